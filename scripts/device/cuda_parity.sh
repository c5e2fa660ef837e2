#!/usr/bin/env bash
# CUDA vs CPU parity on the GPU machine: teacher-forced logits of the CUDA build, token by token
# (--chunk 1) and in prefill chunks (--chunk 64), against the CPU build on the same GGUF.
#
# Here:  CUDA=1 scripts/device/pack.sh        (CPU + CUDA builds into .carry/)
# There: scripts/device/cuda_parity.sh         (from the repo root; results under $OUT)
#
# Models (synthesized into /dev/shm, else /tmp): tiny q2 and tiny f16 (~200 tokens), a flash-width
# 4-layer q2 (~64 tokens). Per model (docs/VALIDATION.md, section "CUDA", says why):
#   EXACT numerics (--numerics exact; pass/fail): the op-by-op check, then CUDA chunk 1 and chunk 64
#     vs the CPU and CUDA chunk 64 vs chunk 1: top-1 >= 99.5% and max rel <= 1e-2 (expect ~1e-6).
#   DS4 numerics, DSV4_CUDA_MATVEC=generic (pass/fail): CUDA chunk 64 == chunk 1 byte for byte.
#   DS4 numerics (statistics only, no verdict): the op-by-op check (pass/fail, as before), the
#     tuned path (no DSV4_CUDA_MATVEC) and the generic path against the CPU, tuned chunk 64 vs 1,
#     each printed next to the oracle's float32-vs-float64 floor (tests/fixtures/*_B.meta): DS4
#     roundings amplify last-bit differences, so no elementwise bound holds there.
# Every step has a timeout; a failing step is reported and the remaining steps still run, so
# partial results come back.
#
# Environment: OUT (results folder, default ./parity-out), PARITY_TINY_TOKENS (200),
# PARITY_FLASH_TOKENS (64), PARITY_SKIP_FLASH=1, PARITY_TIMEOUT (seconds per step, 600).
# DSV4_CUDA_MATVEC is set per run by this script (an outside value is ignored).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT="${OUT:-$ROOT/parity-out}"
mkdir -p "$OUT"
BIN="$ROOT/.carry/bin"
CBIN="$ROOT/.carry/bin/cuda"
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TINY_N="${PARITY_TINY_TOKENS:-200}"
FLASH_N="${PARITY_FLASH_TOKENS:-64}"
TMO="${PARITY_TIMEOUT:-600}"
WORK=/dev/shm/dsv4-parity
mkdir -p "$WORK" 2>/dev/null || { WORK=/tmp/dsv4-parity; mkdir -p "$WORK"; }
LOG="$OUT/parity.log"
SUMMARY="$OUT/parity_summary.txt"
JSON="$OUT/parity.jsonl"
: >"$LOG"
: >"$SUMMARY"
: >"$JSON"
fails=0
say() { echo "$*" | tee -a "$SUMMARY"; }
log() { echo "$*" >>"$LOG"; }

# run LABEL CMD...: with a timeout, output to the log; returns the command's status
run() {
  local label="$1"
  shift
  log "=== $label: $*"
  local t0=$(date +%s.%N) rc=0
  timeout "$TMO" "$@" >>"$LOG" 2>&1 || rc=$?
  local dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  log "=== $label: rc=$rc in ${dt}s"
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 124 ] && say "TIMEOUT $label after ${TMO}s" || say "ERROR $label (rc=$rc, see parity.log)"
    tail -n 5 "$LOG" | sed 's/^/    /' | tee -a "$SUMMARY"
  else
    echo "ok $label (${dt}s)" >>"$SUMMARY"
  fi
  return "$rc"
}

for b in "$BIN/dsv4" "$BIN/dsv4-gguf" "$CBIN/dsv4"; do
  if [ ! -x "$b" ]; then
    say "missing $b: run CUDA=1 scripts/device/pack.sh on the build machine and carry .carry"
    exit 2
  fi
done
command -v python3 >/dev/null || { say "python3 is missing"; exit 2; }
python3 -c 'import numpy' 2>/dev/null || say "note: python3 has no numpy; comparing in plain Python (slower)"

say "dsv4 CUDA parity, commit $(cat .carry/COMMIT 2>/dev/null || echo unknown), $(date -u +%FT%TZ)"
nvidia-smi -L >>"$LOG" 2>&1 || true
unset DSV4_CUDA_MATVEC DSV4_NUMERICS
say "work dir $WORK, tiny $TINY_N tokens, flash-width $FLASH_N tokens"

# tokens NAME N VOCAB: N pseudo-random ids in [0, VOCAB), fixed seed, one per line
tokens() {
  python3 - "$1" "$2" "$3" <<'EOF'
import random, sys
path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(4242)
with open(path, "w") as f:
    f.write("\n".join(str(r.randrange(vocab)) for _ in range(n)) + "\n")
EOF
}

