#!/usr/bin/env bash
# Session 21 call 3: qws_kernel with its two blocks one after the other (ws1, the new default) against the
# overlapped form (ws) and session 20's kernel (v1): q8_wg_check of each, the full flash q2 2K prefill
# interleaved, then the oracle fixtures and the tiny q2 ops check on the default.
set -u
SUMMARY=s21_c3
. "$(dirname "$0")/ab_lib.sh"
chk() { # tag env...
  local tag=$1; shift
  env "$@" timeout 150 "$C/q8_wg_check" >"$OUT/q8wg-$tag.txt" 2>&1; local rc=$?
  say "== q8_wg_check $tag ($*): rc $rc, $(tail -1 "$OUT/q8wg-$tag.txt")"
  grep -E "FAIL|TOPS|never" "$OUT/q8wg-$tag.txt" | sed 's/.*n=/n=/; s/outputs differ from quant_dot_q8_0/differ/' | cut -c1-160 | tee -a "$S"
  return $rc
}
chk ws1 X=1; OK1=$?
chk ws1-fma DSV4_CUDA_Q8_WG=fma
chk ws DSV4_CUDA_Q8_WG_KERNEL=ws
chk v1 DSV4_CUDA_Q8_WG_KERNEL=v1
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
say "s21_c3 done"
cd "$OUT" && tar czf s21_c3.tgz --exclude=s21_c3.tgz * && find . -type f ! -name s21_c3.tgz ! -name s21_c3.txt -delete
