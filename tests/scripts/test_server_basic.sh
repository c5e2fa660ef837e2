#!/usr/bin/env bash
# dsv4-server end to end on the synthesized tiny model, loopback only, bounded waits: every
# endpoint streaming and non-streaming (JSON shapes checked with python3), greedy server output
# equals `dsv4 -p` output, error shapes and status codes (404/405/401/400/413/context), CORS and
# API key, prefix extend/rewind counters on follow-up requests, a client disconnect frees the
# worker within a second, SIGTERM exits 0.
set -euo pipefail
ulimit -c 0
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
srv="$root/$BUILD/dsv4-server"
cli="$root/$BUILD/dsv4"
gguf="$root/$BUILD/dsv4-gguf"
for b in "$srv" "$cli" "$gguf"; do [ -x "$b" ] || { echo "missing $b (run make BUILD=$BUILD programs)"; exit 1; }; done
command -v curl >/dev/null || { echo "curl is required"; exit 1; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-server-test.XXXXXX")"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$dir/server.err" ] && head -n 60 "$dir/server.err"; exit 1; }

"$gguf" synth --preset tiny --seed 3 "$dir/tiny.gguf" >/dev/null
M="$dir/tiny.gguf"
KEY="test-key-123"
CTX=256

start_server() { # extra args...
  "$srv" -m "$M" --port 0 --ctx "$CTX" --threads 2 --quiet "$@" >"$dir/server.out" 2>"$dir/server.err" &
  pid=$!
  for _ in $(seq 1 100); do
    grep -q '^port ' "$dir/server.out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || fail "server exited at start: $(cat "$dir/server.err")"
    sleep 0.1
  done
  PORT=$(awk '/^port /{print $2}' "$dir/server.out")
  [ -n "$PORT" ] || fail "server did not report its port"
  URL="http://127.0.0.1:$PORT"
}

# req METHOD PATH [BODY] -> body in $dir/body, status in $STATUS (with the API key)
req() {
  local m="$1" p="$2" data="${3:-}"
  if [ -n "$data" ]; then
    STATUS=$(curl -s -m 60 -o "$dir/body" -w '%{http_code}' -X "$m" -H "Authorization: Bearer $KEY" \
      -H 'Content-Type: application/json' --data-binary "$data" "$URL$p")
  else
    STATUS=$(curl -s -m 60 -o "$dir/body" -w '%{http_code}' -X "$m" -H "Authorization: Bearer $KEY" "$URL$p")
  fi
}
expect() { [ "$STATUS" = "$1" ] || fail "$2: status $STATUS, want $1: $(head -c 400 "$dir/body")"; }
pycheck() { python3 -c "import json,sys; d=json.load(open('$dir/body')); $1" || fail "$2: $(head -c 600 "$dir/body")"; }
metric() { curl -s -m 10 "$URL/metrics" -H "x-api-key: $KEY" | awk -v n="$1" '$1==n{print $2}'; }
# every SSE data line is JSON (or [DONE]); prints the event names / data types in order
sse_check() {
  python3 - "$dir/body" <<'PY' || fail "SSE stream malformed: $(head -c 600 "$dir/body")"
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
kinds = []
for l in lines:
    if l.startswith("data: "):
        d = l[6:]
        if d == "[DONE]":
            kinds.append("[DONE]"); continue
        j = json.loads(d)
        kinds.append(j.get("type") or j.get("object"))
print(" ".join(kinds))
PY
}

start_server --api-key "$KEY" --cors

# ---- discovery, routing, auth, CORS ----
req GET /health; expect 200 health; pycheck 'assert d["status"]=="ok"' health
STATUS=$(curl -s -m 10 -o "$dir/body" -w '%{http_code}' "$URL/health"); expect 200 "health without key"
STATUS=$(curl -s -m 10 -o "$dir/body" -w '%{http_code}' "$URL/v1/models"); expect 401 "models without key"
pycheck 'assert d["error"]["message"] and "type" in d["error"]' "401 shape"
STATUS=$(curl -s -m 10 -o "$dir/body" -w '%{http_code}' -X POST -H 'x-api-key: wrong' -d '{}' "$URL/v1/messages")
expect 401 "messages with a wrong key"; pycheck 'assert d["type"]=="error" and d["error"]["type"]=="authentication_error"' "anthropic 401"
req GET /v1/models; expect 200 models; pycheck 'assert d["object"]=="list" and d["data"][0]["id"]=="deepseek-v4-flash"' models
req GET /v1/models/deepseek-v4-flash; expect 200 model; pycheck 'assert d["id"]=="deepseek-v4-flash"' model
req GET /v1/models/nope; expect 404 "unknown model"
req GET /v1/nothing; expect 404 "unknown path"; pycheck 'e=d["error"]; assert set(e)>={"message","type","param","code"}' "404 shape"
req GET /v1/chat/completions; expect 405 "GET on a POST endpoint"
req DELETE /health; expect 405 "DELETE on health"
hdr=$(curl -s -m 10 -D - -o /dev/null -X OPTIONS -H 'Origin: http://x' -H 'Access-Control-Request-Headers: authorization' "$URL/v1/chat/completions")
echo "$hdr" | grep -q '^HTTP/1.1 204' || fail "OPTIONS is not 204: $hdr"
echo "$hdr" | grep -qi '^Access-Control-Allow-Origin: \*' || fail "no CORS header with --cors: $hdr"

# ---- greedy output equals the CLI ----
P="Hello! Tell me a short story."
N=12
"$cli" -m "$M" -p "$P" -n $N --temp 0 --nothink --ctx $CTX --threads 2 >"$dir/cli.txt" 2>/dev/null || fail "dsv4 -p failed"
body=$(python3 -c 'import json,sys; print(json.dumps({"model":"deepseek-v4-flash","messages":[{"role":"system","content":"You are a helpful assistant"},{"role":"user","content":sys.argv[1]}],"max_tokens":int(sys.argv[2]),"temperature":0,"think":False}))' "$P" $N)
req POST /v1/chat/completions "$body"; expect 200 "chat greedy"
python3 - "$dir/body" "$dir/cli.txt" <<'PY' || fail "server greedy output differs from dsv4 -p"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
cli = open(sys.argv[2], encoding="utf-8", errors="strict").read()
assert cli.endswith("\n"); cli = cli[:-1]
c = d["choices"][0]
assert d["object"] == "chat.completion" and c["message"]["role"] == "assistant", d
assert c["message"]["content"] == cli, (c["message"]["content"], cli)
assert c["finish_reason"] in ("length", "stop")
u = d["usage"]; assert u["completion_tokens"] <= 12 and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
PY
# the same through Anthropic with thinking disabled and through Responses with effort none
abody=$(python3 -c 'import json,sys; print(json.dumps({"model":"m","system":"You are a helpful assistant","messages":[{"role":"user","content":sys.argv[1]}],"max_tokens":int(sys.argv[2]),"temperature":0,"thinking":{"type":"disabled"}}))' "$P" $N)
req POST /v1/messages "$abody"; expect 200 "messages greedy"
python3 - "$dir/body" "$dir/cli.txt" <<'PY' || fail "anthropic greedy output differs: $(head -c 500 "$dir/body")"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8")); cli = open(sys.argv[2], encoding="utf-8").read()[:-1]
assert d["type"] == "message" and d["role"] == "assistant" and d["stop_reason"] in ("max_tokens", "end_turn")
texts = [b["text"] for b in d["content"] if b["type"] == "text"]
assert texts == [cli], (texts, cli)
u = d["usage"]; assert u["output_tokens"] <= 12 and u["cache_read_input_tokens"] > 0  # same prompt: reused
PY
rbody=$(python3 -c 'import json,sys; print(json.dumps({"instructions":"You are a helpful assistant","input":sys.argv[1],"max_output_tokens":int(sys.argv[2]),"temperature":0,"reasoning":{"effort":"none"}}))' "$P" $N)
req POST /v1/responses "$rbody"; expect 200 "responses greedy"
python3 - "$dir/body" "$dir/cli.txt" <<'PY' || fail "responses greedy output differs: $(head -c 500 "$dir/body")"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8")); cli = open(sys.argv[2], encoding="utf-8").read()[:-1]
assert d["object"] == "response" and d["status"] in ("completed", "incomplete")
msgs = [it for it in d["output"] if it["type"] == "message"]
assert msgs and msgs[0]["content"][0]["text"] == cli
assert d["usage"]["input_tokens_details"]["cached_tokens"] > 0
PY

# ---- non-streaming shapes with thinking (default) ----
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"seed":7}'
expect 200 "chat thinking"; pycheck 'm=d["choices"][0]["message"]; assert "reasoning_content" in m and m["content"]=="" ' "reasoning split"
req POST /v1/completions '{"prompt":"Once upon a time","max_tokens":5,"temperature":0}'
expect 200 completions; pycheck 'c=d["choices"][0]; assert d["object"]=="text_completion" and isinstance(c["text"],str) and d["usage"]["completion_tokens"]==5' completions

