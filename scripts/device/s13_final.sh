#!/usr/bin/env bash
# Session 13 closing call (after `CUDA=1 XZ=1 scripts/device/pack.sh` here with the session-12 final
# build's dsv4-bench carried as .carry/bin/bench/dsv4-bench-old.xz; scripts/device/unpack.sh there):
#  0. (below) bitwise checks on flash4;
#  1. full flash q2, 2K prompt, 128 decoded tokens: this build and the session-12 build (148b520)
#     side by side, interleaved (new, old, new, old, new);
#  2. this build, --ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64 (2K and 32K);
#  3. this build, a 70,000-token prompt and 128 decoded tokens (17,500 compressed rows per ratio-4
#     layer: the one-query indexer scoring and selection past the staged-key limit).
# Results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s13-out}"; mkdir -p "$OUT"
S="$OUT/s13_final.txt"; touch "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
OLD="$ROOT/.carry/bin/bench/dsv4-bench-old"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
# 0. flash4 teacher-forced logits, byte for byte: this build vs the session-12 build (148b520, carried as
#    .carry/bin/bench/dsv4-old) at chunk 1 over 2,200 positions and at chunk 128 over 300; this build vs
#    DSV4_CUDA_ROUTER_SMEM=0 and DSV4_CUDA_ISCORE_ONE_TILE=8 at chunk 1 over 2,200 positions.
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || say "FAIL synth flash4"
python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(10,1000)) for _ in range(2200)))" >"$W/toks-long"
python3 -c "import random; r=random.Random(11); print(','.join(str(r.randrange(10,1000)) for _ in range(300)))" >"$W/toks"
dump() { local tag=$1 bin=$2 chunk=$3 toks=$4; shift 4
  env "$@" "$bin" -m "$M" --backend cuda --chunk $chunk --ctx 4096 --tokens "$(cat "$W/$toks")" --stats \
    --dump-logits "$W/f.$tag.bin" >/dev/null 2>"$OUT/f.$tag.err" || say "FAIL dump $tag: $(tail -1 "$OUT/f.$tag.err")"; }
same() { cmp -s "$W/f.$1.bin" "$W/f.$2.bin" && say "ok   $1 == $2 ($(stat -c %s "$W/f.$1.bin") bytes)" || say "FAIL $1 != $2"; }
dump new-long "$C/dsv4" 1 toks-long X=1
dump old-long "$ROOT/.carry/bin/bench/dsv4-old" 1 toks-long X=1
same new-long old-long
dump rsmem0-long "$C/dsv4" 1 toks-long DSV4_CUDA_ROUTER_SMEM=0
same new-long rsmem0-long
dump tile8-long "$C/dsv4" 1 toks-long DSV4_CUDA_ISCORE_ONE_TILE=8
same new-long tile8-long
dump new-c128 "$C/dsv4" 128 toks X=1
dump old-c128 "$ROOT/.carry/bin/bench/dsv4-old" 128 toks X=1
same new-c128 old-c128
rm -f "$W"/f.*.bin
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
for i in 1 2 3; do
  OUT="$OUT" "$FB" "s13f-new-$i" "$A2" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
  if [ $i -lt 3 ] && [ -x "$OLD" ]; then
    BENCH="$OLD" BENCH_COMMIT=148b520 OUT="$OUT" "$FB" "s13f-old-$i" "$A2" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
  fi
done
for ab in DSV4_CUDA_ROUTER_SMEM=0 DSV4_CUDA_ISCORE_ONE_TILE=8; do
  t=$(echo "$ab" | sed 's/DSV4_CUDA_//' | tr -c 'A-Za-z0-9\n' '-' | tr 'A-Z' 'a-z')
  OUT="$OUT" "$FB" "s13f-$t" "$A2" "$ab" 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
done
OUT="$OUT" timeout 150 "$FB" "s13f-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
OUT="$OUT" timeout 200 "$FB" "s13f-ctx70k" "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
echo "s13_final done" | tee -a "$S"
