#!/usr/bin/env python3
"""The resident kernel alone (CuPy, on a GPU): what it can do with no host in its loop, and the
zero-copy ceilings it works under.

usage: tools/resident-kernel.py [BYTES ...]      (default 65536 262144 1048576)

The kernel is the demo's own (`resident_kernel` of seqsync-demo/src/demo/workload.rs, read
from that file), launched as `seqsync demo --engine resident` launches it (one block of 256
threads per multiprocessor, intensity 8):

- `zc_read`, `zc_write`, `zc_copy`: 64 MiB read from, written to, and copied between pinned
  host buffers by a grid-stride kernel (16-byte accesses): the bus's ceilings for kernels that
  touch host memory in place;
- `bound`: every batch (512, 256, 128, 32 of them) arrived before the kernel starts, GB/s of
  batches, for tiles of 4096, 8192 and 16384 elements and 1, 2 and 4 blocks per
  multiprocessor (the demo's tile: 4096 up to 64 KiB, 8192 up to 256 KiB, 16384 above), with
  no cap on the tiles reading at once unless READERS=N is in the environment (the demo's cap:
  24 under 256 KiB, 32 from there);
- `isolated`: the kernel resident over 8 slots, one batch at a time from Python (store
  `arrived`, spin on the slot's `done` word), median and p99 of 300 (Python's own loop adds
  about a microsecond);

outputs checked against a NumPy reference of f, g and h (every slot of the isolated runs;
the first and last batch of each bound, and every batch's done word).

Diagnostic only (issue 22): where the resident engine's throughput and latency come from.
"""
import os
import re
import statistics
import sys
import time

import cupy as cp
import numpy as np

from resident_host import K, pinned, reference

# The kernel's word spacing (u64s a word: CTL_LINE in pinned memory, DEV_LINE in device memory)
# and its cap on tiles reading at once (READERS in the environment; 0, the default: no cap).
CTL_LINE, DEV_LINE = 8, 16
READERS = int(os.environ.get("READERS", "0"))
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SOURCE = open(os.path.join(ROOT, "seqsync-demo/src/demo/workload.rs")).read()
CUDA = re.search(r'pub const CUDA_SOURCE: &str = r#"(.*?)"#;', SOURCE, re.S).group(1)
CEILINGS = r'''
extern "C" __global__ void zc_read(const uint4 *src, unsigned long long n4, unsigned *sink) {
    unsigned acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n4; i += (unsigned long long)gridDim.x * blockDim.x) {
        uint4 v = __ldcv(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}
extern "C" __global__ void zc_write(uint4 *dst, unsigned long long n4) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n4; i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = make_uint4(i, i, i, i);
}
extern "C" __global__ void zc_copy(const uint4 *src, uint4 *dst, unsigned long long n4) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n4; i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = __ldcv(src + i);
}
'''
mod = cp.RawModule(code=CUDA + CEILINGS)
resident = mod.get_function("resident_kernel")
reset = mod.get_function("resident_reset")
SMS = cp.cuda.Device().attributes["MultiProcessorCount"]


def launch(n, slots, batches, tile, grid, stream):
    hin_m, hin = pinned(slots * n)
    hout_m, hout = pinned(slots * n)
    ctl_m, ctl = pinned((2 + slots) * CTL_LINE, np.uint64)
    hin[:] = np.random.default_rng(1).integers(0, 2**32, slots * n, dtype=np.uint32)
    words = cp.zeros((4 + slots) * DEV_LINE, dtype=cp.uint64)
    reset((1,), (256,), (words, np.uint64(words.size)), stream=stream)
    args = (np.uint64(hin_m.ptr), np.uint64(hout_m.ptr), np.uint64(n), np.uint32(K),
            np.uint64(slots), np.uint64(batches), np.uint64(tile), np.uint64(ctl_m.ptr), words,
            np.uint64(READERS))
    return (hin_m, hout_m, ctl_m, words), hin, hout, ctl, lambda: resident(
        (grid,), (256,), args, stream=stream)


def bound(nbytes, nb, tile, grid):
    n, s = nbytes // 4, cp.cuda.Stream(non_blocking=True)
    keep, hin, hout, ctl, go = launch(n, nb, nb, tile, grid, s)
    ctl[0] = nb
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(s)
    go()
    e1.record(s)
    e1.synchronize()
    first, last = slice(0, n), slice((nb - 1) * n, nb * n)
    ok = (np.array_equal(hout[first], reference(hin[first]))
          and np.array_equal(hout[last], reference(hin[last]))
          and all(ctl[(2 + i) * CTL_LINE] == i + 1 for i in range(nb)))
    return nb * nbytes / cp.cuda.get_elapsed_time(e0, e1) / 1e6, ok


def isolated(nbytes, tile, rounds=300, slots=8):
    n, s = nbytes // 4, cp.cuda.Stream(non_blocking=True)
    keep, hin, hout, ctl, go = launch(n, slots, rounds, tile, SMS, s)
    go()
    lat = []
    for b in range(rounds):
        t0 = time.perf_counter_ns()
        ctl[0] = b + 1
        while ctl[(2 + b % slots) * CTL_LINE] != b + 1:
            pass
        lat.append((time.perf_counter_ns() - t0) / 1e3)
    s.synchronize()
    lat = sorted(lat[10:])
    return statistics.median(lat), lat[int(0.99 * len(lat))], np.array_equal(hout, reference(hin))


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [65536, 262144, 1048576]
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), SMS, "SMs", flush=True)
    words = 16 << 20
    am, a = pinned(words)
    bm, b = pinned(words)
    sink = cp.zeros(1, dtype=cp.uint32)
    for name, args in (("zc_read", (np.uint64(am.ptr), np.uint64(words // 4), sink)),
                       ("zc_write", (np.uint64(bm.ptr), np.uint64(words // 4))),
                       ("zc_copy", (np.uint64(am.ptr), np.uint64(bm.ptr), np.uint64(words // 4)))):
        f, s = mod.get_function(name), cp.cuda.Stream(non_blocking=True)
        e0, e1, best = cp.cuda.Event(), cp.cuda.Event(), 0.0
        for _ in range(3):
            e0.record(s)
            f((SMS * 8,), (256,), args, stream=s)
            e1.record(s)
            e1.synchronize()
            best = max(best, words * 4 / cp.cuda.get_elapsed_time(e0, e1) / 1e6)
        print(f"{name}: {best:.1f} GB/s", flush=True)
    for nbytes in sizes:
        nb = max(8, min(512, (32 << 20) // nbytes))
        for tile in (4096, 8192, 16384):
            row = []
            for per_sm in (1, 2, 4):
                runs = [bound(nbytes, nb, tile, SMS * per_sm) for _ in range(3)]
                row.append(f"x{per_sm} {max(g for g, _ in runs):.1f}"
                           + ("" if all(ok for _, ok in runs) else " WRONG"))
            p50, p99, ok = isolated(nbytes, tile)
            print(f"{nbytes >> 10} KiB tile {tile}: bound GB/s {', '.join(row)}; isolated p50 "
                  f"{p50:.1f} p99 {p99:.1f} us{'' if ok else ' WRONG'}", flush=True)


if __name__ == "__main__":
    main()
