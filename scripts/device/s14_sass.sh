#!/usr/bin/env bash
# Session 14, call 1: the SASS listing of the IQ2_XXS / Q2_K matvec kernels (cuobjdump, present on the GPU
# machine) and the matvec bench's IQ2_XXS and Q2_K cases (decode and BIG shapes, every config checked).
# Usage after pack + unpack: OUT=... scripts/device/s14_sass.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/bench-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$ROOT/.carry/lib:${LD_LIBRARY_PATH:-}
B=$ROOT/.carry/bin/bench/cuda_matvec_bench
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass -arch sm_90 "$B" > "$OUT/sass-all.txt" 2>&1
  gzip -9 "$OUT/sass-all.txt"
  "$ROOT/scripts/device/sass_stats.sh" "$B" "${SASS_PAT:-mv_kernel}" > "$OUT/sass-stats.txt" 2>&1
  head -c 2500 "$OUT/sass-stats.txt"
fi
for f in ${FILTERS:-IQ2 Q2_K}; do
  timeout 240 "$B" --filter "$f" > "$OUT/mv-$f.txt" 2>&1
  echo "== bench $f rc=$?"; grep -E "^  cfg|^RESULT|FAIL" "$OUT/mv-$f.txt" | cut -c1-170
done
