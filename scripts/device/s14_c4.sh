#!/usr/bin/env bash
# Session 14, call 4 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here, with the session-13 final build
# (bdff632) carried as .carry/bin/bench/dsv4-bench-old.xz and dsv4-old.xz): the q heads' norm + RoPE a
# warp per head in prefill chunks, the expert slot sum four outputs a thread, then the closing numbers.
#  1. cuda_ops_check on flash4 (DS4): every op (q_norm_rope n=70: the warp kernel, bitwise the unfused ops);
#  2. flash4 teacher-forced logits byte for byte: this build vs bdff632 at chunk 300 (600 positions, the
#     cuBLAS / f16 MoE prefill path) and chunk 1 (2,200 positions); DSV4_CUDA_QNR_WARP=0 at chunk 300;
#  3. full flash q2, 2K prompt, 128 tokens: this build 3x and bdff632 2x, interleaved;
#  4. this build: --ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64; a 70,000-token prompt
#     and 128 tokens.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s14-out}"; mkdir -p "$OUT"
S="$OUT/s14_c4.txt"; touch "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
OLD="$ROOT/.carry/bin/bench/dsv4-bench-old"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || say "FAIL synth flash4"
t0=$(date +%s)
timeout 200 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt") ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|q_norm_rope L. bitwise.*n=70|hc_pre prefill" "$OUT/ops_check.txt" | head -20 | tee -a "$S"
python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(10,1000)) for _ in range(2200)))" >"$W/toks-long"
python3 -c "import random; r=random.Random(11); print(','.join(str(r.randrange(10,1000)) for _ in range(600)))" >"$W/toks"
dump() { local tag=$1 bin=$2 chunk=$3 toks=$4; shift 4
  env "$@" "$bin" -m "$M" --backend cuda --chunk $chunk --ctx 4096 --tokens "$(cat "$W/$toks")" --stats \
    --dump-logits "$W/f.$tag.bin" >/dev/null 2>"$OUT/f.$tag.err" || say "FAIL dump $tag: $(tail -1 "$OUT/f.$tag.err")"; }
same() { cmp -s "$W/f.$1.bin" "$W/f.$2.bin" && say "ok   $1 == $2 ($(stat -c %s "$W/f.$1.bin") bytes)" || say "FAIL $1 != $2"; }
t0=$(date +%s)
dump new-c300 "$C/dsv4" 300 toks X=1
dump old-c300 "$ROOT/.carry/bin/bench/dsv4-old" 300 toks X=1
same new-c300 old-c300
dump qnr0-c300 "$C/dsv4" 300 toks DSV4_CUDA_QNR_WARP=0
same new-c300 qnr0-c300
dump new-long "$C/dsv4" 1 toks-long X=1
dump old-long "$ROOT/.carry/bin/bench/dsv4-old" 1 toks-long X=1
same new-long old-long
rm -f "$W"/f.*.bin
say "dumps: $(( $(date +%s) - t0 )) s"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run() { OUT="$OUT" "$FB" "$@" 2>&1 | grep -v ^ctx_tokens | tee -a "$S"; }
run s14c4-new-1 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c4-old-1 "$A2" X=1
run s14c4-new-2 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c4-old-2 "$A2" X=1
run s14c4-new-3 "$A2" X=1
OUT="$OUT" timeout 150 "$FB" "s14c4-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
OUT="$OUT" timeout 200 "$FB" "s14c4-ctx70k" "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s14_c4 done"
