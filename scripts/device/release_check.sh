#!/usr/bin/env bash
# The closing call of a work session on the H200 (after `CUDA=1 XZ=1 scripts/device/pack.sh`): the
# acceptance checks that must hold for what is submitted, most important first, each bounded in time:
#  1. --ctx that cannot fit is refused at start (ctx_refusal.sh);
#  2. CUDA vs CPU parity (cuda_parity.sh: tiny fixtures, oracle, flash-width 4 layers);
#  3. fusion_check.sh: every CUDA fusion on / off / gates off / faulted, byte-identical;
#  4. flash4_check.sh: ops check, attention test, bitwise A/B of $AB_SWITCHES, a 2K bench;
#  5. full flash q2 dsv4-bench at 2K and 32K (flash_bench.sh; $BENCH_ARGS), then once more per
#     assignment in $BENCH_AB (side by side with the default paths).
# CTX_REFUSAL=0 skips step 1. Results under $OUT; the summary lines on stdout.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/release-out}"; mkdir -p "$OUT"
D="$ROOT/scripts/device"
"$D/unpack.sh"
if [ "${CTX_REFUSAL:-1}" != 0 ]; then timeout 60 "$D/ctx_refusal.sh" >"$OUT/ctx_refusal.txt" 2>&1; tail -4 "$OUT/ctx_refusal.txt"; fi
OUT="$OUT/parity" PARITY_FLASH_TOKENS="${PARITY_FLASH_TOKENS:-32}" PARITY_TIMEOUT=120 timeout 230 "$D/cuda_parity.sh" >/dev/null 2>&1
grep -E "^(PASS|FAIL|ERROR|TIMEOUT|SKIP)|PARITY" "$OUT/parity/parity_summary.txt" | cut -c1-160 | head -30
OUT="$OUT/fusion" timeout 120 "$D/fusion_check.sh" >/dev/null 2>&1; grep -E "FAIL|fusion_check" "$OUT/fusion/fusion_check.txt" | head -12
OUT="$OUT/f4" AB_SWITCHES="${AB_SWITCHES:-DSV4_CUDA_GRAPH=0 DSV4_CUDA_HC_FAST=0}" OLD="${OLD:-X=1}" \
  timeout 200 "$D/flash4_check.sh" 2>&1 | grep -vE "^RESULT" | tail -10
BA="${BENCH_ARGS:---ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64}"
OUT="$OUT" timeout 150 "$D/flash_bench.sh" release "$BA" 2>&1 | tail -4
for ab in ${BENCH_AB:-}; do
  OUT="$OUT" timeout 90 "$D/flash_bench.sh" "release-${ab%%=*}" "$BA" "$ab" 2>&1 | tail -3
done
