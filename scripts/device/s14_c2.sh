#!/usr/bin/env bash
# Session 14, call 2 (after `CUDA=1 XZ=1 BENCHES=cuda_matvec_bench scripts/device/pack.sh` here, with the
# session-13 final build (bdff632) carried as .carry/bin/bench/dsv4-bench-old.xz and dsv4-old.xz):
#  0. the matvec bench's IQ2_XXS cases (the selector decoder's lookups rewritten; every config checked, the
#     sign-mask decoder's rows compared bit for bit) and the SASS mix of the matvec kernels;
#  1. flash4 teacher-forced logits byte for byte: this build vs bdff632 (chunk 1 over 2,200 positions, chunk
#     128 over 300), and this build with DSV4_CUDA_MVW_CTAS=2 (the warp-direct plan at 2 CTAs per SM);
#  2. full flash q2, 2K prompt, 128 tokens: this build, bdff632, DSV4_CUDA_MVW_CTAS=2 and =3, interleaved.
# Ran at 9e573b1; the DSV4_CUDA_MVW_CTAS knob was removed after it (6c21678: measured slower).
set -u
SUMMARY=s14_c2
. "$(dirname "$0")/ab_lib.sh"
B=$ROOT/.carry/bin/bench/cuda_matvec_bench
"$ROOT/scripts/device/sass_stats.sh" "$B" 'mv_kernelILi1ELi1ELi4' > "$OUT/sass-stats.txt" 2>&1; head -c 600 "$OUT/sass-stats.txt"
timeout 200 "$B" --filter IQ2 > "$OUT/mv-IQ2.txt" 2>&1; say "== bench IQ2 rc=$?"
grep -E "differ from the default|^RESULT|FAIL" "$OUT/mv-IQ2.txt" | cut -c1-170 | tee -a "$S"
ab_flash4
t0=$(date +%s)
vs_old long 1 toks-long
vs_env ctas2-long 1 toks-long DSV4_CUDA_MVW_CTAS=2
vs_old c128 128 toks
rm -f "$W"/f.*.bin
say "dumps: $(( $(date +%s) - t0 )) s"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s14c2-new-1 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c2-old-1 "$A2" X=1
run s14c2-ctas2-1 "$A2" DSV4_CUDA_MVW_CTAS=2
run s14c2-ctas3-1 "$A2" DSV4_CUDA_MVW_CTAS=3
run s14c2-new-2 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c2-old-2 "$A2" X=1
run s14c2-ctas2-2 "$A2" DSV4_CUDA_MVW_CTAS=2
run s14c2-ctas3-2 "$A2" DSV4_CUDA_MVW_CTAS=3
say "s14_c2 done"
