#!/usr/bin/env bash
# Session 22 call 1 (written in session 21): the pipelined qws_kernel form (DSV4_CUDA_Q8_WG_KERNEL=pipe, written
# after session 21's device budget was spent) against the default (ws1): q8_wg_check of both (bitwise, TOPS),
# then, only if pipe passed, the full flash q2 2K prefill of both interleaved and pipe's oracle fixtures, tiny q2
# ops check and cuda_parity.sh (~6 min with the flash synth). If pipe is faster and passes, make it the default.
set -u
SUMMARY=s22_c1
. "$(dirname "$0")/ab_lib.sh"
q8wg_chk pipe DSV4_CUDA_Q8_WG_KERNEL=pipe; OKP=$?
q8wg_chk pipe-fma DSV4_CUDA_Q8_WG_KERNEL=pipe DSV4_CUDA_Q8_WG=fma
q8wg_chk ws1 X=1
if [ $OKP = 0 ]; then
  A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
  run pipe-1 "$A2" DSV4_CUDA_Q8_WG_KERNEL=pipe
  run ws1-1 "$A2" X=1
  run pipe-2 "$A2" DSV4_CUDA_Q8_WG_KERNEL=pipe
  run ws1-2 "$A2" X=1
  rm -f /dev/shm/flash-q2.gguf
  oracle pipe DSV4_CUDA_Q8_WG_KERNEL=pipe
  export DSV4_CUDA_Q8_WG_KERNEL=pipe
  tiny_ops q2 "FAIL"
  parity_run 300
else
  say "SKIP: pipe failed its check"
fi
ab_finish s22_c1
