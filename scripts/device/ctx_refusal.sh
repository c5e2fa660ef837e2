#!/usr/bin/env bash
# A context that does not fit in device memory is refused when the session is created, with the
# bytes needed and available (issue 4), never an out-of-memory failure mid-generation. On the GPU
# machine after `CUDA=1 scripts/device/pack.sh` here; tiny model, so it takes seconds.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH="$ROOT/.carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B="$ROOT/.carry/bin"; W=/dev/shm/dsv4-ctx; mkdir -p "$W"; fails=0
"$B/dsv4-gguf" synth --preset tiny --quant q2 "$W/tiny.gguf" >/dev/null || { echo "FAIL synth"; exit 1; }
for ctx in 4000000000 1000000000; do # the tiny model: ~194 bytes of KV per token, so 1e9 needs ~194 GB
  rc=0
  "$B/cuda/dsv4" -m "$W/tiny.gguf" --backend cuda --ctx $ctx -p "hello" -n 4 >"$W/out" 2>"$W/err" || rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -qE "bytes" "$W/err" && grep -qiE "free" "$W/err"; then
    echo "ok   --ctx $ctx refused at start (rc $rc): $(grep -m1 -E 'bytes' "$W/err" | cut -c1-220)"
  else
    echo "FAIL --ctx $ctx: rc $rc: $(tail -2 "$W/err")"; fails=$((fails+1))
  fi
done
rc=0; "$B/cuda/dsv4" -m "$W/tiny.gguf" --backend cuda --ctx 65536 -p "hello" -n 4 >"$W/out" 2>"$W/err" || rc=$?
[ $rc = 0 ] && echo "ok   --ctx 65536 runs" || { echo "FAIL --ctx 65536: $(tail -2 "$W/err")"; fails=$((fails+1)); }
echo "ctx_refusal: $fails failure(s)"
