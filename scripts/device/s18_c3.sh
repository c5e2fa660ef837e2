#!/usr/bin/env bash
# (Run at 47da99d; the switch measured slower and was removed after this call: bench/NOTES.md session 18.)
# Session 18, call 3 (the graph change reverted): the L2 prefetch of the routed down rows from the gate/up
# launch (DSV4_CUDA_MOE_L2PF=1, off by default) against the default, full flash q2 2K decode interleaved;
# flash4 logits byte-identical with it; cuda_matvec_bench IQ2_XXS cases; the default 2K -> 32K.
set -u
SUMMARY=s18_c3
. "$(dirname "$0")/ab_lib.sh"
B2="$ROOT/.carry/bin/bench"
timeout 120 "$B2/cuda_matvec_bench" --filter IQ2_XXS >"$OUT/mv_iq2.txt" 2>&1; say "IQ2_XXS rc $?"
grep -E "  FAIL|RESULT" "$OUT/mv_iq2.txt" | tee -a "$S"
ab_flash4
dump new-c1 "$C/dsv4" 1 toks X=1
vs_env l2pf-c1 1 toks DSV4_CUDA_MOE_L2PF=1
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s18c3-def-1 "$A2" X=1
run s18c3-l2pf-1 "$A2" DSV4_CUDA_MOE_L2PF=1
run s18c3-def-2 "$A2" X=1
run s18c3-l2pf-2 "$A2" DSV4_CUDA_MOE_L2PF=1
OUT="$OUT" timeout 150 "$FB" "s18c3-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s18_c3 done"
cd "$OUT" && tar czf s18c3.tgz --exclude=s18c3.tgz * && find . -type f ! -name s18c3.tgz ! -name s18_c3.txt -delete
