"""Run a command and report what its whole process tree cost (scripts/bench-peers.sh).

Usage: python rusage.py OUT.json -- CMD [ARGS...]

Writes OUT.json with:
  user_s, sys_s   getrusage(RUSAGE_CHILDREN) after the command exited: every descendant that
                  was waited for (worker processes joined by their parents included);
  tree_cpu_s      the same from /proc, sampled every 0.2 s: the last utime+stime seen of every
                  process of the tree (a cross-check; catches descendants nobody waited for,
                  misses the last < 0.2 s);
  peak_rss_mib    the largest sum of VmRSS over the tree at one sample;
                  (the sampler walks all of /proc only every 2 s, to find new descendants,
                  and reads just the tree's own stat files in between: a few stat reads per
                  0.2 s on the measured core, not a ms-long scan);
  max_rss_one_mib ru_maxrss of RUSAGE_CHILDREN (the largest single process);
  max_procs       most processes of the tree alive at one sample;
  wall_s, exit    wall-clock seconds and the command's exit status.
The command's exit status is also this script's. SIGTERM/SIGINT to this script are passed
on to the command (so a server can be stopped by this wrapper's pid and still be measured).
"""

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def stat(pid):
    """(ppid, utime+stime ticks, rss bytes) of `pid`, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    # fields after the name: state(0) ppid(1) ... utime(11) stime(12) ... rss(21)
    try:
        return int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[21]) * PAGE
    except (IndexError, ValueError):
        return None


def proc_table():
    """pid -> stat(pid) for every process."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = stat(int(d))
            if st:
                out[int(d)] = st
    return out


def tree(table, root):
    kids = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    seen, todo = [], [root]
    while todo:
        p = todo.pop()
        if p in table:
            seen.append(p)
        todo.extend(kids.get(p, []))
    return seen


def main():
    out_path = sys.argv[1]
    assert sys.argv[2] == "--"
    cmd = sys.argv[3:]
    t0 = time.monotonic()
    child = subprocess.Popen(cmd)

    def forward(sig, _frame):
        try:
            child.send_signal(sig)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    stats = {"peak_rss": 0, "max_procs": 0, "cpu_ticks": {}}
    done = threading.Event()

    def sample():
        known = [child.pid]
        n = 0
        while not done.wait(0.2):
            if n % 10 == 0:  # every 2 s: find new descendants
                table = proc_table()
                known = tree(table, child.pid)
            else:
                table = {p: st for p in known if (st := stat(p))}
            n += 1
            pids = [p for p in known if p in table]
            stats["peak_rss"] = max(stats["peak_rss"], sum(table[p][2] for p in pids))
            stats["max_procs"] = max(stats["max_procs"], len(pids))
            for p in pids:
                stats["cpu_ticks"][p] = table[p][1]

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    rc = child.wait()
    done.set()
    th.join()
    wall = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    rep = {
        "user_s": round(ru.ru_utime, 3),
        "sys_s": round(ru.ru_stime, 3),
        "tree_cpu_s": round(sum(stats["cpu_ticks"].values()) / TICK, 2),
        "peak_rss_mib": round(stats["peak_rss"] / 2**20, 1),
        "max_rss_one_mib": round(ru.ru_maxrss / 1024, 1),
        "max_procs": stats["max_procs"],
        "wall_s": round(wall, 2),
        "exit": rc,
    }
    with open(out_path, "w") as f:
        json.dump(rep, f)
    sys.exit(rc if rc >= 0 else 128 - rc)


if __name__ == "__main__":
    main()
