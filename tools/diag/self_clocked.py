#!/usr/bin/env python3
"""The resident kernel with its arrivals free: what its latency at a load would be if the host's
arrival reached it without a read over the link (CuPy, on a GPU).

usage: tools/diag/self_clocked.py [BYTES ...]      (default 65536 262144 1048576)
       LOADS=0.1,0.5,0.8,0.9 BATCHES=N in the environment (defaults below)

The kernel is the demo's own (`resident_kernel` of seqsync-demo/src/demo/workload.rs, read from
that file, with the demo's tile, cap on tiles reading and slots for the size), changed in one
place: the block that polls for the next arrival reads a clock on the device instead of the
host's `arrived` word (and not the host's `stop` word either). Batch s arrives at
t0 + s x period on `%globaltimer`, so no read of host memory stands between an arrival and the
kernel seeing it; the tiles still read their inputs from, and write their outputs to, pinned
host memory in place, as in the demo. The block that stores a batch's `done` then stamps the
batch's end; a batch's latency is its end stamp less its arrival time.

- `bound`: every batch arrived when the kernel starts (GB/s of batches, fastest of three);
- at each load L, the period is (batch bytes) / (L x bound): p50 / p99 / max of the latency
  on the device over every batch (after the first 5 %), and whether the kernel kept up (the
  last batch's end within 50 us of its arrival plus the p99).

Every slot's output is checked against a NumPy reference of f, g and h after each run (every
batch of a slot reads the same input, so the output must be its reference whichever batch
wrote it last), and every batch's `done` word and stamp.

Compare with the demo's `on_device` phase at the same loads (tools/diag/latency_by_load.py),
which starts at the host's arrival store and ends when a worker sees `done`: that path adds
the arrival's read over the link, and the done word's trip to the host.

Diagnostic only (issue 22): which part of the latency at 80 % load the arrival's path is.
"""
import os
import re
import sys

import cupy as cp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from resident_host import K, pinned, reference  # noqa: E402

CTL_LINE, DEV_LINE = 8, 16
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SOURCE = open(os.path.join(ROOT, "seqsync-demo/src/demo/workload.rs")).read()
CUDA = re.search(r'pub const CUDA_SOURCE: &str = r#"(.*?)"#;', SOURCE, re.S).group(1)

CLOCK = r'''
__device__ unsigned long long g_t0, g_period, *g_stamps;
__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// Batches arrived by now: batch s arrives at g_t0 + s * g_period.
__device__ __forceinline__ unsigned long long clock_arrivals(unsigned long long batches) {
    const unsigned long long t = gtime();
    if (t < g_t0) return 0;
    const unsigned long long a = (t - g_t0) / g_period + 1;
    return a < batches ? a : batches;
}
extern "C" __global__ void set_clock(unsigned long long delay, unsigned long long period,
                                     unsigned long long *stamps) {
    g_t0 = gtime() + delay;
    g_period = period;
    g_stamps = stamps;
}
'''


def patched(src):
    """The demo's kernel with the arrival read from the clock, and the end of each batch
    stamped; refuses if the demo's kernel no longer has the lines it replaces."""
    swaps = [
        ("const unsigned long long h = CTL(0);",
         "const unsigned long long h = clock_arrivals(batches);"),
        ("if (CTL(1)) { *seen_stop = 1; go = 0; break; }", ""),
        ("CTL(2 + slot) = s + 1;", "CTL(2 + slot) = s + 1;\n                g_stamps[s] = gtime();"),
    ]
    for old, new in swaps:
        if src.count(old) != 1:
            sys.exit(f"self_clocked.py: the demo's kernel has {src.count(old)} of {old!r}")
        src = src.replace(old, new)
    return CLOCK + src


mod = cp.RawModule(code=patched(CUDA))
resident = mod.get_function("resident_kernel")
reset = mod.get_function("resident_reset")
set_clock = mod.get_function("set_clock")
SMS = cp.cuda.Device().attributes["MultiProcessorCount"]


def demo_settings(nbytes):
    """The demo's tile (cuda_device.rs, resident_tile), cap (resident_readers) and automatic
    slots (resident_engine.rs, auto_slots) for batches of `nbytes`."""
    n = nbytes // 4
    tile = 4096 if n <= 16384 else 8192 if n <= 65536 else 16384
    readers = 24 if n < 65536 else 32
    slots = min(24, max(6, round(12.0 * (262144 / nbytes) ** 0.5)))
    return tile, readers, slots


