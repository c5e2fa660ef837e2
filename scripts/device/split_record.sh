#!/usr/bin/env bash
# Issue 7, decode steps recorded across two GPUs (nvidia-h200-x2, after
# `CUDA=1 XZ=1 BENCHES=peer_capture_probe scripts/device/pack.sh` here), one call:
#  1. bench/kernels/peer_capture_probe: which cross-device copy forms stream capture records;
#  2. full flash q2 split cuda0:0-21,cuda1:22-42, teacher-forced decode (chunk 1) of 128 tokens with
#     each tier copy form (DSV4_CUDA_TIER_COPY=peer|default|kernel) against one GPU: logits
#     compared (scripts/device/parity_compare.py) and the recorded decode steps counted;
#  3. dsv4-bench side by side: one GPU at 2K, the split at 2K and 32K, and q4 (routed experts a
#     hole: `dsv4-gguf synth --sparse-experts`) placed from --tier-mem 0:138G,1:138G at 2K and 32K,
#     with the first form that recorded.
# Results in $OUT: split_record.txt and <date>-flash-{q2,q4}-h200x2-*.{csv,json,err}.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/split-record-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DSV4_GIT_COMMIT="$(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-split; mkdir -p "$W"
S="$OUT/split_record.txt"; : >"$S"; fails=0
say() { echo "$*" | tee -a "$S"; }
P="$ROOT/.carry/data/promessi_sposi.txt"
SPLIT="cuda0:0-21,cuda1:22-42"
say "commit: $DSV4_GIT_COMMIT"
[ -x "$B/bench/peer_capture_probe" ] && "$B/bench/peer_capture_probe" 2>&1 | tee -a "$S"
Q2=/dev/shm/flash-q2.gguf
[ -s "$Q2" ] || "$B/dsv4-gguf" synth --preset flash --quant q2 --threads 32 "$Q2" >"$OUT/synth.log" 2>&1 || { say "FAIL synth q2"; exit 1; }
python3 -c "import random; r=random.Random(12); print(','.join(str(r.randrange(10,100000)) for _ in range(128)))" >"$W/toks"
dump() { # tag env-and-args...
  local tag=$1; shift
  env "$@" --backend cuda --chunk 1 --ctx 1024 --tokens "$(cat "$W/toks")" --stats \
    --dump-logits "$W/$tag.bin" >/dev/null 2>"$OUT/$tag.err" || { say "FAIL $tag: $(tail -1 "$OUT/$tag.err")"; fails=$((fails+1)); }
}
dump one X=1 "$C/dsv4" -m "$Q2"
FORM=""
for form in peer default kernel; do
  dump "split-$form" DSV4_CUDA_TIER_COPY=$form "$C/dsv4" -m "$Q2" --tiers "$SPLIT"
  python3 "$ROOT/scripts/device/parity_compare.py" --ref "$W/one.bin" --test "$W/split-$form.bin" \
    --label "q2 decode steps, two GPUs (tier copy $form) vs one" | tee -a "$S" | grep -q '^PASS' || fails=$((fails+1))
  cmp -s "$W/one.bin" "$W/split-$form.bin" && say "     (byte-identical)"
  say "  $form: $(grep -E '^(decode steps|tier copies)|not recorded' "$OUT/split-$form.err" | sort | uniq -c | tr '\n' ' ')"
  [ -z "$FORM" ] && grep -qE '^decode steps: recorded [1-9]' "$OUT/split-$form.err" && FORM=$form
done
say "recorded with tier copy form: ${FORM:-none}"
bench() { # file-tag model args...
  local tag=$1 m=$2; shift 2
  local F="$OUT/$(date +%F)-$tag"
  env DSV4_CUDA_TIER_COPY=${FORM:-peer} "$C/dsv4-bench" -m "$m" --backend cuda --prompt-file "$P" "$@" --json "$F.json" >"$F.csv" 2>"$F.err" ||
    { say "FAIL bench $tag: $(tail -1 "$F.err")"; fails=$((fails+1)); }
  say "$tag: $(tail -n +2 "$F.csv" | tr '\n' ' ') $(grep -c 'not recorded' "$F.err") unrecorded-step warnings"
}
CUDA_VISIBLE_DEVICES=0 bench flash-q2-h200-s5-one "$Q2" --ctx-start 2048 --gen-tokens 64
bench flash-q2-h200x2-s5-split-rec "$Q2" --tiers "$SPLIT" --ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64
Q4="${Q4_DIR:-$ROOT}/flash-q4-sparse-experts.gguf"
[ -s "$Q4" ] || "$B/dsv4-gguf" synth --preset flash --quant q4 --sparse-experts --threads 32 "$Q4" >"$OUT/synth-q4.log" 2>&1 || { say "FAIL synth q4"; fails=$((fails+1)); }
bench flash-q4-h200x2-s5-auto-rec "$Q4" --tier-mem 0:138G,1:138G --ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("q4 placement:", j.get("placement"), "load", j.get("model_load_s"), "s")' \
  "$OUT/$(date +%F)-flash-q4-h200x2-s5-auto-rec.json" | tee -a "$S"
say "split_record: $fails failure(s)"
