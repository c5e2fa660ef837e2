#!/usr/bin/env bash
# Follow-up after a tool call whose sampled argument bytes were ill-formed UTF-8: the client only
# saw U+FFFD for them (JSON output must be valid UTF-8) and sends that text back, which no longer
# equals the live tokens' bytes. The server must still extend the live session (the live tokens
# are the model's own; dsv4_prefix_extend_total +1, rewind +0, rebuild +0). Finds, over seeds, a
# forced call (tiny model, temperature 1) whose arguments contain U+FFFD, so the case is exercised
# whatever the sampler draws (regression test for a ~1-in-40 flake of the SDK round-trip tests).
set -euo pipefail
ulimit -c 0
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
srv="$root/$BUILD/dsv4-server"
gguf="$root/$BUILD/dsv4-gguf"
for b in "$srv" "$gguf"; do [ -x "$b" ] || { echo "missing $b (run make BUILD=$BUILD programs)"; exit 1; }; done
command -v curl >/dev/null || { echo "curl is required"; exit 1; }
. "$root/tests/scripts/server_lib.sh"
dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-replay-test.XXXXXX")"
trap 'srv_stop >/dev/null 2>&1; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; tail -n 30 "$dir/server.log" 2>/dev/null; exit 1; }
"$gguf" synth --preset tiny --seed 3 "$dir/tiny.gguf" >/dev/null
srv_start "$srv" "$dir/server.log" -m "$dir/tiny.gguf" --threads 2 || fail "server did not start"
python3 - "$SRV_URL" <<'PY' || fail "round trip"
import json, sys, urllib.request
url = sys.argv[1]
def post(path, body):
    r = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=120))
def metric(name):
    for line in urllib.request.urlopen(url + "/metrics", timeout=30).read().decode().splitlines():
        if line.split(" ")[0] == name:
            return float(line.split(" ")[1])
    raise SystemExit("metric %s missing" % name)
schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city", "days"]}
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
common = {"model": "m", "tools": tools, "temperature": 1, "reasoning_effort": "none"}
for seed in range(1, 400):
    a = post("/v1/chat/completions", dict(common, messages=msgs, max_tokens=400, seed=seed,
             tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    call = a["choices"][0]["message"]["tool_calls"][0]
    if "\ufffd" in call["function"]["arguments"]:
        break
else:
    raise SystemExit("no seed in 1..399 sampled ill-formed UTF-8 in the arguments: the test no longer exercises its case")
print("seed %d: arguments %s" % (seed, json.dumps(call["function"]["arguments"])[:120]))
before = {k: metric(k) for k in ("dsv4_prefix_extend_total", "dsv4_prefix_rewind_total", "dsv4_prefix_rebuild_total")}
b = post("/v1/chat/completions", dict(common, max_tokens=4, messages=msgs + [
    {"role": "assistant", "content": None, "tool_calls": [call]},
    {"role": "tool", "tool_call_id": call["id"], "content": '{"temp_c": 21}'}]))
d = {k: metric(k) - v for k, v in before.items()}
assert d == {"dsv4_prefix_extend_total": 1, "dsv4_prefix_rewind_total": 0, "dsv4_prefix_rebuild_total": 0}, d
cached = b["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
first = a["usage"]["prompt_tokens"] + a["usage"]["completion_tokens"]
assert cached >= first, (cached, first)
print("ok: follow-up extended the live session (%d cached tokens >= %d of the first turn)" % (cached, first))
PY
echo "replay checks passed"
