#!/usr/bin/env bash
# Session 14, call 3 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here, with the session-13 final build
# (bdff632) carried as .carry/bin/bench/dsv4-bench-old.xz and dsv4-old.xz): the prefill changes
# (the HC mix's rmsnorm folded into its f16 conversion, one weighted-sum block per token, the expert
# lists' ids staged in shared memory).
#  1. cuda_ops_check on flash4 (DS4): every op, and the new hc_pre prefill check (fold and grid bitwise);
#  2. flash4 teacher-forced logits at chunk 300 (the cuBLAS prefill path) byte for byte: this build vs
#     bdff632, DSV4_CUDA_HC_MIX_FOLD=0 and DSV4_CUDA_HC_SUM_BLOCKS=4; chunk 1 vs bdff632 (2,200 positions);
#  3. full flash q2, 2K prompt, 32 tokens: this build and bdff632 twice, interleaved, then each switch.
set -u
SUMMARY=s14_c3 TOKS=600
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ab_ops_check "hc_pre prefill|hc_pre n=300|moe f16 timing|moe f16 IQ2"
t0=$(date +%s)
dump new-c300 "$C/dsv4" 300 toks X=1
grep -E "cuBLAS" "$OUT/f.new-c300.err" | tee -a "$S"
dump old-c300 "$OLD_CLI" 300 toks X=1
same new-c300 old-c300
vs_env fold0-c300 300 toks DSV4_CUDA_HC_MIX_FOLD=0
vs_env sum4-c300 300 toks DSV4_CUDA_HC_SUM_BLOCKS=4
vs_old long 1 toks-long
rm -f "$W"/f.*.bin
say "dumps: $(( $(date +%s) - t0 )) s"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 32"
run s14c3-new-1 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c3-old-1 "$A2" X=1
run s14c3-fold0-1 "$A2" DSV4_CUDA_HC_MIX_FOLD=0
run s14c3-new-2 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c3-old-2 "$A2" X=1
run s14c3-sum4-1 "$A2" DSV4_CUDA_HC_SUM_BLOCKS=4
run s14c3-new-3 "$A2" X=1
say "s14_c3 done"
