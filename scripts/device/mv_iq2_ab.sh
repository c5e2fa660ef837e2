#!/usr/bin/env bash
# Session 7, IQ2_XXS decoders: the matvec bench's IQ2_XXS cases (sign masks vs PRMT selectors, every
# config checked), the static SASS mix of the matvec kernels, and the full flash q2 decode A/B
# (DSV4_CUDA_MV_IQ2=sel vs the default). Usage after pack + unpack: scripts/device/mv_iq2_ab.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/bench-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$ROOT/.carry/lib:${LD_LIBRARY_PATH:-}
"$ROOT/scripts/device/sass_stats.sh" "$ROOT/.carry/bin/bench/cuda_matvec_bench" 'mv_kernel' > "$OUT/sass-mv.txt" 2>&1
head -c 3000 "$OUT/sass-mv.txt"
for f in ${FILTERS:-IQ2 Q2_K}; do
  timeout 300 "$ROOT/.carry/bin/bench/cuda_matvec_bench" --filter "$f" > "$OUT/mv-$f.txt" 2>&1
  echo "== bench $f rc=$?"; grep -E "^  cfg|^RESULT|FAIL" "$OUT/mv-$f.txt" | cut -c1-170
done
[ -n "${NO_AB:-}" ] || OLD="${OLD:-DSV4_CUDA_MV_IQ2=sel}" REPS="${REPS:-2}" OUT="$OUT" "$ROOT/scripts/device/decode_ab.sh"
