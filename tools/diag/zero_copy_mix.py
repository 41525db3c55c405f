#!/usr/bin/env python3
"""Both directions of the bus at once, moved by kernels in place (zero-copy), by the copy
engines, or one of each (CuPy, on a GPU).

usage: tools/diag/zero_copy_mix.py [MIB]        (default 256 MiB each way)

Each row moves MIB in (pinned host -> device) and MIB out (device -> pinned host) at the same
time, on two streams, and prints the GB/s of the slower direction (what a pipeline that needs
both gets) and of each direction alone in that run:

- kernel/kernel: one kernel reads the host input in place and writes the host output in place
  (the resident engine's copy in place, `zc_copy`), at 1 and 8 blocks a multiprocessor;
- copy/copy: cuMemcpyAsync each way (the copy engines; "copies together");
- kernel in / copy out: a kernel reads the host in place into device memory while a copy
  engine copies device memory out;
- copy in / kernel out: a copy engine copies in while a kernel writes device memory to the
  host in place.

Diagnostic only (issue 22): whether the resident engine at 1 MiB could mix the two.
"""
import sys
import time

import cupy as cp
import numpy as np

SMS = cp.cuda.Device().attributes["MultiProcessorCount"]
SRC = r'''
extern "C" __global__ void zc_move(const uint4 *src, uint4 *dst, unsigned long long n4) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n4; i += (unsigned long long)gridDim.x * blockDim.x)
        dst[i] = __ldcv(src + i);
}
'''
move = cp.RawModule(code=SRC).get_function("zc_move")


def pinned(nbytes, fill):
    mem = cp.cuda.alloc_pinned_memory(nbytes)
    np.frombuffer(mem, np.uint8, nbytes)[:] = fill
    return mem


def timed(parts):
    """parts: [(stream, fn)]; GB/s-time of each part (its own end event) and of all."""
    ev = []
    t0 = cp.cuda.Event()
    t0.record(parts[0][0])
    for s, _ in parts[1:]:
        s.wait_event(t0)
    for s, fn in parts:
        fn()
        e = cp.cuda.Event()
        e.record(s)
        ev.append(e)
    for e in ev:
        e.synchronize()
    return [cp.cuda.get_elapsed_time(t0, e) for e in ev]


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    n = mib << 20
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), SMS, "SMs", mib, "MiB each way",
          flush=True)
    # Ones move in and out; the destinations start as zeros, so the check at the end sees
    # that something moved each way.
    hin, hout = pinned(n, 1), pinned(n, 0)
    din, dout = cp.zeros(n, cp.uint8), cp.ones(n, cp.uint8)
    s_in, s_out = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    n4 = np.uint64(n // 16)

    def kernel(src, dst, stream, per_sm):
        return lambda: move((SMS * per_sm,), (256,), (np.uint64(src), np.uint64(dst), n4),
                            stream=stream)

    def copy(dst, src, stream):
        return lambda: cp.cuda.runtime.memcpyAsync(dst, src, n, cp.cuda.runtime.memcpyDefault,
                                                    stream.ptr)

    rows = {
        "kernel/kernel x1 (one kernel, host to host)": [(s_in, kernel(hin.ptr, hout.ptr, s_in, 1))],
        "kernel/kernel x8 (one kernel, host to host)": [(s_in, kernel(hin.ptr, hout.ptr, s_in, 8))],
        "copy/copy": [(s_in, copy(din.data.ptr, hin.ptr, s_in)),
                      (s_out, copy(hout.ptr, dout.data.ptr, s_out))],
        "kernel in x1 / copy out": [(s_in, kernel(hin.ptr, din.data.ptr, s_in, 1)),
                                    (s_out, copy(hout.ptr, dout.data.ptr, s_out))],
        "kernel in x8 / copy out": [(s_in, kernel(hin.ptr, din.data.ptr, s_in, 8)),
                                    (s_out, copy(hout.ptr, dout.data.ptr, s_out))],
        "copy in / kernel out x1": [(s_in, copy(din.data.ptr, hin.ptr, s_in)),
                                    (s_out, kernel(dout.data.ptr, hout.ptr, s_out, 1))],
        "copy in / kernel out x8": [(s_in, copy(din.data.ptr, hin.ptr, s_in)),
                                    (s_out, kernel(dout.data.ptr, hout.ptr, s_out, 8))],
        "kernel in x1 alone": [(s_in, kernel(hin.ptr, din.data.ptr, s_in, 1))],
        "kernel out x1 alone": [(s_out, kernel(dout.data.ptr, hout.ptr, s_out, 1))],
        "copy in alone": [(s_in, copy(din.data.ptr, hin.ptr, s_in))],
        "copy out alone": [(s_out, copy(hout.ptr, dout.data.ptr, s_out))],
    }
    for name, parts in rows.items():
        best = None
        for _ in range(4):
            ms = timed(parts)
            if best is None or max(ms) < max(best):
                best = ms
        each = ", ".join(f"{n / m / 1e6:.1f}" for m in best)
        print(f"{name}: {n / max(best) / 1e6:.1f} GB/s of batches (each part: {each})", flush=True)
    dev_ok = bool((din == 1).all()) and bool(np.frombuffer(hout, np.uint8, n).all())
    print("data moved:", "ok" if dev_ok else "WRONG", flush=True)


if __name__ == "__main__":
    main()
