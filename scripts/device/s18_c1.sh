#!/usr/bin/env bash
# Session 18, call 1: the streamed IQ2_XXS kernel with per-slot cursors (cuda_matvec_bench IQ2_XXS
# cases x3, its SASS mix); cuda_parity.sh; full flash q2 2K decode (128 tokens) x2, the 70K prefill +
# 128 decoded tokens; ncu per-kernel times of flash4 decode (for issue 5).
set -u
SUMMARY=s18_c1
. "$(dirname "$0")/ab_lib.sh"
B2="$ROOT/.carry/bin/bench"
for k in 1 2 3; do
  timeout 120 "$B2/cuda_matvec_bench" --filter IQ2_XXS >"$OUT/mv_iq2_$k.txt" 2>&1; say "IQ2_XXS run $k rc $?"
  grep -E "  FAIL|RESULT" "$OUT/mv_iq2_$k.txt" | tee -a "$S"
done
bash "$ROOT/scripts/device/sass_stats.sh" "$B2/cuda_matvec_bench" 'mvs_iq2' >"$OUT/sass_iq2.txt" 2>&1
head -4 "$OUT/sass_iq2.txt" | cut -c1-300 | tee -a "$S"
cuobjdump -sass -arch sm_90 -fun '_Z14mvs_iq2_kernelILi4ELi4ELi2EEv9mv_params' "$B2/cuda_matvec_bench" >"$OUT/sass_iq2_442.txt" 2>&1
OUT="$OUT/parity" PARITY_TIMEOUT=200 timeout 400 bash "$ROOT/scripts/device/cuda_parity.sh" >/dev/null 2>&1; say "cuda_parity rc $?"
grep -E "^(PASS|FAIL|ERROR|TIMEOUT)|CUDA OPS" "$OUT/parity/parity_summary.txt" | cut -c1-220 | tee -a "$S"
grep -E "^FAIL" "$OUT/parity/parity.log" | head -20 | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
run s18c1-2k-1 "$A2" X=1
run s18c1-2k-2 "$A2" X=1
OUT="$OUT" timeout 150 "$FB" "s18c1-70k" "--ctx-start 70000 --gen-tokens 128" X=1 2>&1 | grep -v ^ctx_tokens | tee -a "$S"
OUT="$OUT/ncu" GEN=3 timeout 150 bash "$ROOT/scripts/device/ncu_kernels.sh" s18c1 >/dev/null 2>&1; say "ncu rc $?"
say "s18_c1 done"
cd "$OUT" && tar czf s18c1.tgz --exclude=s18c1.tgz * && find . -type f ! -name s18c1.tgz ! -name s18_c1.txt -delete
