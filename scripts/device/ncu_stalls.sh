#!/usr/bin/env bash
# Nsight Compute warp-stall breakdown (WarpStateStats with every metric by name) plus throughput,
# occupancy and memory sections, of the batch-1 product kernels at their steady-state and decode
# shapes: the warp-direct dense Q8_0 matvec (mvw_kernel, cuda_mvw_bench), the IQ2_XXS and Q2_K expert
# matvecs (mv_kernel, cuda_matvec_bench --quick). One launch each. Usage after pack + unpack:
#   scripts/device/ncu_stalls.sh   -> $OUT/ncu-stalls-*.txt, and the stall lines sorted on stdout
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/ncu-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "FAIL no ncu"; exit 1; }
B="$ROOT/.carry/bin/bench"
SECT="--section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
--section MemoryWorkloadAnalysis --section InstructionStats --section LaunchStats"
prof() { # tag kernel-regex skip program args...
  local tag=$1 k=$2 s=$3; shift 3
  timeout 240 "$NCU" $SECT --print-details all -k "regex:$k" -s "$s" -c 1 "$@" >"$OUT/ncu-stalls-$tag.txt" 2>&1
  echo "== $tag rc $?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Issued Ipc Active|Achieved Occupancy|Registers Per Thread|Eligible Warps|Active Warps Per|Executed Instructions  |Dynamic Shared|Block Limit" \
    "$OUT/ncu-stalls-$tag.txt" | sed 's/  */ /g' | head -20
  # stall reasons (cycles per issued instruction), largest first
  grep -iE "stall" "$OUT/ncu-stalls-$tag.txt" | grep -E "[0-9]" | sed 's/  */ /g' | sort -t' ' -k4 -g -r 2>/dev/null | head -14
}
prof mvw-q8-8192x4096 'mvw_kernel' 2 "$B/cuda_mvw_bench" --case q8_8192x4096_attn_out_b
prof mvw-q8-1024x32768 'mvw_kernel' 2 "$B/cuda_mvw_bench" --case q8_1024x32768_attn_q_b
DSV4_CUDA_MV_IQ2=sel prof mv-iq2-big 'mv_kernel' 0 "$B/cuda_matvec_bench" --quick --filter "BIG IQ2"
DSV4_CUDA_MV_IQ2=sel prof mv-iq2-decode 'mv_kernel' 0 "$B/cuda_matvec_bench" --quick --filter "IQ2_XXS gate"
prof mv-q2k-big 'mv_kernel' 0 "$B/cuda_matvec_bench" --quick --filter "BIG Q2_K"
