#!/usr/bin/env bash
# Session 28 call 4 (final build; a first, longer form of this call lost its machine and brought nothing back): the
# router's candidates ranked by scores kept beside their ids and the slot weights a lane per slot (default) against
# DSV4_CUDA_ROUTER_SMEM=0 (session 12's code path): flash4 logits byte-identical, cuda_ops_check, then as much of the
# full flash q2 2K decode A/B as ~5 min of device time allows.
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
[ $SECONDS -lt 60 ] && run def-1 "$A" X=1
[ $SECONDS -lt 130 ] && run rs0-1 "$A" DSV4_CUDA_ROUTER_SMEM=0
[ $SECONDS -lt 150 ] && run def-2 "$A" X=1
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
