#!/usr/bin/env bash
# Tier placement and fused-op switches through the programs, tiny model on the CPU backend:
# --dump-logits with three virtual tiers (chunks 1 and 7), with DSV4_TIER_BOUNCE=1, with
# --no-fusion and with DSV4_FAULT=hc_pre_norm is byte-identical to one tier; --stats prints the
# placement, tier counters equal to the formulas and the fusion counters; bad placements exit
# non-zero with one clear line; dsv4-bench --json carries the counters; the server's /metrics
# exposes dsv4_tier_switches_total / dsv4_tier_bytes_total per mode.
set -euo pipefail
ulimit -c 0
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cli="$root/$BUILD/dsv4"
bench="$root/$BUILD/dsv4-bench"
server="$root/$BUILD/dsv4-server"
gguf="$root/$BUILD/dsv4-gguf"
for b in "$cli" "$bench" "$server" "$gguf"; do [ -x "$b" ] || { echo "missing $b (run make BUILD=$BUILD programs)"; exit 1; }; done
dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-tiers-test.XXXXXX")"
. "$root/tests/scripts/server_lib.sh"
trap 'srv_stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$root"
"$gguf" synth --preset tiny --seed 5 "$dir/tiny.gguf" >/dev/null
M="$dir/tiny.gguf"
T3="cpu:0-1,cpu:2-3,cpu:4-5"
ids="$(python3 -c "print(','.join(str((i * 53 + 7) % 1024) for i in range(45)))")"

# --- logits: one tier vs three tiers, bounce, no fusion, injected fault ---
"$cli" -m "$M" -t 1 --no-fusion --dump-logits "$dir/ref.bin" --tokens "$ids" --chunk 45 2>"$dir/e" || fail "reference dump: $(cat "$dir/e")"
for c in 1 7; do
  "$cli" -m "$M" -t 1 --tiers "$T3" --dump-logits "$dir/t$c.bin" --tokens "$ids" --chunk $c 2>"$dir/e" || fail "3 tiers chunk $c: $(cat "$dir/e")"
  cmp -s "$dir/ref.bin" "$dir/t$c.bin" || fail "3 tiers, chunk $c: logits differ from one tier"
done
DSV4_TIER_BOUNCE=1 "$cli" -m "$M" -t 1 --tiers "$T3" --dump-logits "$dir/b.bin" --tokens "$ids" --chunk 7 2>/dev/null || fail "bounce run"
cmp -s "$dir/ref.bin" "$dir/b.bin" || fail "DSV4_TIER_BOUNCE=1 changes the logits"
DSV4_FAULT=hc_pre_norm "$cli" -m "$M" -t 1 --tiers "$T3" --dump-logits "$dir/f.bin" --tokens "$ids" --chunk 7 2>/dev/null || fail "fault run"
cmp -s "$dir/ref.bin" "$dir/f.bin" || fail "DSV4_FAULT=hc_pre_norm changes the logits"
DSV4_FUSION=off "$cli" -m "$M" -t 1 --tiers "0:0-5" --dump-logits "$dir/x.bin" --tokens "$ids" 2>"$dir/e" && fail "a CUDA tier in a CPU build ran"
grep -q "tier 0 (cuda0)" "$dir/e" || fail "CUDA tier error does not name the tier: $(cat "$dir/e")"

# --- --stats: placement line and exact counters for a greedy one-shot (2 boundaries) ---
"$cli" -m "$M" -t 1 --tiers "$T3" -p "Hello" -n 5 --temp 0 --stats >/dev/null 2>"$dir/s" || fail "--stats run: $(cat "$dir/s")"
grep -q "^placement: $T3 (3 tiers, 2 boundaries)$" "$dir/s" || fail "--stats placement line: $(cat "$dir/s")"
python3 - "$dir/s" <<'PY' || fail "--stats counters: $(cat "$dir/s")"
import re, sys
t = open(sys.argv[1]).read()
n_prompt = int(re.search(r"^prompt tokens: (\d+)$", t, re.M).group(1))
m = re.search(r"^tier switches: decode (\d+) \((\d+) bytes\), batch (\d+) \((\d+) bytes\), nocopy (\d+) \((\d+) bytes\)$", t, re.M)
d, db, b, bb, n, nb = map(int, m.groups())
row = 4 * 256 * 4  # HC x EMBD x 4 of the tiny preset
assert d == 2 * 4 and db == d * row, (d, db)            # 4 decode steps after the prefill's token
assert b == 2 and bb == 2 * n_prompt * row, (b, bb)      # the prompt is one chunk
assert nb == 0 and n >= 5, (n, nb)
f = re.search(r"^fusion hc_pre_norm: selected (\d+), fallback (\d+), faulted (\d+), skipped (\d+)$", t, re.M)
# both halves of 6 layers in 5 evaluations, but the FFN halves of the 4 decode steps, whose pre step
# takes the attention's post (hc_post_pre_norm)
assert list(map(int, f.groups())) == [2 * 6 * 5 - 4 * 6, 0, 0, 0], f.groups()
p = re.search(r"^fusion hc_post_pre_norm: selected (\d+), fallback (\d+), faulted (\d+), skipped (\d+)$", t, re.M)
assert list(map(int, p.groups())) == [4 * 6, 0, 0, 0], p.groups()
PY
"$cli" -m "$M" -t 1 -p "Hello" -n 2 --temp 0 --stats --no-fusion >/dev/null 2>"$dir/s2" || fail "--no-fusion --stats"
grep -q "^fusion hc_pre_norm: selected 0, fallback 0, faulted 0, skipped 24$" "$dir/s2" || fail "--no-fusion counters: $(cat "$dir/s2")"

