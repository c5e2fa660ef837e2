#!/usr/bin/env bash
# Session 19, call 2: the Q8_0 prefill products on cuBLAS with three terms (both operands as two f16
# terms; DSV4_CUDA_Q8_TERMS=1 is the one-term form). cuda_ops_check on tiny f16 / q2 (DS4), whose blas
# lines now also check the products against float64 of the exact operands; the HF-oracle fixtures on
# CUDA, default and one term; the full flash q2 2K prefill, default against one term, interleaved x2;
# then cuda_parity.sh (EXACT and DS4 lines) on this build.
# (Rewritten after the call with the ab_lib.sh helpers tiny_ops / oracle / parity_run: the same commands.)
set -u
SUMMARY=s19_c2
. "$(dirname "$0")/ab_lib.sh"
for q in f16 q2; do tiny_ops $q "matmul blas"; done
oracle default X=1
oracle q8-one DSV4_CUDA_Q8_TERMS=1
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 16"
run s19c2-def-1 "$A2" X=1
run s19c2-one-1 "$A2" DSV4_CUDA_Q8_TERMS=1
run s19c2-def-2 "$A2" X=1
run s19c2-one-2 "$A2" DSV4_CUDA_Q8_TERMS=1
rm -f /dev/shm/flash-q2.gguf
parity_run 300
say "s19_c2 done"
cd "$OUT" && tar czf s19c2.tgz --exclude=s19c2.tgz * && find . -type f ! -name s19c2.tgz ! -name s19_c2.txt -delete
