#!/usr/bin/env bash
# Session 28 call 3: the attention's HC pre step without its unread Q8_K blocks (default; DSV4_CUDA_PREQK_ALL=1
# writes them as before), and the router epilogue (DSV4_CUDA_ROUTER_FUSED=1) with the plan's rest_mul 2
# (DSV4_CUDA_ROUTER_REST, default 2) and 1 (session 12's plan). Logits byte-identical across the switches
# (flash4, chunk 1 past the indexer start, and chunk 2048), cuda_ops_check, full flash q2 decode interleaved;
# for reference the consumer-side Q8_0 (PREQ=0 + MVW_ACT=fused) and the grid tail with it.
set -u
SUMMARY=s28_c3
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
dump def-c1 "$C/dsv4" 1 toks-long X=1
dump qkall-c1 "$C/dsv4" 1 toks-long DSV4_CUDA_PREQK_ALL=1
dump rf-c1 "$C/dsv4" 1 toks-long DSV4_CUDA_ROUTER_FUSED=1
same def-c1 qkall-c1
same def-c1 rf-c1
dump def-c2048 "$C/dsv4" 2048 toks-long X=1
dump qkall-c2048 "$C/dsv4" 2048 toks-long DSV4_CUDA_PREQK_ALL=1
same def-c2048 qkall-c2048
say "dumps done at ${SECONDS} s"
ab_ops_check "hc pre|router_topk|moe decode"
say "checks done at ${SECONDS} s"
A="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run def-1 "$A" X=1
run qkall-1 "$A" DSV4_CUDA_PREQK_ALL=1
run rf2-1 "$A" DSV4_CUDA_ROUTER_FUSED=1
run rf1-1 "$A" DSV4_CUDA_ROUTER_FUSED=1 DSV4_CUDA_ROUTER_REST=1
run pq0f-1 "$A" DSV4_CUDA_PREQ=0 DSV4_CUDA_MVW_ACT=fused
run multif-1 "$A" DSV4_CUDA_HC_TAIL=multi DSV4_CUDA_MVW_ACT=fused
run def-2 "$A" X=1
run qkall-2 "$A" DSV4_CUDA_PREQK_ALL=1
[ $SECONDS -lt 400 ] && run rf2-2 "$A" DSV4_CUDA_ROUTER_FUSED=1
[ $SECONDS -lt 420 ] && run pq0f-2 "$A" DSV4_CUDA_PREQ=0 DSV4_CUDA_MVW_ACT=fused
[ $SECONDS -lt 440 ] && run def-3 "$A" X=1
B="--ctx-start 32768 --ctx-max 32768 --gen-tokens 32"
[ $SECONDS -lt 470 ] && run def32k "$B" X=1
[ $SECONDS -lt 510 ] && run qkall32k "$B" DSV4_CUDA_PREQK_ALL=1
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
