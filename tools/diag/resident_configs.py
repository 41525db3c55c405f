#!/usr/bin/env python3
"""The resident engine's settings against each other, interleaved so that the machine's slow
spells fall on all of them (CuPy-free: runs the seqsync binary).

usage: tools/diag/resident_configs.py SEQSYNC ROUNDS BYTES RATE "FLAGS" ["FLAGS" ...]

Each round runs every FLAGS once saturated (no baselines) and once at RATE batches a second;
then prints, per FLAGS, the median and the worst of the GB/s, the saturated p99 and the p99 at
RATE (microseconds), every batch verified. With PHASES=1 in the environment, also each run's
GB/s, p99, the steal jiffies (10 ms each) during it and its phases' p50, p99 and max. LONG=K
runs K times the batches. Diagnostic only (issue 22).
"""
import json
import os
import statistics
import subprocess
import sys

BATCHES = {65536: 6000, 262144: 1500, 1048576: 375}


def steal():
    """The machine's steal time so far in jiffies (/proc/stat, all CPUs), 0 where unreadable."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8])
    except (OSError, IndexError, ValueError):
        return 0


def demo(seqsync, args):
    st = steal()
    try:
        p = subprocess.run([seqsync, "demo", "--backend", "cuda", "--engine", "resident",
                            "--json", "--no-baselines"] + args,
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None
    if p.returncode != 0:
        return None
    d = json.loads(p.stdout)
    if os.environ.get("PHASES"):
        ph = {x["phase"]: (round(x["p50_us"], 1), round(x["p99_us"], 1), round(x["max_us"]))
              for x in d.get("phases") or []}
        print(f"  {' '.join(args[4:])}: {d['gbps']:.1f} GB/s p99 {d['latency_p99_us']:.0f} "
              f"steal {steal() - st} phases (p50, p99, max) {ph}", flush=True)
    return d if d["verified"] == d["batches"] else None


def main():
    seqsync, rounds, size, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    configs = sys.argv[5:]
    batches = BATCHES.get(size, 1000) * int(os.environ.get("LONG", "1"))
    base = ["--batch-bytes", str(size), "--batches", str(batches)]
    seen = {c: [] for c in configs}
    for _ in range(rounds):
        for c in configs:
            a = demo(seqsync, base + c.split())
            r = demo(seqsync, base + c.split() + ["--rate", rate])
            seen[c].append((a and a["gbps"], a and a["latency_p99_us"], r and r["latency_p99_us"]))
    for c, rows in seen.items():
        def col(i, worst):
            v = [row[i] for row in rows if row[i] is not None]
            return f"{statistics.median(v):.1f} ({worst(v):.1f})" if v else "-"
        fails = sum(1 for row in rows for x in row if x is None)
        print(f"{size} [{c}]: GB/s {col(0, min)}  p99 {col(1, max)}  p99 at {rate}/s "
              f"{col(2, max)}  all: {[tuple(round(x or -1) for x in row) for row in rows]}"
              + (f"  FAILED {fails}" if fails else ""), flush=True)


if __name__ == "__main__":
    main()
