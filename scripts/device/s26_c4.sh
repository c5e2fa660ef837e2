#!/usr/bin/env bash
# Session 26 call 4: do the side lanes still pay in decode? Full flash q2 2K decode with parallel_ffn and
# parallel_attn disabled, interleaved with the default.
set -u
SUMMARY=s26_c4
. "$(dirname "$0")/ab_lib.sh"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run def-1 "$A2" X=1
run noffn-1 "$A2" DSV4_FUSION_DISABLE=parallel_ffn
run noattn-1 "$A2" DSV4_FUSION_DISABLE=parallel_attn
run def-2 "$A2" X=1
run noffn-2 "$A2" DSV4_FUSION_DISABLE=parallel_ffn
run noattn-2 "$A2" DSV4_FUSION_DISABLE=parallel_attn
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
