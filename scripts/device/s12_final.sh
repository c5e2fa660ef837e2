#!/usr/bin/env bash
# Session 12, last call (after `CUDA=1 XZ=1 scripts/device/pack.sh` here with the previous build's
# dsv4-bench as .carry/bin/bench/dsv4-bench-old.xz; scripts/device/unpack.sh there):
#  1. cuda_ops_check (emit_row's FP4 row packed by a warp: bitwise the unfused store) and
#     test_cuda_attn;
#  2. fusion_check (emit_row on / off / faulted byte-identical; tiny and flash4);
#  3. full flash 2K decode, 128 tokens: this build vs the previous one, interleaved, twice.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s12-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
C="$ROOT/.carry/bin/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
S="$OUT/s12_final.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
timeout 170 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check.txt" 2>&1; say "cuda_ops_check rc $?: $(tail -1 "$OUT/ops_check.txt")"
grep -E "^FAIL|emit_row" "$OUT/ops_check.txt" | head -20 | tee -a "$S"
timeout 120 "$C/test_cuda_attn" >"$OUT/test_cuda_attn.txt" 2>&1; say "test_cuda_attn rc $?: $(tail -1 "$OUT/test_cuda_attn.txt")"
OUT="$OUT/fusion" timeout 200 "$ROOT/scripts/device/fusion_check.sh" 2>&1 | grep -E "^FAIL|fusion_check:|emit_row" | tee -a "$S"
FB="$ROOT/scripts/device/flash_bench.sh"
for i in 1 2; do
  OUT="$OUT" "$FB" "s12-final-new-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" X=1 2>&1 | tee -a "$S"
  BENCH="$ROOT/.carry/bin/bench/dsv4-bench-old" BENCH_COMMIT=c0d838b OUT="$OUT" "$FB" "s12-final-old-$i" \
    "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" X=1 2>&1 | tee -a "$S"
done
say "s12_final done"
