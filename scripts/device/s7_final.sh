#!/usr/bin/env bash
# Session 7 closing call (after pack + unpack): the reciprocal's exhaustive GPU check, flash4_check
# (ops check, bitwise switches incl. this session's), the producer-side Q8_0 decode A/B on the full
# flash q2, then the ds4-bench release run 2K -> 32K with all defaults.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/bench-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$ROOT/.carry/lib:${LD_LIBRARY_PATH:-}
D="$ROOT/scripts/device"
timeout 60 "$ROOT/.carry/bin/cuda/recip_gpu_check" | tee "$OUT/recip_gpu_check.txt"
rm -f "$ROOT/.carry/bin/cuda/test_cuda_attn" # attention unchanged this session
OUT="$OUT/f4" AB_SWITCHES="${AB_SW:-DSV4_CUDA_PREQ=0 DSV4_CUDA_MVW_ASYNC=0 DSV4_CUDA_MV_IQ2=mask DSV4_CUDA_HC_TAIL=multi DSV4_CUDA_HC_TAIL=off DSV4_CUDA_PDL=0 DSV4_CUDA_GRAPH=0}" \
  OLD="DSV4_CUDA_PREQ=0" timeout 330 "$D/flash4_check.sh" 2>&1 | tail -22
OLD="DSV4_CUDA_PREQ=0" REPS=1 OUT="$OUT" timeout 200 "$D/decode_ab.sh"
OUT="$OUT" timeout 240 "$D/flash_bench.sh" "${TAG:-s7-final}" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64"
