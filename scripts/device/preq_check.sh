#!/usr/bin/env bash
# Producer-side quantization check (after pack + unpack): byte-identical logits with DSV4_CUDA_PREQ=0 on
# the flash-width 4-layer model (chunk 1 and 128), then the full flash q2 decode A/B.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/bench-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH=$ROOT/.carry/lib:${LD_LIBRARY_PATH:-}
AB_SWITCHES="DSV4_CUDA_PREQ=0" OUT="$OUT/ab" timeout 150 "$ROOT/scripts/device/ab_check.sh" 2>&1 | grep -E "^(ok|FAIL)|ab_check"
OLD="DSV4_CUDA_PREQ=0" REPS=1 OUT="$OUT" timeout 170 "$ROOT/scripts/device/decode_ab.sh"
