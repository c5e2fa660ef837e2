#!/usr/bin/env bash
# Session 7: the cp.async warp-direct Q8_0 path against the register path (DSV4_CUDA_MVW_ASYNC=0):
# cuda_mvw_bench both ways, the expert matvec cases (--quick), byte-identical logits for the two
# switches (ab_check), and the full flash q2 decode A/B. Usage after pack + unpack.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/bench-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$ROOT/.carry/lib:${LD_LIBRARY_PATH:-}
B="$ROOT/.carry/bin/bench"
for v in 1 0; do
  DSV4_CUDA_MVW_ASYNC=$v timeout 200 "$B/cuda_mvw_bench" > "$OUT/mvw-async$v.txt" 2>&1
  echo "== mvw async=$v rc=$?"; grep -E "^RESULT" "$OUT/mvw-async$v.txt" | grep -v ":stream" | cut -c1-120
done
for f in IQ2 Q2_K; do
  timeout 200 "$B/cuda_matvec_bench" --quick --filter "$f" > "$OUT/mv-$f.txt" 2>&1
  echo "== matvec $f rc=$?"; grep -E "^RESULT|FAIL" "$OUT/mv-$f.txt" | cut -c1-150
done
AB_SWITCHES="${AB_SWITCHES:-DSV4_CUDA_MVW_ASYNC=0 DSV4_CUDA_MV_IQ2=mask}" OUT="$OUT" timeout 400 "$ROOT/scripts/device/ab_check.sh" 2>&1 | tail -8
[ -n "${NO_AB:-}" ] || OLD="${OLD:-DSV4_CUDA_MVW_ASYNC=0}" REPS="${REPS:-2}" OUT="$OUT" "$ROOT/scripts/device/decode_ab.sh"
