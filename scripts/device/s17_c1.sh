#!/usr/bin/env bash
# Session 17, call 1: where the streamed IQ2_XXS matvec's time goes. cuda_matvec_bench on the IQ2_XXS cases
# (every config, with the 32-warp form that was never run); the SASS opcode mix and listing of
# mvs_iq2_kernel; ncu (scheduler, warp states, instructions, memory) of the 16- and 32-warp forms at the
# decode shape (gate+up x12) and the steady-state shape (x128).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s17-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$ROOT/.carry/bin/bench/cuda_matvec_bench"
S="$OUT/s17_c1.txt"
say() { echo "$*" | tee -a "$S"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv | tee -a "$S"
timeout 200 "$B" --filter IQ2_XXS >"$OUT/mv_iq2.txt" 2>&1; say "cuda_matvec_bench IQ2_XXS rc $?"
grep -E "FAIL|RESULT|cfg|differ|==" "$OUT/mv_iq2.txt" | tee -a "$S"
bash "$ROOT/scripts/device/sass_stats.sh" "$B" 'mvs_iq2' | tee "$OUT/sass_stats.txt" | tee -a "$S"
cuobjdump -sass -arch sm_90 "$B" 2>/dev/null | awk '/Function : .*mvs_iq2/{p=1} /Function : /{if($0 !~ /mvs_iq2/) p=0} p' >"$OUT/sass_mvs_iq2.txt"
say "sass lines $(wc -l <"$OUT/sass_mvs_iq2.txt")"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
SECT="--section SpeedOfLight --section SchedulerStats --section WarpStateStats --section InstructionStats \
--section MemoryWorkloadAnalysis_Tables --section Occupancy --section LaunchStats"
for w in 16 32; do
  for f in "gate+up 4096->2048 x12" "BIG IQ2_XXS"; do
    tag="w$w-$(echo "$f" | tr -c 'A-Za-z0-9' '_' | cut -c1-12)"
    DSV4_CUDA_MV_IQ2_WARPS=$w timeout 120 "$NCU" --clock-control none $SECT --print-details all -k "regex:mvs_iq2" -c 1 \
      "$B" --quick --filter "$f" >"$OUT/ncu-$tag.txt" 2>&1
    say "ncu $tag rc $?"
    grep -E "mvs_iq2_kernel|Duration|Issue Slots Busy|Issued Ipc|Executed Instructions |Registers Per|Eligible Warps|Active Warps Per|No Eligible|Warp Cycles Per Issued|stall|Shared.*Wavefronts|Bank Conflicts|Memory Throughput|DRAM Throughput" \
      "$OUT/ncu-$tag.txt" | cut -c1-150 | head -60 | tee -a "$S"
  done
done
say "s17_c1 done"
cd "$OUT" && tar czf s17c1.tgz --exclude=s17c1.tgz * && find . -type f ! -name s17c1.tgz ! -name s17_c1.txt -delete
