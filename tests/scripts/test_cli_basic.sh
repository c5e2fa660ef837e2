#!/usr/bin/env bash
# dsv4 CLI end to end on the synthesized tiny model: greedy and seeded runs are reproducible and
# independent of the prefill chunk; --dump-logits is chunk-independent (byte-identical) with the
# right size and meta; the multi-turn REPL (piped) produces exactly the greedy continuation of
# its own conversation tokens under teacher forcing (so earlier turns were reused correctly);
# bad inputs exit non-zero with a one-line message and never crash.
set -euo pipefail
ulimit -c 0
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cli="$root/$BUILD/dsv4"
gguf="$root/$BUILD/dsv4-gguf"
[ -x "$cli" ] || { echo "missing $cli (run make BUILD=$BUILD programs)"; exit 1; }
[ -x "$gguf" ] || { echo "missing $gguf (run make BUILD=$BUILD programs)"; exit 1; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-cli-test.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cd "$root"
"$gguf" synth --preset tiny --seed 3 "$dir/tiny.gguf" >/dev/null
M="$dir/tiny.gguf"
P="Hello! Tell me a short story."

# --- reproducibility ---
"$cli" -m "$M" -p "$P" -n 16 --temp 0 >"$dir/g1" 2>"$dir/g1.err" || fail "greedy run failed: $(cat "$dir/g1.err")"
"$cli" -m "$M" -p "$P" -n 16 --temp 0 >"$dir/g2" 2>/dev/null || fail "second greedy run failed"
[ -s "$dir/g1" ] || fail "greedy run printed nothing"
cmp -s "$dir/g1" "$dir/g2" || fail "greedy output differs between runs"
for c in 1 5 4096; do
  "$cli" -m "$M" -p "$P" -n 16 --temp 0 --chunk "$c" >"$dir/gc" 2>/dev/null || fail "chunk $c run failed"
  cmp -s "$dir/g1" "$dir/gc" || fail "greedy output with --chunk $c differs"
done
"$cli" -m "$M" -p "$P" -n 16 --temp 0 --threads 1 >"$dir/gt" 2>/dev/null || fail "--threads 1 run failed"
cmp -s "$dir/g1" "$dir/gt" || fail "greedy output with --threads 1 differs"
"$cli" -m "$M" -p "$P" -n 16 --temp 1 --seed 42 >"$dir/s1" 2>/dev/null || fail "seeded run failed"
"$cli" -m "$M" -p "$P" -n 16 --temp 1 --seed 42 --chunk 3 >"$dir/s2" 2>/dev/null || fail "seeded run 2 failed"
cmp -s "$dir/s1" "$dir/s2" || fail "same seed gives different output"
"$cli" -m "$M" -p "$P" -n 16 --temp 1 --seed 43 >"$dir/s3" 2>/dev/null || fail "seeded run 3 failed"
! cmp -s "$dir/s1" "$dir/s3" || fail "seed has no effect on sampled output"
# -n 0 generates nothing (only the final newline)
"$cli" -m "$M" -p "$P" -n 0 >"$dir/n0" 2>/dev/null || fail "-n 0 failed"
[ "$(wc -c <"$dir/n0")" = 1 ] || fail "-n 0 printed tokens"

# --- --stats and --dump-tokens ---
"$cli" -m "$M" -p "$P" -n 4 --temp 0 --stats >/dev/null 2>"$dir/stats" || fail "--stats run failed"
for k in "prompt tokens:" "prefill:" "decode:" "KV bytes:"; do
  grep -q "^$k" "$dir/stats" || fail "--stats lacks '$k'"
done
"$cli" -m "$M" -p "$P" --nothink --dump-tokens >"$dir/tok" 2>/dev/null || fail "--dump-tokens failed"
head -n 1 "$dir/tok" | grep -q "begin▁of▁sentence" || fail "--dump-tokens: first token is not BOS"
tail -n 1 "$dir/tok" | grep -q "'</think>'$" || fail "--dump-tokens: --nothink prompt does not end in </think>"
"$cli" -m "$M" -p "$P" --dump-tokens | tail -n 1 | grep -q "'<think>'$" || fail "default mode does not think"
n_prompt=$(wc -l <"$dir/tok")
# <think> and </think> are one token each, so the thinking prompt has as many tokens
grep -q "^prompt tokens: $n_prompt\$" "$dir/stats" || fail "--stats prompt tokens disagree with --dump-tokens ($n_prompt)"

# --- teacher-forced logits: chunk 1 vs chunk 16, size and meta ---
python3 -c "print('\n'.join(str((i * 37 + 11) % 1024) for i in range(40)))" >"$dir/ids.txt"
"$cli" -m "$M" --dump-logits "$dir/l1.bin" --tokens "$dir/ids.txt" --chunk 1 2>"$dir/d.err" ||
  fail "--dump-logits chunk 1 failed: $(cat "$dir/d.err")"
"$cli" -m "$M" --dump-logits "$dir/l16.bin" --tokens "$(paste -sd, "$dir/ids.txt")" --chunk 16 2>/dev/null ||
  fail "--dump-logits chunk 16 (comma list) failed"
[ "$(stat -c %s "$dir/l1.bin")" = $((40 * 1024 * 4)) ] || fail "logits file size is not 40*1024*4"
cmp -s "$dir/l1.bin" "$dir/l16.bin" || fail "logits differ between chunk 1 and chunk 16"
grep -qx 'n_pos=40' "$dir/l1.bin.meta" || fail "meta n_pos"
grep -qx 'n_vocab=1024' "$dir/l1.bin.meta" || fail "meta n_vocab"
grep -qx 'chunk=16' "$dir/l16.bin.meta" || fail "meta chunk"
grep -qx "model=$M" "$dir/l1.bin.meta" || fail "meta model"
# the last position's argmax is the first greedy token after the same prefix: dump the one-shot
# prompt's ids and compare with the one-shot greedy run's first token id
"$cli" -m "$M" -p "Hello there" --nothink --dump-tokens | cut -f2 | paste -sd, >"$dir/prompt_ids"
"$cli" -m "$M" --dump-logits "$dir/lp.bin" --tokens "$(cat "$dir/prompt_ids")" 2>/dev/null || fail "dump of prompt ids"

# --- REPL (piped): turn 2 reuses turn 1's state; teacher forcing must reproduce both answers ---
printf 'Hello there\nWhat next?\n/ctx\n/tokens\n/quit\n' |
  "$cli" -m "$M" --temp 0 -n 8 --nothink >"$dir/repl.out" 2>"$dir/repl.err" || fail "REPL failed: $(cat "$dir/repl.err")"
grep -qE '^context: [0-9]+/4096 tokens used' "$dir/repl.out" || fail "/ctx output missing"
conv="$(grep -E '^[0-9]+(,[0-9]+)+$' "$dir/repl.out" | tail -n 1)"
[ -n "$conv" ] || fail "/tokens printed nothing"
think_end="$(tail -n 1 "$dir/tok" | cut -f2)"
"$cli" -m "$M" --dump-logits "$dir/lc.bin" --tokens "$conv" --chunk 7 2>/dev/null || fail "dump of conversation ids"
python3 - "$dir/lc.bin" "$conv" "$think_end" "$dir/lp.bin" "$(cat "$dir/prompt_ids")" "$dir/repl.out" <<'EOF' || fail "teacher-forced check"
import struct, sys
path, conv, te, lp, prompt, repl = sys.argv[1], [int(x) for x in sys.argv[2].split(',')], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
V = 1024
def rows(p):
    b = open(p, 'rb').read()
    f = struct.unpack('<%df' % (len(b) // 4), b)
    return [f[i * V:(i + 1) * V] for i in range(len(f) // V)]
def argmax(r):
    best, bi = -1e30, 0
    for i, v in enumerate(r):
        if v > best: best, bi = v, i
    return bi
L = rows(path)
assert len(L) == len(conv), (len(L), len(conv))
eos = conv[-1]
turns = [i for i, t in enumerate(conv) if t == te]
assert len(turns) == 2, ("expected two assistant turns", turns)
checked = 0
for i in turns:
    for k in range(1, 9):
        p = i + k
        assert argmax(L[p - 1]) == conv[p], ("position", p, "greedy", argmax(L[p - 1]), "conversation", conv[p])
        checked += 1
        if conv[p] == eos: break
# the conversation starts with exactly the one-shot prompt
pids = [int(x) for x in prompt.split(',')]
assert conv[:len(pids)] == pids, "turn 1 tokens differ from the one-shot encoding"
Lp = rows(lp)
assert argmax(Lp[-1]) == conv[len(pids)], "one-shot last-position argmax != REPL first answer token"
print("ok", checked, "generated positions checked")
EOF
# the REPL's first answer is the one-shot greedy answer
"$cli" -m "$M" -p "Hello there" -n 8 --temp 0 --nothink >"$dir/one" 2>/dev/null || fail "one-shot for REPL compare"
python3 -c 'import sys; a, b = (open(f, "rb").read() for f in sys.argv[1:]); sys.exit(not a.startswith(b))' \
  "$dir/repl.out" "$dir/one" || fail "REPL turn 1 differs from the one-shot answer"
# /reset then the same question gives the same answer again
printf 'Hello there\n/reset\nHello there\n' | "$cli" -m "$M" --temp 0 -n 8 --nothink >"$dir/reset.out" 2>/dev/null ||
  fail "REPL /reset run failed"
# (answers may contain newlines: split on the /reset acknowledgement)
python3 -c 'import sys; a, b = open(sys.argv[1], "rb").read().split(b"conversation cleared\n"); sys.exit(not (a and a + b"\n" == b))' \
  "$dir/reset.out" || fail "answer after /reset differs"

# --- errors: non-zero exit, one message on stderr, no crash ---
expect_error() { # description, args...
  local what="$1"; shift
  local rc=0
  "$cli" "$@" >"$dir/e.out" 2>"$dir/e.err" </dev/null || rc=$?
  [ "$rc" -ne 0 ] || fail "$what: exit status 0"
  [ "$rc" -lt 128 ] || fail "$what: killed by a signal (rc=$rc)"
  [ -s "$dir/e.err" ] || fail "$what: no message on stderr"
  grep -q '^dsv4: ' "$dir/e.err" || fail "$what: message does not start with 'dsv4: ': $(cat "$dir/e.err")"
  echo "ok: $what -> $(head -n 1 "$dir/e.err")"
}
head -c 200000 "$M" >"$dir/trunc.gguf"
echo "this is not a model" >"$dir/text.gguf"
expect_error "missing model" -m "$dir/nope.gguf" -p hi
expect_error "truncated model" -m "$dir/trunc.gguf" -p hi
expect_error "non-GGUF file" -m "$dir/text.gguf" -p hi
expect_error "unknown flag" -m "$M" -p hi --frobnicate
expect_error "bad number" -m "$M" -p hi -n 12x
expect_error "bad temperature" -m "$M" -p hi --temp abc
expect_error "missing value" -m "$M" -p hi --ctx
expect_error "prompt over --ctx" -m "$M" -p "$P" --ctx 8
expect_error "no model" -p hi
expect_error "cuda backend" -m "$M" -p hi --backend cuda
grep -q "this build has no CUDA backend" "$dir/e.err" || fail "cuda: unclear message"
expect_error "bad token list" -m "$M" --dump-logits "$dir/x.bin" --tokens "1,2,abc"
expect_error "token out of vocabulary" -m "$M" --dump-logits "$dir/x.bin" --tokens "1,2,999999"

# --- help names every flag ---
"$cli" --help >"$dir/help" || fail "--help exit status"
for f in -m -p -n --temp --top-p --top-k --min-p --seed --nothink --think --think-max --system --ctx --threads \
  --backend --chunk --stats --dump-tokens --dump-logits --tokens --help; do
  grep -q -- "$f" "$dir/help" || fail "--help does not mention $f"
done
echo "all CLI checks passed"