# compare MODE NAME TEST REF [EXPECT_META]: MODE bounds|bitwise|stats; a stats line never fails
compare() {
  local mode="$1" name="$2" test="$3" ref="$4" meta="${5:-}"
  local base="$WORK/$name" args=()
  if [ ! -f "$base.$ref.bin" ] || [ ! -f "$base.$test.bin" ]; then
    say "SKIP $name $test vs $ref (a dump is missing)"
    [ "$mode" = stats ] || fails=$((fails + 1))
    return
  fi
  case "$mode" in
  bitwise) args=(--bitwise) ;;
  stats) args=(--stats ${meta:+--expect-meta "$meta"}) ;;
  esac
  python3 scripts/device/parity_compare.py --ref "$base.$ref.bin" --test "$base.$test.bin" \
    --label "$name $test vs $ref" --json "$JSON" "${args[@]}" 2>>"$LOG" | tee -a "$SUMMARY" |
    grep -qE '^(PASS|STATS)' || fails=$((fails + 1))
}

# ops_check NAME MODEL NUMERICS: op by op first, names the op that diverges if parity fails
ops_check() {
  local name="$1" model="$2" nm="$3"
  [ -x "$CBIN/cuda_ops_check" ] || return 0
  local mark=$(wc -l <"$LOG")
  run "$name ops check $nm" "$CBIN/cuda_ops_check" "$model" --numerics "$nm" || fails=$((fails + 1))
  tail -n +"$((mark + 1))" "$LOG" | grep -E '^(FAIL|CUDA OPS)' | head -n 40 | sed "s/^/    [$name $nm] /" >>"$SUMMARY"
}

# dump NAME LABEL OUT [ENV...] -- ARGS: one teacher-forced logits dump (a failure counts)
dump() {
  local name="$1" label="$2" out="$3"
  shift 3
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  run "$name $label" env -u DSV4_CUDA_MATVEC "${envs[@]}" "$@" --dump-logits "$WORK/$name.$out.bin" ||
    fails=$((fails + 1))
}

# parity NAME MODEL TOKENS EXPECT_META
parity() {
  local name="$1" model="$2" toks="$3" meta="$4"
  local base="$WORK/$name" c
  rm -f "$base".*.bin "$base".*.bin.meta
  local cpu=("$BIN/dsv4" -m "$model" --tokens "$toks") gpu=("$CBIN/dsv4" -m "$model" --backend cuda --tokens "$toks")
  # ---- EXACT numerics: bounds ----
  dump "$name" "cpu exact" cpux -- "${cpu[@]}" --numerics exact --chunk 64
  ops_check "$name" "$model" exact
  if [ "$name" = tiny-q2 ]; then # one device report per run
    run "$name device-info" "$CBIN/dsv4" -m "$model" --backend cuda --device-info || true
    grep -A9 "^=== $name device-info:" "$LOG" | grep -v '^===' | sed 's/^/    /' >>"$SUMMARY"
  fi
  for c in 1 64; do
    dump "$name" "cuda exact chunk $c" "cudax$c" -- "${gpu[@]}" --numerics exact --chunk "$c"
  done
  compare bounds "$name" cudax1 cpux
  compare bounds "$name" cudax64 cpux
  compare bounds "$name" cudax64 cudax1
  # ---- DS4 numerics ----
  dump "$name" "cpu ds4" cpu -- "${cpu[@]}" --chunk 64
  ops_check "$name" "$model" ds4
  for c in 1 64; do
    dump "$name" "cuda ds4 generic chunk $c" "cudag$c" DSV4_CUDA_MATVEC=generic -- "${gpu[@]}" --chunk "$c"
    dump "$name" "cuda ds4 tuned chunk $c" "cuda$c" -- "${gpu[@]}" --chunk "$c"
  done
  compare bitwise "$name" cudag64 cudag1
  compare stats "$name" cudag1 cpu "$meta"
  compare stats "$name" cuda1 cpu "$meta"
  compare stats "$name" cuda64 cpu "$meta"
  compare stats "$name" cuda64 cuda1 "$meta"
}

# ---- host-only decoder check, then the tiny models ----
if [ -x "$CBIN/gemm_units_check" ]; then
  run "gemm units (host)" "$CBIN/gemm_units_check" || fails=$((fails + 1))
fi
# ---- tiny models ----
tokens "$WORK/tiny.tok" "$TINY_N" 1024
for q in q2 f16; do
  m="$WORK/tiny-$q.gguf"
  if run "synth tiny $q" "$BIN/dsv4-gguf" synth --preset tiny --quant "$q" "$m"; then
    parity "tiny-$q" "$m" "$WORK/tiny.tok" "$ROOT/tests/fixtures/oracle_tiny_${q}_B.meta"
  else
    fails=$((fails + 1))
  fi
done

# ---- flash width, 4 layers ----
if [ "${PARITY_SKIP_FLASH:-0}" != 1 ]; then
  tokens "$WORK/flash.tok" "$FLASH_N" 129280
  m="$WORK/flash4-q2.gguf"
  if run "synth flash 4-layer q2" "$BIN/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$m"; then
    # no oracle at flash width: the tiny q2 floor (same weight types) is the nearest expectation
    parity "flash4-q2" "$m" "$WORK/flash.tok" "$ROOT/tests/fixtures/oracle_tiny_q2_B.meta"
  else
    fails=$((fails + 1))
  fi
  rm -f "$m"
fi

rm -f "$WORK"/*.bin "$WORK"/*.bin.meta "$WORK"/*.gguf
if [ "$fails" -eq 0 ]; then say "PARITY PASSED"; else say "PARITY FAILED: $fails failing step(s)"; fi
[ "$fails" -eq 0 ]
