#!/usr/bin/python3
"""Hostile and malformed requests against a running dsv4-server (127.0.0.1 only, stdlib only).

Every case is sent on its own raw socket, so headers, lengths and bytes are exactly what the
case says. A case passes when the reply has the expected status class (4xx, or the listed codes)
and, where the server owns the reply, a JSON error body in the API's shape:
  OpenAI:    {"error": {"message": str, "type": str, ...}}
  Anthropic: {"type": "error", "error": {"type": str, "message": str}}
Protocol-level garbage may instead be answered by closing the connection (marked close_ok).
Afterwards /health must still answer 200 and a valid request must still succeed.

Usage: server_hostile.py --port P [--api-key K] [--max-body BYTES] [--ctx TOKENS]
Prints one line per failure and a summary; exit status 1 on any failure.
"""
import argparse
import json
import socket
import sys
import threading
import time

HOST = "127.0.0.1"
TIMEOUT = 20.0


class Reply:
    def __init__(self, status, headers, body, closed_without_reply=False):
        self.status = status
        self.headers = headers
        self.body = body
        self.closed = closed_without_reply


def recv_reply(sock, deadline):
    """Reads one HTTP/1.1 reply (Content-Length, chunked, or until close)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            if not buf:
                return Reply(None, {}, b"", closed_without_reply=True)
            raise ValueError("connection closed inside the reply headers: %r" % buf[:200])
        buf += chunk
        if len(buf) > 1 << 20:
            raise ValueError("reply headers over 1 MiB")
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ValueError("bad status line %r" % lines[0])
    status = int(parts[1])
    headers = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            headers[k.strip().lower()] = v.strip()

    def more():
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            return sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return b""

    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(rest) < n:
            c = more()
            if not c:
                break
            rest += c
        body = rest[:n]
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            while b"\r\n" not in rest:
                c = more()
                if not c:
                    return Reply(status, headers, body)
                rest += c
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            while len(rest) < size + 2:
                c = more()
                if not c:
                    break
                rest += c
            body += rest[:size]
            rest = rest[size + 2:]
    else:
        body = rest
        while True:
            c = more()
            if not c:
                break
            body += c
    return Reply(status, headers, body)


def send_raw(port, data, *, pause_after=None, shut_wr=False, timeout=TIMEOUT):
    """Sends data (bytes, or a list of pieces sent with pause_after seconds between) and reads the
    reply. Send errors (the server closing early, e.g. after a 413) are not failures by themselves."""
    deadline = time.monotonic() + timeout
    s = socket.create_connection((HOST, port), timeout=timeout)
    try:
        pieces = data if isinstance(data, list) else [data]
        for i, p in enumerate(pieces):
            try:
                s.sendall(p)
            except (BrokenPipeError, ConnectionResetError):
                break
            if pause_after and i + 1 < len(pieces):
                time.sleep(pause_after)
        if shut_wr:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        return recv_reply(s, deadline)
    finally:
        s.close()


def request_bytes(method, path, body=b"", headers=None, content_type="application/json", auth=None,
                  content_length=None):
    h = {"Host": "%s" % HOST, "Connection": "close"}
    if content_type is not None:
        h["Content-Type"] = content_type
    if auth:
        h.update(auth)
    if headers:
        h.update(headers)
    if isinstance(body, str):
        body = body.encode("utf-8")
    if body or method in ("POST", "PUT", "PATCH") or content_length is not None:
        h["Content-Length"] = str(len(body) if content_length is None else content_length)
    lines = ["%s %s HTTP/1.1" % (method, path)] + ["%s: %s" % kv for kv in h.items() if kv[1] is not None]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def shape_ok(api, body):
    try:
        j = json.loads(body)
    except Exception:
        return False, "body is not JSON: %r" % body[:120]
    if not isinstance(j, dict):
        return False, "body is not an object"
    if api in ("anthropic", "any") and j.get("type") == "error":
        e = j.get("error")
        if isinstance(e, dict) and isinstance(e.get("type"), str) and isinstance(e.get("message"), str):
            return True, ""
        return False, "Anthropic error without error.type/message: %r" % body[:160]
    if api in ("openai", "any"):
        e = j.get("error")
        if isinstance(e, dict) and isinstance(e.get("message"), str) and isinstance(e.get("type"), str) \
                and "type" not in j:
            return True, ""
    return False, "not a %s error body: %r" % (api, body[:160])


class Suite:
    def __init__(self, port, api_key):
        self.port = port
        self.api_key = api_key
        self.n = 0
        self.failures = []
        self.statuses = {}

    def auth_for(self, path):
        if not self.api_key:
            return None
        if path.startswith("/v1/messages"):
            return {"x-api-key": self.api_key, "anthropic-version": "2023-06-01"}
        return {"Authorization": "Bearer %s" % self.api_key}

    def check(self, name, data, api, expect=None, close_ok=False, json_body=True, **kw):
        """expect: set of allowed statuses (default: any 4xx)."""
        self.n += 1
        try:
            r = send_raw(self.port, data, **kw)
        except Exception as ex:  # noqa: BLE001 - a hostile case must not break the run
            self.failures.append("%s: no valid reply (%s)" % (name, ex))
            return None
        if r.closed:
            self.statuses["closed"] = self.statuses.get("closed", 0) + 1
            if not close_ok:
                self.failures.append("%s: connection closed without a reply" % name)
            return r
        self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
        ok_status = (r.status in expect) if expect else (400 <= r.status < 500)
        if not ok_status:
            self.failures.append("%s: status %s, want %s; body %r" % (
                name, r.status, sorted(expect) if expect else "4xx", r.body[:200]))
            return r
        if r.status == 429 and "retry-after" not in r.headers:
            self.failures.append("%s: 429 without Retry-After" % name)
        if json_body:
            ok, why = shape_ok(api, r.body)
            if not ok:
                self.failures.append("%s: %s %s" % (name, r.status, why))
        return r

    def post(self, name, path, body, expect=None, api=None, content_type="application/json", auth="default",
             **kw):
        api = api or ("anthropic" if path.startswith("/v1/messages") else "openai")
        a = self.auth_for(path) if auth == "default" else auth
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        return self.check(name, request_bytes("POST", path, body, content_type=content_type, auth=a), api,
                          expect, **kw)


CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
RESP = "/v1/responses"
MSGS = "/v1/messages"


def valid(path):
    if path == CHAT:
        return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    if path == COMP:
        return {"prompt": "hi", "max_tokens": 2}
    if path == RESP:
        return {"input": "hi", "max_output_tokens": 2}
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def with_field(path, key, value):
    b = valid(path)
    b[key] = value
    return b


def run(args):
    s = Suite(args.port, args.api_key)
    eps = [CHAT, COMP, RESP, MSGS]

    # --- bodies that are not JSON, or not an object ---
    bad_json = ["", "{", "[", "}", "null", "42", "\"str\"", "true", "[]", "{\"model\":}", "{'a':1}", "{} x",
                "{\"a\":1,}", "{\"temperature\": NaN}", "{\"max_tokens\": Infinity}", "\ufeff{}",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"messages\":[]}"]
    for ep in eps:
        for i, b in enumerate(bad_json):
            s.post("bad json %d on %s" % (i, ep), ep, b, expect={400})

    # --- wrong types for every field ---
    wrong = {
        CHAT: {"model": [1, [], {}], "messages": ["hi", {}, 5, [1], [[]], [{"role": 1, "content": "x"}],
                                                   [{"role": "user", "content": 5}],
                                                   [{"role": "user", "content": [{"type": "image_url"}]}],
                                                   [{"role": "user", "content": [{"text": "no type"}]}],
                                                   [{"role": "user"}, 7]],
               "temperature": ["hot", True, [], {}], "top_p": ["x", False], "top_k": [1.5, "x", []],
               "min_p": ["x", {}], "seed": ["x", 1.5], "max_tokens": ["x", 1.5, True],
               "max_completion_tokens": ["x"], "stream": ["yes", 1, {}],
               "stream_options": [1, "x", {"include_usage": "x"}], "stop": [1, [1], {}, [None]],
               "tools": ["x", [1], [{"type": "function"}], [{"type": "function", "function": {"name": 5}}],
                         [{"type": "retrieval"}], [{"type": "function", "function": {"name": "f", "parameters": 5}}]],
               "tool_choice": [5, "bogus", [], {}, "required", {"type": "function", "function": {"name": "nope"}},
                               {"type": "function", "function": {"name": 5}}], "reasoning_effort": ["ultra", 5], "n": [2, 0, "x"],
               "think": ["x", 1]},
        COMP: {"prompt": [5, [1, 2], [], {}, ["a", "b"], True], "max_tokens": ["x", -1], "temperature": ["x"],
               "stream": ["x"], "echo": ["x"], "stop": [5], "seed": [[]], "top_p": [{}]},
        RESP: {"input": [5, {}, True, [5], [{"role": "wizard", "content": "x"}],
                         [{"type": "function_call_output"}], [{"type": "unknown_item"}]],
               "instructions": [5, []], "max_output_tokens": ["x", -5, 0], "reasoning": ["x", {"effort": "ultra"}],
               "tools": ["x", [5], [{"type": "function", "name": 5}]], "temperature": ["x"], "stream": ["x"],
               "tool_choice": [5, "required", {"type": "function"}, {"type": "function", "name": "nope"}]},
        MSGS: {"max_tokens": ["many", -1, 0, 1.5, None], "system": [5, {}, [5], [{"type": "image"}]],
               "messages": ["x", {}, [5], [{"role": "user", "content": 5}],
                            [{"role": "user", "content": [{"type": "video"}]}],
                            [{"role": "user", "content": [{"type": "tool_result"}]}],
                            [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": 5}]}]],
               "thinking": ["x", {"type": "maybe"}, {"type": "enabled", "budget_tokens": "x"}],
               "stop_sequences": [5, [5]], "tools": ["x", [5], [{"name": 5}], [{"name": "f", "input_schema": 5}]],
               "temperature": ["x", -1], "top_k": ["x"], "stream": ["x"],
               "tool_choice": ["any", {"type": "any"}, {"type": "tool"}, {"type": "tool", "name": "nope"}]},
    }
    for ep, fields in wrong.items():
        for key, values in fields.items():
            for i, v in enumerate(values):
                s.post("wrong type %s=%s on %s" % (key, json.dumps(v)[:40], ep), ep, with_field(ep, key, v),
                       expect={400})
    # a required field missing
    s.post("chat without messages", CHAT, {"max_tokens": 2}, expect={400})
    s.post("completions without prompt", COMP, {"max_tokens": 2}, expect={400})
    s.post("responses without input", RESP, {"max_output_tokens": 2}, expect={400})
    s.post("messages without max_tokens", MSGS, {"messages": [{"role": "user", "content": "x"}]}, expect={400})
    s.post("messages without messages", MSGS, {"max_tokens": 2}, expect={400})
    s.post("chat with empty messages", CHAT, {"messages": []}, expect={400})

    # --- unknown roles ---
    for role in ["wizard", "", "SYSTEM", "User", "tool_result", "ai", None]:
        s.post("chat role %r" % role, CHAT, {"messages": [{"role": role, "content": "x"}]}, expect={400})
        s.post("messages role %r" % role, MSGS, {"max_tokens": 2, "messages": [{"role": role, "content": "x"}]},
               expect={400})
    s.post("messages system role in list", MSGS, {"max_tokens": 2, "messages": [{"role": "system", "content": "x"}]},
           expect={400})

    # --- tool-call history that cannot be rendered ---
    bad_calls = [
        {"role": "assistant", "tool_calls": "x"},
        {"role": "assistant", "tool_calls": [5]},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f",
                                                                                            "arguments": "{not json"}}]},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f",
                                                                                            "arguments": "[1,2]"}}]},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "",
                                                                                            "arguments": "{}"}}]},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f",
                                                                                            "arguments": 5}}]},
    ]
    for i, m in enumerate(bad_calls):
        s.post("bad tool call %d" % i, CHAT, {"messages": [{"role": "user", "content": "x"}, m]}, expect={400})

    # --- absurd sampling / length values ---
    absurd = {"temperature": [-1, 2.5, 1e308, -1e-9], "top_p": [-0.1, 1.5, 1e9], "top_k": [-1, 1e12, 2 ** 63],
              "min_p": [-1, 2], "max_tokens": [-1, 0, 2 ** 63, 1e30, -2 ** 63, 2 ** 64]}
    for key, values in absurd.items():
        for v in values:
            for ep in (CHAT, MSGS):
                k = key
                if ep == MSGS and key == "max_tokens" and v == 0:
                    continue  # Anthropic itself accepts no max_tokens=0? keep it out of the contract
                s.post("absurd %s=%r on %s" % (k, v, ep), ep, with_field(ep, k, v), expect={400})
    s.post("absurd max_output_tokens", RESP, with_field(RESP, "max_output_tokens", 2 ** 62), expect={400})
    s.post("too many stop strings", CHAT, with_field(CHAT, "stop", ["s%d" % i for i in range(100)]), expect={400})
    s.post("stop string too long", CHAT, with_field(CHAT, "stop", ["x" * 5000]), expect={400})

    # --- invalid UTF-8 and bad escapes inside JSON strings ---
    for i, raw in enumerate([b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"a\x80b",
                             b"\xe2\x82"]):
        body = b'{"messages":[{"role":"user","content":"' + raw + b'"}],"max_tokens":2}'
        s.post("invalid utf-8 %d on chat" % i, CHAT, body, expect={400})
        body = b'{"max_tokens":2,"messages":[{"role":"user","content":"' + raw + b'"}]}'
        s.post("invalid utf-8 %d on messages" % i, MSGS, body, expect={400})
    for esc in ["\\ud800", "\\udc00x", "\\u12", "\\x41", "\\"]:
        s.post("bad escape %s" % esc, CHAT,
               '{"messages":[{"role":"user","content":"%s"}],"max_tokens":2}' % esc, expect={400})
    s.post("NUL in content", CHAT, '{"messages":[{"role":"user","content":"a\\u0000b"}],"max_tokens":2}',
           expect={400})

    # --- deep nesting ---
    for depth in (100, 10000, 200000):  # the deepest bodies may also exceed --max-body (413)
        s.post("nested arrays %d" % depth, CHAT, '{"messages":' + "[" * depth + "]" * depth + "}", expect={400, 413})
        s.post("nested objects %d" % depth, MSGS,
               '{"max_tokens":2,"x":' + '{"a":' * depth + "1" + "}" * depth + "}", expect={400, 413})

    # --- prompts over the context ---
    long_text = "word " * (args.ctx * 2 + 100)
    r = s.post("chat prompt over the context", CHAT, {"messages": [{"role": "user", "content": long_text}]},
               expect={400})
    if r is not None and r.status == 400:
        try:
            e = json.loads(r.body)["error"]
            if e.get("code") != "context_length_exceeded":
                s.failures.append("over-context chat: code %r, want context_length_exceeded" % e.get("code"))
        except Exception as ex:  # noqa: BLE001
            s.failures.append("over-context chat: %s" % ex)
    s.post("completions prompt over the context", COMP, {"prompt": long_text}, expect={400})
    s.post("responses prompt over the context", RESP, {"input": long_text}, expect={400})
    s.post("messages prompt over the context", MSGS,
           {"max_tokens": 2, "messages": [{"role": "user", "content": long_text}]}, expect={400})

    # --- bodies over the limit ---
    big = b'{"prompt":"' + b"a" * (args.max_body + 1024) + b'"}'
    s.post("body over the limit", COMP, big, expect={413, 400}, close_ok=True)
    s.post("body over the limit (messages)", MSGS, b'{"max_tokens":2,"x":"' + b"b" * (args.max_body + 16) + b'"}',
           expect={413, 400}, close_ok=True)
    s.check("content-length over the limit, no body sent",
            request_bytes("POST", CHAT, b"", auth=s.auth_for(CHAT), content_length=args.max_body * 4),
            "openai", {413, 400}, close_ok=True)
    s.check("content-length 2^63", request_bytes("POST", CHAT, b"", auth=s.auth_for(CHAT),
                                                 content_length=2 ** 63), "openai", {413, 400}, close_ok=True,
            json_body=False)

    # --- unknown endpoints ---
    for path in ["/", "/v1", "/v1/nope", "/v2/chat/completions", "/v1/chat/completions/x", "/v1/chat",
                 "/v1/models/x/y", "/../../etc/passwd", "/v1/%00", "/" + "a" * 8000, "/v1/embeddings",
                 "/v1/images/generations", "/v1/messages/count_tokens/x", "/metrics/x", "/health/x"]:
        s.check("unknown endpoint %s" % path[:40], request_bytes("GET", path, auth=s.auth_for(path)), "any",
                {404, 414, 400, 431}, json_body=not path.startswith("/" + "a" * 100))
        s.check("unknown endpoint POST %s" % path[:40], request_bytes("POST", path, b"{}", auth=s.auth_for(path)),
                "any", {404, 405, 414, 400, 431}, json_body=not path.startswith("/" + "a" * 100))

    # --- wrong methods ---
    for path in eps:
        for m in ["GET", "PUT", "DELETE", "PATCH"]:
            s.check("%s %s" % (m, path), request_bytes(m, path, b"{}" if m != "GET" else b"",
                                                       auth=s.auth_for(path)), "any", {405, 404})
    for path in ["/v1/models", "/health", "/metrics"]:
        s.check("POST %s" % path, request_bytes("POST", path, b"{}", auth=s.auth_for(path)), "any", {405, 404})

    # --- content type ---
    for ct in [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]:
        s.post("content-type %r with a valid body" % ct, CHAT, valid(CHAT), content_type=ct, expect={415, 400})

    # --- authentication (only with --api-key) ---
    if args.api_key:
        bad_auths = [None, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic dXNlcjpwYXNz"},
                     {"Authorization": "Bearer "}, {"Authorization": args.api_key},
                     {"Authorization": "Bearer %s " % args.api_key + "x"},
                     {"Authorization": "Bearer " + args.api_key[:-1]}]
        for ep in eps:
            for i, a in enumerate(bad_auths):
                s.post("bad auth %d on %s" % (i, ep), ep, valid(ep), auth=a, expect={401})
        s.post("anthropic wrong x-api-key", MSGS, valid(MSGS), auth={"x-api-key": "nope"}, expect={401})
        s.check("models without auth", request_bytes("GET", "/v1/models"), "openai", {401})
        s.check("model retrieve without auth", request_bytes("GET", "/v1/models/x"), "openai", {401})

    # --- malformed HTTP (the library may answer or just close) ---
    garbage = [b"GARBAGE\r\n\r\n", b"POST\r\n\r\n", b"POST /v1/chat/completions\r\n\r\n",
               b"POST /v1/chat/completions HTTP/9.9\r\nHost: x\r\n\r\n",
               b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
               b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
               b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n{}",
               b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 9\r\n\r\n{}",
               b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
               b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: " + b"h" * 100000 + b"\r\n\r\n",
               b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + b"".join(
                   b"X-H%d: v\r\n" % i for i in range(5000)) + b"\r\n",
               b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64]
    for i, g in enumerate(garbage):
        # an unknown HTTP version may be answered 505 by the HTTP library
        s.check("malformed HTTP %d" % i, g, "any", set(range(400, 500)) | {505}, close_ok=True, json_body=False,
                shut_wr=True)

    # --- truncated bodies ---
    s.post("truncated JSON", CHAT, '{"messages":[{"role":"user","content":"hi"}', expect={400})
    a = s.auth_for(CHAT)
    full = request_bytes("POST", CHAT, b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}', auth=a)
    head_len = full.index(b"\r\n\r\n") + 4
    s.check("body shorter than Content-Length, then half-close", full[:head_len + 20], "openai", None,
            close_ok=True, shut_wr=True)
    s.check("headers cut, then half-close", full[:head_len - 10], "openai", None, close_ok=True, json_body=False,
            shut_wr=True)

    # --- slowloris: partial headers held open must not block others, and are dropped in time ---
    slow_socks = []
    for i in range(16):
        so = socket.create_connection((HOST, args.port), timeout=5)
        so.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        slow_socks.append(so)
    stop = threading.Event()

    def drip():
        k = 0
        while not stop.is_set() and k < args.slow_seconds:
            for so in slow_socks:
                try:
                    so.sendall(b"X-Slow-%d: 1\r\n" % k)
                except OSError:
                    pass
            k += 1
            stop.wait(1.0)

    th = threading.Thread(target=drip, daemon=True)
    th.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    try:
        r = send_raw(args.port, request_bytes("GET", "/health", content_type=None), timeout=5)
        dt = time.monotonic() - t0
        if r.status != 200 or dt > 2.0:
            s.failures.append("slowloris: /health got %s after %.2f s while 16 slow clients held connections" % (
                r.status, dt))
    except Exception as ex:  # noqa: BLE001
        s.failures.append("slowloris: /health failed while slow clients held connections: %s" % ex)
    s.n += 1
    # a client that stops sending entirely must be dropped within the server's IO timeout
    idle = socket.create_connection((HOST, args.port), timeout=5)
    auth = "".join("%s: %s\r\n" % kv for kv in (s.auth_for(CHAT) or {}).items()).encode()
    idle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + auth +
                 b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
    t0 = time.monotonic()
    idle.settimeout(args.idle_timeout)
    try:
        data = idle.recv(65536)
        dt = time.monotonic() - t0
        print("stalled body: %s after %.1f s" % ("reply %r" % data[:40] if data else "closed", dt))
        if data and not data.startswith(b"HTTP/1.1 4") and not data.startswith(b"HTTP/1.0 4"):
            s.failures.append("stalled body: reply %r, want 4xx or close" % data[:60])
    except socket.timeout:
        s.failures.append("stalled body: connection still open after %.0f s" % args.idle_timeout)
    except OSError:
        pass
    idle.close()
    s.n += 1
    stop.set()
    th.join(timeout=5)
    for so in slow_socks:
        so.close()

    # --- still alive and still serving ---
    try:
        r = send_raw(args.port, request_bytes("GET", "/health", content_type=None), timeout=10)
        if r.status != 200:
            s.failures.append("after the hostile run /health answers %s" % r.status)
    except Exception as ex:  # noqa: BLE001
        s.failures.append("after the hostile run /health fails: %s" % ex)
    body = json.dumps(valid(CHAT)).encode()
    try:
        r = send_raw(args.port, request_bytes("POST", CHAT, body, auth=s.auth_for(CHAT)), timeout=60)
        if r.status != 200:
            s.failures.append("after the hostile run a valid chat request gets %s: %r" % (r.status, r.body[:200]))
    except Exception as ex:  # noqa: BLE001
        s.failures.append("after the hostile run a valid chat request fails: %s" % ex)

    for f in s.failures:
        print("FAIL:", f)
    print("hostile: %d requests, %d failures; statuses: %s" % (
        s.n, len(s.failures), ", ".join("%s=%d" % kv for kv in sorted(s.statuses.items(), key=str))))
    return 1 if s.failures or s.n < 200 else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--max-body", type=int, default=8 << 20)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--slow-seconds", type=int, default=6)
    ap.add_argument("--idle-timeout", type=float, default=30.0)
    args = ap.parse_args()
    sys.exit(run(args))


if __name__ == "__main__":
    main()
