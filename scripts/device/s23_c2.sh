#!/usr/bin/env bash
# Session 23 call 2: the warpgroup routed-expert kernel at 128 k a stage (each thread decodes a 64-k half row, 8 chunks,
# as the session-22 producers did; every warpgroup multiplies its own 64 rows; B tiles in 3 slots, A in 2). cuda_ops_check on flash4 with DSV4_CUDA_MOE_WS=1
# and without (mh_kernel); then, if =1 passed, the full flash q2 2K prefill interleaved: =1, =down (down only), =gateup, mh;
# ncu of both products on flash4's first 2K chunk; if ws beat mh, the oracle fixtures with =1 (~7 min).
# WS2=1: the ops check with =2 too; PROF=1: a per-op profile of the default 2K prefill; ORACLE=0: no oracle step.
set -u
SUMMARY=${SUMMARY:-s23_c2}
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ops_moe ws DSV4_CUDA_MOE_WS=1; OKW=$?
[ "${WS2:-0}" = 1 ] && ops_moe ws2 DSV4_CUDA_MOE_WS=2
ops_moe mh X=1
if [ $OKW = 0 ]; then
  A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
  for i in 1 2; do
    run ws-$i "$A2" DSV4_CUDA_MOE_WS=1
    run down-$i "$A2" DSV4_CUDA_MOE_WS=down
    run gateup-$i "$A2" DSV4_CUDA_MOE_WS=gateup
    run mh-$i "$A2" X=1
  done
  grep -ho '"moe_f16_products": [0-9]*, "moe_ws_products": [0-9]*' "$OUT"/*ws-1*.json | tee -a "$S"
  [ "${PROF:-0}" = 1 ] && [ $SECONDS -lt 420 ] && run prof "--ctx-start 2048 --ctx-max 2048 --gen-tokens 4" DSV4_CUDA_PROFILE=1
  rm -f /dev/shm/flash-q2.gguf
  ws=$(grep -hv ctx_tokens "$OUT"/*-ws-[12].csv | cut -d, -f3 | sort -n | head -1)
  mh=$(grep -hv ctx_tokens "$OUT"/*-mh-[12].csv | cut -d, -f3 | sort -n | tail -1)
  say "slowest ws $ws, fastest mh $mh"
  if [ "${ORACLE:-1}" = 1 ] && awk -v a="$ws" -v b="$mh" 'BEGIN{exit !(a>b)}'; then oracle ws DSV4_CUDA_MOE_WS=1; fi
  for k in ${NCU_KINDS:-ws mh}; do
    ncu_moe $k 480 "SpeedOfLight SchedulerStats WarpStateStats" \
      "mp_kernel|mh_kernel|Duration|Issue Active|Eligible Warps|Stall (Long|Short|Wait|Barrier)|Pipe Tensor Cycles|Pipe Alu"
  done
else
  say "SKIP: the ws kernel failed its ops check"
fi
ab_finish "$SUMMARY"
