#!/usr/bin/env bash
# One validation call on the flash-width 4-layer q2 model (after `CUDA=1 scripts/device/pack.sh`):
#  1. cuda_ops_check (DS4 numerics): every device op against the CPU (and bitwise checks);
#  2. test_cuda_attn (attention kernels against the CPU / the exact kernel, timings);
#  3. every kernel benchmark+check program carried in .carry/bin/bench/ (exit 0 = its checks passed);
#  4. scripts/device/ab_check.sh over $AB_SWITCHES (bitwise paths against their switches);
#  5. dsv4-bench at 2K (chunk 2048) with the default paths and with $OLD (the paths they replace).
# Summary in $OUT/flash4_check.txt; each part's output beside it.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/f4-out}"; mkdir -p "$OUT"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$ROOT/.carry/bin"; C="$B/cuda"; W=/dev/shm/dsv4-ab; mkdir -p "$W"; M="$W/flash4.gguf"
S="$OUT/flash4_check.txt"; : >"$S"; fails=0
say() { echo "$*" | tee -a "$S"; }
say "commit: $(cat "$ROOT/.carry/COMMIT" 2>/dev/null || echo unknown)"
[ -s "$M" ] || "$B/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$M" >/dev/null || { say "FAIL synth"; exit 1; }
run() { # name timeout cmd...
  local name=$1 to=$2; shift 2
  timeout "$to" "$@" >"$OUT/$name.txt" 2>&1; local rc=$?
  if [ $rc = 0 ]; then say "ok   $name"; else say "FAIL $name (rc $rc): $(grep -m3 -E 'FAIL|rror' "$OUT/$name.txt" | tr '\n' ' ')"; fails=$((fails+1)); fi
}
[ -x "$C/cuda_ops_check" ] && run ops_check 300 "$C/cuda_ops_check" "$M" --numerics ds4
[ -x "$C/test_cuda_attn" ] && run test_cuda_attn 300 "$C/test_cuda_attn"
for b in "$B"/bench/*; do [ -x "$b" ] && run "bench-$(basename "$b")" 120 "$b"; done
grep -h "^RESULT" "$OUT"/bench-*.txt "$OUT"/test_cuda_attn.txt 2>/dev/null | tee -a "$S"
if [ -n "${AB_SWITCHES:-}" ]; then
  OUT="$OUT/ab" AB_SWITCHES="$AB_SWITCHES" timeout 400 "$ROOT/scripts/device/ab_check.sh" >/dev/null 2>&1
  grep -E "^(ok|FAIL)|ab_check" "$OUT/ab/ab_check.txt" | tee -a "$S"
  grep -q "ab_check: 0 failure" "$OUT/ab/ab_check.txt" || fails=$((fails+1))
fi
P="$ROOT/.carry/data/promessi_sposi.txt"; [ -f "$P" ] || P="$ROOT/data/tiny-corpus.txt"
for mode in default old; do
  e="X=1"; [ $mode = old ] && e="${OLD:-X=1}"
  env $e timeout 120 "$C/dsv4-bench" -m "$M" --backend cuda --prompt-file "$P" --ctx-start 2048 --ctx-max 2048 \
    --gen-tokens 64 --chunk 2048 --json "$OUT/bench-$mode.json" >"$OUT/bench-$mode.csv" 2>"$OUT/bench-$mode.err"
  say "flash4 2K $mode ($e): $(tail -1 "$OUT/bench-$mode.csv")"
done
say "flash4_check: $fails failure(s)"
