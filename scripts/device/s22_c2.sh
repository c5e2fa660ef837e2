#!/usr/bin/env bash
# Session 22 call 2 (written in session 21): the producer / consumer routed gate/up and down kernel (DSV4_CUDA_MOE_WS=1,
# cuda_moe_ws.cu, written after session 21's device budget was spent; host emulation only so far).
# cuda_ops_check on flash4 with it (=1; =2 computes the IQ2_XXS sign masks instead of reading the 16-byte table
# entries) (the moe f16 lines: within 1e-2 of the CPU and run on the new kernel; the
# "moe f16 timing" line's "f16 gate/up only" time at n = 2048) and without it (the same line for mh_kernel),
# then, only if it passed, the full flash q2 2K prefill of both interleaved and ncu of both kernels on flash4's
# first 2K chunk (~7 min with the synths).
set -u
SUMMARY=${SUMMARY:-s22_c2} # s22_c3.sh runs this script again under its own name
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ops_moe ws DSV4_CUDA_MOE_WS=1; OKW=$?
ops_moe ws2 DSV4_CUDA_MOE_WS=2
ops_moe mh X=1
if [ $OKW = 0 ]; then
  A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
  run moews-1 "$A2" DSV4_CUDA_MOE_WS=1
  run moews2-1 "$A2" DSV4_CUDA_MOE_WS=2
  run mh-1 "$A2" X=1
  run moews-2 "$A2" DSV4_CUDA_MOE_WS=1
  run moews2-2 "$A2" DSV4_CUDA_MOE_WS=2
  run mh-2 "$A2" X=1
  grep -ho '"moe_f16_products": [0-9]*, "moe_ws_products": [0-9]*' "$OUT"/*moews-1*.json | tee -a "$S"
  rm -f /dev/shm/flash-q2.gguf
  # ncu of both kernels on flash4's first 2K chunk (gate/up and down of layer 0), time permitting
  for k in ws mh; do
    ncu_moe $k 470 "SpeedOfLight SchedulerStats WarpStateStats MemoryWorkloadAnalysis" \
      "mp_kernel|mh_kernel|Duration|Issue Slots Busy|Eligible Warps|Shared Memory|L1/TEX Cache Throughput|Lsu Wavefronts|Stall Long|Pipe Tensor Cycles|stalled_(long|short|wait|barrier|mio|lg)"
  done
else
  say "SKIP: the ws kernel failed its ops check"
fi
ab_finish "$SUMMARY"
