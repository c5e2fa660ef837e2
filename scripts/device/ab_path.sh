#!/usr/bin/env bash
# A switchable prefill path against its exact companion in one call (after
# `CUDA=1 XZ=1 scripts/device/pack.sh` here and scripts/device/unpack.sh there). Environment:
#   TAG       name of the run (files, summary);
#   AB_OFF    the environment assignment that turns the path off (e.g. DSV4_CUDA_MOE_F16=0);
#   OPS_GREP  extended regex of the cuda_ops_check lines to keep in the summary;
#   SKIP_OPS, SKIP_PARITY, SKIP_FULL: leave a part out; FULL_ARGS (default 2K, 32 tokens) or
#   FULL32K=1 for the full flash q2 bench.
#  1. flash4: cuda_ops_check (the OPS_GREP lines);
#  2. flash4 2K bench, default vs off, twice interleaved;
#  3. flash4 teacher-forced logits of 300 tokens: CUDA chunk 300 default and off against the CPU
#     (parity_compare.py --stats, as cuda_parity.sh does for DS4 numerics);
#  4. full flash q2: default vs off (flash_bench.sh).
# Summary in $OUT/ab_<TAG>.txt.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/ab-out}"; mkdir -p "$OUT"
TAG="${TAG:-ab}"; AB_OFF="${AB_OFF:?AB_OFF=VAR=value}"; OPS_GREP="${OPS_GREP:-^FAIL}"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
S="$OUT/ab_$TAG.txt"; : >"$S"
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown), $(date -u +%FT%TZ), off: $AB_OFF"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH" && break
done
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
[ -s "$M" ] || "$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
if [ -z "${SKIP_OPS:-}" ]; then
  t0=$(date +%s)
  timeout 300 "$C/cuda_ops_check" "$M" --numerics ds4 >"$OUT/ops_check_$TAG.txt" 2>&1; rc=$?
  say "ops_check rc $rc ($(( $(date +%s) - t0 )) s): $(grep -c '^FAIL' "$OUT/ops_check_$TAG.txt") FAIL lines"
  grep -E "$OPS_GREP|^FAIL|CUDA OPS" "$OUT/ops_check_$TAG.txt" | tee -a "$S"
fi
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
for mode in on off on2 off2; do
  e="X=1"; case $mode in off*) e="$AB_OFF" ;; esac
  env $e timeout 120 "$C/dsv4-bench" -m "$M" --backend cuda --prompt-file "$P" --ctx-start 2048 --ctx-max 2048 \
    --gen-tokens 16 --chunk 2048 --json "$OUT/f4-$TAG-$mode.json" >"$OUT/f4-$TAG-$mode.csv" 2>"$OUT/f4-$TAG-$mode.err"
  say "flash4 $mode ($e): $(tail -n +2 "$OUT/f4-$TAG-$mode.csv")"
done
if [ -z "${SKIP_PARITY:-}" ]; then
  T="$W/tok300.txt"
  python3 -c 'import random; r=random.Random(4242); print("\n".join(str(r.randrange(129280)) for _ in range(300)))' >"$T"
  [ -s "$W/f4.cpu.bin" ] || timeout 300 "$B/dsv4" -m "$M" --tokens "$T" --chunk 64 --dump-logits "$W/f4.cpu.bin" \
    >"$OUT/dump-cpu.txt" 2>&1 || say "FAIL cpu dump"
  timeout 120 "$C/dsv4" -m "$M" --backend cuda --tokens "$T" --chunk 300 --dump-logits "$W/f4.on.bin" \
    >"$OUT/dump-on-$TAG.txt" 2>&1 || say "FAIL on dump"
  env $AB_OFF timeout 120 "$C/dsv4" -m "$M" --backend cuda --tokens "$T" --chunk 300 --dump-logits "$W/f4.off.bin" \
    >"$OUT/dump-off-$TAG.txt" 2>&1 || say "FAIL off dump"
  for p in "on cpu" "off cpu" "on off"; do
    set -- $p
    python3 "$ROOT/scripts/device/parity_compare.py" --ref "$W/f4.$2.bin" --test "$W/f4.$1.bin" \
      --label "flash4 300 $1 vs $2" --stats 2>&1 | tee -a "$S"
  done
fi
if [ -z "${SKIP_FULL:-}" ]; then
  ARGS="${FULL_ARGS:---ctx-start 2048 --ctx-max 2048 --gen-tokens 32}"
  [ -n "${FULL32K:-}" ] && ARGS="--ctx-start 2048 --ctx-max 32768 --step-mul 16 --gen-tokens 64"
  OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" "$TAG-off" "$ARGS" $AB_OFF 2>&1 | tee -a "$S"
  OUT="$OUT" "$ROOT/scripts/device/flash_bench.sh" "$TAG-on" "$ARGS" X=1 2>&1 | tee -a "$S"
fi
say "ab_path $TAG done"
