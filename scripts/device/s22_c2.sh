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
ops() { # tag env...
  local tag=$1 t0; shift; t0=$(date +%s)
  env "$@" timeout 240 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops-$tag.txt" 2>&1; local rc=$?
  say "== cuda_ops_check $tag ($*): rc $rc, $(tail -1 "$OUT/ops-$tag.txt") ($(( $(date +%s) - t0 )) s)"
  grep -E "^FAIL|moe f16" "$OUT/ops-$tag.txt" | cut -c1-230 | head -24 | tee -a "$S"
  return $rc
}
ops ws DSV4_CUDA_MOE_WS=1; OKW=$?
ops ws2 DSV4_CUDA_MOE_WS=2
ops mh X=1
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
    [ $SECONDS -lt 470 ] || { say "SKIP ncu $k: time"; continue; }
    env $([ $k = ws ] && echo DSV4_CUDA_MOE_WS=1) X=1 timeout 120 /usr/local/cuda/bin/ncu --section SpeedOfLight \
      --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --print-details all \
      -k "regex:mp_kernel|mh_kernel" -c 2 "$C/dsv4" -m "$M" --backend cuda --chunk 2048 --ctx 4096 \
      --tokens "$(cat "$W/toks-long")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-moe-$k.txt" 2>&1
    say "== ncu moe $k rc $?"
    grep -E "mp_kernel|mh_kernel|Duration|Issue Slots Busy|Eligible Warps|Shared Memory|L1/TEX Cache Throughput|Lsu Wavefronts|Stall Long|Pipe Tensor Cycles|stalled_(long|short|wait|barrier|mio|lg)" "$OUT/ncu-moe-$k.txt" | sed 's/  */ /g' | cut -c1-160 | tee -a "$S"
  done
else
  say "SKIP: the ws kernel failed its ops check"
fi
ab_finish "$SUMMARY"
