#!/usr/bin/env bash
# Session 12: the staged ratio-4 compressor emission (DSV4_CUDA_COMPRESSOR_STAGED) and the new
# defaults (emit_row, hc_post_pre_norm on). After `CUDA=1 XZ=1 scripts/device/pack.sh` here,
# scripts/device/unpack.sh there:
#  1. test_cuda_attn (compressor state and pool, staged == unstaged bitwise);
#  2. ab_check with the three switches back (byte-identical logits at chunk 1 and 128);
#  3. full flash 2K decode, 128 tokens, default vs DSV4_CUDA_COMPRESSOR_STAGED=0, interleaved, twice;
#  4. full flash 2K -> 32K, default vs the session-11 defaults (all three switched back).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s12-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$OUT/s12_staged.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
timeout 120 "$ROOT/.carry/bin/cuda/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1; say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
grep -E "^FAIL|compressor" "$OUT/test_cuda_attn.txt" | tee -a "$S"
AB_SWITCHES="DSV4_CUDA_COMPRESSOR_STAGED=0 DSV4_CUDA_EMIT_ROW=0 DSV4_CUDA_HC_POST_PRE=0 DSV4_FUSION=off" \
  OUT="$OUT/ab" timeout 150 "$ROOT/scripts/device/ab_check.sh" 2>&1 | grep -E "^FAIL|ab_check:|^ok" | tee -a "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
for i in 1 2; do
  OUT="$OUT" "$FB" "s12-staged-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" X=1 2>&1 | tee -a "$S"
  OUT="$OUT" "$FB" "s12-unstaged-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" DSV4_CUDA_COMPRESSOR_STAGED=0 2>&1 | tee -a "$S"
done
OUT="$OUT" "$FB" "s12-32k-new" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | tee -a "$S"
OUT="$OUT" "$FB" "s12-32k-s11defaults" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" \
  DSV4_CUDA_COMPRESSOR_STAGED=0 DSV4_CUDA_EMIT_ROW=0 DSV4_CUDA_HC_POST_PRE=0 2>&1 | tee -a "$S"
say "s12_staged done"
