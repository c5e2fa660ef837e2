#!/usr/bin/env bash
# dsv4-bench on the tiny model: ds4-bench's CSV header, one row per frontier with the right
# ctx/prefill/gen columns for linear and multiplicative steps, --csv to a file, a JSON report
# that parses and is self-consistent, and clear failures for bad input.
set -euo pipefail
ulimit -c 0
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
bench="$root/$BUILD/dsv4-bench"
gguf="$root/$BUILD/dsv4-gguf"
[ -x "$bench" ] || { echo "missing $bench (run make BUILD=$BUILD programs)"; exit 1; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-bench-test.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$root"
"$gguf" synth --preset tiny --seed 2 "$dir/tiny.gguf" >/dev/null
M="$dir/tiny.gguf"
TXT="data/tiny-corpus.txt"
HDR="ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes"

"$bench" -m "$M" --prompt-file "$TXT" --ctx-start 64 --ctx-max 128 --step-incr 32 --gen-tokens 8 \
  --json "$dir/b.json" >"$dir/b.csv" 2>"$dir/b.err" || fail "bench run failed: $(cat "$dir/b.err")"
[ "$(head -n 1 "$dir/b.csv")" = "$HDR" ] || fail "CSV header: $(head -n 1 "$dir/b.csv")"
[ "$(wc -l <"$dir/b.csv")" = 4 ] || fail "expected 3 rows for 64..128 step 32"
python3 - "$dir/b.csv" "$dir/b.json" <<'PY' || fail "CSV/JSON content"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [int(r["ctx_tokens"]) for r in rows] == [64, 96, 128], rows
assert [int(r["prefill_tokens"]) for r in rows] == [64, 32, 32], rows
assert all(int(r["gen_tokens"]) == 8 for r in rows)
assert all(float(r["prefill_tps"]) > 0 and float(r["gen_tps"]) > 0 for r in rows)
kv = {int(r["kvcache_bytes"]) for r in rows}
assert len(kv) == 1 and kv.pop() > 0, "kvcache_bytes must be the (fixed-size) snapshot bytes"
for r in rows:  # two decimals, like ds4-bench's %.2f
    assert len(r["prefill_tps"].split(".")[1]) == 2 and len(r["gen_tps"].split(".")[1]) == 2
j = json.load(open(sys.argv[2]))
assert j["decode_latency_ms"]["samples"] == 3 * 8
assert 0 < j["decode_latency_ms"]["p50"] <= j["decode_latency_ms"]["p95"]
lat = sorted(j["decode_latency_ms"]["all"])
assert len(lat) == 3 * 8 and all(v > 0 for v in lat)
assert lat[0] <= j["decode_latency_ms"]["p50"] <= lat[-1]
assert j["peak_rss_bytes"] > 0 and j["kvcache_bytes"] == int(rows[0]["kvcache_bytes"])
assert j["model_load_s"] > 0, j["model_load_s"]
assert j["time_to_first_token_s"] >= j["rows"][0]["prefill_s"] > 0
assert abs(j["decode_floor_fraction"] - j["decode_tps"] / 450.0) < 1e-4
assert j["floor_tps"] == 450 and j["ctx_alloc"] == 128 + 8 + 1
assert isinstance(j["machine"]["uname"], str) and j["machine"]["online_cpus"] >= 1
assert len(j["rows"]) == 3 and [r["ctx_tokens"] for r in j["rows"]] == [64, 96, 128]
for jr, cr in zip(j["rows"], rows):
    assert abs(jr["gen_tps"] - float(cr["gen_tps"])) < 0.01
# the CPU tier reports no cuBLAS products (the field exists for every device)
assert j["devices"] and j["devices"][0]["blas"] == {"ready": False, "products": 0, "conversions_shared": 0, "hc_mix_rms_folded": 0}, j["devices"]
assert j["devices"][0]["q8_wg_products"] == 0, j["devices"]
assert j["devices"][0]["moe_f16_products"] == 0, j["devices"]
assert j["devices"][0]["moe_ws_products"] == 0, j["devices"]
assert j["devices"][0]["moe_x16_products"] == 0, j["devices"]
print("ok")
PY

# multiplicative steps (ceil, clamped at ctx-max), --csv FILE, --floor-tps
"$bench" -m "$M" --prompt-file "$TXT" --ctx-start 16 --ctx-max 100 --step-mul 2 --gen-tokens 4 \
  --csv "$dir/m.csv" --json "$dir/m.json" --floor-tps 100 >"$dir/m.out" 2>/dev/null || fail "--step-mul run failed"
[ ! -s "$dir/m.out" ] || fail "CSV went to stdout despite --csv"
[ "$(cut -d, -f1 "$dir/m.csv" | paste -sd' ')" = "ctx_tokens 16 32 64 100" ] || fail "step-mul frontiers: $(cut -d, -f1 "$dir/m.csv" | paste -sd' ')"
[ "$(cut -d, -f2 "$dir/m.csv" | paste -sd' ')" = "prefill_tokens 16 16 32 36" ] || fail "step-mul prefill tokens"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert abs(j["decode_floor_fraction"]-j["decode_tps"]/100)<1e-4' \
  "$dir/m.json" || fail "--floor-tps not used"
# --ctx-max defaults to --ctx-start: one row
"$bench" -m "$M" --prompt-file "$TXT" --ctx-start 32 --gen-tokens 2 >"$dir/one.csv" 2>/dev/null || fail "single frontier"
[ "$(wc -l <"$dir/one.csv")" = 2 ] || fail "--ctx-max default is not --ctx-start"
# the default prompt file, when the shared data is there
if [ -f ../shared/data/promessi_sposi.txt ]; then
  "$bench" -m "$M" --ctx-start 32 --gen-tokens 2 >"$dir/def.csv" 2>/dev/null || fail "default --prompt-file"
  [ "$(wc -l <"$dir/def.csv")" = 2 ] || fail "default prompt run rows"
fi

# errors
err() { # what, args...
  local what="$1"; shift
  local rc=0
  "$bench" "$@" >/dev/null 2>"$dir/e.err" || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "$what: rc=$rc"
  grep -q '^dsv4-bench: ' "$dir/e.err" || fail "$what: no message"
  echo "ok: $what -> $(head -n 1 "$dir/e.err")"
}
printf 'just a few words\n' >"$dir/short.txt"
err "prompt shorter than ctx-max" -m "$M" --prompt-file "$dir/short.txt" --ctx-start 64
err "unknown flag" -m "$M" --prompt-file "$TXT" --bogus
err "bad number" -m "$M" --prompt-file "$TXT" --ctx-start 12ab
err "start above max" -m "$M" --prompt-file "$TXT" --ctx-start 64 --ctx-max 32
err "ctx-alloc too small" -m "$M" --prompt-file "$TXT" --ctx-start 64 --ctx-alloc 64
err "missing model" -m "$dir/none.gguf" --prompt-file "$TXT" --ctx-start 16
err "cuda" -m "$M" --prompt-file "$TXT" --backend cuda
# A broken model must not pass as a speed result: a NaN scale in the first Q8_0 block of the LM
# head's row 0 makes logit 0 NaN at every step (a NaN in an activation would not do: Q8
# quantization's max ignores NaN); the row is still written, the JSON counts the values and the
# run exits 3.
cp "$M" "$dir/nan.gguf"
off=$("$gguf" info "$M" | awk '$2 == "output.weight" && $3 == "Q8_0" {print $NF}')
doff=$("$gguf" info "$M" | sed -n 's/.*data offset \([0-9]*\).*/\1/p')
[ -n "$off" ] && [ -n "$doff" ] || fail "cannot locate a Q8_0 output.weight"
python3 - "$dir/nan.gguf" $((doff + off)) <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]))
    f.write(struct.pack("<H", 0x7E00))  # f16 NaN: the block's scale
PY
rc=0
"$bench" -m "$dir/nan.gguf" --prompt-file "$TXT" --ctx-start 32 --gen-tokens 2 --json "$dir/nan.json" \
  >"$dir/nan.csv" 2>"$dir/nan.err" || rc=$?
[ "$rc" = 3 ] || fail "NaN logits: exit code $rc, expected 3 ($(cat "$dir/nan.err"))"
grep -q 'non-finite logit values' "$dir/nan.err" || fail "NaN logits: no message"
python3 - "$dir/nan.json" <<'PY' || fail "NaN logits: JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["rows"][0]["nonfinite_logits"] > 0, j["rows"][0]
PY
echo "ok: NaN logits -> exit 3, $(head -n 1 "$dir/nan.err")"
echo "bench checks passed"
