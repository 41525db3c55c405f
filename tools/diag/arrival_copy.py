#!/usr/bin/env python3
"""What a batch's copy by the copy engines costs from its arrival when it is enqueued ahead of
its data and released on the device (CuPy and the driver through ctypes, on a GPU).

usage: tools/diag/arrival_copy.py [--bytes B] [--batches N] [--streams S] [--relay [--group G]]
                                  [--push]

Each batch i is enqueued before it arrives, on stream i % S: a stream wait until the host word
`arrived` is at least i + 1 (`cuStreamWaitValue64`), a copy of B bytes from its pinned host
slot to a device slot, and a write of i + 1 to its `done` word in pinned host memory
(`cuStreamWriteValue64`). Then the host releases the batches on a clock (one store of
`arrived` each) and stamps when it sees each `done`. Printed: p50 / p99 / max µs from the store
to the host seeing `done`, at several intervals between arrivals, idle and with T blocks of
another kernel reading pinned host memory (16 KiB in flight each, as the resident kernel's
tiles). The last round of device slots is checked against the host slots.

With `--relay` no copy is enqueued: what is timed is the stream wait's own delay (a relay of
the host's arrival to a word the device reads). With `--group G` too, the waits and writes of G
batches at a time are one `cuStreamBatchMemOp` call, on one stream. With `--push` nothing is
enqueued ahead: at each arrival the host calls `cuStreamWriteValue64` of its `done` word on one
stream (the arrival pushed to the device by a driver call, with no wait on a host word; timed
from before the call). Neither copies anything, so each prints "data ok -". Also printed: the
host's time to enqueue one batch's operations.

Diagnostic only (issue 22, BENCHMARKS.md §13 runs AB and AC): the resident kernel's zero-copy
reads are the queue its arrival poll waits in at 80 % load; the copy engines' traffic delays a
read much less. Run AC (an H100): idle, a copy or a relay enqueued ahead took 2.3-20 us from the
store at the median (a kernel's read of the host: 1.2), and the copies fell behind at 5 us
apart; with 16 or 32 blocks reading the host every form fell behind by milliseconds, even at
20 us apart, but for one stream's relay at 16 blocks and 20 us (21.0 / 42.0 us); so did a
write pushed at each arrival (`--push`), 6-9 us at the median idle.
"""
import argparse
import ctypes
import time

import cupy as cp
import numpy as np

TRAFFIC = r'''
extern "C" __global__ void traffic(const uint4 *rd, unsigned long long rd4, volatile int *stop,
        unsigned *sink) {
    unsigned acc = 0;
    unsigned long long round = 0, t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    __shared__ int s_stop;
    for (;;) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (threadIdx.x == 0) s_stop = *stop || t - t0 > 5000000000ull;  // 5 s at most
        __syncthreads();
        if (s_stop) break;
        const unsigned long long chunks = rd4 / 1024;
        const unsigned long long c = (blockIdx.x + round * gridDim.x) % chunks;
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = __ldcv(rd + c * 1024 + j * 256 + threadIdx.x);
#pragma unroll
        for (int j = 0; j < 4; j++) acc += v[j].x ^ v[j].w;
        round++;
        __syncthreads();
    }
    atomicAdd(sink, acc);
}
'''


