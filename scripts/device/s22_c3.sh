#!/usr/bin/env bash
# Session 22 call 3: s22_c2.sh again after the producers stage each superblock of their rows in shared
# memory with coalesced loads (call 2: the per-thread row loads held mp_kernel at L1 wavefronts 77 %,
# 5.41 ms gate/up against mh_kernel 3.79 under ncu; flash 2K 3,734 against 4,615).
set -u
SUMMARY=s22_c3
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
ab_finish s22_c3
