#!/usr/bin/env bash
# Session 8 closing call (after pack + unpack): 1. cuda_ops_check on flash4 (router warp == block,
# cuBLAS products); 2. ab_check for DSV4_CUDA_ROUTER=block (byte-identical logits, chunk 1 and 128);
# 3. full flash q2: decode A/B default vs DSV4_CUDA_ROUTER=block (REPS each, interleaved), then the
# 2K->32K bench; 4. virtual tiers with the cuBLAS prefill (chunk 300 over 300 tokens). Summary in
# $OUT/s8_final.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s8f-out}"; mkdir -p "$OUT"
D="$ROOT/scripts/device"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$OUT/s8_final.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown), $(date -u +%FT%TZ)"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
t0=$(date +%s)
timeout 300 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; rc=$?
say "ops_check rc $rc ($(( $(date +%s) - t0 )) s)"
grep -E "router warp|^FAIL|CUDA OPS|matmul_multi blas" "$OUT/ops_check.txt" | tee -a "$S"
OUT="$OUT/ab" AB_SWITCHES="DSV4_CUDA_ROUTER=block" timeout 300 "$D/ab_check.sh" >/dev/null 2>&1
grep -E "^(ok|FAIL)|ab_check" "$OUT/ab/ab_check.txt" | tee -a "$S"
OLD="DSV4_CUDA_ROUTER=block" REPS="${REPS:-2}" OUT="$OUT" timeout 600 "$D/decode_ab.sh" 2>&1 | tee -a "$S"
OUT="$OUT" "$D/flash_bench.sh" s8-final "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | tee -a "$S"
if [ -z "${SKIP_TIERS:-}" ]; then
  OUT="$OUT/tiers" TIER_CHUNKS=300 TIER_FLASH_TOKENS=300 timeout 400 "$D/tiers_cuda.sh" >/dev/null 2>&1
  grep -vE "^$" "$OUT/tiers/tiers_summary.txt" | tee -a "$S"
fi
say "s8_final done"
