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

import http.client
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


def cmd_stream(base_url, model, max_tokens=32):
    u = urllib.parse.urlparse(base_url.rstrip("/") + "/chat/completions")
    body = json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": int(max_tokens),
        "temperature": 0.0,
    })
    out = {"model": model}
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
    try:
        conn.request("POST", u.path, body=body, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        out["status"] = resp.status
        out["headers_ms"] = round((time.monotonic() - t0) * 1000)
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        out["headers"] = {k: v for k, v in hdrs.items()
                          if k in INTERESTING_HEADERS or k.startswith("x-ratelimit")}
        if resp.status != 200 or not hdrs.get("content-type", "").startswith("text/event-stream"):
            out["body"] = resp.read(400).decode("utf-8", "replace")
            return out
        events, delta_keys, malformed = 0, set(), 0
        first_event_ms = first_content_ms = None
        usage = None
        done = finish = False
        out["end"] = "eof"
        try:
            while True:
                line = resp.readline()
                if not line:
                    break
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
        except (http.client.IncompleteRead, ConnectionError, socket.timeout, OSError) as e:
            out["end"] = f"error: {type(e).__name__}"
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
    except (OSError, http.client.HTTPException) as e:
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    finally:
        conn.close()


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
