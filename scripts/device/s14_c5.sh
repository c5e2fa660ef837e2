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
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s14-out}"; mkdir -p "$OUT"
S="$OUT/s14_c5.txt"; touch "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
OLD="$ROOT/.carry/bin/bench/dsv4-bench-old"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || say "FAIL synth flash4"
t0=$(date +%s)
timeout 200 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt") ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|f16 copies" "$OUT/ops_check.txt" | head -20 | tee -a "$S"
python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(10,1000)) for _ in range(2200)))" >"$W/toks-long"
python3 -c "import random; r=random.Random(11); print(','.join(str(r.randrange(10,1000)) for _ in range(600)))" >"$W/toks"
dump() { local tag=$1 bin=$2 chunk=$3 toks=$4; shift 4
  env "$@" "$bin" -m "$M" --backend cuda --chunk $chunk --ctx 4096 --tokens "$(cat "$W/$toks")" --stats \
    --dump-logits "$W/f.$tag.bin" >/dev/null 2>"$OUT/f.$tag.err" || say "FAIL dump $tag: $(tail -1 "$OUT/f.$tag.err")"; }
same() { cmp -s "$W/f.$1.bin" "$W/f.$2.bin" && say "ok   $1 == $2 ($(stat -c %s "$W/f.$1.bin") bytes)" || say "FAIL $1 != $2"; }
t0=$(date +%s)
dump new-c300 "$C/dsv4" 300 toks X=1
grep -E "f16 copies|cuBLAS" "$OUT/f.new-c300.err" | head -3 | tee -a "$S"
dump old-c300 "$ROOT/.carry/bin/bench/dsv4-old" 300 toks X=1
same new-c300 old-c300
dump w16off-c300 "$C/dsv4" 300 toks DSV4_CUDA_W16_CACHE=0
same new-c300 w16off-c300
dump new-long "$C/dsv4" 1 toks-long X=1
dump old-long "$ROOT/.carry/bin/bench/dsv4-old" 1 toks-long X=1
same new-long old-long
rm -f "$W"/f.*.bin
say "dumps: $(( $(date +%s) - t0 )) s"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run() { OUT="$OUT" "$FB" "$@" 2>&1 | grep -v ^ctx_tokens | tee -a "$S"; }
run s14c5-new-1 "$A2" X=1
run s14c5-w16off-1 "$A2" DSV4_CUDA_W16_CACHE=0
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c5-old-1 "$A2" X=1
run s14c5-new-2 "$A2" X=1
grep -hE "f16 copies" "$OUT"/*s14c5-new-2.err | head -2 | tee -a "$S"
OUT="$OUT" timeout 150 "$FB" "s14c5-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s14_c5 done"
