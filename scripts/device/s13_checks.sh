#!/usr/bin/env bash
# Session 13 checks (after `CUDA=1 XZ=1 scripts/device/pack.sh` here, scripts/device/unpack.sh there):
#  1. test_cuda_attn (iscore_one: scores bitwise vs a host evaluation and vs the old decode kernel);
#  2. flash4 teacher-forced logits over 2,200 positions at chunk 1 (the indexer runs from position
#     2051): default vs each switch in S13_SWITCHES, byte for byte;
#  3. OPS=1: cuda_ops_check; AB="switches": ab_check with them (300 positions, chunk 1 and 128);
#  4. PART=bench: full flash q2, 2K prompt 128 tokens, default vs each switch, REPS rounds
#     interleaved; then 32K prompt 64 tokens, default vs each switch in S13_32K.
# Results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s13-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
S="$OUT/s13_checks.txt"; touch "$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
SW="${S13_SWITCHES:-DSV4_CUDA_ISCORE_ONE=0}"
if [ "${CHECKS:-1}" = 1 ]; then
  timeout 200 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1; say "test_cuda_attn rc $?: $(grep -c '^PASS' "$OUT/test_cuda_attn.txt") pass, $(grep -c '^FAIL' "$OUT/test_cuda_attn.txt") fail"
  grep -E "^FAIL|iscore_one|one-query" "$OUT/test_cuda_attn.txt" | head -30 | tee -a "$S"
  [ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
  python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(10,1000)) for _ in range(2200)))" >"$W/toks-long"
  dump() { local tag=$1; shift; env "$@" "$C/dsv4" -m "$M" --backend cuda --chunk 1 --ctx 4096 --tokens "$(cat "$W/toks-long")" \
      --stats --dump-logits "$W/s13.$tag.bin" >/dev/null 2>"$OUT/s13.$tag.err" || say "FAIL dump $tag: $(tail -1 "$OUT/s13.$tag.err")"; }
  dump base X=1
  for sw in $SW; do
    t=$(echo "$sw" | tr -c 'A-Za-z0-9\n' '-')
    dump "$t" $(echo "$sw" | tr '+' ' ')
    cmp -s "$W/s13.base.bin" "$W/s13.$t.bin" && say "ok   $sw == default, chunk 1, 2,200 positions ($(stat -c %s "$W/s13.base.bin") bytes)" || say "FAIL $sw != default (2,200 positions)"
  done
fi
if [ "${OPS:-0}" = 1 ]; then
  timeout 170 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt")"
  grep -E "^FAIL|indexer" "$OUT/ops_check.txt" | head -20 | tee -a "$S"
fi
if [ -n "${AB:-}" ]; then
  AB_SWITCHES="$AB" OUT="$OUT/ab" timeout 200 "$ROOT/scripts/device/ab_check.sh" 2>&1 | grep -E "^FAIL|ab_check:|counters" | tee -a "$S"
fi
if [ "${PART:-}" = bench ]; then
  FB="$ROOT/scripts/device/flash_bench.sh"
  A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
  for i in $(seq 1 "${REPS:-2}"); do
    OUT="$OUT" "$FB" "s13-base-$i" "$A2" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
    for sw in $SW; do
      t=$(echo "$sw" | sed 's/DSV4_CUDA_//' | tr -c 'A-Za-z0-9\n' '-' | tr 'A-Z' 'a-z')
      OUT="$OUT" "$FB" "s13-$t-$i" "$A2" $(echo "$sw" | tr '+' ' ') 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
    done
  done
  A32="--ctx-start 32768 --ctx-max 32768 --gen-tokens 64"
  for sw in ${S13_32K:-}; do
    t=$(echo "$sw" | sed 's/DSV4_CUDA_//' | tr -c 'A-Za-z0-9\n' '-' | tr 'A-Z' 'a-z')
    OUT="$OUT" "$FB" "s13-32k-$t" "$A32" $(echo "$sw" | tr '+' ' ') 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
  done
fi
say "s13_checks done"
