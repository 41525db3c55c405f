"""A Python record + wait pair on a seqsync ring against PyTorch's own event record +
stream wait_event, on two PyTorch streams, in the same run (BENCHMARKS.md keeps the figures).

    python3 seqsync-py/bench/ring_vs_torch_events.py [--pairs N] [--repeat R]
"""

import argparse
import statistics
import time

import torch

import seqsync


def per_pair(f, pairs):
    torch.cuda.synchronize()
    start = time.perf_counter()
    f(pairs)
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / pairs * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    backend = seqsync.Backend("cuda")
    sa, sb = backend.stream(a), backend.stream(b)  # borrowed once, as a pipeline would
    events = [torch.cuda.Event() for _ in range(64)]
    state = {"seq": 0}

    def ring_pairs(n):
        ring = seqsync.EventRingbuf(backend, "bench", nconsumers=1, max_size=64)
        for seq in range(n):
            ring.record(seq, sa)
            ring.wait(seq, sb)

    def ring_pairs_raw(n):  # torch streams passed as they are (found in the backend's cache)
        ring = seqsync.EventRingbuf(backend, "bench", nconsumers=1, max_size=64)
        for seq in range(n):
            ring.record(seq, a)
            ring.wait(seq, b)

    def torch_pairs(n):
        for i in range(n):
            ev = events[i % 64]
            ev.record(a)
            b.wait_event(ev)

    rows = {"torch events": [], "seqsync ring": [], "seqsync ring, torch streams per call": []}
    for _ in range(args.repeat):
        rows["torch events"].append(per_pair(torch_pairs, args.pairs))
        rows["seqsync ring"].append(per_pair(ring_pairs, args.pairs))
        rows["seqsync ring, torch streams per call"].append(per_pair(ring_pairs_raw, args.pairs))
    base = statistics.median(rows["torch events"])
    print(f"record + wait pairs, {args.pairs} per run, median of {args.repeat} runs, torch {torch.__version__}")
    for name, v in rows.items():
        m = statistics.median(v)
        print(f"  {name:40s} {m:7.3f} us/pair   x torch events {m / base:5.2f}")


if __name__ == "__main__":
    main()
