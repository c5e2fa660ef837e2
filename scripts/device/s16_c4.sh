#!/usr/bin/env bash
# Session 16, call 4: the streamed IQ2_XXS rows with the smem over-read fixed (call 3: illegal address),
# then the checks of the session's code: cuda_matvec_bench (IQ2_XXS cases), flash4 decode logits streamed
# == pipelines (chunk 1) and prefill unchanged (chunk 300), cuda_ops_check, full flash q2 2K decode
# interleaved, 2K -> 32K with the defaults.
set -u
SUMMARY=s16_c4 TOKS=300
. "$(dirname "$0")/ab_lib.sh"
B2="$ROOT/.carry/bin/bench"
timeout 200 "$B2/cuda_matvec_bench" --filter IQ2_XXS >"$OUT/mv_iq2.txt" 2>&1; say "cuda_matvec_bench IQ2_XXS rc $?"
grep -E "FAIL|RESULT|cfg|differ" "$OUT/mv_iq2.txt" | tee -a "$S"
ab_flash4
dump stream-c1 "$C/dsv4" 1 toks
dump pipe-c1 "$C/dsv4" 1 toks DSV4_CUDA_MV_Q2K=pipe DSV4_CUDA_MV_IQ2=sel
same stream-c1 pipe-c1
rm -f "$W"/f.*.bin
ab_ops_check "matvec|moe decode"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 32"
run s16c4-stream-1 "$A2" X=1
run s16c4-pipe-1 "$A2" DSV4_CUDA_MV_Q2K=pipe DSV4_CUDA_MV_IQ2=sel
run s16c4-stream-2 "$A2" X=1
run s16c4-pipe-2 "$A2" DSV4_CUDA_MV_Q2K=pipe DSV4_CUDA_MV_IQ2=sel
OUT="$OUT" timeout 150 "$FB" "s16c4-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s16_c4 done"
cd "$OUT" && tar czf s16c4.tgz --exclude=s16c4.tgz * && find . -type f ! -name s16c4.tgz ! -name s16_c4.txt -delete
