#!/usr/bin/env bash
# dsv4-gguf end to end: synth the tiny CI model and inspect it; write sparse Flash-shape q2/q4
# files and check their inventory against the spec (1328 tensors; 86,714,775,900 B q2,
# 164,628,167,004 B q4); a synth to an unwritable path fails and leaves no file.
set -euo pipefail
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
tool="$root/$BUILD/dsv4-gguf"
[ -x "$tool" ] || { echo "missing $tool (run make BUILD=$BUILD)"; exit 1; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-gguf-test.XXXXXX")"
trap 'rm -rf "$dir"' EXIT

fail() { echo "FAIL: $*"; exit 1; }
field() { # key file -> the integer after "key: "
  local v
  v="$(grep -E "^$1: [0-9]+$" "$2" | tail -n 1 | awk '{print $2}')"
  [ -n "$v" ] || fail "no '$1:' line in $2"
  echo "$v"
}

# --- tiny: synth, then info runs the binder ---
"$tool" synth --preset tiny --seed 5 "$dir/tiny.gguf" >"$dir/synth.out"
[ -f "$dir/tiny.gguf" ] || fail "tiny.gguf not written"
[ ! -e "$dir/tiny.gguf.tmp" ] || fail "temp file left behind"
"$tool" info "$dir/tiny.gguf" >"$dir/info.out"
[ "$(field tensors "$dir/info.out")" = 178 ] || fail "tiny: expected 178 tensors"
[ "$(field tensor_bytes "$dir/info.out")" = "$(field tensor_bytes "$dir/synth.out")" ] || fail "tiny: tensor_bytes differ"
grep -q '^binder: ok' "$dir/info.out" || fail "tiny: binder did not accept the file"
grep -q 'tokenizer.ggml.pre .*"joyai-llm"' "$dir/info.out" || fail "tiny: tokenizer.ggml.pre missing"
grep -q 'deepseek4.attention.compress_ratios .*\[0, 0, 4, 16, 4, 16\]' "$dir/info.out" || fail "tiny: ratios"
grep -qE 'blk\.0\.ffn_gate_exps\.weight +IQ2_XXS +\[256, 256, 8\]' "$dir/info.out" || fail "tiny: expert tensor row"
# same seed -> same bytes; another seed -> different bytes
"$tool" synth --preset tiny --seed 5 --threads 1 "$dir/tiny2.gguf" >/dev/null
cmp -s "$dir/tiny.gguf" "$dir/tiny2.gguf" || fail "tiny: not deterministic across thread counts"
"$tool" synth --preset tiny --seed 6 "$dir/tiny2.gguf" >/dev/null
! cmp -s "$dir/tiny.gguf" "$dir/tiny2.gguf" || fail "tiny: seed has no effect"

# --sparse-experts: same tensors, the routed experts left as a hole; the binder accepts it
"$tool" synth --preset tiny --seed 5 --sparse-experts "$dir/tiny-se.gguf" >"$dir/synth-se.out"
grep -q '(experts sparse)' "$dir/synth-se.out" || fail "sparse-experts: no mark in the summary"
"$tool" info "$dir/tiny-se.gguf" >"$dir/info-se.out"
grep -q '^binder: ok' "$dir/info-se.out" || fail "sparse-experts: binder did not accept the file"
[ "$(field tensor_bytes "$dir/info-se.out")" = "$(field tensor_bytes "$dir/synth.out")" ] || fail "sparse-experts: tensor_bytes differ"
! cmp -s "$dir/tiny.gguf" "$dir/tiny-se.gguf" || fail "sparse-experts: file equals the full one"

# --- info on a damaged file: binder error and non-zero exit ---
head -c 4096 "$dir/tiny.gguf" >"$dir/trunc.gguf"
if "$tool" info "$dir/trunc.gguf" >"$dir/trunc.out" 2>&1; then fail "info accepted a truncated file"; fi
if "$tool" info "$dir/missing.gguf" >/dev/null 2>&1; then fail "info accepted a missing file"; fi

# --- flash shape, sparse ---
for q in q2 q4; do
  want=86714775900; [ "$q" = q4 ] && want=164628167004
  "$tool" synth --preset flash --quant "$q" --sparse "$dir/flash-$q.gguf" >"$dir/synth-$q.out"
  "$tool" info "$dir/flash-$q.gguf" >"$dir/info-$q.out"
  [ "$(field tensors "$dir/info-$q.out")" = 1328 ] || fail "flash $q: tensor count"
  [ "$(field tensor_bytes "$dir/info-$q.out")" = "$want" ] || fail "flash $q: tensor_bytes $(field tensor_bytes "$dir/info-$q.out") != $want"
  grep -q '^binder: ok' "$dir/info-$q.out" || fail "flash $q: binder"
  alloc=$(( $(stat -c %b "$dir/flash-$q.gguf") * $(stat -c %B "$dir/flash-$q.gguf") ))
  [ "$alloc" -lt $((64 << 20)) ] || fail "flash $q: sparse file has $alloc allocated bytes"
  rm -f "$dir/flash-$q.gguf"
done
grep -q 'Total, ctx <= 2048' "$dir/info-q2.out" || fail "flash: per-token totals missing"

# --- unwritable destination: non-zero exit, no partial file ---
mkdir "$dir/ro"
chmod 555 "$dir/ro"
if [ "$(id -u)" != 0 ]; then
  if "$tool" synth --preset tiny "$dir/ro/x.gguf" >/dev/null 2>"$dir/ro.err"; then fail "synth into a read-only dir succeeded"; fi
  [ -z "$(ls -A "$dir/ro")" ] || fail "partial file left in read-only dir"
fi
if "$tool" synth --preset tiny "$dir/no/such/dir/x.gguf" >/dev/null 2>"$dir/nodir.err"; then fail "synth into a missing dir succeeded"; fi
grep -q 'cannot create' "$dir/nodir.err" || fail "no clear message: $(cat "$dir/nodir.err")"
[ ! -e "$dir/no" ] || fail "synth created directories"
# a file-size limit makes the write fail part way: exit non-zero, no file, no temp file
if ( ulimit -f 1024; exec "$tool" synth --preset tiny "$dir/big.gguf" ) >/dev/null 2>"$dir/fsize.err"; then
  fail "synth past the file-size limit succeeded"
fi
[ ! -e "$dir/big.gguf" ] && [ ! -e "$dir/big.gguf.tmp" ] || fail "partial file left after a write error"
# bad options
if "$tool" synth --quant q3 "$dir/x.gguf" >/dev/null 2>&1; then fail "unknown --quant accepted"; fi
if "$tool" synth --heads 7 "$dir/x.gguf" >/dev/null 2>&1; then fail "inconsistent shape accepted"; fi
[ ! -e "$dir/x.gguf" ] || fail "file written despite bad options"
echo "ok"