# ---- streaming shapes ----
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}'
expect 200 "chat stream"; k=$(sse_check)
[[ "$k" == chat.completion.chunk*" [DONE]" ]] || fail "chat stream events: $k"
grep -q '"usage":{"prompt_tokens"' "$dir/body" || fail "chat stream has no usage chunk"
grep -q '"reasoning_content"' "$dir/body" || fail "chat stream has no reasoning deltas"
req POST /v1/completions '{"prompt":"Once","max_tokens":4,"stream":true}'
expect 200 "completions stream"; k=$(sse_check); [[ "$k" == *"text_completion [DONE]" ]] || fail "completions stream: $k"
req POST /v1/responses '{"input":[{"role":"user","content":[{"type":"input_text","text":"Hi"}]}],"max_output_tokens":6,"stream":true,"reasoning":{"effort":"none"}}'
expect 200 "responses stream"; k=$(sse_check)
for e in response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done; do
  [[ " $k " == *" $e "* ]] || fail "responses stream lacks $e: $k"
done
[[ "$k" == *"response.incomplete" || "$k" == *"response.completed" ]] || fail "responses stream end: $k"
python3 - "$dir/body" <<'PY' || fail "responses sequence numbers are not 0,1,2,..."
import json, sys
seq = [json.loads(l[6:])["sequence_number"] for l in open(sys.argv[1]).read().split("\n") if l.startswith("data: ")]
assert seq == list(range(len(seq))), seq
PY
req POST /v1/messages '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"stream":true}'
expect 200 "messages stream"; k=$(sse_check)
[[ "$k" == "message_start ping content_block_start content_block_delta"* && "$k" == *"content_block_stop message_delta message_stop" ]] || fail "messages stream events: $k"
grep -q '"thinking_delta"' "$dir/body" || fail "messages stream has no thinking deltas"

