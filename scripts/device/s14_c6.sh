#!/usr/bin/env bash
# Session 14, call 6: the final code (the blas gate and result handler shared by the product and the folded
# HC mix) checked on flash4: cuda_ops_check (DS4), teacher-forced logits byte for byte against the
# session-13 build (bdff632) at chunk 300 (600 positions) and chunk 1 (2,200 positions).
set -u
SUMMARY=s14_c6 TOKS=600
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ab_ops_check "hc_pre prefill"
vs_old c300 300 toks
vs_old long 1 toks-long
rm -f "$W"/f.*.bin
say "s14_c6 done"
