#!/usr/bin/env bash
# Session 23 call 4 (ran at commit 950da24; the kernel it measured was removed after it, so DSV4_CUDA_HC_MIX is gone): the prefill HC mix as one f32 kernel (hc_mix_rows_kernel, the default; DSV4_CUDA_HC_MIX=blas
# keeps the cuBLAS mix). cuda_ops_check on flash4 (the hc_pre prefill lines: the new mix against the CPU, the
# blas variants bitwise each other); the full flash q2 2K prefill, default against blas, interleaved; the oracle
# fixtures, tiny q2 ops and cuda_parity.sh on the default, time permitting (~8 min).
set -u
SUMMARY=s23_c4
. "$(dirname "$0")/ab_lib.sh"
ab_flash4
t0=$(date +%s)
timeout 200 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops-flash4.txt" 2>&1
say "== cuda_ops_check flash4 rc $?: $(tail -1 "$OUT/ops-flash4.txt") ($(( $(date +%s) - t0 )) s)"
grep -E "^FAIL|hc_pre|hc pre" "$OUT/ops-flash4.txt" | cut -c1-200 | head -30 | tee -a "$S"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 64"
for i in 1 2; do
  run hcrows-$i "$A2" X=1
  run hcblas-$i "$A2" DSV4_CUDA_HC_MIX=blas
done
rm -f /dev/shm/flash-q2.gguf
oracle default X=1
tiny_ops q2 "hc_pre"
if [ $SECONDS -lt 330 ]; then parity_run 200; else say "SKIP parity: time ($SECONDS s)"; fi
ab_finish "$SUMMARY"
