#!/usr/bin/env bash
# Session 19, call 4 (the closing measurements of the shipped build: three-term Q8_0 products as three
# cuBLAS GEMMs, the code call 2 checked): full flash q2 2K prefill + 128 decoded tokens x3, the one-term
# form (DSV4_CUDA_Q8_TERMS=1) x2 beside it, 2K -> 32K, the 70K prompt + 128 tokens; ncu per-kernel times of
# the flash4 2K prefill (where the three terms' time goes).
set -u
SUMMARY=s19_c4
. "$(dirname "$0")/ab_lib.sh"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s19c4-2k-1 "$A2" X=1
run s19c4-one-1 "$A2" DSV4_CUDA_Q8_TERMS=1
run s19c4-2k-2 "$A2" X=1
run s19c4-one-2 "$A2" DSV4_CUDA_Q8_TERMS=1
run s19c4-2k-3 "$A2" X=1
run s19c4-32k "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1
run s19c4-70k "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1
grep -ho '"nonfinite_logits": [0-9]*' "$OUT"/*s19c4-70k*.json | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
OUT="$OUT/ncu" GEN=2 timeout 170 bash "$ROOT/scripts/device/ncu_kernels.sh" s19c4 >/dev/null 2>&1; say "ncu rc $?"
say "s19_c4 done"
cd "$OUT" && tar czf s19c4.tgz --exclude=s19c4.tgz * && find . -type f ! -name s19c4.tgz ! -name s19_c4.txt -delete
