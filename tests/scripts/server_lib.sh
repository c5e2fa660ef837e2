# Helpers shared by the server test scripts (sourced, not run): free loopback port, start the
# server in the background and wait for /health, stop it. All traffic stays on 127.0.0.1.
# Not named test_*.sh, so scripts/run-tests does not run it.

# A free TCP port on 127.0.0.1 (the kernel picks it; the race until the server binds is benign
# on a test machine).
srv_free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# srv_start BIN LOG ARGS... : starts BIN --host 127.0.0.1 --port $SRV_PORT ARGS in the background
# (stdout+stderr to LOG), sets SRV_PID and SRV_URL, waits up to 60 s for GET /health = 200.
srv_start() {
  local bin="$1" log="$2"
  shift 2
  SRV_PORT="$(srv_free_port)"
  SRV_URL="http://127.0.0.1:$SRV_PORT"
  "$bin" --host 127.0.0.1 --port "$SRV_PORT" "$@" >"$log" 2>&1 &
  SRV_PID=$!
  local i
  for i in $(seq 1 600); do
    if ! kill -0 "$SRV_PID" 2>/dev/null; then
      echo "server exited during startup:"; tail -n 30 "$log"; SRV_PID=""; return 1
    fi
    if [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$SRV_URL/health" 2>/dev/null)" = 200 ]; then
      return 0
    fi
    sleep 0.1
  done
  echo "server did not answer /health within 60 s:"; tail -n 30 "$log"
  srv_stop
  return 1
}

# Stops the server we started: SIGTERM, then SIGKILL after 10 s. Returns its exit status
# (143 = terminated by the SIGTERM).
srv_stop() {
  [ -n "${SRV_PID:-}" ] || return 0
  local pid="$SRV_PID" i rc=0
  SRV_PID=""
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "server $pid ignored SIGTERM for 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || rc=$?
  return $rc
}

srv_alive() { [ -n "${SRV_PID:-}" ] && kill -0 "$SRV_PID" 2>/dev/null; }

# Sanitizer findings in a server log (ASan, UBSan, LeakSanitizer).
srv_san_report() {
  grep -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|Undefined|Leak)Sanitizer' "$1"
}
