#!/usr/bin/env bash
# The exact warpgroup Q8_0 GEMM's kernel variants side by side (session 20 left the 4-warpgroup form,
# DSV4_CUDA_Q8_WG_KERNEL=wg4, unmeasured): q8_wg_check (bitwise and TOPS) for the default and wg4, each
# with the exact and the fused update; then, unless Q8WG_NO_FLASH=1, the full flash q2 2K prefill + 64
# tokens, default and wg4 interleaved. Outputs in one archive (the device tool brings back few files).
set -u
SUMMARY=q8wg_ab
. "$(dirname "$0")/ab_lib.sh"
for k in default wg4; do
  for m in 1 fma; do
    DSV4_CUDA_Q8_WG_KERNEL=$k DSV4_CUDA_Q8_WG=$m "$C/q8_wg_check" >"$OUT/q8wg-$k-$m.txt" 2>&1
    say "== kernel $k update $m: rc $?, $(tail -1 "$OUT/q8wg-$k-$m.txt")"
    grep -E "FAIL|2048" "$OUT/q8wg-$k-$m.txt" | sed 's/.*groups=/groups=/; s/outputs differ from quant_dot_q8_0/differ/' | cut -c1-150 | tee -a "$S"
  done
done
if [ "${Q8WG_NO_FLASH:-0}" != 1 ]; then
  A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
  run q8wg-default-1 "$A2" X=1
  run q8wg-wg4-1 "$A2" DSV4_CUDA_Q8_WG_KERNEL=wg4
  run q8wg-default-2 "$A2" X=1
  run q8wg-wg4-2 "$A2" DSV4_CUDA_Q8_WG_KERNEL=wg4
  rm -f /dev/shm/flash-q2.gguf
fi
say "q8wg_ab done"
cd "$OUT" && tar czf q8wg_ab.tgz --exclude=q8wg_ab.tgz * && find . -type f ! -name q8wg_ab.tgz ! -name q8wg_ab.txt -delete
