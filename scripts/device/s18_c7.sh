#!/usr/bin/env bash
# Session 18, call 7 (written after the device time was spent; for the next session's first call):
# cuda_ops_check (DS4) on the tiny f16 and tiny q2 models with its two-term F16 reference; the HF-oracle
# fixtures on CUDA with the Q8_0 products off cuBLAS (DSV4_CUDA_BLAS=f16) and with the F16 ones off it
# (=q8), to find which operands leave tiny_q2_A's DS4 top-1 at 0.778 (bound 0.783); the full flash q2 2K
# prefill with DSV4_CUDA_BLAS=f16 against the default, interleaved (what the exact Q8_0 path would cost).
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
for v in "default X=1" "blas-f16 DSV4_CUDA_BLAS=f16" "blas-q8 DSV4_CUDA_BLAS=q8" "blas-off DSV4_CUDA_BLAS=0"; do
  set -- $v; tag=$1; shift
  (cd "$ROOT" && env DSV4_TEST_BACKEND=cuda "$@" timeout 120 .carry/bin/cuda/test_oracle) >"$OUT/oracle-$tag.txt" 2>&1
  say "== oracle $tag ($*): rc $?"
  grep -E "^ds4 .*median|OK \]|FAILED \]" "$OUT/oracle-$tag.txt" | grep -v "listed below" | tee -a "$S"
done
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 16"
run s18c7-def-1 "$A2" X=1
run s18c7-blasf16-1 "$A2" DSV4_CUDA_BLAS=f16
run s18c7-def-2 "$A2" X=1
run s18c7-blasf16-2 "$A2" DSV4_CUDA_BLAS=f16
say "s18_c7 done"
cd "$OUT" && tar czf s18c7.tgz --exclude=s18c7.tgz * && find . -type f ! -name s18c7.tgz ! -name s18_c7.txt -delete
