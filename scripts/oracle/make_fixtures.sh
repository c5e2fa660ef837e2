#!/usr/bin/env bash
# Regenerate the HF-transformers oracle fixtures (tests/fixtures/oracle_*, tokenizer_tiny.jsonl).
# Runs on a machine with python3 + torch + transformers (DeepseekV4) + tokenizers + numpy, ideally a GPU.
#
#   scripts/oracle/make_fixtures.sh OUTDIR            # self-tests, both models, both sequences (< 5 min on an H200)
#   scripts/oracle/make_fixtures.sh OUTDIR --check    # only print HF's classes/params and smoke-test the hooks
#
# Inputs (environment, all optional):
#   DSV4_GGUF   the engine's dsv4-gguf binary (default: build/dsv4-gguf); used to synthesize the two models
#   TINY_F16    use this GGUF instead of running `dsv4-gguf synth --preset tiny --quant f16 --seed 1`
#   TINY_Q2     use this GGUF instead of running `dsv4-gguf synth --preset tiny --quant q2 --seed 2`
#   TINY_F16_CMD, TINY_Q2_CMD  the command that made a given file (written to the .meta files)
#   CORPUS      text corpus (default: data/tiny-corpus.txt)
#   PYTHON      python interpreter (default: python3)
#   DEVICE      cuda or cpu (default: cuda when available)
#   ALLOW_PY_SYNTH=1  when no dsv4-gguf binary is found, make stand-in models with scripts/oracle/synth_tiny.py
#               (smoke tests only: fixtures must come from the engine's own synth, whose sha256 the tests check)
# Outputs in OUTDIR: oracle_<model>_<seq>.{tokens,logits.f32,meta,indexer,plain.logits.f32,plain.indexer},
# tokenizer_tiny.jsonl, oracle.log, make_fixtures.log, STATUS, models/ (the GGUFs).
set -u -o pipefail
export PYTHONDONTWRITEBYTECODE=1

if [ $# -lt 1 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    sed -n '2,19p' "$0"
    exit 2
fi
OUT=$1
shift
CHECK=0
if [ "${1:-}" = "--check" ]; then CHECK=1; shift; fi

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-python3}
CORPUS=${CORPUS:-$ROOT/data/tiny-corpus.txt}
BIN=${DSV4_GGUF:-$ROOT/build/dsv4-gguf}
mkdir -p "$OUT/models" || exit 1
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/make_fixtures.log
: >"$LOG"
say() { echo "[make_fixtures] $*" | tee -a "$LOG" >&2; }
die() { say "ERROR: $*"; echo "failed: $*" >"$OUT/STATUS"; exit 1; }

say "root $ROOT, out $OUT, python $PY"
"$PY" -c 'import sys, numpy, torch, transformers, tokenizers; print("python", sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tee -a "$LOG" >&2 \
    || die "python environment lacks numpy/torch/transformers/tokenizers"

DEV_ARGS=()
if [ -n "${DEVICE:-}" ]; then DEV_ARGS=(--device "$DEVICE"); fi

if [ "$CHECK" = 1 ]; then
    MODEL_ARGS=()
    if [ -n "${TINY_F16:-}" ]; then MODEL_ARGS=(--model "tiny_f16=$TINY_F16"); fi
    "$PY" "$HERE/oracle.py" --check "${MODEL_ARGS[@]}" "${DEV_ARGS[@]}" 2>&1 | tee -a "$LOG"
    exit "${PIPESTATUS[0]}"
fi

[ -f "$CORPUS" ] || die "corpus not found: $CORPUS"

# 1. the two models
make_model() { # name quant seed envpath
    local name=$1 quant=$2 seed=$3 given=$4 dst="$OUT/models/$1.gguf"
    if [ -n "$given" ]; then
        [ -f "$given" ] || die "$name: $given not found"
        cp "$given" "$dst" || die "copy $given"
        local cmdvar="TINY_${quant^^}_CMD"
        echo "${!cmdvar:-given file $(basename "$given")}" >"$OUT/models/$name.cmd"
    elif [ -x "$BIN" ]; then
        local cmd=(synth --preset tiny --quant "$quant" --seed "$seed" --corpus data/tiny-corpus.txt)
        say "$name: $BIN ${cmd[*]} $dst"
        (cd "$ROOT" && "$BIN" "${cmd[@]}" "$dst") >>"$LOG" 2>&1 || die "$name: dsv4-gguf synth failed (see $LOG)"
        echo "dsv4-gguf ${cmd[*]} OUT.gguf" >"$OUT/models/$name.cmd"
    elif [ "${ALLOW_PY_SYNTH:-0}" = 1 ]; then
        say "WARNING: $name: no dsv4-gguf binary at $BIN; using the python stand-in (NOT for committed fixtures)"
        "$PY" "$HERE/synth_tiny.py" "$dst" --quant "$quant" --seed "$seed" --corpus "$CORPUS" >>"$LOG" 2>&1 \
            || die "$name: synth_tiny.py failed"
        echo "scripts/oracle/synth_tiny.py OUT.gguf --quant $quant --seed $seed (python stand-in)" >"$OUT/models/$name.cmd"
    else
        die "$name: no GGUF: set TINY_${quant^^} or DSV4_GGUF (build it with make), or ALLOW_PY_SYNTH=1 for a smoke test"
    fi
    sha256sum "$dst" | tee -a "$LOG" >&2
}
make_model tiny_f16 f16 1 "${TINY_F16:-}"
make_model tiny_q2 q2 2 "${TINY_Q2:-}"

# 2. self-tests, oracle for both models and both sequences
T0=$(date +%s)
"$PY" "$HERE/oracle.py" --out "$OUT" --corpus "$CORPUS" "${DEV_ARGS[@]}" \
    --model "tiny_f16=$OUT/models/tiny_f16.gguf" --model "tiny_q2=$OUT/models/tiny_q2.gguf" \
    --synth-cmd "tiny_f16=$(cat "$OUT/models/tiny_f16.cmd")" --synth-cmd "tiny_q2=$(cat "$OUT/models/tiny_q2.cmd")" \
    2>&1 | tee -a "$LOG"
RC=${PIPESTATUS[0]}
say "oracle.py exit $RC after $(( $(date +%s) - T0 ))s"
du -ch "$OUT"/oracle_* "$OUT"/tokenizer_tiny.jsonl 2>/dev/null | tail -1 | sed 's/^/[make_fixtures] fixture size: /' | tee -a "$LOG" >&2
cat "$OUT/STATUS" 2>/dev/null | tee -a "$LOG" >&2
exit "$RC"
