#!/usr/bin/env bash
# Session 19, call 3: the three-term Q8_0 product as one cuBLAS GEMM over 3 in (no accumulate passes).
# cuda_ops_check tiny q2 (DS4: blas lines against the exact operands); the HF-oracle fixtures on CUDA;
# the full flash q2 2K prefill, default against DSV4_CUDA_Q8_TERMS=1, interleaved x2; a 70K prompt with
# 128 decoded tokens (the larger f16 weight cache beside the long-context buffers); cuda_parity.sh.
# (Rewritten after the call with the ab_lib.sh helpers tiny_ops / oracle / parity_run: the same commands.)
set -u
SUMMARY=s19_c3
. "$(dirname "$0")/ab_lib.sh"
for q in q2 f16; do tiny_ops $q "matmul blas Q8"; done
oracle default
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 16"
run s19c3-def-1 "$A2" X=1
run s19c3-one-1 "$A2" DSV4_CUDA_Q8_TERMS=1
run s19c3-def-2 "$A2" X=1
run s19c3-one-2 "$A2" DSV4_CUDA_Q8_TERMS=1
run s19c3-def-3 "$A2" X=1
run s19c3-70k "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1
grep -h "nonfinite\|free_mem" "$OUT"/*s19c3-70k*.json | cut -c1-300 | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
parity_run 240
say "s19_c3 done"
cd "$OUT" && tar czf s19c3.tgz --exclude=s19c3.tgz * && find . -type f ! -name s19c3.tgz ! -name s19_c3.txt -delete