# ---- stop strings: the output never contains the stop string ----
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":40,"temperature":0,"think":false}'
full=$(python3 -c "import json; print(json.load(open('$dir/body'))['choices'][0]['message']['content'][3:6])")
if [ -n "$full" ]; then
  sb=$(python3 -c 'import json,sys; print(json.dumps({"messages":[{"role":"user","content":"Hi"}],"max_tokens":40,"temperature":0,"think":False,"stop":[sys.argv[1]]}))' "$full")
  req POST /v1/chat/completions "$sb"; expect 200 "stop string"
  python3 - "$dir/body" "$full" <<'PY' || fail "stop string not applied: $(head -c 400 "$dir/body")"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8")); c = d["choices"][0]
assert sys.argv[2] not in c["message"]["content"] and c["finish_reason"] == "stop", c
PY
fi

# ---- errors ----
STATUS=$(curl -s -m 10 -o "$dir/body" -w '%{http_code}' -H "x-api-key: $KEY" -H 'Content-Type: text/plain' -d '{"prompt":"x"}' "$URL/v1/completions")
expect 415 "a body that is not declared JSON"
req POST /v1/chat/completions '{"messages": [}'; expect 400 "bad JSON"; pycheck 'assert d["error"]["type"]=="invalid_request_error"' "bad JSON shape"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}'; expect 400 "wrong type"
pycheck 'assert d["error"]["param"]=="temperature"' "wrong type names the field"
req POST /v1/chat/completions '{"messages":[{"role":"wizard","content":"x"}]}'; expect 400 "unknown role"
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":-5}'; expect 400 "negative max_tokens"
req POST /v1/messages '{"messages":[{"role":"user","content":"x"}]}'; expect 400 "anthropic without max_tokens"
pycheck 'assert d["type"]=="error" and d["error"]["type"]=="invalid_request_error"' "anthropic error shape"
deep=$(python3 -c 'print("{\"messages\":" + "["*100 + "]"*100 + "}")')
req POST /v1/chat/completions "$deep"; expect 400 "deep nesting"
printf '{"messages":[{"role":"user","content":"\xff\xfe"}]}' >"$dir/badutf8.json"
STATUS=$(curl -s -m 10 -o "$dir/body" -w '%{http_code}' -H "x-api-key: $KEY" -H 'Content-Type: application/json' --data-binary @"$dir/badutf8.json" "$URL/v1/chat/completions")
expect 400 "invalid UTF-8"
python3 -c 'print("{\"prompt\":\"" + "a"*(9<<20) + "\"}")' >"$dir/huge.json"
STATUS=$(curl -s -m 30 -o "$dir/body" -w '%{http_code}' -H "x-api-key: $KEY" -H 'Content-Type: application/json' --data-binary @"$dir/huge.json" "$URL/v1/completions")
expect 413 "body over --max-body"
long=$(python3 -c 'import json; print(json.dumps({"messages":[{"role":"user","content":"word "*400}]}))')
req POST /v1/chat/completions "$long"; expect 400 "prompt over the context"
pycheck 'e=d["error"]; assert e["code"]=="context_length_exceeded" and e["n_ctx"]==256 and e["n_prompt_tokens"]>=256' "context error fields"

