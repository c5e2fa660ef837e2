#!/usr/bin/env bash
# Session 21 call 5: the rest of qws_kernel's breakdown (DSV4_CUDA_Q8_WG_DIAG without the loads: products and
# update, products only, update only, nothing but the stores), q8_wg_check TOPS only (outputs wrong by design).
set -u
SUMMARY=s21_c5
. "$(dirname "$0")/ab_lib.sh"
for d in noloads productsonly updateonly nothing; do
  DSV4_CUDA_Q8_WG_DIAG=$d timeout 100 "$C/q8_wg_check" >"$OUT/q8wg-diag-$d.txt" 2>&1
  say "== q8_wg_check DSV4_CUDA_Q8_WG_DIAG=$d (outputs wrong by design): rc $?"
  grep -E "TOPS" "$OUT/q8wg-diag-$d.txt" | sed 's/.*n=/n=/; s/ (.*);/;/' | cut -c1-120 | tee -a "$S"
done
ab_finish s21_c5
