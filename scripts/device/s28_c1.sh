#!/usr/bin/env bash
# Session 28 call 1 (a measurement build, not the landed code: bench/results/2026-12-03-s28-c1-whatif.diff):
# upper bounds for decode work that could be taken off the critical path. DSV4_WHATIF skips a kernel or
# shortens it (values wrong but finite; only the step time is of interest): comb1 (the HC tails' Sinkhorn
# at 1 iteration), hct (no HC tail kernels), mid (no MoE mid kernel), combine (no decode attention combine),
# rsel (no router selection), qnr (no decode query norm + RoPE). Full flash q2, 2K + 64 tokens each, interleaved.
set -u
SUMMARY=s28_c1
. "$(dirname "$0")/ab_lib.sh"
A="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run base1 "$A" X=1
for w in comb1 mid combine rsel qnr hct; do
  [ $SECONDS -lt 400 ] && run "wi-$w" "$A" DSV4_WHATIF=$w
done
[ $SECONDS -lt 430 ] && run base2 "$A" X=1
[ $SECONDS -lt 460 ] && run "wi-comb1-2" "$A" DSV4_WHATIF=comb1
rm -f /dev/shm/flash-q2.gguf
ab_finish "$SUMMARY"