# ---- prefix reuse: extend and rewind counters ----
ext0=$(metric dsv4_prefix_extend_total); rew0=$(metric dsv4_prefix_rewind_total); reb0=$(metric dsv4_prefix_rebuild_total)
b1='{"messages":[{"role":"user","content":"Tell me about cats."}],"max_tokens":4,"temperature":0,"think":false}'
req POST /v1/chat/completions "$b1"; expect 200 "prefix base"
reb1=$(metric dsv4_prefix_rebuild_total); [ "$reb1" -gt "$reb0" ] || fail "a new conversation did not rebuild"
# the same prompt again: an exact prefix of the live tokens (prompt + generated) -> rewind
req POST /v1/chat/completions "$b1"; expect 200 "prefix same"
rew1=$(metric dsv4_prefix_rewind_total); [ "$rew1" -gt "$rew0" ] || fail "repeating a prompt did not rewind ($rew0 -> $rew1)"
pycheck 'assert d["usage"]["prompt_tokens_details"]["cached_tokens"] == d["usage"]["prompt_tokens"] - 1' "rewind reuses len-1 tokens"
# a chat follow-up carrying the generated reply: the live tokens' text prefixes the rendered
# conversation, so it extends (when the reply came back byte-exact, i.e. had valid UTF-8)
fu=$(python3 -c "
import json; d=json.load(open('$dir/body')); c=d['choices'][0]['message']['content']
print(json.dumps({'messages':[{'role':'user','content':'Tell me about cats.'},{'role':'assistant','content':c},
  {'role':'user','content':'And dogs?'}],'max_tokens':3,'temperature':0,'think':False}))
print('exact' if '\ufffd' not in c else 'lossy')")
e0=$(metric dsv4_prefix_extend_total)
req POST /v1/chat/completions "$(echo "$fu" | head -n 1)"; expect 200 "chat follow-up"
e1=$(metric dsv4_prefix_extend_total)
if [ "$(echo "$fu" | tail -n 1)" = exact ]; then [ "$e1" -gt "$e0" ] || fail "a chat follow-up did not extend ($e0 -> $e1)"; fi
pycheck 'assert d["usage"]["prompt_tokens_details"]["cached_tokens"] > 0' "follow-up reuses the prefix"
# a raw completion that continues the live tokens exactly -> extend (max_tokens 1: the sampled
# token is never evaluated, so the live tokens end with the prompt)
ext1=$(metric dsv4_prefix_extend_total)
req POST /v1/completions '{"prompt":"<｜begin▁of▁sentence｜><｜User｜>Tell me about cats.<｜Assistant｜></think>","max_tokens":1,"temperature":0}'
req POST /v1/completions '{"prompt":"<｜begin▁of▁sentence｜><｜User｜>Tell me about cats.<｜Assistant｜></think><｜end▁of▁sentence｜><｜User｜>More.","max_tokens":2,"temperature":0}'
expect 200 "prefix extend"
ext2=$(metric dsv4_prefix_extend_total); [ "$ext2" -gt "$ext1" ] || fail "an extension of the live tokens did not extend ($ext1 -> $ext2)"
reb2=$(metric dsv4_prefix_rebuild_total); [ "$reb2" = "$reb1" ] || fail "follow-ups rebuilt ($reb1 -> $reb2)"

# ---- a client that disconnects mid-stream frees the worker within a second ----
# (a sampled EOS can end a generation before the disconnect: a few seeds are tried)
c0=$(metric dsv4_requests_cancelled_total); c1=$c0
for seed in 11 12 13 14 15 16; do
  curl -s -N -m 0.15 -o /dev/null -H "x-api-key: $KEY" -H 'Content-Type: application/json' -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Go on forever.\"}],\"max_tokens\":100000,\"stream\":true,\"think\":false,\"temperature\":1,\"seed\":$seed}" "$URL/v1/chat/completions" || true
  t0=$(date +%s.%N)
  req POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}'; expect 200 "request after a disconnect"
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')
  awk -v d="$dt" 'BEGIN{exit !(d < 1.5)}' || fail "the worker was not freed promptly after a disconnect (${dt}s)"
  c1=$(metric dsv4_requests_cancelled_total)
  [ "$c1" -gt "$c0" ] && break
