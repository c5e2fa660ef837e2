#!/usr/bin/python3
"""Load and cancellation checks against a running dsv4-server (127.0.0.1 only, stdlib only).

1. Bursts of 32 concurrent clients (mixed APIs, streaming and not) against a server whose queue
   holds 8: every request either completes (200 with a complete body / stream) or gets 429 with
   Retry-After and a JSON error body; at least one completes per burst.
2. RSS (VmRSS of --pid) after a second burst is within --rss-growth-mb of the first (repeated
   load does not leak) and within --rss-total-mb of the warmed-up start.
3. A client that disconnects mid-stream frees the worker: after closing a long streaming request,
   a new short request's time to first byte exceeds the idle baseline by less than 1 s, and
   dsv4_requests_cancelled_total grows.

Usage: server_load.py --port P --pid PID [--clients 32] [--rss-growth-mb 32]
"""
import argparse
import json
import socket
import statistics
import sys
import threading
import time

HOST = "127.0.0.1"


def vmrss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def req_bytes(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    head = "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n" % (method, path, HOST)
    if body is not None:
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(data)
    if path.startswith("/v1/messages"):
        head += "anthropic-version: 2023-06-01\r\n"
    return (head + "\r\n").encode() + data


def read_all(sock, timeout):
    deadline = time.monotonic() + timeout
    out = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("reply not complete after %.0f s" % timeout)
        sock.settimeout(left)
        c = sock.recv(65536)
        if not c:
            return out
        out += c


def split_reply(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            out += rest[:size]
            rest = rest[size + 2:]
        body = out
    return status, headers, body


def one_request(port, kind, i):
    """Returns (status, problem or None)."""
    stream = i % 2 == 1
    if kind == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi %d" % i}],
                                             "max_tokens": 8, "reasoning_effort": "none", "stream": stream}
    elif kind == "messages":
        path, body = "/v1/messages", {"messages": [{"role": "user", "content": "Hi %d" % i}], "max_tokens": 8,
                                      "thinking": {"type": "disabled"}, "stream": stream}
    elif kind == "responses":
        path, body = "/v1/responses", {"input": "Hi %d" % i, "max_output_tokens": 8,
                                       "reasoning": {"effort": "none"}, "stream": stream}
    else:
        path, body = "/v1/completions", {"prompt": "Hi %d" % i, "max_tokens": 8, "stream": stream}
    s = socket.create_connection((HOST, port), timeout=10)
    try:
        s.sendall(req_bytes("POST", path, body))
        raw = read_all(s, 120)
    finally:
        s.close()
    status, headers, data = split_reply(raw)
    if status == 429:
        if "retry-after" not in headers:
            return status, "429 without Retry-After"
        try:
            j = json.loads(data)
            assert isinstance(j.get("error"), dict)
        except Exception:  # noqa: BLE001
            return status, "429 without a JSON error body: %r" % data[:120]
        return status, None
    if status != 200:
        return status, "status %d: %r" % (status, data[:200])
    text = data.decode("utf-8", "replace")
    if not stream:
        try:
            j = json.loads(data)
        except Exception:  # noqa: BLE001
            return status, "200 with a non-JSON body: %r" % data[:120]
        ok = ("choices" in j) if kind in ("chat", "completions") else ("content" in j if kind == "messages"
                                                                       else "output" in j)
        return status, None if ok else "200 body lacks its result: %r" % data[:160]
    end = {"chat": "data: [DONE]", "completions": "data: [DONE]", "messages": "event: message_stop",
           "responses": "response.completed"}[kind]
    if end not in text and not (kind == "responses" and "response.incomplete" in text):
        return status, "stream did not finish (no %r): ...%r" % (end, text[-200:])
    return status, None


def burst(port, clients):
    kinds = ["chat", "messages", "responses", "completions"]
    results = [None] * clients
    start = threading.Barrier(clients)

    def worker(i):
        try:
            start.wait(timeout=30)
            results[i] = one_request(port, kinds[i % 4], i)
        except Exception as ex:  # noqa: BLE001
            results[i] = (None, "exception: %s" % ex)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    problems = [("client %d: %s" % (i, r[1])) for i, r in enumerate(results) if r is None or r[1]]
    if any(t.is_alive() for t in threads):
        problems.append("a client did not finish within 180 s")
    ok = sum(1 for r in results if r and r[0] == 200 and not r[1])
    busy = sum(1 for r in results if r and r[0] == 429 and not r[1])
    return ok, busy, problems


def metric(port, name):
    s = socket.create_connection((HOST, port), timeout=10)
    try:
        s.sendall(req_bytes("GET", "/metrics"))
        status, _, body = split_reply(read_all(s, 10))
    finally:
        s.close()
    if status != 200:
        return None
    total, found = 0.0, False
    for ln in body.decode().splitlines():
        if ln.startswith(name + " ") or ln.startswith(name + "{"):
            total += float(ln.rsplit(" ", 1)[1])
            found = True
    return total if found else None


def ttfb(port, body, path="/v1/chat/completions"):
    """Seconds until the first byte of the reply. The request is not streamed, so its first byte
    comes only after the worker has generated the whole (short) reply."""
    s = socket.create_connection((HOST, port), timeout=30)
    try:
        t0 = time.monotonic()
        s.sendall(req_bytes("POST", path, body))
        s.settimeout(30)
        first = s.recv(1)
        if not first:
            raise RuntimeError("closed without a reply")
        dt = time.monotonic() - t0
        status, _, data = split_reply(first + read_all(s, 60))
        if status != 200:
            raise RuntimeError("short request got %d: %r" % (status, data[:200]))
        return dt
    finally:
        s.close()


def disconnect_check(port, failures):
    short = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "reasoning_effort": "none"}
    base = statistics.median(ttfb(port, short) for _ in range(3))
    for seed in range(1, 6):
        long_req = {"messages": [{"role": "user", "content": "Tell me a long story"}], "max_tokens": 1000000,
                    "temperature": 1.0, "seed": seed, "reasoning_effort": "none", "stream": True}
        cancelled0 = metric(port, "dsv4_requests_cancelled_total")
        s = socket.create_connection((HOST, port), timeout=30)
        s.sendall(req_bytes("POST", "/v1/chat/completions", long_req))
        buf = b""
        s.settimeout(30)
        while buf.count(b"data:") < 2:
            c = s.recv(65536)
            if not c:
                break
            buf += c
        # it must still be generating a second later, or this request is not long enough
        t_end = time.monotonic() + 1.0
        ended = b"[DONE]" in buf
        while not ended and time.monotonic() < t_end:
            s.settimeout(max(0.05, t_end - time.monotonic()))
            try:
                c = s.recv(65536)
            except socket.timeout:
                continue
            if not c:
                ended = True
            buf += c
            ended = ended or b"[DONE]" in buf
        if ended:
            s.close()
            continue
        s.close()  # the client goes away mid-stream
        t = ttfb(port, short)
        if t - base >= 1.0:
            failures.append("disconnect: new request's first byte took %.2f s after the disconnect (idle %.2f s)"
                            % (t, base))
        cancelled1 = metric(port, "dsv4_requests_cancelled_total")
        if cancelled0 is None or cancelled1 is None:
            failures.append("disconnect: dsv4_requests_cancelled_total missing from /metrics")
        elif cancelled1 <= cancelled0:
            failures.append("disconnect: dsv4_requests_cancelled_total did not grow (%s -> %s)"
                            % (cancelled0, cancelled1))
        print("disconnect: idle TTFB %.3f s, after disconnect %.3f s" % (base, t))
        return
    failures.append("disconnect: no seed gave a stream longer than 1 s; cannot test cancellation")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--rss-growth-mb", type=float, default=32)
    ap.add_argument("--rss-total-mb", type=float, default=128)
    args = ap.parse_args()
    failures = []
    one_request(args.port, "chat", 0)  # warm up
    rss0 = vmrss_kb(args.pid)
    totals = []
    for b in range(2):
        ok, busy, problems = burst(args.port, args.clients)
        failures += ["burst %d: %s" % (b, p) for p in problems]
        if ok == 0:
            failures.append("burst %d: no request completed" % b)
        totals.append(vmrss_kb(args.pid))
        print("burst %d: %d completed, %d got 429, %d problems; VmRSS %d kB" % (b, ok, busy, len(problems),
                                                                                totals[-1]))
    if (totals[1] - rss0) / 1024.0 > args.rss_total_mb:
        failures.append("VmRSS grew by %.1f MB over two bursts (%d kB -> %d kB)" % (
            (totals[1] - rss0) / 1024.0, rss0, totals[1]))
    growth_mb = (totals[1] - totals[0]) / 1024.0
    if growth_mb > args.rss_growth_mb:
        failures.append("VmRSS grew by %.1f MB between two identical bursts (start %d kB, %d kB, %d kB)"
                        % (growth_mb, rss0, totals[0], totals[1]))
    disconnect_check(args.port, failures)
    for f in failures:
        print("FAIL:", f)
    print("load: %d failures" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
