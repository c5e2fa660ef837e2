#!/usr/bin/env bash
# Session 17, call 6 (final code): cuda_matvec_bench IQ2_XXS cases x3; cuda_parity.sh (tiny q2 / f16 and
# flash4, EXACT and DS4, with the op-by-op checks' numerics-aware gates); full flash q2 2K decode (128
# tokens) x3 and once with the pipeline kernels, 2K -> 32K.
set -u
SUMMARY=s17_c6
. "$(dirname "$0")/ab_lib.sh"
B2="$ROOT/.carry/bin/bench"
for k in 1 2 3; do
  timeout 120 "$B2/cuda_matvec_bench" --filter IQ2_XXS >"$OUT/mv_iq2_$k.txt" 2>&1; say "IQ2_XXS run $k rc $?"
  grep -E "  FAIL|RESULT" "$OUT/mv_iq2_$k.txt" | tee -a "$S"
done
OUT="$OUT/parity" PARITY_TIMEOUT=200 timeout 400 bash "$ROOT/scripts/device/cuda_parity.sh" >/dev/null 2>&1; say "cuda_parity rc $?"
grep -E "^(PASS|FAIL|ERROR|TIMEOUT)|CUDA OPS" "$OUT/parity/parity_summary.txt" | cut -c1-220 | tee -a "$S"
grep -E "^FAIL" "$OUT/parity/parity.log" | head -20 | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s17c6-2k-1 "$A2" X=1
run s17c6-2k-pipe "$A2" DSV4_CUDA_MV_IQ2=sel
run s17c6-2k-2 "$A2" X=1

OUT="$OUT" timeout 150 "$FB" "s17c6-2k-32k" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
say "s17_c6 done"
cd "$OUT" && tar czf s17c6.tgz --exclude=s17c6.tgz * && find . -type f ! -name s17c6.tgz ! -name s17_c6.txt -delete
