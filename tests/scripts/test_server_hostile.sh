#!/usr/bin/env bash
# dsv4-server under hostile input (tests/scripts/server_hostile.py): 300+ malformed requests
# (bad JSON, wrong field types, unknown roles, absurd sampling values, invalid UTF-8, deep
# nesting, prompts over the context, bodies over --max-body, unknown endpoints, wrong methods,
# wrong content types, bad auth with --api-key, malformed HTTP, truncated bodies, slowloris).
# Each must get a 4xx with a JSON error body in its API's shape, and the server must still serve
# afterwards. Runs the sanitizer build (build-san/dsv4-server, from `make SAN=1 programs`) when
# it is there and not older than $BUILD/dsv4-server, and fails on any sanitizer report.
set -euo pipefail
ulimit -c 0
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
. tests/scripts/server_lib.sh

gguf="$root/$BUILD/dsv4-gguf"
server="${DSV4_HOSTILE_SERVER:-}"
if [ -z "$server" ]; then
  server="$root/$BUILD/dsv4-server"
  san="$root/${SAN_BUILD:-build-san}/dsv4-server"
  if [ -x "$san" ] && { [ ! -x "$server" ] || [ ! "$san" -ot "$server" ]; }; then server="$san"; fi
fi
for b in "$server" "$gguf"; do
  [ -x "$b" ] || { echo "FAIL: missing $b (run make BUILD=$BUILD programs)"; exit 1; }
done
echo "server binary: $server"

dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-hostile-test.XXXXXX")"
cleanup() { srv_stop >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
"$gguf" synth --preset tiny --seed 3 "$dir/tiny.gguf" >/dev/null

key="hostile-test-key-0123456789"
ctx=512
max_body=$((1 << 20))
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
srv_start "$server" "$dir/server.log" -m "$dir/tiny.gguf" -c "$ctx" --api-key "$key" --max-body "$max_body" \
  --quiet || { echo "FAIL: server did not start"; exit 1; }

rc=0
timeout 600 /usr/bin/python3 tests/scripts/server_hostile.py --port "$SRV_PORT" --api-key "$key" \
  --max-body "$max_body" --ctx "$ctx" || rc=$?

if ! srv_alive; then echo "FAIL: the server died during the hostile run"; tail -n 40 "$dir/server.log"; exit 1; fi
srv_stop || true
if srv_san_report "$dir/server.log" >/dev/null; then
  echo "FAIL: sanitizer report in the server log:"; srv_san_report "$dir/server.log" | head -20
  grep -A 30 -m 1 -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$dir/server.log" | head -60
  exit 1
fi
[ $rc -eq 0 ] || { echo "FAIL: hostile requests were not all rejected cleanly (rc=$rc)"; exit 1; }
echo "PASS: hostile requests"
