#!/usr/bin/env bash
# Session 11 checks (after `CUDA=1 XZ=1 scripts/device/pack.sh` here, scripts/device/unpack.sh there):
# cuda_ops_check on flash4 (q_norm_rope_idx bitwise vs its three ops, the plain indexer scoring vs
# the tiled default, every op vs the CPU), ab_check with its default switches, fusion_check (with
# the flash4 run past the indexer's start). Results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s11-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
S="$OUT/s11_checks.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
timeout 200 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt")"
grep -E "^FAIL|q_norm_rope_idx|plain" "$OUT/ops_check.txt" | head -30 | tee -a "$S"
OUT="$OUT/fusion" timeout 280 "$ROOT/scripts/device/fusion_check.sh" 2>&1 | grep -E "^FAIL|fusion_check:|long|q_norm_rope_idx" | tee -a "$S"
OUT="$OUT/ab" timeout 250 "$ROOT/scripts/device/ab_check.sh" 2>&1 | grep -E "^FAIL|ab_check:" | tee -a "$S"
say "s11_checks done"
