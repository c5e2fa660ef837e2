#!/usr/bin/env bash
# Session 21 call 1: the warpgroup Q8_0 GEMM's two kernel forms (the steps of the removed q8wg_ab.sh: checks and full flash 2K
# A/B), plus ncu (stalls, instruction counts) of both forms on q8_wg_check's first shape (flash q_b,
# 2048 x 32768 x 1024) and their SASS (cuobjdump) for the instruction mix of the main loop.
set -u
SUMMARY=s21_c1
. "$(dirname "$0")/ab_lib.sh"
NCU=/usr/local/cuda/bin/ncu; OBJ=/usr/local/cuda/bin/cuobjdump
for k in default wg4; do
  for m in 1 fma; do
    DSV4_CUDA_Q8_WG_KERNEL=$k DSV4_CUDA_Q8_WG=$m "$C/q8_wg_check" >"$OUT/q8wg-$k-$m.txt" 2>&1
    say "== kernel $k update $m: rc $?, $(tail -1 "$OUT/q8wg-$k-$m.txt")"
    grep -E "FAIL|TOPS" "$OUT/q8wg-$k-$m.txt" | sed 's/.*groups=/groups=/; s/outputs differ from quant_dot_q8_0/differ/' | cut -c1-150 | tee -a "$S"
  done
done
for k in default wg4; do
  DSV4_CUDA_Q8_WG_KERNEL=$k timeout 150 "$NCU" --section SpeedOfLight --section Occupancy --section SchedulerStats \
    --section WarpStateStats --section InstructionStats --section LaunchStats --print-details all \
    -k "regex:qw4?_kernel" -c 1 "$C/q8_wg_check" >"$OUT/ncu-$k.txt" 2>&1
  say "== ncu $k rc $?"
  grep -E "Duration|Registers Per|Executed Instructions  |Issue Slots Busy|Eligible Warps|Active Warps Per|hmma_cycles|issue_active|stalled_(short|long|wait|gmma|barrier|not_sel|math|dispatch|mio)" "$OUT/ncu-$k.txt" | sed 's/  */ /g' | tee -a "$S"
done
"$OBJ" -sass "$C/q8_wg_check" 2>/dev/null | xz >"$OUT/sass-q8wg.txt.xz"; say "sass rc $?"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run q8wg-default-1 "$A2" X=1
run q8wg-wg4-1 "$A2" DSV4_CUDA_Q8_WG_KERNEL=wg4
run q8wg-default-2 "$A2" X=1
run q8wg-wg4-2 "$A2" DSV4_CUDA_Q8_WG_KERNEL=wg4
rm -f /dev/shm/flash-q2.gguf
ab_finish s21_c1
