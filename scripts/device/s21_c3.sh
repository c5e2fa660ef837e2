#!/usr/bin/env bash
# Session 21 call 3: qws_kernel with its two blocks one after the other (ws1, the new default) against the
# overlapped form (ws) and session 20's kernel (v1): q8_wg_check of each, the full flash q2 2K prefill
# interleaved, then the oracle fixtures and the tiny q2 ops check on the default.
set -u
SUMMARY=s21_c3
. "$(dirname "$0")/ab_lib.sh"
q8wg_chk ws1 X=1; OK1=$?
q8wg_chk ws1-fma DSV4_CUDA_Q8_WG=fma
q8wg_chk ws DSV4_CUDA_Q8_WG_KERNEL=ws
q8wg_chk v1 DSV4_CUDA_Q8_WG_KERNEL=v1
if [ $OK1 = 0 ]; then
  A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
  run ws1-1 "$A2" X=1
  run ws-1 "$A2" DSV4_CUDA_Q8_WG_KERNEL=ws
  run v1-1 "$A2" DSV4_CUDA_Q8_WG_KERNEL=v1
  run ws1-2 "$A2" X=1
  run ws-2 "$A2" DSV4_CUDA_Q8_WG_KERNEL=ws
  rm -f /dev/shm/flash-q2.gguf
  oracle ws1 X=1
  tiny_ops q2 "FAIL"
else
  say "SKIP: ws1 failed its check"
fi
ab_finish s21_c3
