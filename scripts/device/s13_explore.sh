#!/usr/bin/env bash
# Session 13, first call: runtime switches that need no new code, on the full flash q2 (after
# `CUDA=1 XZ=1 scripts/device/pack.sh` here, scripts/device/unpack.sh there). 2K prompt, 128 decoded
# tokens, interleaved, REPS rounds: default; the shared expert serial after the routed experts
# (DSV4_FUSION_DISABLE=parallel_ffn); 3 IQ2_XXS row pipelines per CTA (DSV4_CUDA_MV_PLAN_IQ2=0,0,0,3).
# Then 32K prompt, 64 tokens: default vs DSV4_CUDA_HC_POST_PRE=0 (session 12's open question).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s13-out}"; mkdir -p "$OUT"
S="$OUT/s13_explore.txt"; touch "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
A2="--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
for i in $(seq 1 "${REPS:-2}"); do
  OUT="$OUT" "$FB" "s13-base-$i" "$A2" X=1 2>&1 | tee -a "$S"
  OUT="$OUT" "$FB" "s13-serialffn-$i" "$A2" DSV4_FUSION_DISABLE=parallel_ffn 2>&1 | tee -a "$S"
  OUT="$OUT" "$FB" "s13-iq2g3-$i" "$A2" DSV4_CUDA_MV_PLAN_IQ2=0,0,0,3 2>&1 | tee -a "$S"
done
if [ "${K32:-1}" = 1 ]; then
  A32="--ctx-start 32768 --ctx-max 32768 --gen-tokens 64"
  OUT="$OUT" "$FB" "s13-32k-base" "$A32" X=1 2>&1 | tee -a "$S"
  OUT="$OUT" "$FB" "s13-32k-nopostpre" "$A32" DSV4_CUDA_HC_POST_PRE=0 2>&1 | tee -a "$S"
fi
echo "s13_explore done" | tee -a "$S"
