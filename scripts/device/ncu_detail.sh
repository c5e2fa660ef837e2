#!/usr/bin/env bash
# Nsight Compute detail (throughput, scheduler, warp stall, memory sections) of the kernels that
# dominate a flash decode and prefill, each profiled once from its kernel benchmark:
#   - mv_kernel<1> / <2>: the routed gate/up pair (IQ2_XXS) and down (Q2_K) of the 5-launch MoE;
#   - md_gate_up_kernel / md_down_kernel: the 2-launch MoE (DSV4_CUDA_MOE_DECODE=2launch);
#   - mw_kernel: the routed-MoE prefill on tensor cores at 2048 tokens;
#   - qm_kernel: the Q8_0 prefill GEMM.
# Usage (after `CUDA=1 XZ=1 BENCHES="cuda_moe_decode_bench cuda_moe_prefill_bench
# cuda_prefill_q8_0_bench" scripts/device/pack.sh` here, scripts/device/unpack.sh there):
#   scripts/device/ncu_detail.sh   -> $OUT/ncu-detail-*.txt
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/ncu-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "FAIL no ncu"; exit 1; }
B="$ROOT/.carry/bin/bench"
SECT="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
--section Occupancy --section SchedulerStats --section WarpStateStats --section LaunchStats \
--section InstructionStats"
prof() { # tag kernel-regex count program args...
  local tag=$1 k=$2 c=$3; shift 3
  local t0; t0=$(date +%s)
  timeout 200 "$NCU" $SECT -k "regex:$k" -c "$c" "$@" >"$OUT/ncu-detail-$tag.txt" 2>&1
  echo "$tag rc $? $(( $(date +%s) - t0 )) s"
  grep -E '^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Issue Slots Busy|Issued Ipc|Achieved Occupancy|Registers Per|No Eligible|Stall|Executed Instructions ' \
    "$OUT/ncu-detail-$tag.txt" | head -80
}
if [ -z "${STALLS_ONLY:-}" ]; then
  prof moe-decode 'mv_kernel|md_gate_up|md_down' 4 "$B/cuda_moe_decode_bench"
  prof moe-prefill 'mw_kernel' 2 "$B/cuda_moe_prefill_bench" --model q2 --ns 2048 --reps 1
  prof q8-gemm 'qm_kernel' 2 "$B/cuda_prefill_q8_0_bench"
fi
# STALLS=1: the warp stall breakdown of the matvec kernels at the MoE shapes (the first IQ2_XXS and
# Q2_K launches of cuda_matvec_bench --quick): the WarpStateStats section with every metric printed by
# name (--print-details all), and the stall metric names this ncu knows (session 6's regex of
# guessed names matched nothing; PC sampling is not available on this machine).
if [ -n "${STALLS:-}" ]; then
  "$NCU" --query-metrics 2>/dev/null | grep -i stall >"$OUT/ncu-stall-metric-names.txt"
  timeout 200 "$NCU" --section WarpStateStats --section SchedulerStats --section InstructionStats \
    --print-details all --print-metric-name name -k "regex:mv_kernel<[12]>" -c 2 \
    "$B/cuda_matvec_bench" --quick >"$OUT/ncu-stalls-mv.txt" 2>&1
  echo "stalls rc $?; $(wc -l <"$OUT/ncu-stall-metric-names.txt") stall metric names known"
  grep -E "mv_kernel<|stall|inst_executed|issue_active|warps_active|ERROR" "$OUT/ncu-stalls-mv.txt" | cut -c1-120 | head -80
fi
