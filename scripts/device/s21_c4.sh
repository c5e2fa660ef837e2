#!/usr/bin/env bash
# Session 21 call 4: where qws_kernel's time goes (q8_wg_check TOPS without the update, without the products,
# with neither: DSV4_CUDA_Q8_WG_DIAG, wrong outputs by design), then the closing runs of the new default
# (ws1): full flash q2 2K -> 32K, the 70K prompt + 128 tokens, cuda_parity.sh.
set -u
SUMMARY=s21_c4
. "$(dirname "$0")/ab_lib.sh"
for d in noupdate noproducts loadsonly; do
  DSV4_CUDA_Q8_WG_DIAG=$d timeout 150 "$C/q8_wg_check" >"$OUT/q8wg-diag-$d.txt" 2>&1
  say "== q8_wg_check DSV4_CUDA_Q8_WG_DIAG=$d (outputs wrong by design): rc $?"
  grep -E "TOPS" "$OUT/q8wg-diag-$d.txt" | sed 's/.*n=/n=/; s/outputs differ from quant_dot_q8_0/differ/' | sed 's/ (.*);/;/' | cut -c1-120 | tee -a "$S"
done
run s21c4-32k "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1
run s21c4-70k "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1
grep -ho '"nonfinite_logits": [0-9]*\|"q8_wg_products": [0-9]*\|"buffer_bytes": [0-9]*' "$OUT"/*s21c4-70k*.json | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
parity_run 300
ab_finish s21_c4
