#!/usr/bin/env bash
# Session 12 benches on the full flash q2 (after `CUDA=1 XZ=1 scripts/device/pack.sh` here,
# scripts/device/unpack.sh there). PART=2k (default): 2K prompt, 128 decoded tokens, interleaved,
# REPS rounds of: default, the three new fused ops together, and each alone. PART=32k: 2K -> 32K
# (step x16, 64 tokens) default vs all three. PART=greedy: 64 greedy tokens after a 2,225-token
# prompt with the three on, default and --no-fusion: the same text. Results in $OUT.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/s12-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$OUT/s12_bench.txt"; touch "$S"
say() { echo "$*" | tee -a "$S"; }
ALL="DSV4_CUDA_EMIT_ROW=1 DSV4_CUDA_ROUTER_FUSED=1 DSV4_CUDA_HC_POST_PRE=1"
FB="$ROOT/scripts/device/flash_bench.sh"
case "${PART:-2k}" in
2k)
  for i in $(seq 1 "${REPS:-2}"); do
    OUT="$OUT" "$FB" "s12-base-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" X=1 2>&1 | tee -a "$S"
    OUT="$OUT" "$FB" "s12-all3-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" $ALL 2>&1 | tee -a "$S"
    for sw in $ALL; do
      t=$(echo "$sw" | sed 's/DSV4_CUDA_//; s/=1//' | tr 'A-Z_' 'a-z-')
      OUT="$OUT" "$FB" "s12-$t-$i" "--ctx-start 2048 --ctx-max 2048 --gen-tokens 128" "$sw" 2>&1 | tee -a "$S"
    done
  done ;;
32k)
  OUT="$OUT" "$FB" "s12-32k-base" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" X=1 2>&1 | tee -a "$S"
  OUT="$OUT" "$FB" "s12-32k-all3" "--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64" $ALL 2>&1 | tee -a "$S" ;;
greedy)
  M=/dev/shm/flash-q2.gguf
  [ -s "$M" ] || "$ROOT/.carry/bin/dsv4-gguf" synth --preset flash --quant q2 --threads 16 "$M" >/dev/null 2>&1 || say "FAIL synth"
  PROMPT="$(head -c 5400 "$ROOT/.carry/data/promessi_sposi.txt")" # 2,225 tokens: the indexer runs
  for tag in all3 base off; do
    case $tag in all3) e="$ALL" ;; base) e=X=1 ;; off) e=DSV4_FUSION=off ;; esac
    env $e "$ROOT/.carry/bin/cuda/dsv4" -m "$M" --backend cuda --system "" -p "$PROMPT" -n 64 --temp 0 \
      --ctx 4096 --stats >"$OUT/greedy.$tag.txt" 2>"$OUT/greedy.$tag.err"
    rc=$?; eval "rc_$tag=$rc"
    say "greedy $tag rc $rc: $(grep -E '^prompt|^decode|^fusion (emit_row|router_topk|hc_post_pre)' "$OUT/greedy.$tag.err" | tr '\n' ' ')"
  done
  for tag in base off; do
    r=rc_$tag
    if [ "$rc_all3" = 0 ] && [ "${!r}" = 0 ] && [ -s "$OUT/greedy.all3.txt" ] && cmp -s "$OUT/greedy.all3.txt" "$OUT/greedy.$tag.txt"; then
      say "ok   greedy 64 tokens: all3 == $tag ($(wc -c <"$OUT/greedy.all3.txt") bytes)"
    else say "FAIL greedy text: all3 != $tag (or a run failed)"; fi
  done ;;
esac
say "s12_bench ${PART:-2k} done"
