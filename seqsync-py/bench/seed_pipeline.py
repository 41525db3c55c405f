"""The seed's pipeline written in Python on PyTorch streams: declared and run by seqsync
(`Pipeline.run`, one host thread per spec thread) against the same kernels hand-ordered with
PyTorch events (one host thread), every element of every batch verified, in the same run.

    python3 seqsync-py/bench/seed_pipeline.py [--mib 64 1] [--repeat 3] [--spec PATH] [--profile]
        [--check equal|eq-all] [--torch-threads N]

`--spec` runs another declaration of the same stages (a spec whose `copy_out` is `sync = true`
gets `process` as its after-sync hook); `--profile` prints, per host thread, the time spent in
the stage functions (Python) against the run's wall time.
"""

import argparse
import os
import pathlib
import statistics
import time

import torch

import seqsync

SEED = pathlib.Path(__file__).resolve().parents[2] / "specs" / "seed-python.toml"

STREAMS = ("s_h2g", "s_f", "s_g", "s_h", "s_g2h")

# How `process` checks a batch on the host (`--check`).
CHECK = "equal"


class Work:
    """Buffers and kernels shared by both versions: inp = seq, x = 2 inp, y = inp + 1,
    out = x + y = 3 seq + 1, checked on the host."""

    def __init__(self, n, batches):
        dev = torch.device("cuda", 0)
        self.n = n
        self.buf = {k: [torch.empty(n, device=dev) for _ in range(2)] for k in ("inp", "x", "y", "out")}
        self.host_out = [torch.empty(n, pin_memory=True) for _ in range(2)]
        self.src = [torch.full((n,), float(s % 1000), pin_memory=True) for s in range(min(batches, 8))]
        # What each batch must come out as (3 seq + 1), prepared once: `torch.equal` then checks
        # every element in one call (one GIL release), where `==` and `.all()` take two.
        self.expected = [torch.full((n,), 3.0 * (s % 1000) + 1.0) for s in range(len(self.src))]
        self.check = CHECK
        self.wrong = 0
        self.checked = 0

    def copy_in(self, seq):
        self.buf["inp"][seq % 2].copy_(self.src[seq % len(self.src)], non_blocking=True)

    def f(self, seq):
        torch.mul(self.buf["inp"][seq % 2], 2.0, out=self.buf["x"][seq % 2])

    def g(self, seq):
        torch.add(self.buf["inp"][seq % 2], 1.0, out=self.buf["y"][seq % 2])

    def h(self, seq):
        b = self.buf
        torch.add(b["x"][seq % 2], b["y"][seq % 2], out=b["out"][seq % 2])

    def copy_out(self, seq):
        self.host_out[seq % 2].copy_(self.buf["out"][seq % 2], non_blocking=True)

    def process(self, seq, _stream=None):
        if seq == 0:
            self.threads = torch.get_num_threads()
        self.checked += 1
        got = self.host_out[seq % 2]
        if self.check == "equal":
            ok = torch.equal(got, self.expected[seq % len(self.src)])
        else:  # "eq-all": compare with a scalar, then reduce
            ok = bool((got == 3.0 * float(seq % len(self.src) % 1000) + 1.0).all())
        if not ok:
            self.wrong += 1


def run_seqsync(backend, spec, n, batches, profile=None):
    w = Work(n, batches)
    streams = {s: torch.cuda.Stream() for s in STREAMS}
    p = seqsync.Pipeline.from_toml(spec)

    def timed(name, fn):
        if profile is None:
            return fn

        def call(*a):
            t = time.perf_counter()
            try:
                return fn(*a)
            finally:
                profile[name] = profile.get(name, 0.0) + time.perf_counter() - t

        return call

    def on(fn):
        def stage(seq, s):  # `s` is the torch stream given in `streams=`
            with torch.cuda.stream(s):
                fn(seq)

        return stage

    stages = {name: timed(name, on(getattr(w, name))) for name in ("copy_in", "f", "g", "h", "copy_out")}
    after = None
    if "sync = true" in spec:
        after = {"copy_out": timed("process", w.process)}
    else:
        stages["process"] = timed("process", w.process)
    torch.cuda.synchronize()
    start = time.perf_counter()
    p.run(backend, stages, after_sync=after, streams=streams, batches=batches)
    return time.perf_counter() - start, w


