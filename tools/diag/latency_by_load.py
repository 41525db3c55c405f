#!/usr/bin/env python3
"""An engine's latency against the load (on a GPU): per batch size, one saturated run of the
first binary sets the rate, then every binary runs at fractions of it, interleaved.

usage: [ENGINE=resident] [LOADS=0.02,0.1,0.3,0.8] [REPS=2] [BACKEND=cuda] tools/diag/latency_by_load.py SEQSYNC [SEQSYNC2 ...] \\
           [--sizes 1048576,262144,65536]

One line a run: the binary (by its position), the load and its batches a second, the latency's
p50/p99/max (µs), the `before_launch` (get_data late), `on_device` (the resident engine's
release to seen done) and `check` phases' p50/p99 where the engine reports them, and the
batches verified. Several binaries compare builds on the same machine in the same minutes
(BENCHMARKS.md §13, run W).
"""
import json
import os
import subprocess
import sys

BATCHES = {65536: 6000, 131072: 4000, 262144: 2000, 1048576: 600}


def demo(seqsync, args):
    """One run's report, or None (the reason printed)."""
    backend = os.environ.get("BACKEND", "cuda")
    engine = os.environ.get("ENGINE", "resident")
    p = subprocess.run([seqsync, "demo", "--backend", backend, "--json", "--engine", engine]
                       + args, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print(f"  failed: {' '.join(args)}: {p.stderr[-300:]}", flush=True)
        return None
    return json.loads(p.stdout)


def phase(report, name):
    for p in report.get("phases") or []:
        if p["phase"] == name:
            return f'{p["p50_us"]:.1f}/{p["p99_us"]:.1f}'
    return "-"


def main():
    args = sys.argv[1:]
    sizes = list(BATCHES)[::-1]
    if "--sizes" in args:
        i = args.index("--sizes")
        sizes = [int(v) for v in args[i + 1].split(",")]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    for seqsync in args:
        if not os.access(seqsync, os.X_OK):
            sys.exit(f"{seqsync}: not an executable")
    loads = [float(v) for v in os.environ.get("LOADS", "0.02,0.1,0.3,0.8").split(",")]
    reps = int(os.environ.get("REPS", "2"))
    for size in sizes:
        n = BATCHES.get(size, max(200, 400_000_000 // size))
        a = demo(args[0], ["--batch-bytes", str(size), "--batches", str(n)])
        if a is None:
            continue
        rate0 = a["batches"] / a["wall_s"]
        print(f'{size}: saturated {a["gbps"]:.1f} GB/s, {rate0:.0f} batches/s, isolated '
              f'{a["isolated_latency_us"]:.1f} µs', flush=True)
        for load in loads:
            for _ in range(reps):
                for k, seqsync in enumerate(args):
                    m = max(200, int(n * min(1.0, 2 * load)))
                    d = demo(seqsync, ["--batch-bytes", str(size), "--batches", str(m),
                                       "--no-baselines", "--rate", f"{load * rate0:.0f}"])
                    if d is None:
                        continue
                    print(f'  bin{k} load {load:.2f} ({load * rate0:.0f}/s) p50/p99/max '
                          f'{d["latency_p50_us"]:.1f}/{d["latency_p99_us"]:.1f}/'
                          f'{d.get("latency_max_us") or 0:.0f} before {phase(d, "before_launch")} '
                          f'on_device {phase(d, "on_device")} check {phase(d, "check")} '
                          f'verified {d["verified"]}/{d["batches"]}', flush=True)


if __name__ == "__main__":
    main()
