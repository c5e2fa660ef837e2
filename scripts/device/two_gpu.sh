#!/usr/bin/env bash
# Issue 7 on the nvidia-h200-x2 machine (after `CUDA=1 scripts/device/pack.sh` here), one call:
#  1. the GPUs and their peer link (nvidia-smi topo);
#  2. full flash q2 (synthesized into /dev/shm once): teacher-forced logits of 128 tokens on one
#     GPU and split over two (--tiers cuda0:0-21,cuda1:22-42; layers 22-42 and the head on GPU 1),
#     in prefill chunks of 64 and one token per step, and split with the pinned host bounce
#     (DSV4_TIER_BOUNCE=1): compared with scripts/device/parity_compare.py (the same kernels on the
#     same GPU model: expected byte-identical, required within the CUDA parity bound);
#  3. dsv4-bench of the split at 2K and 32K (peer copies), and at 2K with the host bounce;
#  4. q4 (Q4_K experts, ~153 GiB: more than one H200 holds), written --sparse-experts (the routed
#     expert weights are a hole of zeros, every other tensor is the random model's: routing and
#     attention are real, so the experts each token reads are too; the file fits on the disk that
#     could not hold 153 GiB; speed and placement are real, the text is not), placed from
#     per-device budgets (--tier-mem 0:138G,1:138G) and benchmarked at 2K and 32K.
# STEPS (default "parity bench q4") picks the parts, PARITY_CHUNKS (default "64 1") the chunks. Results in $OUT (default ./two-gpu-out):
# two_gpu.txt and <date>-flash-{q2,q4}-h200x2-*.{csv,json}.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/two-gpu-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DSV4_GIT_COMMIT="$(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-2gpu; mkdir -p "$W"
S="$OUT/two_gpu.txt"; : >"$S"; fails=0
say() { echo "$*" | tee -a "$S"; }
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
SPLIT="cuda0:0-21,cuda1:22-42"
STEPS="${STEPS:-parity bench q4}"
step() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
say "commit: $DSV4_GIT_COMMIT"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | sed 's/^/gpu: /' | tee -a "$S"
nvidia-smi topo -m 2>/dev/null | head -4 | tee -a "$S"
Q2=/dev/shm/flash-q2.gguf
{ step parity || step bench; } && { [ -s "$Q2" ] || "$B/dsv4-gguf" synth --preset flash --quant q2 --threads 24 "$Q2" >"$OUT/synth.log" 2>&1 || { say "FAIL synth q2"; exit 1; }; }
python3 -c "import random; r=random.Random(12); print(','.join(str(r.randrange(10,100000)) for _ in range(128)))" >"$W/toks"
dump() { # tag chunk env-and-args...
  local tag=$1 chunk=$2; shift 2
  env "$@" --backend cuda --chunk "$chunk" --ctx 1024 --tokens "$(cat "$W/toks")" --stats \
    --dump-logits "$W/$tag.bin" >/dev/null 2>"$OUT/$tag.err" || { say "FAIL $tag: $(tail -1 "$OUT/$tag.err")"; fails=$((fails+1)); }
}
step parity && for chunk in ${PARITY_CHUNKS:-64 1}; do
  dump "one.c$chunk" $chunk X=1 "$C/dsv4" -m "$Q2"
  dump "split.c$chunk" $chunk X=1 "$C/dsv4" -m "$Q2" --tiers "$SPLIT"
  dump "bounce.c$chunk" $chunk DSV4_TIER_BOUNCE=1 "$C/dsv4" -m "$Q2" --tiers "$SPLIT"
  for t in split bounce; do
    python3 "$ROOT/scripts/device/parity_compare.py" --ref "$W/one.c$chunk.bin" --test "$W/$t.c$chunk.bin" \
      --label "q2 chunk $chunk: two GPUs ($t) vs one" | tee -a "$S" | grep -q '^PASS' || fails=$((fails+1))
    cmp -s "$W/one.c$chunk.bin" "$W/$t.c$chunk.bin" && say "     (byte-identical)"
  done
  say "split chunk $chunk counters: $(grep -E '^(tier |decode steps)' "$OUT/split.c$chunk.err" | tr '\n' ' ')"
  say "bounce chunk $chunk counters: $(grep -E '^(tier |decode steps)' "$OUT/bounce.c$chunk.err" | tr '\n' ' ')"
done
bench() { # file-tag model args...
  local tag=$1 m=$2; shift 2
  local F="$OUT/$(date +%F)-$tag"
  "$C/dsv4-bench" -m "$m" --backend cuda --prompt-file "$P" "$@" --json "$F.json" >"$F.csv" 2>"$F.err" ||
    { say "FAIL bench $tag: $(tail -1 "$F.err")"; fails=$((fails+1)); }
  say "$tag: $(tail -n +2 "$F.csv" | tr '\n' ' ')"
}
step bench && bench flash-q2-h200x2-split "$Q2" --tiers "$SPLIT" --ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64
step bench && DSV4_TIER_BOUNCE=1 bench flash-q2-h200x2-bounce "$Q2" --tiers "$SPLIT" --ctx-start 2048 --gen-tokens 64
# on the disk, not tmpfs: a read fault on a tmpfs hole allocates the page, on a disk file system the
# holes read as zeros from reclaimable page cache
if step q4; then
  Q4="${Q4_DIR:-$ROOT}/flash-q4-sparse-experts.gguf"
  [ -s "$Q4" ] || "$B/dsv4-gguf" synth --preset flash --quant q4 --sparse-experts --threads 32 "$Q4" >"$OUT/synth-q4.log" 2>&1 || { say "FAIL synth q4"; fails=$((fails+1)); }
  say "q4 file: $(du -h --apparent-size "$Q4" | cut -f1) apparent, $(du -h "$Q4" | cut -f1) allocated ($(df -T "$Q4" | awk 'NR==2{print $2}'))"
  bench flash-q4-h200x2-auto "$Q4" --tier-mem 0:138G,1:138G --ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("q4 placement:", j.get("placement"), "load", j.get("model_load_s"), "s, peak rss", j.get("peak_rss_bytes"))' \
    "$OUT/$(date +%F)-flash-q4-h200x2-auto.json" | tee -a "$S"
fi
say "two_gpu: $fails failure(s)"
