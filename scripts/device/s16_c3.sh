#!/usr/bin/env bash
# Session 16, call 3: the IQ2_XXS gate/up rows streamed per warp (mvs_iq2_kernel) beside the Q2_K ones.
#  cuda_matvec_bench on the IQ2_XXS cases (bitwise against the pipeline's default plan); flash4 decode
#  logits (chunk 1) streamed == pipelines; full flash q2 2K decode, interleaved.
set -u
SUMMARY=s16_c3 TOKS=300
. "$(dirname "$0")/ab_lib.sh"
B2="$ROOT/.carry/bin/bench"
timeout 200 "$B2/cuda_matvec_bench" --filter IQ2_XXS >"$OUT/mv_iq2.txt" 2>&1; say "cuda_matvec_bench IQ2_XXS rc $?"
grep -E "FAIL|RESULT|cfg|differ" "$OUT/mv_iq2.txt" | tee -a "$S"
ab_flash4
dump stream-c1 "$C/dsv4" 1 toks
dump pipe-c1 "$C/dsv4" 1 toks DSV4_CUDA_MV_Q2K=pipe DSV4_CUDA_MV_IQ2=sel
same stream-c1 pipe-c1
rm -f "$W"/f.*.bin
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 32"
run s16c3-stream-1 "$A2" X=1
run s16c3-pipe-1 "$A2" DSV4_CUDA_MV_Q2K=pipe DSV4_CUDA_MV_IQ2=sel
run s16c3-stream-2 "$A2" X=1
run s16c3-pipe-2 "$A2" DSV4_CUDA_MV_Q2K=pipe DSV4_CUDA_MV_IQ2=sel
say "s16_c3 done"
cd "$OUT" && tar czf s16c3.tgz --exclude=s16c3.tgz * && find . -type f ! -name s16c3.tgz ! -name s16_c3.txt -delete
