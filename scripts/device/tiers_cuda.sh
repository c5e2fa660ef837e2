#!/usr/bin/env bash
# Virtual tiers on one GPU (issue 5): 1 vs 2 vs 4 tiers must give bitwise identical logits on the
# same device, for decode (chunk 1) and chunked prefill (chunk 64); decode speed with 1 vs 4 tiers
# gives the cost of a boundary crossing; decode steps across tiers are recorded (one graph over
# every tier's stream), counted from --stats and compared with DSV4_CUDA_GRAPH=0; greedy
# generation (prefill then recorded decode) over tiers must print what one tier prints. Run from the repo root on the GPU machine after
# `CUDA=1 scripts/device/pack.sh` here; results under $OUT (default ./tiers-out). TIER_CHUNKS ("1 64")
# and TIER_FLASH_TOKENS (48) change the chunked runs (e.g. 300 and 300: the cuBLAS prefill path).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/tiers-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-tiers; mkdir -p "$W"
S="$OUT/tiers_summary.txt"; : >"$S"
fails=0
say() { echo "$*" | tee -a "$S"; }
python3 -c "import random; r=random.Random(7); print('\n'.join(str(r.randrange(1024)) for _ in range(160)))" >"$W/tiny.tok"
python3 -c "import random; r=random.Random(8); print('\n'.join(str(r.randrange(129280)) for _ in range(${TIER_FLASH_TOKENS:-48})))" >"$W/flash.tok"
"$B/dsv4-gguf" synth --preset tiny --quant q2 "$W/tiny.gguf" >/dev/null || { say "FAIL synth tiny"; exit 1; }
"$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$W/flash4.gguf" >/dev/null || { say "FAIL synth flash4"; exit 1; }
check() { # name model tokens chunk tierspec...
  local name=$1 model=$2 tok=$3 chunk=$4; shift 4
  local ref="$W/$name.c$chunk.t1.bin"
  timeout 300 "$C/dsv4" -m "$model" --backend cuda --tokens "$tok" --chunk "$chunk" --dump-logits "$ref" \
    >>"$OUT/tiers.log" 2>&1 || { say "FAIL $name chunk $chunk one tier run"; fails=$((fails + 1)); return; }
  for spec in "$@"; do
    local out="$W/$name.c$chunk.$(echo "$spec" | tr ',:' '_-').bin"
    timeout 300 "$C/dsv4" -m "$model" --backend cuda --tiers "$spec" --tokens "$tok" --chunk "$chunk" \
      --dump-logits "$out" --stats >"$W/run.log" 2>&1 || { cat "$W/run.log" >>"$OUT/tiers.log"; say "FAIL $name chunk $chunk --tiers $spec: run"; fails=$((fails + 1)); continue; }
    cat "$W/run.log" >>"$OUT/tiers.log"
    if cmp -s "$ref" "$out"; then say "ok   $name chunk $chunk --tiers $spec: bitwise equal to one tier ($(grep -E '^decode steps' "$W/run.log"))"
    else say "FAIL $name chunk $chunk --tiers $spec: differs from one tier"; fails=$((fails + 1)); fi
    if [ "$chunk" = 1 ] && ! grep -qE '^decode steps: recorded [1-9]' "$W/run.log"; then
      say "FAIL $name chunk 1 --tiers $spec: no recorded decode step"; fails=$((fails + 1)); fi
  done
}
for ch in ${TIER_CHUNKS:-1 64}; do
  check tiny "$W/tiny.gguf" "$W/tiny.tok" "$ch" "cuda0:0-2,cuda0:3-5" "cuda0:0-1,cuda0:2-3,cuda0:4,cuda0:5"
  check flash4 "$W/flash4.gguf" "$W/flash.tok" "$ch" "cuda0:0-1,cuda0:2-3" "cuda0:0,cuda0:1,cuda0:2,cuda0:3"
done
# greedy generation: a prefill, then decode steps recorded across the tiers
for model in tiny flash4; do
  gen() { timeout 300 "$C/dsv4" -m "$W/$model.gguf" --backend cuda --temp 0 -n 48 --nothink -p "Tell me about tiers" "$@"; }
  gen >"$W/gen1.txt" 2>>"$OUT/tiers.log" || { say "FAIL $model generation, one tier"; fails=$((fails + 1)); continue; }
  spec="cuda0:0-1,cuda0:2-3"; [ "$model" = tiny ] && spec="cuda0:0-2,cuda0:3-5"
  gen --tiers "$spec" --stats >"$W/gen2.txt" 2>"$W/gen2.err" || { say "FAIL $model generation --tiers $spec"; fails=$((fails + 1)); continue; }
  if cmp -s "$W/gen1.txt" "$W/gen2.txt"; then say "ok   $model greedy generation --tiers $spec = one tier ($(grep -E '^decode steps' "$W/gen2.err"))"
  else say "FAIL $model greedy generation --tiers $spec differs from one tier"; fails=$((fails + 1)); fi
done
n=0
for run in ":" "cuda0:0,cuda0:1,cuda0:2,cuda0:3:" "cuda0:0,cuda0:1,cuda0:2,cuda0:3:DSV4_CUDA_GRAPH=0"; do
  n=$((n + 1)); spec=${run%:*}; spec=${spec%:}; envs=${run##*:}
  env ${envs:-X=1} timeout 300 "$C/dsv4-bench" -m "$W/flash4.gguf" --backend cuda ${spec:+--tiers "$spec"} \
    --prompt-file "$ROOT/data/tiny-corpus.txt" --ctx-start 128 --gen-tokens 64 --chunk 1 \
    --json "$OUT/bench_tiers_run$n.json" >>"$OUT/tiers_bench.csv" 2>>"$OUT/tiers.log"
done
say "bench (1 tier; 4 tiers recorded; 4 tiers DSV4_CUDA_GRAPH=0):"; cat "$OUT/tiers_bench.csv" | tee -a "$S"
rm -f "$W"/*.bin "$W"/*.gguf
say "tiers: $fails failure(s)"
[ "$fails" -eq 0 ]
