#!/usr/bin/env bash
# Session 18, call 7: cuda_ops_check (DS4) on the tiny f16 and tiny q2 models after its F16 product
# check learned the two-term operand (reference: the f32 activations, 1e-5).
set -u
SUMMARY=s18_c7
. "$(dirname "$0")/ab_lib.sh"
for q in f16 q2; do
  m=/dev/shm/tiny-$q.gguf
  "$ROOT/.carry/bin/dsv4-gguf" synth --preset tiny --quant $q "$m" >/dev/null 2>&1 || say "FAIL synth $q"
  timeout 100 "$C/cuda_ops_check" "$m" --numerics ds4 >"$OUT/ops-$q.txt" 2>&1
  say "ops $q rc $?: $(tail -1 "$OUT/ops-$q.txt")"
  grep -E "^FAIL|matmul f16 mma" "$OUT/ops-$q.txt" | head -8 | cut -c1-200 | tee -a "$S"
done
