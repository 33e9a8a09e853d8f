"""Rows and table of scripts/bench-peers.sh (system python3, standard library only).

  report.py row RUN_DIR       read one run's files, write RUN_DIR/row.json
  report.py table OUT_DIR [--write BENCHMARKS.md]
                              print the markdown table of every OUT_DIR/runs/*/row.json (with
                              OUT_DIR/meta.json); with --write, also replace the part of
                              BENCHMARKS.md between the peers markers (created after the
                              "Load: one agent" section when missing)

A run directory holds: run.json (tool, workload, command), truth.ndjson (the simulator's
`GET /_truth`: one line per request it received), loadavg.before/after, and per tool:
  guidellm  rusage.json, benchmarks.json
  aiperf    rusage.json, artifacts/profile_export.jsonl
  latmesh   rusage-agent.json, rusage-coordinator.json, rusage-launch.json, summary.json
  floor     rusage.json, floor.json (agent/benches/peers_floor.rs: the raw client's summary)

Percentiles here are nearest-rank over the per-request values (latmesh's come from its own
HDR histograms, 3 significant digits). TTFT error = the tool's TTFT percentile − the
simulator's first-token percentile of the same run: an unpaired difference of percentiles
(the tools send no probe id, so requests do not pair up).
"""

import json
import math
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BEGIN = "<!-- peers:begin: written by `scripts/bench-peers.sh --write`; edit outside these markers -->"
END = "<!-- peers:end -->"
SECTION = "## Peers side by side (GuideLLM, AIPerf)"