done
[ "$c1" -gt "$c0" ] || fail "no disconnect was counted as cancelled"

# ---- metrics text ----
curl -s -m 10 -H "x-api-key: $KEY" "$URL/metrics" >"$dir/metrics"
for m in dsv4_requests_total dsv4_prompt_tokens_total dsv4_cached_tokens_total dsv4_generated_tokens_total \
  dsv4_prefill_tokens_per_second dsv4_decode_tokens_per_second dsv4_time_to_first_token_seconds_bucket \
  dsv4_queue_depth dsv4_kv_bytes dsv4_prefix_extend_total dsv4_prefix_rewind_total dsv4_prefix_rebuild_total; do
  grep -q "^$m" "$dir/metrics" || fail "metric $m missing"
done
grep -q 'dsv4_requests_total{endpoint="/v1/chat/completions",status="200"}' "$dir/metrics" || fail "request counter by endpoint/status missing"

# ---- SIGTERM exits 0 ----
kill -TERM "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "server still running 10 s after SIGTERM"
rc=0; wait "$pid" || rc=$?; pid=""
[ $rc -eq 0 ] || fail "server exit status $rc after SIGTERM"
if grep -q 'ERROR: \(Address\|Leak\)Sanitizer\|runtime error:' "$dir/server.err"; then fail "sanitizer report"; fi

