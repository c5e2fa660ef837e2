#!/usr/bin/env bash
# dsv4 interactive chat driven through a real terminal (tmux): two turns, /ctx growing, /think,
# Ctrl-C clearing a typed line, Ctrl-C stopping a long generation and an interrupted prefill
# (both return to the prompt and the next turn still works), double Ctrl-C and /quit exiting
# with status 0. Every wait is bounded. Skipped (exit 0) only when tmux is not installed.
set -euo pipefail
ulimit -c 0
if ! command -v tmux >/dev/null 2>&1; then
  echo "SKIP: tmux is not installed"
  exit 0
fi
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cli="$root/$BUILD/dsv4"
gguf="$root/$BUILD/dsv4-gguf"
[ -x "$cli" ] || { echo "missing $cli (run make BUILD=$BUILD programs)"; exit 1; }
[ -x "$gguf" ] || { echo "missing $gguf (run make BUILD=$BUILD programs)"; exit 1; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-repl-test.XXXXXX")"
# one private tmux server per dsv4 session (never the user's server; restarting one is racy)
n_sock=0
sock="dsv4-repl-test-$$-0"
T() { tmux -L "$sock" "$@"; }
cleanup() {
  for i in $(seq 0 "$n_sock"); do tmux -L "dsv4-repl-test-$$-$i" kill-server >/dev/null 2>&1 || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
cd "$root"
"$gguf" synth --preset tiny --seed 3 "$dir/tiny.gguf" >/dev/null
M="$dir/tiny.gguf"
head -c 9000 data/tiny-corpus.txt >"$dir/long.txt"

pane() { T capture-pane -p -J -t repl -S -2000 2>/dev/null || true; }
fail() {
  echo "FAIL: $*"
  echo "---- pane ----"
  pane | grep -v '^$' | cut -c1-200 | tail -n 40
  exit 1
}
# wait_for DESCRIPTION TIMEOUT_S COMMAND...: poll until COMMAND succeeds on the pane text
wait_for() {
  local what="$1" limit="$2"; shift 2
  local end=$((SECONDS + limit))
  while [ $SECONDS -lt $end ]; do
    pane >"$dir/pane"
    if "$@" "$dir/pane"; then return 0; fi
    sleep 0.2
  done
  fail "timed out after ${limit}s waiting for: $what"
}
n_prompts() { grep -c '^> ' "$1" || true; }
# at least N prompt lines and the last non-empty line is an empty prompt
prompt_ready() { # N file
  [ "$(n_prompts "$2")" -ge "$1" ] && [ "$(grep -v '^$' "$2" | tail -n 1)" = ">" -o "$(grep -v '^$' "$2" | tail -n 1)" = "> " ]
}
has() { grep -qE -- "$1" "$2"; }
# reply text (not the prefill progress bar, which shares the terminal) after the question line
line_after() { grep -A1 -xF -- "> $1" "$2" | tail -n +2 | grep -v 'prefill \[' | grep -q .; }
count_ge() { [ "$(grep -cE -- "$2" "$3" || true)" -ge "$1" ]; }
ctx_used() { grep -E '^context: [0-9]+/' "$dir/pane" | tail -n 1 | sed -E 's/^context: ([0-9]+)\/.*/\1/'; }
send() { T send-keys -t repl "$@"; }

start() { # extra dsv4 args
  T kill-server >/dev/null 2>&1 || true
  n_sock=$((n_sock + 1))
  sock="dsv4-repl-test-$$-$n_sock"
  T new-session -d -s repl -x 200 -y 50 "'$cli' -m '$M' --temp 0 $*; echo DSV4_EXIT=\$?; sleep 120"
  wait_for "the first prompt" 30 prompt_ready 1
}

# ---- session A: turns, /ctx, /think, Ctrl-C on a typed line, /quit ----
start -n 12 --nothink
has 'context 4096 tokens' "$dir/pane" || fail "banner does not show the context"
send "Hello there" Enter
wait_for "the first answer" 30 prompt_ready 2
send "/ctx" Enter
wait_for "/ctx output" 10 has '^context: [0-9]+/4096 tokens used'
used1=$(ctx_used)
[ "$used1" -gt 12 ] || fail "/ctx after one turn shows $used1 tokens"
send "What happened next?" Enter
wait_for "the second answer" 30 prompt_ready 4
send "/ctx" Enter
wait_for "second /ctx output" 10 count_ge 2 '^context: [0-9]+/4096 tokens used'
used2=$(ctx_used)
[ "$used2" -gt "$used1" ] || fail "context did not grow in turn 2 ($used1 -> $used2)"
dim=$'\e[2m'
T capture-pane -p -e -t repl -S -2000 | grep -qF "$dim" && fail "non-thinking replies were dimmed"
send "/think" Enter
wait_for "/think acknowledgement" 10 has '^thinking: high'
send "Think about it" Enter
wait_for "the thinking answer" 30 prompt_ready 7
# the reasoning (everything generated after <think>) is shown dimmed on a terminal
T capture-pane -p -e -t repl -S -2000 | grep -qF "$dim" || fail "the thinking reply was not dimmed"
send "some half-typed line"
wait_for "the typed text" 10 has 'some half-typed line'
send C-c
wait_for "a fresh prompt after Ctrl-C" 10 prompt_ready 8
send "/ctx" Enter
wait_for "third /ctx output" 10 count_ge 3 '^context: [0-9]+/4096 tokens used'
grep -q 'unknown command' "$dir/pane" && fail "the cleared line was submitted"
send "/quit" Enter
wait_for "exit after /quit" 10 has '^DSV4_EXIT=0$'

# ---- session B: Ctrl-C during generation and prefill, then double Ctrl-C exits ----
start -n 100000 --nothink --chunk 64 --ctx 8192
# A reply may end on its own (EOS) before the key arrives: then ask again, a bounded number of times.
stopped=0
for q in "Tell me everything" "Tell me more" "And then" "Go on please" "Continue"; do
  before=$(n_prompts "$dir/pane")
  send "$q" Enter
  wait_for "the reply to '$q' to start" 30 has "^> $q\$"
  wait_for "the first reply text" 30 line_after "$q"
  send C-c
  wait_for "the prompt after Ctrl-C during '$q'" 30 prompt_ready $((before + 1))
  if has '^\[interrupted\]$' "$dir/pane"; then stopped=1; break; fi
  echo "note: the reply to '$q' ended before Ctrl-C arrived; trying again"
done
[ "$stopped" = 1 ] || fail "no generation was ever interrupted by Ctrl-C"
has '^DSV4_EXIT' "$dir/pane" && fail "Ctrl-C during generation ended the program"
send "/ctx" Enter
wait_for "/ctx after the interrupted turn" 10 has '^context: [0-9]+/8192 tokens used'
used=$(ctx_used)
[ "$used" -gt 20 ] && [ "$used" -lt 4096 ] || fail "context after an interrupted turn: $used"
before=$(n_prompts "$dir/pane")
send "/read $dir/long.txt" Enter
wait_for "the prefill progress bar" 30 has 'prefill \['
send C-c
wait_for "[interrupted] after Ctrl-C during prefill" 30 count_ge 2 '^\[interrupted\]$'
wait_for "the prompt after an interrupted prefill" 10 prompt_ready $((before + 1))
send "/ctx" Enter
wait_for "/ctx after the interrupted prefill" 10 count_ge 2 '^context: [0-9]+/8192 tokens used'
[ "$(ctx_used)" = "$used" ] || fail "an interrupted prefill changed the kept history ($used -> $(ctx_used))"
T kill-server >/dev/null 2>&1 || true

# a short turn after an interrupted prefill still works (the session is rebuilt from history)
start -n 4 --nothink --chunk 64 --ctx 8192
send "/read $dir/long.txt" Enter
wait_for "the prefill progress bar" 30 has 'prefill \['
send C-c
wait_for "[interrupted] after Ctrl-C during prefill" 30 has '^\[interrupted\]$'
wait_for "the prompt after an interrupted prefill" 10 prompt_ready 2
send "short one" Enter
wait_for "an answer after the interrupted prefill" 30 prompt_ready 3
send "/ctx" Enter
wait_for "/ctx" 10 has '^context: [0-9]+/8192 tokens used \([1-9][0-9]* evaluated\)'
send C-c
wait_for "the Ctrl-C hint at an empty prompt" 10 has 'Ctrl-C again or /quit to exit'
send C-c
wait_for "exit after a second Ctrl-C" 10 has '^DSV4_EXIT=0$'
echo "interactive checks passed"
