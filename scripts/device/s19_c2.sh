#!/usr/bin/env bash
# Session 19, call 2: the Q8_0 prefill products on cuBLAS with three terms (both operands as two f16
# terms; DSV4_CUDA_Q8_TERMS=1 is the one-term form). cuda_ops_check on tiny f16 / q2 (DS4), whose blas
# lines now also check the products against float64 of the exact operands; the HF-oracle fixtures on
# CUDA, default and one term; the full flash q2 2K prefill, default against one term, interleaved x2;
# then cuda_parity.sh (EXACT and DS4 lines) on this build.
set -u
SUMMARY=s19_c2
. "$(dirname "$0")/ab_lib.sh"
for q in f16 q2; do
  m=/dev/shm/tiny-$q.gguf
  "$ROOT/.carry/bin/dsv4-gguf" synth --preset tiny --quant $q "$m" >/dev/null 2>&1 || say "FAIL synth $q"
  timeout 100 "$C/cuda_ops_check" "$m" --numerics ds4 >"$OUT/ops-$q.txt" 2>&1
  say "ops $q rc $?: $(tail -1 "$OUT/ops-$q.txt")"
  grep -E "^FAIL|matmul blas" "$OUT/ops-$q.txt" | head -12 | cut -c1-220 | tee -a "$S"
done
for v in "default X=1" "q8-one DSV4_CUDA_Q8_TERMS=1"; do
  set -- $v; tag=$1; shift
  (cd "$ROOT" && env DSV4_TEST_BACKEND=cuda "$@" timeout 120 .carry/bin/cuda/test_oracle) >"$OUT/oracle-$tag.txt" 2>&1
  say "== oracle $tag ($*): rc $?"
  grep -E "^ds4 .*median|OK \]|FAILED \]" "$OUT/oracle-$tag.txt" | grep -v "listed below" | tee -a "$S"
done
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 16"
run s19c2-def-1 "$A2" X=1
run s19c2-one-1 "$A2" DSV4_CUDA_Q8_TERMS=1
run s19c2-def-2 "$A2" X=1
run s19c2-one-2 "$A2" DSV4_CUDA_Q8_TERMS=1
rm -f /dev/shm/flash-q2.gguf
mkdir -p "$OUT/parity"
OUT="$OUT/parity" PARITY_TIMEOUT=150 timeout 300 bash "$ROOT/scripts/device/cuda_parity.sh" >"$OUT/parity.log" 2>&1
say "parity rc $?"
grep -E "PASS|FAIL" "$OUT/parity.log" | head -40 | tee -a "$S"
say "s19_c2 done"
cd "$OUT" && tar czf s19c2.tgz --exclude=s19c2.tgz * && find . -type f ! -name s19c2.tgz ! -name s19_c2.txt -delete
