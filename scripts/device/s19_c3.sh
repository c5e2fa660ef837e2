#!/usr/bin/env bash
# Session 19, call 3: the three-term Q8_0 product as one cuBLAS GEMM over 3 in (no accumulate passes).
# cuda_ops_check tiny q2 (DS4: blas lines against the exact operands); the HF-oracle fixtures on CUDA;
# the full flash q2 2K prefill, default against DSV4_CUDA_Q8_TERMS=1, interleaved x2; a 70K prompt with
# 128 decoded tokens (the larger f16 weight cache beside the long-context buffers); cuda_parity.sh.
set -u
SUMMARY=s19_c3
. "$(dirname "$0")/ab_lib.sh"
for q in q2 f16; do
  m=/dev/shm/tiny-$q.gguf
  "$ROOT/.carry/bin/dsv4-gguf" synth --preset tiny --quant $q "$m" >/dev/null 2>&1 || say "FAIL synth $q"
  timeout 100 "$C/cuda_ops_check" "$m" --numerics ds4 >"$OUT/ops-$q.txt" 2>&1
  say "ops $q rc $?: $(tail -1 "$OUT/ops-$q.txt")"
  grep -E "^FAIL|matmul blas Q8" "$OUT/ops-$q.txt" | head -12 | cut -c1-220 | tee -a "$S"
done
(cd "$ROOT" && env DSV4_TEST_BACKEND=cuda timeout 120 .carry/bin/cuda/test_oracle) >"$OUT/oracle-default.txt" 2>&1
say "== oracle default: rc $?"
grep -E "^ds4 .*median|OK \]|FAILED \]" "$OUT/oracle-default.txt" | grep -v "listed below" | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 16"
run s19c3-def-1 "$A2" X=1
run s19c3-one-1 "$A2" DSV4_CUDA_Q8_TERMS=1
run s19c3-def-2 "$A2" X=1
run s19c3-one-2 "$A2" DSV4_CUDA_Q8_TERMS=1
run s19c3-def-3 "$A2" X=1
run s19c3-70k "--ctx-start 70000 --ctx-max 70000 --gen-tokens 128" X=1
grep -h "nonfinite\|free_mem" "$OUT"/*s19c3-70k*.json | cut -c1-300 | tee -a "$S"
rm -f /dev/shm/flash-q2.gguf
mkdir -p "$OUT/parity"
OUT="$OUT/parity" PARITY_TIMEOUT=150 timeout 240 bash "$ROOT/scripts/device/cuda_parity.sh" >"$OUT/parity.log" 2>&1
say "parity rc $?"
grep -E "PASS|FAIL" "$OUT/parity.log" | head -40 | tee -a "$S"
say "s19_c3 done"
cd "$OUT" && tar czf s19c3.tgz --exclude=s19c3.tgz * && find . -type f ! -name s19c3.tgz ! -name s19_c3.txt -delete
