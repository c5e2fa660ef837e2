#!/usr/bin/env bash
# CUDA vs CPU parity on the GPU machine (issue 4): teacher-forced logits of the CUDA build, token by
# token (--chunk 1) and in prefill chunks (--chunk 64), against the CPU build on the same GGUF.
#
# Here:  CUDA=1 scripts/device/pack.sh        (CPU + CUDA builds into .carry/)
# There: scripts/device/cuda_parity.sh         (from the repo root; results under $OUT)
#
# Models (synthesized into /dev/shm, else /tmp): tiny q2 and tiny f16 (~200 tokens), a flash-width
# 4-layer q2 (~64 tokens). Pass: top-1 agreement >= 99.5% of positions and max relative logit error
# <= 1e-2 (scripts/device/parity_compare.py defines it), for CUDA vs CPU at chunk 1 and chunk 64 and
# for CUDA chunk 64 vs CUDA chunk 1. Every step has a timeout; a failing step is reported and the
# remaining steps still run, so partial results come back.
#
# Environment: OUT (results folder, default ./parity-out), PARITY_TINY_TOKENS (200),
# PARITY_FLASH_TOKENS (64), PARITY_SKIP_FLASH=1, PARITY_TIMEOUT (seconds per step, 600),
# DSV4_CUDA_MATVEC=generic (every CUDA product through the CPU-order kernels).
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
say "work dir $WORK, tiny $TINY_N tokens, flash-width $FLASH_N tokens, matvec ${DSV4_CUDA_MATVEC:-tuned}"

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

# parity NAME MODEL TOKENS: CPU reference, CUDA chunk 1 and chunk 64, three comparisons
parity() {
  local name="$1" model="$2" toks="$3"
  local base="$WORK/$name"
  rm -f "$base".*.bin "$base".*.bin.meta
  run "$name cpu" "$BIN/dsv4" -m "$model" --dump-logits "$base.cpu.bin" --tokens "$toks" --chunk 64 || {
    fails=$((fails + 1))
    return
  }
  if [ -x "$CBIN/cuda_ops_check" ]; then # op by op first: names the op that diverges if parity fails
    local mark=$(wc -l <"$LOG")
    run "$name ops check" "$CBIN/cuda_ops_check" "$model" || fails=$((fails + 1))
    tail -n +"$((mark + 1))" "$LOG" | grep -E '^(FAIL|CUDA OPS)' | head -n 40 | sed "s/^/    [$name] /" >>"$SUMMARY"
  fi
  if [ "$name" = tiny-q2 ]; then # one device report per run
    run "$name device-info" "$CBIN/dsv4" -m "$model" --backend cuda --device-info || true
    grep -A9 "^=== $name device-info:" "$LOG" | grep -v '^===' | sed 's/^/    /' >>"$SUMMARY"
  fi
  local c
  for c in 1 64; do
    run "$name cuda chunk $c" "$CBIN/dsv4" -m "$model" --backend cuda --dump-logits "$base.cuda$c.bin" \
      --tokens "$toks" --chunk "$c" || fails=$((fails + 1))
  done
  local pair ref test
  for pair in "cpu cuda1" "cpu cuda64" "cuda1 cuda64"; do
    set -- $pair
    ref="$base.$1.bin" test="$base.$2.bin"
    if [ ! -f "$ref" ] || [ ! -f "$test" ]; then
      say "SKIP $name $2 vs $1 (a dump is missing)"
      fails=$((fails + 1))
      continue
    fi
    python3 scripts/device/parity_compare.py --ref "$ref" --test "$test" --label "$name $2 vs $1" \
      --json "$JSON" 2>>"$LOG" | tee -a "$SUMMARY" | grep -q '^PASS' || fails=$((fails + 1))
  done
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
    parity "tiny-$q" "$m" "$WORK/tiny.tok"
  else
    fails=$((fails + 1))
  fi
done

# ---- flash width, 4 layers ----
if [ "${PARITY_SKIP_FLASH:-0}" != 1 ]; then
  tokens "$WORK/flash.tok" "$FLASH_N" 129280
  m="$WORK/flash4-q2.gguf"
  if run "synth flash 4-layer q2" "$BIN/dsv4-gguf" synth --preset flash --layers 4 --quant q2 "$m"; then
    parity "flash4-q2" "$m" "$WORK/flash.tok"
  else
    fails=$((fails + 1))
  fi
  rm -f "$m"
fi

rm -f "$WORK"/*.bin "$WORK"/*.bin.meta "$WORK"/*.gguf
if [ "$fails" -eq 0 ]; then say "PARITY PASSED"; else say "PARITY FAILED: $fails failing step(s)"; fi
[ "$fails" -eq 0 ]
