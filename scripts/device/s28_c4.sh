#!/usr/bin/env bash
# Session 28 call 4 (final build): the router's candidates ranked by scores kept beside their ids and the slot
# weights formed a lane per slot (default) against DSV4_CUDA_ROUTER_SMEM=0 (session 12's code path: ids and
# weights in global memory, thread 0's loop): flash4 logits byte-identical, cuda_ops_check, full flash q2 decode
# interleaved at 2K, and 32K.
set -u
SUMMARY=s28_c4
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
dump def-c1 "$C/dsv4" 1 toks-long X=1
dump rs0-c1 "$C/dsv4" 1 toks-long DSV4_CUDA_ROUTER_SMEM=0
same def-c1 rs0-c1
dump def-c2048 "$C/dsv4" 2048 toks-long X=1
dump rs0-c2048 "$C/dsv4" 2048 toks-long DSV4_CUDA_ROUTER_SMEM=0
same def-c2048 rs0-c2048
ab_ops_check "router"
say "checks done at ${SECONDS} s"
A="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run def-1 "$A" X=1
run rs0-1 "$A" DSV4_CUDA_ROUTER_SMEM=0
run def-2 "$A" X=1
[ $SECONDS -lt 330 ] && run rs0-2 "$A" DSV4_CUDA_ROUTER_SMEM=0
[ $SECONDS -lt 360 ] && run final32k "--ctx-start 32768 --ctx-max 32768 --gen-tokens 32" X=1
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
