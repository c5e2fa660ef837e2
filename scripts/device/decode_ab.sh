#!/usr/bin/env bash
# Full flash q2 dsv4-bench at 2K, interleaved: the default paths, then the paths in $OLD (env
# assignments separated by spaces), REPS times each, side by side in one call (flash_bench.sh
# synthesizes the model once). Each run logs at info (why a decode step was not recorded). Prints per
# run: prefill and decode tok/s, decode p50, recorded / unrecorded steps, graph instantiations and
# the first 6 step latencies (warm-up). Usage (after pack + unpack):
#   OLD="DSV4_FUSION_DISABLE=hc_post_add" REPS=2 scripts/device/decode_ab.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="${OUT:-$ROOT/bench-out}"; mkdir -p "$OUT"
D="$ROOT/scripts/device"
BA="${BENCH_ARGS:---ctx-start 2048 --ctx-max 2048 --gen-tokens 64}"
for r in $(seq 1 "${REPS:-2}"); do
  for v in default old; do
    if [ $v = default ]; then OUT="$OUT" timeout 200 "$D/flash_bench.sh" "ab-$v-$r" "$BA" DSV4_LOG=info >/dev/null 2>&1
    else OUT="$OUT" timeout 200 "$D/flash_bench.sh" "ab-$v-$r" "$BA" DSV4_LOG=info ${OLD:-X=1} >/dev/null 2>&1; fi
    j=$(ls "$OUT"/*-flash-q2-h200-ab-$v-$r.json 2>/dev/null | head -1)
    [ -n "$j" ] || { echo "$v $r: no JSON"; continue; }
    python3 - "$j" "$v" "$r" <<'P'
import json, sys
d = json.load(open(sys.argv[1])); row = d["rows"][0]; lat = d["decode_latency_ms"]
sg = d["devices"][0]["step_graphs"]
print(f'{sys.argv[2]:7s} {sys.argv[3]}: prefill {row["prefill_tps"]:.1f} decode {row["gen_tps"]:.2f} tok/s '
      f'p50 {lat["p50"]:.3f} ms, rec {d["steps_recorded"]} unrec {d["steps_unrecorded"]} inst {sg["instantiated"]} '
      f'first {[round(x, 2) for x in lat.get("all", [])[:6]]}')
P
    grep -m3 "not recorded" "${j%.json}.err" | cut -c1-200
  done
done
