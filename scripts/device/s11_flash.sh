#!/usr/bin/env bash
# Session 11, full flash q2 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here, an older dsv4-bench in
# .carry/bin/bench/dsv4-bench-old.xz, and scripts/device/unpack.sh there):
#  1. check_unverified.sh PART=bench: flash4 32K prefill new / old / DSV4_CUDA_ISCORE=tiled, then the
#     full flash 2K -> 32K bench for this build and the old one;
#  2. the IQ2_XXS row pipelines on the full flash at 2K: default (4 pipelines) vs one pipeline
#     (DSV4_CUDA_MV_PLAN_IQ2=0,0,0,1), interleaved, twice.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s11-out}"; mkdir -p "$OUT"
OLD="$ROOT/.carry/bin/bench/dsv4-bench-old"
if [ -z "${SKIP_UNVERIFIED:-}" ]; then
  PART=bench OLD="$OLD" OLD_COMMIT="${OLD_COMMIT:-old}" OUT="$OUT" "$ROOT/scripts/device/check_unverified.sh"
fi
for i in 1 2; do
  OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" "s11-pipes4-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128"
  OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" "s11-pipes1-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" \
    DSV4_CUDA_MV_PLAN_IQ2=0,0,0,1
done
echo "s11_flash done"
