#!/usr/bin/env bash
# Full-shape DeepSeek V4 Flash q2 on the GPU machine (after `CUDA=1 scripts/device/pack.sh` here):
# synthesize the random-weight model into /dev/shm once (~81 GiB; reused while the machine
# stays up), then dsv4-bench with ds4-bench's flags on the ds4 speed-bench text
# (.carry/data/promessi_sposi.txt). Usage:
#   scripts/device/flash_bench.sh TAG "BENCH ARGS..." [ENV=VAL ...]
# e.g. flash_bench.sh ctx2k "--ctx-start 2048 --gen-tokens 64"  DSV4_CUDA_GRAPH=0
# Writes $OUT/<date>-flash-q2-h200-TAG.{csv,json,err} (the JSON notes the commit and machine).
# BENCH=path runs another dsv4-bench build (an older commit's, for side-by-side runs).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/bench-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DSV4_GIT_COMMIT="${BENCH_COMMIT:-$(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)}"
B="$ROOT/.carry/bin"; M=/dev/shm/flash-q2.gguf
TAG="$1"; ARGS="$2"; shift 2
if [ ! -s "$M" ]; then
  t0=$(date +%s)
  "$B/dsv4-gguf" synth --preset flash --quant q2 --threads 16 "$M" >"$OUT/synth.log" 2>&1 || { echo "FAIL synth"; tail -3 "$OUT/synth.log"; exit 1; }
  echo "synth: $(( $(date +%s) - t0 )) s"
fi
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
F="$OUT/$(date +%F)-flash-q2-h200-$TAG"
t0=$(date +%s)
env "$@" "${BENCH:-$B/cuda/dsv4-bench}" -m "$M" --backend cuda --prompt-file "$P" $ARGS --json "$F.json" >"$F.csv" 2>"$F.err"
rc=$?
echo "$TAG ($*): rc $rc, $(( $(date +%s) - t0 )) s"; cat "$F.csv"; [ $rc = 0 ] || tail -5 "$F.err"
