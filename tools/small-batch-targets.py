#!/usr/bin/env python3
"""Issue 22's targets for `seqsync demo --engine adaptive` (or the engine in $ENGINE, e.g.
ENGINE=resident), one line of JSON per batch size.

usage: [ENGINE=E] tools/small-batch-targets.py SEQSYNC [BYTES:"EXTRA FLAGS" ...]

For each batch size (64 KiB, 256 KiB, 1 MiB; or only those given, any size, each with extra
flags for the engine, e.g. 65536:"--graph-depth 6"), on the CUDA backend, every batch verified:

1. the adaptive engine saturated, with baselines: GB/s against the device bound
   (`x_bound`, target >= 0.85) and its p99 latency;
2. the hand-written engine alone: its p99 (`x_hw_p99` = adaptive p99 / this, target <= 1.5);
3. the adaptive engine at 80 % of (1)'s batches per second (`--rate`): its p99 over the
   isolated latency of (1) (`r_x_iso`, target <= 2);

and, for (1) and (3), where the batches' latency went (`phases_p50_p99`: the report's
`phases`, p50 and p99 in microseconds).

Batches: 6000 / 1500 / 375 (about 400 MB each; another size: 400 MB of batches, at least 100).
Stdlib only: runs where only Python is.

ROUNDS (environment, default 1) repeats the three runs per size that many times, sizes
interleaved, and then prints one summary line per size: the median of each ratio and how many
rounds met all three targets. Each run also records the hypervisor's steal time while it ran
(`steal_ms`, summed over the machine's CPUs, from /proc/stat; 0 where unreadable): on the
lent machines a run that lost CPU time that way can lose most of its throughput, or fall behind
its rate, with nothing wrong in the engine (BENCHMARKS.md, run O).
"""
import json
import os
import statistics
import subprocess
import sys

BATCHES = {65536: 6000, 262144: 1500, 1048576: 375}
ENGINE = os.environ.get("ENGINE", "adaptive")
ROUNDS = int(os.environ.get("ROUNDS", "1"))
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def batches(size):
    """Batches a run at this size: the table's, else about 400 MB of them (at least 100)."""
    return BATCHES.get(size, max(100, 393_216_000 // size))


def steal_ms():
    """The machine's steal time so far in milliseconds (all CPUs), 0 where unreadable."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8]) * TICK_MS
    except (OSError, IndexError, ValueError):
        return 0


def demo(seqsync, args):
    """One run's report with its steal (`steal_ms`), or None (printed as failed): a non-zero
    exit (a batch wrong, missing or duplicated included), a timeout, or no report."""
    st = steal_ms()
    try:
        p = subprocess.run([seqsync, "demo", "--backend", "cuda", "--json"] + args,
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError(p.stderr[-400:])
        d = json.loads(p.stdout)
    except (subprocess.TimeoutExpired, RuntimeError, ValueError) as e:
        print(json.dumps({"failed": args, "why": str(e)[-400:]}), flush=True)
        return None
    d["steal_ms"] = round(steal_ms() - st)
    return d


def phases(report):
    """The adaptive engine's phases as {name: [p50, p99]} (microseconds)."""
    return {p["phase"]: [round(p["p50_us"], 1), round(p["p99_us"], 1)]
            for p in report.get("phases") or []}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    seqsync = sys.argv[1]
    extras = {}
    for a in sys.argv[2:]:
        size, _, flags = a.partition(":")
        if not size.isdigit() or int(size) <= 0:
            sys.exit(f"{a!r}: a size is a positive number of bytes, then ':' and its flags")
        extras[int(size)] = flags.split()
    sizes = list(extras) or list(BATCHES)
    rows = {size: [] for size in sizes}
    for _ in range(ROUNDS):
        for size in sizes:
            row = measure(seqsync, size, extras.get(size, []))
            if row:
                rows[size].append(row)
                print(json.dumps(row), flush=True)
    if ROUNDS > 1:
        for size, got in rows.items():
            def median(k):
                v = [r[k] for r in got if r[k] is not None]
                return round(statistics.median(v), 3) if v else None
            met = sum(r["r_x_iso"] is not None and r["x_bound"] >= 0.85
                      and r["x_hw_p99"] <= 1.5 and r["r_x_iso"] <= 2
                      and all(v == batches(size) for v in r["verified"]) for r in got)
            print(json.dumps({"summary": size, "engine": ENGINE, "rounds": ROUNDS,
                              "rounds_failed": ROUNDS - len(got),
                              "median": {k: median(k) for k in ("x_bound", "x_hw_p99", "r_x_iso")},
                              "rounds_meeting_all_three": met,
                              "rounds_without_steal": sum(not any(r["steal_ms"]) for r in got)}),
                  flush=True)


def measure(seqsync, size, extra):
    """One round at one size: the three runs, as one dict (None if a run failed)."""
    base = ["--batch-bytes", str(size), "--batches", str(batches(size))]
    a = demo(seqsync, base + ["--engine", ENGINE] + extra)
    h = demo(seqsync, base + ["--engine", "handwritten", "--no-baselines"])
    if not a or not h:
        return None
    rate = 0.8 * a["batches"] / a["wall_s"]
    # A failed run at the rate keeps the saturated figures (its own fields null).
    r = demo(seqsync, base + ["--engine", ENGINE, "--no-baselines",
                              "--rate", f"{rate:.0f}"] + extra) or {}
    iso = a["isolated_latency_us"]
    return {
        "engine": ENGINE, "bytes": size, "extra": " ".join(extra), "gbps": a["gbps"],
        "device_bound": a["device_bound_gbps"], "span": a["device_bound_span"], "bound_by": a.get("device_bound_by"),
        "x_bound": a["ratio_to_device_bound"], "p50": a["latency_p50_us"],
        "p99": a["latency_p99_us"], "hw_gbps": h["gbps"], "hw_p99": h["latency_p99_us"],
        "x_hw_p99": a["latency_p99_us"] / h["latency_p99_us"], "isolated": iso,
        "rate": rate, "r_p50": r.get("latency_p50_us"), "r_p99": r.get("latency_p99_us"),
        "r_x_iso": r["latency_p99_us"] / iso if r else None,
        "r_batches_per_launch": r.get("batches_per_launch"),
        "batches_per_launch": a.get("batches_per_launch"), "release": a.get("release"),
        "process_threads": a.get("process_threads"), "slots": a["nin"],
        "verified": [a["verified"], h["verified"], r.get("verified")],
        "phases_p50_p99": phases(a), "r_phases_p50_p99": phases(r) if r else None,
        "steal_ms": [a["steal_ms"], h["steal_ms"], r.get("steal_ms")],
    }


if __name__ == "__main__":
    main()
