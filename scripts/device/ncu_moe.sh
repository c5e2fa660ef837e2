#!/usr/bin/env bash
# Nsight Compute detail (speed of light, compute and memory workload, scheduler, warp stalls,
# instruction mix, occupancy) of the routed-MoE prefill gate/up kernels on the flash-width 4-layer q2
# model at a 2048-token chunk: the f16 ones (mh_kernel, default: layer 0's gate/up, then its down)
# and the exact wide one (mw_kernel, DSV4_CUDA_MOE_F16=0). One launch each. Usage after pack + unpack:
#   scripts/device/ncu_moe.sh [KERNEL_REGEX ENV ...]  -> $OUT/ncu-moe-*.txt and a digest on stdout
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/ncu-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH" && break
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "FAIL no ncu"; exit 1; }
B="$ROOT/.carry/bin"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { echo "FAIL synth"; exit 1; }
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
ARGS="-m $M --backend cuda --prompt-file $P --ctx-start 2048 --ctx-max 2048 --gen-tokens 2 --chunk 2048"
SECT="--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats \
--section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats --section LaunchStats"
prof() { # tag kernel-regex env [launches to skip]
  local tag=$1 k=$2 e=$3 s=${4:-0}
  env $e timeout 200 "$NCU" $SECT --print-details all -k "regex:$k" -s "$s" -c 1 "$B/cuda/dsv4-bench" $ARGS \
    >"$OUT/ncu-moe-$tag.txt" 2>&1
  echo "== $tag ($k, $e) rc $?"
  grep -E "Duration|DRAM Throughput|L1/TEX Hit|L2 Cache Throughput|Memory Throughput|Issue Slots Busy|Issued Ipc Active|SM Busy|Achieved Occupancy|Registers Per Thread|Eligible Warps|Active Warps Per|Executed Instructions  |Dynamic Shared|Shared Memory|Bank|Tensor|Pipe" \
    "$OUT/ncu-moe-$tag.txt" | sed 's/  */ /g' | head -40
  grep -iE "stall" "$OUT/ncu-moe-$tag.txt" | grep -E "[0-9]" | sed 's/  */ /g' | sort -t' ' -k4 -g -r 2>/dev/null | head -12
}
if [ $# -ge 2 ]; then prof custom "$1" "$2"; exit 0; fi
prof f16 'mh_kernel' X=1
prof f16down 'mh_kernel' X=1 1
prof wide 'mw_kernel' DSV4_CUDA_MOE_F16=0