def run(nbytes, batches, period_ns):
    """One resident kernel over `batches` batches arriving `period_ns` apart (0: all arrived
    at the start); returns (seconds from launch to end, latencies in us, checked)."""
    n = nbytes // 4
    tile, readers, slots = demo_settings(nbytes)
    s = cp.cuda.Stream(non_blocking=True)
    hin_m, hin = pinned(slots * n)
    hout_m, hout = pinned(slots * n)
    ctl_m, ctl = pinned((2 + slots) * CTL_LINE, np.uint64)
    hin[:] = np.random.default_rng(nbytes).integers(0, 2**32, slots * n, dtype=np.uint32)
    words = cp.zeros((4 + slots) * DEV_LINE, dtype=cp.uint64)
    stamps = cp.zeros(batches, dtype=cp.uint64)
    reset((1,), (256,), (words, np.uint64(words.size)), stream=s)
    # Arrivals start 2 ms after the clock is set (the kernel is up by then); with no period,
    # every batch has arrived already.
    delay, period = (2_000_000, period_ns) if period_ns else (0, 1)
    set_clock((1,), (1,), (np.uint64(delay), np.uint64(period), stamps), stream=s)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(s)
    resident((SMS,), (256,), (np.uint64(hin_m.ptr), np.uint64(hout_m.ptr), np.uint64(n),
                              np.uint32(K), np.uint64(slots), np.uint64(batches),
                              np.uint64(tile), np.uint64(ctl_m.ptr), words,
                              np.uint64(readers)), stream=s)
    e1.record(s)
    e1.synchronize()
    t0 = int(cp.asnumpy(cp.ndarray((1,), cp.uint64, mod.get_global("g_t0")))[0])
    ends = cp.asnumpy(stamps).astype(np.int64)
    arrivals = t0 + np.arange(batches, dtype=np.int64) * (period_ns if period_ns else 0)
    lat = (ends - arrivals) / 1e3
    # Slot i's done word: 1 + the last batch in it.
    last = [i + slots * ((batches - 1 - i) // slots) for i in range(min(slots, batches))]
    ok = (all(ctl[(2 + i) * CTL_LINE] == b + 1 for i, b in enumerate(last))
          and bool((ends > 0).all())
          and np.array_equal(hout, reference(hin)))
    return cp.cuda.get_elapsed_time(e0, e1) / 1e3, lat, ok


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [65536, 262144, 1048576]
    loads = [float(x) for x in os.environ.get("LOADS", "0.1,0.5,0.8,0.9").split(",")]
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), SMS, "SMs", flush=True)
    for nbytes in sizes:
        batches = int(os.environ.get("BATCHES", "0")) or max(2000, min(20000, (1 << 30) // nbytes))
        best, oks = 0.0, []
        for _ in range(3):
            secs, _, ok = run(nbytes, batches, 0)
            best, oks = max(best, batches * nbytes / secs / 1e9), oks + [ok]
        tile, readers, slots = demo_settings(nbytes)
        print(f"{nbytes >> 10} KiB (tile {tile}, cap {readers}, slots {slots}, {batches} "
              f"batches): bound {best:.2f} GB/s{'' if all(oks) else ' WRONG'}", flush=True)
        for load in loads:
            period = int(nbytes / (load * best))  # ns: bytes / (GB/s) is ns
            _, lat, ok = run(nbytes, batches, period)
            # Kept up: the last tenth of the batches no slower than twice the first tenth
            # after the warm-up (the first 5 %), plus 20 us.
            tenth, warm = len(lat) // 10, len(lat) // 20
            kept_up = np.median(lat[-tenth:]) <= 2 * np.median(lat[warm:warm + tenth]) + 20
            lat = np.sort(lat[warm:])
            p50, p99, mx = np.percentile(lat, 50), np.percentile(lat, 99), lat[-1]
            print(f"  load {load:.2f} (a batch every {period / 1e3:.2f} us): device latency "
                  f"p50 / p99 / max {p50:.1f} / {p99:.1f} / {mx:.1f} us"
                  f"{'' if kept_up else ' (fell behind)'}{'' if ok else ' WRONG'}", flush=True)


if __name__ == "__main__":
    main()
