#!/usr/bin/env bash
# Session 23 call 2: the warpgroup routed-expert kernel at 128 k a stage (each thread decodes a 64-k half row, 8 chunks,
# as the session-22 producers did; every warpgroup multiplies its own 64 rows; B tiles in 3 slots, A in 2). cuda_ops_check on flash4 with DSV4_CUDA_MOE_WS=1
# and without (mh_kernel); then, if =1 passed, the full flash q2 2K prefill interleaved: =1, =down (down only), =gateup, mh;
# ncu of both products on flash4's first 2K chunk; if ws beat mh, the oracle fixtures with =1 (~7 min).
set -u
SUMMARY=${SUMMARY:-s23_c2}
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
ops mh X=1
if [ $OKW = 0 ]; then
  A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
  for i in 1 2; do
    run ws-$i "$A2" DSV4_CUDA_MOE_WS=1
    run down-$i "$A2" DSV4_CUDA_MOE_WS=down
    run gateup-$i "$A2" DSV4_CUDA_MOE_WS=gateup
    run mh-$i "$A2" X=1
  done
  grep -ho '"moe_f16_products": [0-9]*, "moe_ws_products": [0-9]*' "$OUT"/*ws-1*.json | tee -a "$S"
  rm -f /dev/shm/flash-q2.gguf
  ws=$(grep -hv ctx_tokens "$OUT"/*-ws-[12].csv | cut -d, -f3 | sort -n | head -1)
  mh=$(grep -hv ctx_tokens "$OUT"/*-mh-[12].csv | cut -d, -f3 | sort -n | tail -1)
  say "slowest ws $ws, fastest mh $mh"
  if awk -v a="$ws" -v b="$mh" 'BEGIN{exit !(a>b)}'; then oracle ws DSV4_CUDA_MOE_WS=1; fi
  for k in ${NCU_KINDS:-ws mh}; do
    [ $SECONDS -lt 480 ] || { say "SKIP ncu $k: time"; continue; }
    env $([ $k = ws ] && echo DSV4_CUDA_MOE_WS=1) X=1 timeout 100 /usr/local/cuda/bin/ncu --section SpeedOfLight \
      --section SchedulerStats --section WarpStateStats --print-details all \
      -k "regex:mp_kernel|mh_kernel" -c 2 "$C/dsv4" -m "$M" --backend cuda --chunk 2048 --ctx 4096 \
      --tokens "$(cat "$W/toks-long")" --dump-logits "$W/ncu.bin" >"$OUT/ncu-moe-$k.txt" 2>&1
    say "== ncu moe $k rc $?"
    grep -E "mp_kernel|mh_kernel|Duration|Issue Active|Eligible Warps|Stall (Long|Short|Wait|Barrier)|Pipe Tensor Cycles|Pipe Alu" "$OUT/ncu-moe-$k.txt" | sed 's/  */ /g' | cut -c1-160 | tee -a "$S"
  done
else
  say "SKIP: the ws kernel failed its ops check"
fi
ab_finish "$SUMMARY"
