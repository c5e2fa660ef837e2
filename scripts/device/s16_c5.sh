#!/usr/bin/env bash
# Session 16, call 5 (final code): cuda_matvec_bench, all cases; full flash q2 2K decode (128 tokens),
# streamed vs pipelines; the 70K prefill + 128 decoded tokens.
set -u
SUMMARY=s16_c5
. "$(dirname "$0")/ab_lib.sh"
B2="$ROOT/.carry/bin/bench"
timeout 180 "$B2/cuda_matvec_bench" >"$OUT/mv_all.txt" 2>&1; say "cuda_matvec_bench rc $?"
grep -E "^FAIL|RESULT" "$OUT/mv_all.txt" | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s16c5-stream-1 "$A2" X=1
run s16c5-pipe-1 "$A2" DSV4_CUDA_MV_Q2K=pipe DSV4_CUDA_MV_IQ2=sel
run s16c5-stream-2 "$A2" X=1
OUT="$OUT" timeout 130 "$FB" "s16c5-70k" "--ctx-start 70000 --gen-tokens 128" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s16_c5 done"
cd "$OUT" && tar czf s16c5.tgz --exclude=s16c5.tgz * && find . -type f ! -name s16c5.tgz ! -name s16_c5.txt -delete
