#!/usr/bin/env bash
# Session 16, call 6 (final code, same binaries as call 5): more full flash q2 2K decode samples (128
# tokens), the default (streamed expert matvecs) and one pipeline run between.
set -u
SUMMARY=s16_c6
. "$(dirname "$0")/ab_lib.sh"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s16c6-stream-1 "$A2" X=1
run s16c6-stream-2 "$A2" X=1
run s16c6-pipe-1 "$A2" DSV4_CUDA_MV_Q2K=pipe DSV4_CUDA_MV_IQ2=sel
run s16c6-stream-3 "$A2" X=1
say "s16_c6 done"
cd "$OUT" && tar czf s16c6.tgz --exclude=s16c6.tgz * && find . -type f ! -name s16c6.tgz ! -name s16_c6.txt -delete
