#!/usr/bin/env bash
# Session 14, call 5 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here, with the session-13 final build
# (bdff632) carried as .carry/bin/bench/dsv4-bench-old.xz and dsv4-old.xz): the f16 copies of the Q8_0
# layer matrices made once at creation for the prefill products (DSV4_CUDA_W16_CACHE=0: per chunk).
#  1. cuda_ops_check on flash4 (DS4);
#  2. flash4 teacher-forced logits byte for byte: this build vs bdff632 and vs DSV4_CUDA_W16_CACHE=0 at
#     chunk 300 (600 positions), this build vs bdff632 at chunk 1 (2,200 positions);
#  3. full flash q2, 2K prompt, 128 tokens: this build 2x, DSV4_CUDA_W16_CACHE=0, bdff632, interleaved;
#     then --ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64.
set -u
SUMMARY=s14_c5 TOKS=600
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
ab_ops_check "f16 copies"
t0=$(date +%s)
dump new-c300 "$C/dsv4" 300 toks X=1
grep -E "f16 copies|cuBLAS" "$OUT/f.new-c300.err" | head -3 | tee -a "$S"
dump old-c300 "$OLD_CLI" 300 toks X=1
same new-c300 old-c300
vs_env w16off-c300 300 toks DSV4_CUDA_W16_CACHE=0
vs_old long 1 toks-long
rm -f "$W"/f.*.bin
say "dumps: $(( $(date +%s) - t0 )) s"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s14c5-new-1 "$A2" X=1
run s14c5-w16off-1 "$A2" DSV4_CUDA_W16_CACHE=0
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c5-old-1 "$A2" X=1
run s14c5-new-2 "$A2" X=1
grep -hE "f16 copies" "$OUT"/*s14c5-new-2.err | head -2 | tee -a "$S"
OUT="$OUT" timeout 150 "$FB" "s14c5-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s14_c5 done"