def pct(values, p):
    """Nearest-rank percentile (p in 0..100) of a list; None when empty."""
    if not values:
        return None
    v = sorted(values)
    k = max(1, math.ceil(p / 100 * len(v)))
    return v[k - 1]


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def read_lines(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def server_side(run):
    """Ground truth of the run: what the simulator received and sent."""
    rows = read_lines(os.path.join(run, "truth.ndjson"))
    chat = [r for r in rows if r.get("stream") is not None]
    ok = [r for r in chat if r.get("status") == 200 and r.get("finished") and not r.get("truncated")]
    tokens = sum(int(r.get("tokens") or 0) for r in chat)
    first = [r["first_token_handed_us"] / 1000 for r in ok if r.get("first_token_handed_us") is not None]
    out = {
        "received": len(chat),
        "finished_ok": len(ok),
        "tokens": tokens,
        "ttft_ms": {p: pct(first, q) for p, q in (("p50", 50), ("p90", 90), ("p99", 99))},
    }
    if ok:
        start = min(r["received_unix_us"] for r in chat)
        end = max(r["received_unix_us"] + (r.get("server_e2e_us") or 0) for r in chat)
        secs = max((end - start) / 1e6, 1e-9)
        out["seconds"] = secs
        recv = sorted(r["received_unix_us"] for r in chat)
        span = (recv[-1] - recv[0]) / 1e6
        out["rps"] = (len(recv) - 1) / span if span > 0 else None
        out["concurrency"] = sum(r.get("server_e2e_us") or 0 for r in ok) / 1e6 / secs
        ev = []
        for r in chat:
            ev.append((r["received_unix_us"], 1))
            ev.append((r["received_unix_us"] + (r.get("server_e2e_us") or 0), -1))
        ev.sort(key=lambda e: (e[0], e[1]))
        cur = peak = 0
        for _, d in ev:
            cur += d
            peak = max(peak, cur)
        out["max_in_flight"] = peak
    return out


def rusage(path):
    r = load(path)
    if not r:
        return None
    r["cpu_s"] = r["user_s"] + r["sys_s"]
    return r


def tool_guidellm(run):
    d = load(os.path.join(run, "benchmarks.json"))
    if not d or not d.get("benchmarks"):
        return {"error": "no benchmarks.json"}
    b = d["benchmarks"][0]
    reqs = b.get("requests", {})
    succ = reqs.get("successful", [])
    ttft = [r["time_to_first_token_ms"] for r in succ if r.get("time_to_first_token_ms") is not None]
    totals = b["metrics"]["request_totals"]
    out = {
        "ok": totals.get("successful"),
        "errored": totals.get("errored"),
        "incomplete": totals.get("incomplete"),
        "per_request_ttft": len(ttft),
        "tokens": sum(r.get("output_tokens") or 0 for r in succ),
    }
    if len(ttft) >= (totals.get("successful") or 0) and ttft:
        out["ttft_ms"] = {p: pct(ttft, q) for p, q in (("p50", 50), ("p90", 90), ("p99", 99))}
        out["ttft_from"] = "per request"
    else:  # a sample of the requests only: its own percentiles over all of them
        ps = b["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"]
        out["ttft_ms"] = {"p50": ps.get("p50"), "p90": ps.get("p90"), "p99": ps.get("p99")}
        out["ttft_from"] = "its percentiles (per-request list sampled: %d)" % len(ttft)
    return out


def tool_aiperf(run):
    recs = read_lines(os.path.join(run, "artifacts", "profile_export.jsonl"))
    if not recs:
        return {"error": "no profile_export.jsonl"}
    ok = [r for r in recs if not r.get("error") and "time_to_first_token" in r.get("metrics", {})]
    ttft = [r["metrics"]["time_to_first_token"]["value"] for r in ok]
    tokens = sum(
        (r["metrics"].get("usage_completion_tokens") or r["metrics"].get("output_token_count") or {}).get("value", 0)
        for r in ok
    )
    return {
        "ok": len(ok),
        "errored": len(recs) - len(ok),
        "tokens": tokens,
        "ttft_ms": {p: pct(ttft, q) for p, q in (("p50", 50), ("p90", 90), ("p99", 99))},
        "ttft_from": "per request",
    }


def tool_floor(run):
    d = load(os.path.join(run, "floor.json"))
    if not d:
        return {"error": "no floor.json"}
    t = d.get("ttft_us") or {}
    return {
        "ok": d.get("ok"),
        "errored": d.get("failed"),
        "tokens": d.get("token_frames"),
        "ttft_ms": {p: (t[p] / 1000 if t.get(p) is not None else None) for p in ("p50", "p90", "p99")},
        "ttft_from": "per request (t_send → the first read holding a token frame)",
        "first_error": d.get("first_error"),
    }


def tool_latmesh(run):
    s = load(os.path.join(run, "summary.json"))
    if not s:
        return {"error": "no summary.json"}
    cells = [c for c in s.get("cells", []) if c.get("region") == "ALL"] or s.get("cells", [])
    if not cells:
        return {"error": "summary without cells"}
    c = cells[0]
    return {
        "ok": (c.get("outcomes") or {}).get("ok", 0),
        "errored": c.get("attempts", 0) - (c.get("outcomes") or {}).get("ok", 0),
        "outcomes": c.get("outcomes"),
        "tokens": round(c.get("output_tokens_mean", 0) * c.get("samples", 0)),
        "ttft_ms": {p: c["ttft"][f"{p}_ms"] for p in ("p50", "p90", "p99")},
        "ttft_from": "its HDR histograms",
        "complete": s.get("complete"),
    }


def row(run):
    meta = load(os.path.join(run, "run.json"), {})
    tool = meta.get("tool")
    srv = server_side(run)
    r = dict(meta)
    r["server"] = srv
    r["loadavg_before"] = open(os.path.join(run, "loadavg.before")).read().split()[0] if os.path.exists(os.path.join(run, "loadavg.before")) else None
    r["loadavg_after"] = open(os.path.join(run, "loadavg.after")).read().split()[0] if os.path.exists(os.path.join(run, "loadavg.after")) else None
    if tool == "latmesh":
        parts = {k: rusage(os.path.join(run, f"rusage-{k}.json")) for k in ("agent", "coordinator", "launch")}
        r["rusage"] = parts
        r["cpu_s"] = parts["agent"]["cpu_s"] if parts["agent"] else None
        r["cpu_all_s"] = sum(p["cpu_s"] for p in parts.values() if p) if parts["agent"] else None
        r["peak_rss_mib"] = parts["agent"]["peak_rss_mib"] if parts["agent"] else None
        r["peak_rss_all_mib"] = sum(p["peak_rss_mib"] for p in parts.values() if p)
        r["procs"] = sum(p["max_procs"] for p in parts.values() if p)
        r["tool"] = tool
        r["out"] = tool_latmesh(run)
    else:
        ru = rusage(os.path.join(run, "rusage.json"))
        r["rusage"] = ru
        r["cpu_s"] = ru["cpu_s"] if ru else None
        r["peak_rss_mib"] = ru["peak_rss_mib"] if ru else None
        r["procs"] = ru["max_procs"] if ru else None
        r["out"] = {"guidellm": tool_guidellm, "aiperf": tool_aiperf, "floor": tool_floor}[tool](run)
    if r.get("cpu_s") is not None and srv["tokens"]:
        r["cpu_per_mtok"] = r["cpu_s"] / srv["tokens"] * 1e6
        if r.get("cpu_all_s") is not None:
            r["cpu_all_per_mtok"] = r["cpu_all_s"] / srv["tokens"] * 1e6
    t, g = r["out"].get("ttft_ms") or {}, srv["ttft_ms"]
    r["ttft_err_ms"] = {p: (t[p] - g[p]) if t.get(p) is not None and g.get(p) is not None else None for p in ("p50", "p90", "p99")}
    with open(os.path.join(run, "row.json"), "w") as f:
        json.dump(r, f, indent=1)
    return r


# ---------------------------------------------------------------------------------------
# The table.

WORKLOAD_ORDER = {"c": 0, "r": 1}
TOOL_ORDER = {"latmesh": 0, "floor": 1, "guidellm": 2, "aiperf": 3}
TOOL_NAME = {"latmesh": "latmesh", "floor": "floor (raw client)", "guidellm": "GuideLLM", "aiperf": "AIPerf"}
PEERS = ("guidellm", "aiperf")


def wl_key(w):
    return (WORKLOAD_ORDER.get(w[0], 9), int(re.sub(r"\D", "", w) or 0))


def wl_label(w, requests=None):
    n = int(w[1:])
    s = f"closed loop, concurrency {n:,}" if w[0] == "c" else f"open loop, {n:,} req/s constant"
    return s + (f", {requests:,} requests" if requests else "")


def f0(x):
    return "–" if x is None else f"{x:,.0f}"


def f1(x):
    return "–" if x is None else f"{x:,.1f}"


def f2(x):
    return "–" if x is None else f"{x:,.2f}"


def table(out_dir):
    meta = load(os.path.join(out_dir, "meta.json"), {})
    rows = []
    runs = os.path.join(out_dir, "runs")
    for d in sorted(os.listdir(runs)):
        r = load(os.path.join(runs, d, "row.json"))
        if r:
            rows.append(r)
    rows.sort(key=lambda r: (wl_key(r["workload"]), TOOL_ORDER.get(r["tool"], 9)))
    lm = {r["workload"]: r for r in rows if r["tool"] == "latmesh" and r.get("cpu_per_mtok")}
    fl = {r["workload"]: r for r in rows if r["tool"] == "floor" and r.get("cpu_per_mtok") and not r.get("failure")}
    L = []
    L.append(BEGIN)
    L.append("")
    L.append(
        f"Measured {meta.get('date', '?')} on {meta.get('nproc', '?')} vCPU ({meta.get('cpu', '?')}), "
        f"{meta.get('mem', '?')} RAM, Linux {meta.get('kernel', '?')}; latmesh git {meta.get('git', '?')} "
        f"(release build), {meta.get('guidellm', 'GuideLLM ?')}, {meta.get('aiperf', 'AIPerf ?')}, Python {meta.get('python', '?')}; "
        f"load average at start: {meta.get('load_start', '?')}, at end: {meta.get('load_end', '?')}."
    )
    L.append("")
    L.append(f"Command: `{meta.get('command', 'scripts/bench-peers.sh --write')}` ({meta.get('knobs', '')}).")
    L.append("")
    L.append(
        f"Target: `latmesh-sim serve --truth-all` pinned to core 1 (`taskset -c 1`), a fresh one per row, "
        f"one provider: TTFT {meta.get('ttft_ms', '?')} ms fixed (no jitter), then exactly "
        f"{meta.get('tokens', '?')} tokens, one per SSE chunk, {meta.get('itl_us', '?')} µs apart, and `usage`; "
        f"HTTP/1.1 over loopback. Every client pinned to core 0 (`taskset -c 0`, inherited by its worker "
        f"processes), asked for {meta.get('requests', '?')} streamed requests (unless the row says otherwise) with a ~{meta.get('prompt_tokens', '?')}-token "
        f"prompt and {meta.get('tokens', '?')} output tokens. latmesh = what a user runs: `latmesh serve` + one "
        f"`latmesh-agent` + `latmesh campaign launch` (a `sweep` scenario, one step, `step_requests`, for the closed "
        f"loop; a `rate` scenario, constant arrivals, for the open loop), all three on core 0."
        + (
            " floor = the machine's floor, not a tool: `peers_floor` (`agent/benches/peers_floor.rs`), one "
            "process on core 0 that only streams and stamps every frame (current-thread tokio, `TcpStream`, "
            "hand-written HTTP/1.1 with keep-alive, one read per wake-up, token frames found by their marker "
            "bytes: no SSE or JSON parsing, no timeouts, no results but a summary), closed loop with N workers, "
            "open loop with an arrival every 1/N s, each its own task."
            if fl else ""
        )
    )
    L.append("")
    L.append(
        "Columns: **ok** = requests the tool counts as successful / streams the simulator finished; "
        "**tokens** = tokens the simulator streamed in the run (the denominator of every CPU figure); "
        "**seconds**, **req/s**, **in flight** = the simulator's view (first request received → last token "
        "sent; requests received per second, first to last receipt; requests in service: mean / most at once; marked when the most at once stays below 90 % of "
        "the concurrency, or the rate below 90 % of the rate, asked for); **client CPU** = user + system CPU (user + sys in brackets) of the tool's whole process tree "
        "(`getrusage(RUSAGE_CHILDREN)` of a wrapper, worker processes included; latmesh: the agent alone, and "
        "agent + coordinator + launch CLI); **ratio** = the peer's CPU per 1M tokens / latmesh's "
        "(agent alone; all latmesh processes)"
        + ("; in the floor's row the other way round: latmesh's CPU per 1M tokens / the floor's (agent alone; "
           "all latmesh processes), how far latmesh is above the floor" if fl else "")
        + "; **RSS** = the largest sum of the tree's resident sets "
        "(sampled every 0.2 s), with the number of processes; **TTFT** P50 / P99 as the tool reports it "
        "(its own per-request values; latmesh's HDR percentiles), **server** = the simulator's first token "
        "handed to hyper − request received (P50 / P99), **error** = tool − server, an unpaired difference "
        "of percentiles, in ms; **load** = 1-min load average before → after the row."
    )
    L.append("")
    hdr = [
        "workload", "tool", "ok: tool / sim", "tokens", "seconds", "req/s", "in flight: mean / max",
        "client CPU s (user + sys)", "CPU s per 1M tokens",
        "ratio to latmesh: agent / all" + (" (floor: latmesh / floor)" if fl else ""),
        "peak RSS MiB (procs)", "TTFT P50 / P99 ms", "server P50 / P99 ms", "TTFT error P50 / P99 ms", "load",
    ]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("| " + " | ".join([":---", ":---"] + ["---:"] * (len(hdr) - 2)) + " |")
    for r in rows:
        o, s = r["out"], r["server"]
        name = TOOL_NAME.get(r["tool"], r["tool"])
        fail = r.get("failure")
        if fail or o.get("error"):
            note = fail or o.get("error")
            L.append(f"| {wl_label(r['workload'], r.get('requests'))} | {name} | **could not run it**: {note} |" + " |" * (len(hdr) - 3))
            continue
        ru = r["rusage"]["agent"] if r["tool"] == "latmesh" else r["rusage"]
        split = f" ({f2(ru['user_s'])} + {f2(ru['sys_s'])})"
        if r["tool"] == "latmesh":
            cpu = f"{f2(r['cpu_s'])}{split} / {f2(r.get('cpu_all_s'))}"
            per = f"**{f1(r.get('cpu_per_mtok'))}** / {f1(r.get('cpu_all_per_mtok'))}"
            ratio = "1 / 1"
            rss = f"{f1(r['peak_rss_mib'])} / {f1(r.get('peak_rss_all_mib'))} ({r.get('procs')})"
        elif r["tool"] == "floor":
            cpu = f2(r["cpu_s"]) + split
            per = f"**{f1(r.get('cpu_per_mtok'))}**"
            base = lm.get(r["workload"])
            if base and r.get("cpu_per_mtok"):
                ratio = (f"latmesh **{base['cpu_per_mtok'] / r['cpu_per_mtok']:.2f}×** / "
                         f"{base['cpu_all_per_mtok'] / r['cpu_per_mtok']:.2f}× floor")
            else:
                ratio = "–"
            rss = f"{f1(r['peak_rss_mib'])} ({r.get('procs')})"
        else:
            cpu = f2(r["cpu_s"]) + split
            per = f"**{f1(r.get('cpu_per_mtok'))}**"
            base = lm.get(r["workload"])
            if base and r.get("cpu_per_mtok"):
                ratio = f"**{r['cpu_per_mtok'] / base['cpu_per_mtok']:.1f}×** / {r['cpu_per_mtok'] / base['cpu_all_per_mtok']:.1f}×"
            else:
                ratio = "–"
            rss = f"{f1(r['peak_rss_mib'])} ({r.get('procs')})"
        t, g, e = o.get("ttft_ms") or {}, s["ttft_ms"], r["ttft_err_ms"]
        ok = f"{f0(o.get('ok'))} / {f0(s['finished_ok'])}"
        if r.get("exit") not in (None, 0):
            ok += f" (exit {r['exit']})"
        # Say when the tool did not reach the workload's concurrency or rate.
        n = int(r["workload"][1:])
        rps = f1(s.get("rps"))
        conc = f"{f1(s.get('concurrency'))} / {f0(s.get('max_in_flight'))}"
        if r["workload"][0] == "c" and (s.get("max_in_flight") or 0) < 0.9 * n:
            conc += f" (**did not reach {n:,}**)"
        if r["workload"][0] == "r" and (s.get("rps") or 0) < 0.9 * n:
            rps += f" (**fell behind {n:,}**)"
        L.append(
            "| " + " | ".join([
                wl_label(r["workload"], r.get("requests")), name, ok, f0(s["tokens"]), f1(s.get("seconds")), rps,
                conc, cpu, per, ratio, rss,
                f"{f1(t.get('p50'))} / {f1(t.get('p99'))}", f"{f1(g.get('p50'))} / {f1(g.get('p99'))}",
                f"{f1(e.get('p50'))} / {f1(e.get('p99'))}",
                f"{r.get('loadavg_before')} → {r.get('loadavg_after')}",
            ]) + " |"
        )
    L.append("")
    if fl:
        L.extend(against_floor(rows, fl))
    # Per-tool commands, once.
    L.append(
        "Exact commands of the rows (`N`: the row's concurrency or rate; `PORT`, `TOK` (the tokenizer "
        "directory), `DIR` (the row's folder)"
        + (", `OUT` (the run's result folder: the floor's binary, copied there when built, and the prompt file)" if fl else "")
        + " and `URL` filled in by the script):"
    )
    L.append("")
    seen = set()
    for r in rows:
        for c in r.get("commands", []):
            c = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", c)
            c = re.sub(r"/\S*/tokenizer", "TOK", c)
            c = re.sub(r"/\S*/runs/[^/ ]+", "DIR", c)
            c = re.sub(r"(?<!\S)/\S*/(peers_floor|prompts\.jsonl)(?=\s|$)", r"OUT/\1", c)
            c = c.replace("\\,", ",").replace(ROOT + "/", "").replace(os.path.expanduser("~") + "/", "~/")
            c = re.sub(r"(streams=|rate=|--concurrency |--request-rate |--rate )\d+", r"\1N", c)
            key = (r["tool"], r["workload"][0], re.sub(r"\d+", "N", c))
            if key in seen:
                continue
            seen.add(key)
            L.append(f"- {TOOL_NAME.get(r['tool'], r['tool'])}, {'closed' if r['workload'][0] == 'c' else 'open'} loop: `{c}`")
    extra = meta.get("campaigns")
    if extra:
        L.append("")
        L.append("latmesh's campaign files, as for concurrency 64 and 40 requests/s (`step_s` is about three "
                 "times what the requests need at the simulator's pace: a sweep step lasts `step_s` whatever happens):")
        L.append("")
        for c in extra:
            L.append("```toml")
            L.append(c.rstrip())
            L.append("```")
    L.append("")
    L.append(END)
    return "\n".join(L) + "\n"


def against_floor(rows, fl):
    """The small table under the main one: every tool's CPU per token / the floor's."""
    tools = [t for t in ("latmesh",) + PEERS if any(r["tool"] == t for r in rows)]
    if not tools:
        return []
    L = [
        "**Against the floor**: each tool's CPU per 1M tokens / the floor's in the same workload (latmesh: agent "
        "alone / all three processes). A peer's figure is the most any client that reads every frame as it "
        "arrives could show against that peer on this machine: where it is under 10× (bold), the target "
        "(≤ 1/10 of the peer's CPU per token) is out of reach of a frame-by-frame client in that workload.",
        "",
        "| workload | floor CPU s per 1M tokens | " + " | ".join(f"{TOOL_NAME[t]} / floor" for t in tools) + " |",
        "| :--- | ---: | " + " | ".join("---:" for _ in tools) + " |",
    ]
    for w in sorted(fl, key=wl_key):
        f = fl[w]["cpu_per_mtok"]
        cells = []
        for t in tools:
            r = next((r for r in rows if r["workload"] == w and r["tool"] == t and r.get("cpu_per_mtok")
                      and not r.get("failure")), None)
            if r is None:
                cells.append("–")
            elif t == "latmesh":
                cells.append(f"{r['cpu_per_mtok'] / f:.2f}× / {r['cpu_all_per_mtok'] / f:.2f}×")
            else:
                x = r["cpu_per_mtok"] / f
                cells.append(f"**{x:.1f}×**" if x < 10 else f"{x:.1f}×")
        L.append(f"| {wl_label(w)} | {f1(f)} | " + " | ".join(cells) + " |")
    L.append("")
    return L


def write(bench_md, block):
    text = open(bench_md).read()
    if BEGIN.split(":")[0] in text and END in text:
        start = text.index(BEGIN.split(":")[0])
        end = text.index(END) + len(END) + 1
        text = text[:start] + block + text[end:]
    else:
        # A new section after "Load: one agent" (before the next "## " heading).
        anchor = text.find("## Load: one agent")
        nxt = text.find("\n## ", anchor + 1) if anchor >= 0 else -1
        intro = (
            f"{SECTION}\n\nIssue 9: the same workloads driven by GuideLLM and AIPerf, in the same run, against "
            "the same simulator, with each tool's client CPU per million streamed tokens and TTFT error "
            "(target: latmesh ≤ 1/10 of either peer's CPU per token). Run: `scripts/bench-peers.sh "
            "--write` (about 20 minutes; it makes the peers' virtual environments on first use, ~7 GB). "
            "Knobs: `--only latmesh|floor|guidellm|aiperf`, `LATMESH_PEERS_WORKLOADS` (default `c64 c1000 r40 r200`: "
            "`cN` closed loop at concurrency N, `rN` open loop at N requests/s), `LATMESH_PEERS_REQUESTS` "
            "(2000), `LATMESH_PEERS_TTFT_MS`, `LATMESH_PEERS_ITL_US`, `LATMESH_PEERS_TOKENS`, "
            "`LATMESH_PEERS_DIR` (venvs and tokenizer, default `~/.cache/latmesh-peers`).\n\n"
        )
        block = intro + block + "\n"
        if nxt < 0:
            text = text.rstrip("\n") + "\n\n" + block
        else:
            text = text[: nxt + 1] + block + text[nxt + 1:]
    with open(bench_md, "w") as f:
        f.write(text)


def main():
    cmd = sys.argv[1]
    if cmd == "row":
        r = row(sys.argv[2])
        print(json.dumps({k: r.get(k) for k in ("tool", "workload", "cpu_s", "cpu_per_mtok", "ttft_err_ms")}))
    elif cmd == "table":
        block = table(sys.argv[2])
        print(block)
        if len(sys.argv) > 4 and sys.argv[3] == "--write":
            write(sys.argv[4], block)
            print(f"written into {sys.argv[4]}")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
