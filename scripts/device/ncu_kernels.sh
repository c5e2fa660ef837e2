#!/usr/bin/env bash
# Per-kernel GPU time with Nsight Compute (Firecracker GPU machines read the counters): every
# kernel of a dsv4-bench run on the flash-width 4-layer q2 model (a 2048-token prefill in one
# chunk, then a few decode steps; recorded steps are profiled node by node), as CSV with
# gpu__time_duration. Kernels run one at a time under ncu, so the times exclude launch gaps and
# overlap; the run without ncu beside it gives the real speed. Usage (after `CUDA=1
# scripts/device/pack.sh` here): scripts/device/ncu_kernels.sh [TAG] [ENV=VAL ...]
# Writes $OUT/ncu-TAG.csv, ncu-TAG-plain.{csv,err}.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/ncu-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TAG="${1:-flash4}"; [ $# -gt 0 ] && shift
B="$ROOT/.carry/bin"; W=/dev/shm/dsv4-ncu; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { echo "FAIL synth"; exit 1; }
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
ARGS="-m $M --backend cuda --prompt-file $P --ctx-start 2048 --ctx-max 2048 --gen-tokens ${GEN:-4} --chunk 2048"
env "$@" timeout 120 "$B/cuda/dsv4-bench" $ARGS >"$OUT/ncu-$TAG-plain.csv" 2>"$OUT/ncu-$TAG-plain.err"
echo "plain rc $?: $(tail -1 "$OUT/ncu-$TAG-plain.csv")"
[ -n "$NCU" ] || { echo "FAIL no ncu"; exit 1; }
t0=$(date +%s)
env "$@" timeout 400 "$NCU" --clock-control none --cache-control none --graph-profiling node \
  --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu-$TAG.log" \
  "$B/cuda/dsv4-bench" $ARGS >"$OUT/ncu-$TAG-app.csv" 2>"$OUT/ncu-$TAG-app.err"
echo "ncu rc $?, $(( $(date +%s) - t0 )) s, $(grep -c gpu__time_duration "$OUT/ncu-$TAG.log") kernel rows"
grep -E '^"ID"|gpu__time_duration' "$OUT/ncu-$TAG.log" >"$OUT/ncu-$TAG.csv"; rm -f "$OUT/ncu-$TAG.log"
