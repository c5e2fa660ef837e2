#!/usr/bin/env bash
# Session 22 call 1 (written in session 21): the pipelined qws_kernel form (DSV4_CUDA_Q8_WG_KERNEL=pipe, written
# after session 21's device budget was spent) against the default (ws1): q8_wg_check of both (bitwise, TOPS),
# then, only if pipe passed, the full flash q2 2K prefill of both interleaved and pipe's oracle fixtures, tiny q2
# ops check and cuda_parity.sh (~6 min with the flash synth). If pipe is faster and passes, make it the default.
set -u
SUMMARY=s22_c1
. "$(dirname "$0")/ab_lib.sh"
chk() { # tag env...
  local tag=$1; shift
  env "$@" timeout 150 "$C/q8_wg_check" >"$OUT/q8wg-$tag.txt" 2>&1; local rc=$?
  say "== q8_wg_check $tag ($*): rc $rc, $(tail -1 "$OUT/q8wg-$tag.txt")"
  grep -E "FAIL|TOPS|never" "$OUT/q8wg-$tag.txt" | sed 's/.*n=/n=/; s/outputs differ from quant_dot_q8_0/differ/' | cut -c1-160 | tee -a "$S"
  return $rc
}
chk pipe DSV4_CUDA_Q8_WG_KERNEL=pipe; OKP=$?
chk pipe-fma DSV4_CUDA_Q8_WG_KERNEL=pipe DSV4_CUDA_Q8_WG=fma
chk ws1 X=1
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
say "s22_c1 done"
cd "$OUT" && tar czf s22_c1.tgz --exclude=s22_c1.tgz * && find . -type f ! -name s22_c1.tgz ! -name s22_c1.txt -delete
