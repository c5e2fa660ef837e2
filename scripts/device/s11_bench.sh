#!/usr/bin/env bash
# Session 11, closing numbers on the full flash q2 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here,
# scripts/device/unpack.sh there):
#  1. dsv4-bench 2K -> 32K (step x16, 64 tokens), all defaults;
#  2. 2K, 128 tokens: default vs DSV4_FUSION_DISABLE=q_norm_rope_idx, interleaved, twice;
#  3. greedy 64 tokens after a ~2,300-token prompt (the indexer runs), fusions on vs off and vs
#     q_norm_rope_idx disabled: the same text.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s11-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$OUT/s11_bench.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
if [ -z "${GREEDY_ONLY:-}" ]; then
OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" s11-final "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | tee -a "$S"
for i in 1 2; do
  OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" "s11-idxf-on-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" X=1 2>&1 | tee -a "$S"
  OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" "s11-idxf-off-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" \
    DSV4_FUSION_DISABLE=q_norm_rope_idx 2>&1 | tee -a "$S"
done
fi
M=/dev/shm/flash-q2.gguf
[ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --quant q2 --threads 16 "$M" >/dev/null 2>&1 || say "FAIL synth"
P="$ROOT/.carry/data/promessi_sposi.txt"
PROMPT="$(head -c 5400 "$P")" # 2,225 tokens: past the indexer's start (position 2,051), inside --ctx
for tag in on off noidx; do
  case $tag in on) e=X=1 ;; off) e=DSV4_FUSION=off ;; noidx) e=DSV4_FUSION_DISABLE=q_norm_rope_idx ;; esac
  env "$e" "$ROOT/.carry/bin/cuda/dsv4" -m /dev/shm/flash-q2.gguf --backend cuda --system "" -p "$PROMPT" -n 64 --temp 0 \
    --ctx 4096 --stats >"$OUT/greedy.$tag.txt" 2>"$OUT/greedy.$tag.err"
  rc=$?; eval "rc_$tag=$rc"
  say "greedy $tag rc $rc: $(grep -E '^prompt|^decode|^fusion q_norm_rope_idx' "$OUT/greedy.$tag.err" | tr '\n' ' ')"
  [ $rc = 0 ] || say "FAIL greedy $tag: $(tail -1 "$OUT/greedy.$tag.err")"
done
for tag in off noidx; do # an empty or failed run proves nothing
  r=rc_$tag
  if [ "$rc_on" = 0 ] && [ "${!r}" = 0 ] && [ -s "$OUT/greedy.on.txt" ] && cmp -s "$OUT/greedy.on.txt" "$OUT/greedy.$tag.txt"; then
    say "ok   greedy 64 tokens: on == $tag ($(wc -c <"$OUT/greedy.on.txt") bytes)"
  else say "FAIL greedy text: on != $tag (or a run failed)"; fi
done
say "s11_bench done"