# --- bad placements: non-zero exit, one line naming the problem ---
check_bad() { # expected-substring, args...
  local want="$1"; shift
  if "$cli" -m "$M" -p "x" -n 1 "$@" >/dev/null 2>"$dir/bad"; then fail "accepted: $*"; fi
  [ "$(wc -l <"$dir/bad")" = 1 ] || fail "not one line for $*: $(cat "$dir/bad")"
  grep -q -- "$want" "$dir/bad" || fail "message for $* lacks '$want': $(cat "$dir/bad")"
}
check_bad "gap: layer 2 is not placed" --tiers cpu:0-1,cpu:3-5
check_bad "overlap" --tiers cpu:0-3,cpu:2-5
check_bad "layer 9 is out of range" --tiers cpu:0-9
check_bad "unknown device 'npu'" --tiers npu:0-5
check_bad "does not fit" --tier-mem 0:1K
check_bad "alternatives" --tiers "$T3" --tier-mem cpu
DSV4_FUSION_DISABLE=bogus "$cli" -m "$M" -p x -n 1 >/dev/null 2>"$dir/bad" && fail "unknown fusion accepted"
grep -q "unknown fusion 'bogus'" "$dir/bad" || fail "unknown fusion message: $(cat "$dir/bad")"

# --- dsv4-bench --json carries placement and counters ---
"$bench" -m "$M" -t 1 --tiers "$T3" --prompt-file data/tiny-corpus.txt --ctx-start 32 --gen-tokens 4 \
  --json "$dir/b.json" >/dev/null 2>"$dir/e" || fail "bench: $(cat "$dir/e")"
python3 - "$dir/b.json" <<'PY' || fail "bench JSON counters"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["placement"] == "cpu:0-1,cpu:2-3,cpu:4-5" and j["tiers"] == 3 and j["tier_boundaries"] == 2, j
assert j["tier_switches"]["decode"] >= 2 * 3 and j["tier_bytes"]["nocopy"] == 0, j
assert j["tier_bytes"]["decode"] == j["tier_switches"]["decode"] * 4096, j
assert j["fusion"]["hc_pre_norm"]["selected"] > 0 and j["fusion"]["hc_pre_norm"]["fallback"] == 0, j
PY

# --- server /metrics ---
srv_start "$server" "$dir/srv.log" -m "$M" -t 1 --ctx 256 --tiers "$T3" --quiet || fail "server start"
curl -s --max-time 60 "$SRV_URL/v1/completions" -H 'content-type: application/json' \
  -d '{"model":"x","prompt":"Hello","max_tokens":3,"temperature":0}' >"$dir/c.json" || fail "completion request"
curl -s --max-time 10 "$SRV_URL/metrics" >"$dir/metrics" || fail "/metrics"
srv_stop || true
for mode in decode batch nocopy; do
  grep -qE "^dsv4_tier_switches_total\{mode=\"$mode\"\} [0-9]+$" "$dir/metrics" || fail "/metrics lacks switches for $mode"
  grep -qE "^dsv4_tier_bytes_total\{mode=\"$mode\"\} [0-9]+$" "$dir/metrics" || fail "/metrics lacks bytes for $mode"
done
grep -qE '^dsv4_tier_switches_total\{mode="batch"\} [1-9]' "$dir/metrics" || fail "no batch switch counted: $(grep tier "$dir/metrics")"
grep -qE '^dsv4_tier_bytes_total\{mode="nocopy"\} 0$' "$dir/metrics" || fail "nocopy bytes not 0"
grep -qE '^dsv4_fusion_total\{fusion="hc_pre_norm",outcome="selected"\} [1-9]' "$dir/metrics" || fail "fusion metric"
echo "ok"