def check(r, what):
    if r != 0:
        raise RuntimeError(f"{what} failed: CUresult {r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=65536)
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--relay", action="store_true", help="no copy: the wait and the write only")
    ap.add_argument("--group", type=int, default=0, help="with --relay: batches a batch-op call")
    ap.add_argument("--push", action="store_true",
                    help="a cuStreamWriteValue64 at each arrival, nothing enqueued ahead")
    a = ap.parse_args()
    cuda = ctypes.CDLL("libcuda.so.1")
    wait64 = cuda.cuStreamWaitValue64_v2
    wait64.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
    write64 = cuda.cuStreamWriteValue64_v2
    write64.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint]
    copy = cuda.cuMemcpyHtoDAsync_v2
    copy.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    batch_op = cuda.cuStreamBatchMemOp_v2
    batch_op.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_uint]
    if a.group and (not a.relay or not 0 < a.group < 128):
        raise SystemExit("--group G needs --relay and 0 < G < 128 (at most 255 operations)")
    if a.push and a.relay:
        raise SystemExit("--push enqueues nothing ahead: not with --relay")
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), flush=True)
    n, b = a.batches, a.bytes
    words = cp.cuda.alloc_pinned_memory(8 * (n + 1))
    w = np.frombuffer(words, np.uint64, n + 1)  # w[0] arrived, w[1 + i] batch i's done
    host = cp.cuda.alloc_pinned_memory(n * b)
    hv = np.frombuffer(host, np.uint8, n * b)
    hv[:] = (np.arange(n * b, dtype=np.uint64) * 2654435761 >> 13).astype(np.uint8)
    dev = cp.empty(n * b, dtype=cp.uint8)
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(a.streams)]
    side = cp.cuda.Stream(non_blocking=True)
    f = cp.RawModule(code=TRAFFIC).get_function("traffic")
    rmem = cp.cuda.alloc_pinned_memory(64 << 20)
    np.frombuffer(rmem, np.uint32, 16 << 20)[:] = 3
    stop = cp.zeros(1, dtype=cp.int32)
    sink = cp.zeros(1, dtype=cp.uint32)
    for blocks in (0, 16, 32):
        for interval_us in (20.0, 5.0, 2.5):
            w[:] = 0
            dev.fill(0)
            cp.cuda.Device().synchronize()
            if blocks:
                stop.fill(0)
                cp.cuda.Device().synchronize()
                f((blocks,), (256,), (np.uint64(rmem.ptr), np.uint64((64 << 20) // 16), stop,
                                      sink), stream=side)
                time.sleep(0.002)  # the traffic under way
            # Enqueued after the device's synchronize above: with these waits open (their
            # values stored only below) a device-wide synchronize waits for ever.
            t_enq = time.perf_counter_ns()
            if a.group:
                ops = np.zeros((2 * a.group, 6), dtype=np.uint64)  # CUstreamBatchMemOpParams
                for g0 in range(0, n, a.group):
                    m = min(a.group, n - g0)
                    for j in range(m):
                        i = g0 + j
                        ops[2 * j] = (4, words.ptr, i + 1, 0, 0, 0)  # WAIT_VALUE_64, GEQ
                        ops[2 * j + 1] = (5, words.ptr + 8 * (i + 1), i + 1, 0, 0, 0)  # WRITE
                    check(batch_op(streams[0].ptr, 2 * m, ops.ctypes.data, 0),
                          "cuStreamBatchMemOp")
            for i in range(0 if a.group or a.push else n):
                s = streams[i % a.streams].ptr
                check(wait64(s, words.ptr, i + 1, 0), "cuStreamWaitValue64")  # GEQ
                if not a.relay:
                    check(copy(dev.data.ptr + i * b, host.ptr + i * b, b, s),
                          "cuMemcpyHtoDAsync")
                check(write64(s, words.ptr + 8 * (i + 1), i + 1, 0), "cuStreamWriteValue64")
            enq_us = (time.perf_counter_ns() - t_enq) / 1000.0 / n
            released = np.zeros(n, dtype=np.int64)
            seen = np.zeros(n, dtype=np.int64)
            step = int(interval_us * 1000)
            start = time.perf_counter_ns()
            nxt, first = 0, 0
            deadline = start + 2_000_000_000
            while first < n:
                t = time.perf_counter_ns()
                if t > deadline:
                    w[0] = n  # release every wait, so that the streams drain
                    stop.fill(1)
                    raise RuntimeError(f"batch {first} not done after 2 s")
                if nxt < n and t >= start + nxt * step:
                    w[0] = nxt + 1
                    released[nxt] = t
                    if a.push:
                        check(write64(streams[0].ptr, words.ptr + 8 * (nxt + 1), nxt + 1, 0),
                              "cuStreamWriteValue64")
                    nxt += 1
                while first < nxt and w[1 + first] == first + 1:
                    seen[first] = time.perf_counter_ns()
                    first += 1
            if blocks:
                stop.fill(1)  # on the default stream: the kernel reads it when it next looks
            cp.cuda.Device().synchronize()
            # Checked where something was copied.
            ok = "-" if a.relay or a.push else bool((dev.get() == hv).all())
            lat = np.sort(seen - released) / 1000.0
            print(f"traffic blocks {blocks:2} interval {interval_us:4.1f} us "
                  f"({b * 1e3 / interval_us / 1e6:.1f} GB/s of copies): p50 "
                  f"{lat[n // 2]:.1f} p99 {lat[n * 99 // 100]:.1f} max {lat[-1]:.1f} us; "
                  f"enqueue {enq_us:.2f} us a batch; data ok {ok}", flush=True)


if __name__ == "__main__":
    main()
