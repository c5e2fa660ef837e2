#!/usr/bin/env bash
# Session 13, last call: more 2K samples of the final build (REPS runs, 128 tokens) and one of the
# session-12 build beside them, for the median. Results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s13-out}"; mkdir -p "$OUT"
S="$OUT/s13_more.txt"; touch "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
for i in $(seq 1 "${REPS:-3}"); do
  OUT="$OUT" "$FB" "s13m-new-$i" "$A2" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
  if [ "$i" = 1 ]; then
    BENCH="$ROOT/.carry/bin/bench/dsv4-bench-old" BENCH_COMMIT=148b520 OUT="$OUT" "$FB" "s13m-old-$i" "$A2" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
  fi
done
echo "s13_more done" | tee -a "$S"
