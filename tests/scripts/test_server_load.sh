#!/usr/bin/env bash
# dsv4-server under load (tests/scripts/server_load.py): two bursts of 32 concurrent clients
# against --queue 8 (each request completes or gets 429 + Retry-After), VmRSS bounded between
# bursts, and a client that disconnects mid-stream frees the worker within 1 s.
set -euo pipefail
ulimit -c 0
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
. tests/scripts/server_lib.sh

server="${DSV4_SERVER:-$root/$BUILD/dsv4-server}"
gguf="$root/$BUILD/dsv4-gguf"
for b in "$server" "$gguf"; do
  [ -x "$b" ] || { echo "FAIL: missing $b (run make BUILD=$BUILD programs)"; exit 1; }
done
dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-load-test.XXXXXX")"
cleanup() { srv_stop >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
"$gguf" synth --preset tiny --seed 3 "$dir/tiny.gguf" >/dev/null

srv_start "$server" "$dir/server.log" -m "$dir/tiny.gguf" -c 8192 --queue 8 --quiet ||
  { echo "FAIL: server did not start"; exit 1; }
rc=0
timeout 600 /usr/bin/python3 tests/scripts/server_load.py --port "$SRV_PORT" --pid "$SRV_PID" --clients 32 || rc=$?
if ! srv_alive; then echo "FAIL: the server died under load"; tail -n 40 "$dir/server.log"; exit 1; fi
srv_stop || true
[ $rc -eq 0 ] || { echo "FAIL: load test (rc=$rc); server log tail:"; tail -n 20 "$dir/server.log"; exit 1; }
echo "PASS: load"
