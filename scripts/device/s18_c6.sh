#!/usr/bin/env bash
# Session 18, call 6: F16-weight prefill products with the two-term f16 operand (hi + lo): the HF-oracle
# fixtures on CUDA (default, and DSV4_CUDA_F16_TWO_TERM=0), cuda_parity.sh, and the full flash q2 2K
# prefill / decode with and without it, interleaved.
set -u
SUMMARY=s18_c6
. "$(dirname "$0")/ab_lib.sh"
for v in "default X=1" "oneterm DSV4_CUDA_F16_TWO_TERM=0"; do
  set -- $v; tag=$1; shift
  (cd "$ROOT" && env DSV4_TEST_BACKEND=cuda "$@" timeout 120 .carry/bin/cuda/test_oracle) >"$OUT/oracle-$tag.txt" 2>&1
  say "== oracle $tag ($*): rc $?"
  grep -E "^exact:|^ds4 .*median|OK \]|FAILED \]" "$OUT/oracle-$tag.txt" | grep -v "listed below" | tee -a "$S"
done
OUT="$OUT/parity" PARITY_TIMEOUT=200 timeout 400 bash "$ROOT/scripts/device/cuda_parity.sh" >/dev/null 2>&1; say "cuda_parity rc $?"
grep -E "^(PASS|FAIL|ERROR|TIMEOUT)|CUDA OPS" "$OUT/parity/parity_summary.txt" | cut -c1-220 | tee -a "$S"
grep -E "^FAIL" "$OUT/parity/parity.log" | head -20 | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
run s18c6-two-1 "$A2" X=1
run s18c6-one-1 "$A2" DSV4_CUDA_F16_TWO_TERM=0
run s18c6-two-2 "$A2" X=1
run s18c6-one-2 "$A2" DSV4_CUDA_F16_TWO_TERM=0
say "s18_c6 done"
cd "$OUT" && tar czf s18c6.tgz --exclude=s18c6.tgz * && find . -type f ! -name s18c6.tgz ! -name s18_c6.txt -delete
