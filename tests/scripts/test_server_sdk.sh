#!/usr/bin/env bash
# dsv4-server against the official OpenAI and Anthropic SDKs (tests/sdk/*.test.mjs, node:test):
# synthesizes the tiny model, starts the server on a free loopback port, runs the SDK tests
# with the base URL in the environment, stops the server. Skips (exit 0) only when node or
# tests/sdk/node_modules is missing (scripts/setup installs them).
set -euo pipefail
ulimit -c 0
BUILD="${BUILD:-build}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
. tests/scripts/server_lib.sh

if ! command -v node >/dev/null 2>&1; then echo "SKIP: node is not installed"; exit 0; fi
if [ ! -d tests/sdk/node_modules/openai ] || [ ! -d tests/sdk/node_modules/@anthropic-ai/sdk ]; then
  echo "SKIP: tests/sdk/node_modules is missing (run scripts/setup)"; exit 0
fi
server="${DSV4_SERVER:-$root/$BUILD/dsv4-server}"
gguf="$root/$BUILD/dsv4-gguf"
cli="$root/$BUILD/dsv4"
for b in "$server" "$gguf" "$cli"; do
  [ -x "$b" ] || { echo "FAIL: missing $b (run make BUILD=$BUILD programs)"; exit 1; }
done

dir="$(mktemp -d "${TMPDIR:-/tmp}/dsv4-sdk-test.XXXXXX")"
cleanup() { srv_stop >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
"$gguf" synth --preset tiny --seed 3 "$dir/tiny.gguf" >/dev/null

srv_start "$server" "$dir/server.log" -m "$dir/tiny.gguf" || { echo "FAIL: server did not start"; exit 1; }
echo "server pid $SRV_PID at $SRV_URL"

rc=0
DSV4_BASE_URL="$SRV_URL" DSV4_CLI="$cli" DSV4_MODEL_PATH="$dir/tiny.gguf" \
  timeout 600 node --test --test-concurrency=1 --test-reporter=spec tests/sdk/ || rc=$?

if ! srv_alive; then echo "FAIL: the server died during the SDK tests"; tail -n 40 "$dir/server.log"; exit 1; fi
srv_stop || true
if srv_san_report "$dir/server.log" >/dev/null; then
  echo "FAIL: sanitizer report in the server log:"; srv_san_report "$dir/server.log" | head -20; exit 1
fi
if [ $rc -ne 0 ]; then
  echo "FAIL: SDK tests failed (rc=$rc); server log tail:"; tail -n 40 "$dir/server.log"; exit 1
fi
echo "PASS: SDK tests"