def run_torch_events(n, batches, profile=None):
    w = Work(n, batches)
    if profile is not None:
        process = w.process

        def timed(seq):
            t = time.perf_counter()
            process(seq)
            profile["process"] = profile.get("process", 0.0) + time.perf_counter() - t

        w.process = timed
    s = {k: torch.cuda.Stream() for k in STREAMS}
    ev = {k: [torch.cuda.Event() for _ in range(2)] for k in ("in", "f", "g", "h", "out")}
    torch.cuda.synchronize()
    start = time.perf_counter()
    for seq in range(batches + 2):
        if seq >= 2:  # copy-out of seq - 2 done: process it (its slot is free again after)
            ev["out"][seq % 2].synchronize()
            w.process(seq - 2)
        if seq >= batches:
            continue
        k = seq % 2
        started = seq >= 2
        with torch.cuda.stream(s["s_h2g"]):
            if started:  # inp[k] is free once f and g of seq - 2 read it
                s["s_h2g"].wait_event(ev["f"][k])
                s["s_h2g"].wait_event(ev["g"][k])
            w.copy_in(seq)
            ev["in"][k].record()
        with torch.cuda.stream(s["s_f"]):
            s["s_f"].wait_event(ev["in"][k])
            if started:
                s["s_f"].wait_event(ev["h"][k])  # x[k] free once h of seq - 2 read it
            w.f(seq)
            ev["f"][k].record()
        with torch.cuda.stream(s["s_g"]):
            s["s_g"].wait_event(ev["in"][k])
            if started:
                s["s_g"].wait_event(ev["h"][k])
            w.g(seq)
            ev["g"][k].record()
        with torch.cuda.stream(s["s_h"]):
            s["s_h"].wait_event(ev["f"][k])
            s["s_h"].wait_event(ev["g"][k])
            if started:
                s["s_h"].wait_event(ev["out"][k])  # out[k] free once copied out
            w.h(seq)
            ev["h"][k].record()
        with torch.cuda.stream(s["s_g2h"]):
            s["s_g2h"].wait_event(ev["h"][k])
            w.copy_out(seq)
            ev["out"][k].record()
    return time.perf_counter() - start, w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, nargs="+", default=[64, 1])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spec", type=pathlib.Path, default=SEED, help="the pipeline declaration")
    ap.add_argument("--profile", action="store_true",
                    help="time spent in each stage function against the wall time")
    ap.add_argument("--check", choices=("equal", "eq-all"), default="equal",
                    help="the host check: torch.equal against a prepared tensor (one call), or "
                         "== with a scalar then .all() (two)")
    ap.add_argument("--torch-threads", type=int, nargs="+", default=None,
                    help="torch.set_num_threads for the run (PyTorch's CPU ops, the host check); "
                         "several: one run of both versions at each")
    ap.add_argument("--switch-interval", type=float, default=None,
                    help="sys.setswitchinterval for the run (Python's GIL hand-off, 5 ms by default)")
    args = ap.parse_args()
    global CHECK
    CHECK = args.check
    if args.switch_interval is not None:
        import sys

        sys.setswitchinterval(args.switch_interval)
    backend = seqsync.Backend("cuda")
    spec = args.spec.read_text()
    print(f"seed pipeline in Python, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for threads in args.torch_threads or [None]:
        if threads is not None:
            torch.set_num_threads(threads)
        print(f"torch threads {torch.get_num_threads()} (of {os.cpu_count()} CPUs), check {CHECK}")
        for mib in args.mib:
            run_size(args, backend, spec, mib)


def run_size(args, backend, spec, mib):
    """Both versions at one batch size, `--repeat` times, then profiled if asked."""
    n = int(mib * (1 << 20) / 4)
    batches = max(40, int(6400 / mib)) if mib >= 4 else 800
    rows = {"torch events (hand-ordered)": [], "seqsync Pipeline.run": []}
    for _ in range(args.repeat):
        for name, f in (("torch events (hand-ordered)", lambda: run_torch_events(n, batches)),
                        ("seqsync Pipeline.run", lambda: run_seqsync(backend, spec, n, batches))):
            wall, w = f()
            assert w.checked == batches and w.wrong == 0, (name, w.checked, w.wrong)
            rows[name].append(batches * n * 4 / wall / 1e9)
    base = statistics.median(rows["torch events (hand-ordered)"])
    print(f"  {mib:g} MiB x {batches} batches, every batch verified, median of {args.repeat}:")
    for name, v in rows.items():
        m = statistics.median(v)
        print(f"    {name:30s} {m:8.3f} GB/s   x torch events {m / base:5.2f}")
    if args.profile:
        for name, f in (("torch events", run_torch_events), ("seqsync", lambda n, b, p: run_seqsync(backend, spec, n, b, p))):
            prof = {}
            cpu = time.process_time()
            wall, w = f(n, batches, prof)
            cpu = time.process_time() - cpu
            print(f"    profile of one more {name} run ({wall * 1e3:.1f} ms wall, {cpu / wall:.2f} "
                  f"cores busy, torch threads {w.threads} where process runs), time in each "
                  f"stage function per batch:")
            for stage, t in prof.items():
                print(f"      {stage:10s} {t / batches * 1e6:9.1f} us  ({t / wall:5.1%} of wall)")


if __name__ == "__main__":
    main()
