#!/usr/bin/env bash
# Session 20, call 1: the exact warpgroup Q8_0 prefill products (cuda_gemm_q8_wg.h) in the backend.
# q8_wg_check (bitwise against quant_dot_q8_0, flash shapes timed); cuda_ops_check on tiny q2 (the
# Q8_0 blas lines must now be bitwise the CPU); the HF-oracle fixtures on CUDA; cuda_parity.sh; full
# flash q2 2K prefill + 64 tokens: the warpgroup path (default) x2 against the three-term cuBLAS path
# (DSV4_CUDA_Q8_WG=0) x2, interleaved, and the fused update (DSV4_CUDA_Q8_WG=fma) once.
set -u
SUMMARY=s20_c1
. "$(dirname "$0")/ab_lib.sh"
"$C/q8_wg_check" >"$OUT/q8_wg_check.txt" 2>&1; say "q8_wg_check rc $?: $(tail -1 "$OUT/q8_wg_check.txt")"
grep -E "2048|FAIL" "$OUT/q8_wg_check.txt" | cut -c1-200 | tee -a "$S"
tiny_ops q2 "matmul blas Q8_0|matmul_multi"
oracle wg
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run s20c1-wg-1 "$A2" X=1
run s20c1-3t-1 "$A2" DSV4_CUDA_Q8_WG=0
run s20c1-wg-2 "$A2" X=1
run s20c1-3t-2 "$A2" DSV4_CUDA_Q8_WG=0
run s20c1-fma-1 "$A2" DSV4_CUDA_Q8_WG=fma
grep -ho '"q8_wg_products": [0-9]*' "$OUT"/*s20c1-wg-1*.json "$OUT"/*s20c1-3t-1*.json | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
parity_run 240
say "s20_c1 done"
cd "$OUT" && tar czf s20c1.tgz --exclude=s20c1.tgz * && find . -type f ! -name s20c1.tgz ! -name s20_c1.txt -delete
