#!/usr/bin/env python3
"""Small stdlib-only HTTP helper for scripts/real-servers.sh (no curl needed).

  http_probe.py wait URL TIMEOUT_S [PID]
      Poll GET URL until it answers 200. Exit 0 when it does; 1 on timeout;
      2 as soon as PID (if given) is no longer alive.

  http_probe.py port-free HOST PORT
      Exit 0 if nothing accepts TCP connections on HOST:PORT, else 1.

  http_probe.py stream BASE_URL MODEL [MAX_TOKENS]
      POST BASE_URL/chat/completions with stream=true and
      stream_options.include_usage=true, and print a one-line JSON summary of
      what came back on the wire: status, interesting headers, time to headers,
      the first SSE event, the delta keys seen (e.g. reasoning_content), whether
      usage and [DONE] arrived, malformed events, and how the stream ended.
"""

import json
import os
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def cmd_wait(url, timeout_s, pid=None):
    deadline = time.monotonic() + float(timeout_s)
    last = "no answer yet"
    while time.monotonic() < deadline:
        if pid is not None and not pid_alive(pid):
            print(f"process {pid} exited (last health answer: {last})", file=sys.stderr)
            return 2
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return 0
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code}"
        except (urllib.error.URLError, OSError) as e:
            last = str(getattr(e, "reason", e))
        time.sleep(0.25)
    print(f"timed out after {timeout_s}s (last health answer: {last})", file=sys.stderr)
    return 1


def cmd_port_free(host, port):
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return 1
    except OSError:
        return 0


INTERESTING_HEADERS = ("content-type", "retry-after", "retry-after-ms")


class _Wire:
    """Minimal HTTP/1.1 client over a raw socket, so that a clean end of a
    chunked body (the zero-size chunk) can be told from a dropped connection,
    which http.client hides."""

    def __init__(self, host, port, timeout):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.f = self.sock.makefile("rb")

    def request(self, path, host, body):
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        self.sock.sendall(head.encode() + body)
        status_line = self.f.readline().decode("latin-1")
        if not status_line:
            raise ConnectionError("connection closed before the status line")
        status = int(status_line.split()[1])
        headers = {}
        while True:
            line = self.f.readline().decode("latin-1").strip()
            if not line:
                break
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return status, headers

    def body_lines(self, headers):
        """Yield body lines; finally yield ("END", how) with how in
        clean | closed-mid-body."""
        if "chunked" in headers.get("transfer-encoding", ""):
            pending = b""
            while True:
                size_line = self.f.readline()
                if not size_line.strip():
                    yield ("END", "closed-mid-body")
                    return
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    if pending:
                        yield pending
                    yield ("END", "clean")
                    return
                data = self.f.read(size)
                self.f.readline()
                if len(data) < size:
                    yield ("END", "closed-mid-body")
                    return
                pending += data
                *lines, pending = pending.split(b"\n")
                for ln in lines:
                    yield ln
        else:
            length = headers.get("content-length")
            got = 0
            while True:
                ln = self.f.readline()
                if not ln:
                    break
                got += len(ln)
                yield ln.rstrip(b"\n")
            if length is not None and got < int(length):
                yield ("END", "closed-mid-body")
            else:
                yield ("END", "clean")

    def close(self):
        try:
            self.f.close()
            self.sock.close()
        except OSError:
            pass


def cmd_stream(base_url, model, max_tokens=32):
    u = urllib.parse.urlparse(base_url.rstrip("/") + "/chat/completions")
    body = json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": int(max_tokens),
        "temperature": 0.0,
    }).encode()
    out = {"model": model}
    t0 = time.monotonic()
    wire = None
    try:
        wire = _Wire(u.hostname, u.port or 80, timeout=30)
        status, hdrs = wire.request(u.path, u.netloc, body)
        out["status"] = status
        out["headers_ms"] = round((time.monotonic() - t0) * 1000)
        out["headers"] = {k: v for k, v in hdrs.items()
                          if k in INTERESTING_HEADERS or k.startswith("x-ratelimit")}
        is_sse = hdrs.get("content-type", "").startswith("text/event-stream")
        events, delta_keys, malformed = 0, set(), 0
        first_event_ms = first_content_ms = None
        usage = None
        done = finish = False
        text = []
        for line in wire.body_lines(hdrs):
            if isinstance(line, tuple):
                out["end"] = line[1]
                break
            if not is_sse:
                text.append(line.decode("utf-8", "replace"))
                continue
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            now_ms = round((time.monotonic() - t0) * 1000)
            if data == b"[DONE]":
                done = True
                continue
            events += 1
            if first_event_ms is None:
                first_event_ms = now_ms
                out["first_event"] = data.decode("utf-8", "replace")[:300]
            try:
                ev = json.loads(data)
            except ValueError:
                malformed += 1
                continue
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                d = ch.get("delta") or {}
                delta_keys.update(k for k, v in d.items() if v not in (None, ""))
                if d.get("content") and first_content_ms is None:
                    first_content_ms = now_ms
                if ch.get("finish_reason"):
                    finish = True
        if not is_sse:
            out["body"] = "\n".join(text)[:400]
            return out
        out.update({
            "first_event_ms": first_event_ms,
            "first_content_ms": first_content_ms,
            "total_ms": round((time.monotonic() - t0) * 1000),
            "events": events,
            "delta_keys": sorted(delta_keys),
            "finish_reason_seen": finish,
            "usage": usage,
            "done": done,
            "malformed_events": malformed,
        })
        return out
    except (OSError, ValueError, IndexError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
        out["total_ms"] = round((time.monotonic() - t0) * 1000)
        return out
    finally:
        if wire is not None:
            wire.close()


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 64
    cmd, args = argv[1], argv[2:]
    if cmd == "wait" and len(args) in (2, 3):
        return cmd_wait(args[0], args[1], int(args[2]) if len(args) == 3 else None)
    if cmd == "port-free" and len(args) == 2:
        return cmd_port_free(*args)
    if cmd == "stream" and len(args) in (2, 3):
        print(json.dumps(cmd_stream(*args)))
        return 0
    print(__doc__, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
