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
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s14-out}"; mkdir -p "$OUT"
S="$OUT/s14_c3.txt"; touch "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
OLD="$ROOT/.carry/bin/bench/dsv4-bench-old"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || say "FAIL synth flash4"
t0=$(date +%s)
timeout 200 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt") ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|hc_pre prefill|hc_pre n=300|moe f16 timing|moe f16 IQ2" "$OUT/ops_check.txt" | head -20 | tee -a "$S"
python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(10,1000)) for _ in range(2200)))" >"$W/toks-long"
python3 -c "import random; r=random.Random(11); print(','.join(str(r.randrange(10,1000)) for _ in range(600)))" >"$W/toks"
dump() { local tag=$1 bin=$2 chunk=$3 toks=$4; shift 4
  env "$@" "$bin" -m "$M" --backend cuda --chunk $chunk --ctx 4096 --tokens "$(cat "$W/$toks")" --stats \
    --dump-logits "$W/f.$tag.bin" >/dev/null 2>"$OUT/f.$tag.err" || say "FAIL dump $tag: $(tail -1 "$OUT/f.$tag.err")"; }
same() { cmp -s "$W/f.$1.bin" "$W/f.$2.bin" && say "ok   $1 == $2 ($(stat -c %s "$W/f.$1.bin") bytes)" || say "FAIL $1 != $2"; }
t0=$(date +%s)
dump new-c300 "$C/dsv4" 300 toks X=1
grep -E "cuBLAS" "$OUT/f.new-c300.err" | tee -a "$S"
dump old-c300 "$ROOT/.carry/bin/bench/dsv4-old" 300 toks X=1
same new-c300 old-c300
dump fold0-c300 "$C/dsv4" 300 toks DSV4_CUDA_HC_MIX_FOLD=0
same new-c300 fold0-c300
dump sum4-c300 "$C/dsv4" 300 toks DSV4_CUDA_HC_SUM_BLOCKS=4
same new-c300 sum4-c300
dump new-long "$C/dsv4" 1 toks-long X=1
dump old-long "$ROOT/.carry/bin/bench/dsv4-old" 1 toks-long X=1
same new-long old-long
rm -f "$W"/f.*.bin
say "dumps: $(( $(date +%s) - t0 )) s"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 32"
run() { OUT="$OUT" "$FB" "$@" 2>&1 | grep -v ^ctx_tokens | tee -a "$S"; }
run s14c3-new-1 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c3-old-1 "$A2" X=1
run s14c3-fold0-1 "$A2" DSV4_CUDA_HC_MIX_FOLD=0
run s14c3-new-2 "$A2" X=1
BENCH="$OLD" BENCH_COMMIT=bdff632 run s14c3-old-2 "$A2" X=1
run s14c3-sum4-1 "$A2" DSV4_CUDA_HC_SUM_BLOCKS=4
run s14c3-new-3 "$A2" X=1
say "s14_c3 done"
