#!/usr/bin/env bash
# Session 21 call 2: the producer / consumer warpgroup Q8_0 kernel (qws_kernel, the new default) against
# session 20's (DSV4_CUDA_Q8_WG_KERNEL=v1): q8_wg_check (bitwise, TOPS) of both, ncu of both on the flash
# q_b shape, then (only if the new kernel passed) the full flash q2 2K prefill of both interleaved, the
# oracle fixtures on CUDA, the tiny q2 ops check and cuda_parity.sh on the new default.
set -u
SUMMARY=s21_c2
. "$(dirname "$0")/ab_lib.sh"
NCU=/usr/local/cuda/bin/ncu
q8wg_chk ws X=1; WS=$?
q8wg_chk ws-fma DSV4_CUDA_Q8_WG=fma
q8wg_chk v1 DSV4_CUDA_Q8_WG_KERNEL=v1
for k in ws v1; do # the q_b shape's first launch: 6 whole-checked shapes come before it
  DSV4_CUDA_Q8_WG_KERNEL=$k timeout 150 "$NCU" --section SpeedOfLight --section Occupancy --section SchedulerStats \
    --section WarpStateStats --section InstructionStats --section LaunchStats --print-details all \
    -k "regex:qws?_kernel" -s 6 -c 1 "$C/q8_wg_check" >"$OUT/ncu-$k.txt" 2>&1
  say "== ncu $k rc $?"
  grep -E "Grid Size|Duration|Registers Per|Executed Instructions  |Issue Slots Busy|Eligible Warps|Active Warps Per Sch|hmma_cycles|stalled_(short|long|wait|gmma|barrier|not_sel|math|dispatch|mio|sleep|branch)" "$OUT/ncu-$k.txt" | sed 's/  */ /g' | tee -a "$S"
done
if [ $WS = 0 ]; then
  A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
  run ws-1 "$A2" X=1
  run v1-1 "$A2" DSV4_CUDA_Q8_WG_KERNEL=v1
  run ws-2 "$A2" X=1
  run v1-2 "$A2" DSV4_CUDA_Q8_WG_KERNEL=v1
  rm -f /dev/shm/flash-q2.gguf
  oracle ws X=1
  tiny_ops q2 "q8_0|Q8_0"
  parity_run 330
else
  say "SKIP: the new kernel failed its check"
fi
ab_finish s21_c2
