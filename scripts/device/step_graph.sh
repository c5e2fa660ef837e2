#!/usr/bin/env bash
# Decode-step recording (CUDA Graphs, src/backend/cuda/cuda_step.cu) on the GPU machine, after
# `CUDA=1 scripts/device/pack.sh` here. For a tiny q2 model and a flash-width 4-layer q2 model:
#  1. teacher-forced logits, one token per step (--chunk 1: every step recorded), with recording
#     on and off (DSV4_CUDA_GRAPH=0): the two dumps must be byte-identical; the flash run is long
#     enough (2100 positions) for the indexer to switch on;
#  2. greedy generation with --stats on/off: same text, the step-graph counters;
#  3. dsv4-bench decode on/off side by side (speed).
# (g1: recording with the next step recorded while the current one runs, ahead0: recording
# without that, g0: no recording.) Results in $OUT (default ./step-out): step_graph.txt and the bench CSV/JSON files.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/step-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CUDA_MODULE_LOADING=EAGER
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-step; mkdir -p "$W"
S="$OUT/step_graph.txt"; : >"$S"; fails=0
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
"$B/dsv4-gguf" synth --preset tiny --quant q2 "$W/tiny.gguf" >/dev/null || say "FAIL synth tiny"
"$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$W/flash4.gguf" >/dev/null || say "FAIL synth flash4"
python3 -c "import random; r=random.Random(7); print(','.join(str(r.randrange(10,1000)) for _ in range(300)))" >"$W/t300"
python3 -c "import random; r=random.Random(8); print(','.join(str(r.randrange(10,1000)) for _ in range(2100)))" >"$W/t2100"
for spec in "tiny $W/t300" "flash4 $W/t2100"; do
  set -- $spec; name=$1; toks=$2; m="$W/$name.gguf"
  for g in 1 0; do
    DSV4_CUDA_GRAPH=$g "$C/dsv4" -m "$m" --backend cuda --chunk 1 --ctx 4096 --tokens "$(cat "$toks")" \
      --dump-logits "$W/$name.g$g.bin" 2>"$OUT/$name.g$g.err" || { say "FAIL dump $name graph=$g: $(tail -2 "$OUT/$name.g$g.err")"; fails=$((fails+1)); }
  done
  if cmp -s "$W/$name.g1.bin" "$W/$name.g0.bin"; then say "ok   $name: logits with step graphs == without (bitwise, $(stat -c %s "$W/$name.g1.bin") bytes)"
  else say "FAIL $name: logits differ with step graphs"; fails=$((fails+1)); fi
  for g in 1 0; do
    DSV4_CUDA_GRAPH=$g "$C/dsv4" -m "$m" --backend cuda --system "" -p "Tell me about lighthouses." -n 64 \
      --temp 0 --chunk 1 --ctx 1024 --stats >"$OUT/$name.gen$g.txt" 2>"$OUT/$name.gen$g.err"
    say "$name gen graph=$g: $(grep -E '^decode:' "$OUT/$name.gen$g.err") | $(grep -E 'decode steps|step graphs' "$OUT/$name.gen$g.err" | tr '\n' ' ')"
  done
  if cmp -s "$OUT/$name.gen1.txt" "$OUT/$name.gen0.txt"; then say "ok   $name: same greedy text"; else say "FAIL $name: greedy text differs"; fails=$((fails+1)); fi
done
for g in 1 0 ahead0; do
  a=1; G=$g; [ "$g" = ahead0 ] && a=0 G=1
  DSV4_STEP_AHEAD=$a DSV4_CUDA_GRAPH=$G "$C/dsv4-bench" -m "$W/flash4.gguf" --backend cuda --prompt-file "$ROOT/data/tiny-corpus.txt" \
    --ctx-start 512 --gen-tokens 128 --chunk 256 --json "$OUT/flash4-bench-g$g.json" >"$OUT/flash4-bench-g$g.csv" 2>"$OUT/bench$g.err"
  say "flash4 bench graph=$g: $(tail -1 "$OUT/flash4-bench-g$g.csv")"
done
say "step_graph: $fails failure(s)"
