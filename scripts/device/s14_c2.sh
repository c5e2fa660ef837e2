#!/usr/bin/env bash
# Session 14, call 2 (after `CUDA=1 XZ=1 BENCHES=cuda_matvec_bench scripts/device/pack.sh` here, with the
# session-13 final build (bdff632) carried as .carry/bin/bench/dsv4-bench-old.xz and dsv4-old.xz):
#  0. the matvec bench's IQ2_XXS cases (the selector decoder's lookups rewritten; every config checked, the
#     sign-mask decoder's rows compared bit for bit) and the SASS mix of the matvec kernels;
#  1. flash4 teacher-forced logits byte for byte: this build vs bdff632 (chunk 1 over 2,200 positions, chunk
#     128 over 300), and this build with DSV4_CUDA_MVW_CTAS=2 (the warp-direct plan at 2 CTAs per SM);
#  2. full flash q2, 2K prompt, 128 tokens: this build, bdff632, DSV4_CUDA_MVW_CTAS=2 and =3, interleaved.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s14-out}"; mkdir -p "$OUT"
S="$OUT/s14_c2.txt"; touch "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
OLD="$ROOT/.carry/bin/bench/dsv4-bench-old"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
B=$ROOT/.carry/bin/bench/cuda_matvec_bench
"$ROOT/scripts/device/sass_stats.sh" "$B" 'mv_kernelILi1ELi1ELi4' > "$OUT/sass-stats.txt" 2>&1; head -c 600 "$OUT/sass-stats.txt"
timeout 200 "$B" --filter IQ2 > "$OUT/mv-IQ2.txt" 2>&1; say "== bench IQ2 rc=$?"
grep -E "differ from the default|^RESULT|FAIL" "$OUT/mv-IQ2.txt" | cut -c1-170 | tee -a "$S"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || say "FAIL synth flash4"
python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(10,1000)) for _ in range(2200)))" >"$W/toks-long"
python3 -c "import random; r=random.Random(11); print(','.join(str(r.randrange(10,1000)) for _ in range(300)))" >"$W/toks"
dump() { local tag=$1 bin=$2 chunk=$3 toks=$4; shift 4
  env "$@" "$bin" -m "$M" --backend cuda --chunk $chunk --ctx 4096 --tokens "$(cat "$W/$toks")" --stats \
    --dump-logits "$W/f.$tag.bin" >/dev/null 2>"$OUT/f.$tag.err" || say "FAIL dump $tag: $(tail -1 "$OUT/f.$tag.err")"; }
same() { cmp -s "$W/f.$1.bin" "$W/f.$2.bin" && say "ok   $1 == $2 ($(stat -c %s "$W/f.$1.bin") bytes)" || say "FAIL $1 != $2"; }
t0=$(date +%s)
dump new-long "$C/dsv4" 1 toks-long X=1
dump old-long "$ROOT/.carry/bin/bench/dsv4-old" 1 toks-long X=1
same new-long old-long
dump ctas2-long "$C/dsv4" 1 toks-long DSV4_CUDA_MVW_CTAS=2
same new-long ctas2-long
dump new-c128 "$C/dsv4" 128 toks X=1
dump old-c128 "$ROOT/.carry/bin/bench/dsv4-old" 128 toks X=1
same new-c128 old-c128
rm -f "$W"/f.*.bin
say "dumps: $(( $(date +%s) - t0 )) s"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run() { OUT="$OUT" "$FB" "$@" 2>&1 | grep -v ^ctx_tokens | tee -a "$S"; }
run s14c2-new-1 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c2-old-1 "$A2" X=1
run s14c2-ctas2-1 "$A2" DSV4_CUDA_MVW_CTAS=2
run s14c2-ctas3-1 "$A2" DSV4_CUDA_MVW_CTAS=3
run s14c2-new-2 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c2-old-2 "$A2" X=1
run s14c2-ctas2-2 "$A2" DSV4_CUDA_MVW_CTAS=2
run s14c2-ctas3-2 "$A2" DSV4_CUDA_MVW_CTAS=3
say "s14_c2 done"