# ---- forced tool call (tool_choice): the server emits the DSML structure and the model samples
# the values; sending the call and its result back extends the live session (no rebuild) and the
# cached tokens cover the whole first turn. The tools block needs a larger context. ----
CTX=2048
start_server --api-key "$KEY"
tools='[{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}},{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}]'
q='[{"role":"user","content":"Weather in Paris?"}]'
req POST /v1/chat/completions "{\"messages\":$q,\"tools\":$tools,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},\"max_tokens\":400,\"think\":false}"
expect 200 "forced tool call"
pycheck '
c = d["choices"][0]; tc = c["message"]["tool_calls"]
assert c["finish_reason"] == "tool_calls" and len(tc) == 1 and tc[0]["function"]["name"] == "get_weather", c
a = json.loads(tc[0]["function"]["arguments"])
assert list(a) == ["city", "days"] and isinstance(a["city"], str) and isinstance(a["days"], int), a' "forced tool call shape"
python3 - "$dir/body" "$q" "$tools" >"$dir/follow.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
m = d["choices"][0]["message"]
msgs = json.loads(sys.argv[2]) + [
    {"role": "assistant", "content": None, "tool_calls": m["tool_calls"]},
    {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "{\"temp_c\":21}"}]
print(json.dumps({"messages": msgs, "tools": json.loads(sys.argv[3]), "max_tokens": 4, "think": False}))
PY
first=$(python3 -c "import json; u=json.load(open('$dir/body'))['usage']; print(u['prompt_tokens']+u['completion_tokens'])")
ext0=$(metric dsv4_prefix_extend_total); reb0=$(metric dsv4_prefix_rebuild_total)
req POST /v1/chat/completions "$(cat "$dir/follow.json")"; expect 200 "tool result follow-up"
ext1=$(metric dsv4_prefix_extend_total); reb1=$(metric dsv4_prefix_rebuild_total)
[ "$ext1" -eq $((ext0 + 1)) ] || fail "the tool result follow-up did not extend ($ext0 -> $ext1)"
[ "$reb1" = "$reb0" ] || fail "the tool result follow-up rebuilt ($reb0 -> $reb1)"
pycheck "assert d['usage']['prompt_tokens_details']['cached_tokens'] >= $first, d['usage']" "cached tokens cover the first turn ($first)"
# Anthropic, streamed, thinking on: "</think>" is forced first; a tool_use block with input deltas
req POST /v1/messages "{\"max_tokens\":400,\"stream\":true,\"messages\":$q,\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}],\"tool_choice\":{\"type\":\"any\"}}"
expect 200 "forced tool_use stream"
python3 - "$dir/body" <<'PY' || fail "forced tool_use stream: $(head -c 800 "$dir/body")"
import json, sys
evs = [json.loads(l[6:]) for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l.startswith("data: ")]
starts = [e["content_block"] for e in evs if e["type"] == "content_block_start"]
uses = [b for b in starts if b["type"] == "tool_use"]
assert len(uses) == 1 and uses[0]["name"] == "get_weather", starts
args = "".join(e["delta"]["partial_json"] for e in evs if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta")
assert list(json.loads(args)) == ["city"], args
assert [e["delta"]["stop_reason"] for e in evs if e["type"] == "message_delta"] == ["tool_use"]
PY
# a named function that is not among the tools is a 400 naming the field
req POST /v1/chat/completions "{\"messages\":$q,\"tools\":$tools,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}"
expect 400 "unknown forced function"; pycheck 'assert d["error"]["param"] == "tool_choice.function.name"' "unknown forced function param"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?; pid=""
[ $rc -eq 0 ] || fail "server exit status $rc after SIGTERM"
if grep -q 'ERROR: \(Address\|Leak\)Sanitizer\|runtime error:' "$dir/server.err"; then fail "sanitizer report"; fi
echo "ok"
