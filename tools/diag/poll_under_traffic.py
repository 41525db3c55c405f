#!/usr/bin/env python3
"""How long one read of pinned host memory takes while other blocks read or write the host
(CuPy, on a GPU).

usage: tools/diag/poll_under_traffic.py [--polls N]

One block polls: its thread 0 reads one word of pinned host memory at a time (a new 128-byte
line each read, so no cache answers) and stamps `%globaltimer` around each read. T other
blocks of 256 threads make traffic until the poller is done: `reads` blocks keep 16 KiB of
host loads in flight each (the resident kernel's tile), `writes` blocks store 4 KiB a round to
a pinned host buffer (posted writes), `both` splits the T blocks between the two; for T = 0, 2,
4, 8, 16, 32. Then `ce-in` / `ce-out`: no traffic blocks, but 200 copies of 4 MiB by the copy
engines (host to device / device to host, on another stream) queued before the poller starts. Printed: the read's p50 / p99 / max in µs and the blocks' traffic in GB/s. Each value the
poller read and the writes' last round are checked.

Diagnostic only (issue 22, BENCHMARKS.md §13 run AB): the resident kernel polls the host's
arrival word with one read at a time, and at 64 KiB and 80 % load it sees arrivals late and in
pairs (run X). If a read waits behind the posted writes on the link (PCIe orders a read after
the writes issued before it), the poll's latency grows with the write traffic, not with the
read traffic.
First runs: BENCHMARKS.md §13 run AB (H200). The read waits behind the blocks' reads (p99 11 µs
with 23 GB/s of them), not behind their writes below the link's rate (1.8 µs with 38.8 GB/s),
and much less behind the copy engines' traffic (3.9 µs host to device at the link's rate).
"""
import argparse

import cupy as cp
import numpy as np

SOURCE = r'''
__device__ __forceinline__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Block 0 polls; blocks 1.. make traffic: mode 0 none, 1 reads, 2 writes, 3 half each.
extern "C" __global__ void probe(const unsigned *poll_src, unsigned long long polls,
        unsigned long long *stamps, unsigned *wrong, const uint4 *rd, unsigned long long rd4,
        uint4 *wr, unsigned long long wr4, int mode, volatile int *stop,
        unsigned long long *moved, unsigned *sink) {
    volatile __shared__ unsigned s_v;
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) {
            const unsigned long long start = now();
            unsigned bad = 0;
            for (unsigned long long i = 0; i < polls; i++) {
                const unsigned long long word = (i * 32) % (1ull << 20);
                const unsigned long long t0 = now();
                const unsigned v = *(volatile const unsigned *)(poll_src + word);
                // The stamp after the read must wait for its value: a volatile store of it
                // (which stalls until the load returns) comes first.
                s_v = v;
                unsigned long long t1;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1) : : "memory");
                if (v != (unsigned)(word * 2654435761u)) bad++;
                stamps[i] = t1 - t0;
            }
            stamps[polls] = now() - start;
            *wrong = bad;
            __threadfence();
            *stop = 1;
        }
        return;
    }
    const int writer = mode == 2 || (mode == 3 && (blockIdx.x & 1));
    const unsigned long long t_end = now() + 2000000000ull;  // 2 s at most, whatever happens
    unsigned long long bytes = 0, round = 0;
    unsigned acc = 0;
    __shared__ int s_stop;
    for (;;) {
        if (threadIdx.x == 0) s_stop = *stop || now() > t_end;
        __syncthreads();
        if (s_stop) break;
        if (writer) {
            const unsigned long long chunks = wr4 / 256;
            const unsigned long long c = (blockIdx.x + round * gridDim.x) % chunks;
            uint4 v;
            v.x = v.y = v.z = (unsigned)round;
            v.w = blockIdx.x;
            wr[c * 256 + threadIdx.x] = v;
            bytes += 4096;
        } else {
            const unsigned long long chunks = rd4 / 1024;
            const unsigned long long c = (blockIdx.x + round * gridDim.x) % chunks;
            uint4 v[4];
#pragma unroll
            for (int j = 0; j < 4; j++) v[j] = __ldcv(rd + c * 1024 + j * 256 + threadIdx.x);
#pragma unroll
            for (int j = 0; j < 4; j++) acc += v[j].x ^ v[j].w;
            bytes += 16384;
        }
        round++;
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(moved, bytes);
    atomicAdd(sink, acc);
}
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--polls", type=int, default=4000)
    polls = ap.parse_args().polls
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), flush=True)
    f = cp.RawModule(code=SOURCE).get_function("probe")
    # The polled words: 1 MiB of pinned memory, word i holds i * 2654435761 (mod 2^32).
    pmem = cp.cuda.alloc_pinned_memory(4 << 20)
    pwords = np.frombuffer(pmem, np.uint32, 1 << 20)
    pwords[:] = (np.arange(1 << 20, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(np.uint32)
    rmem = cp.cuda.alloc_pinned_memory(64 << 20)
    np.frombuffer(rmem, np.uint32, 16 << 20)[:] = 7
    wmem = cp.cuda.alloc_pinned_memory(64 << 20)
    whost = np.frombuffer(wmem, np.uint32, 16 << 20)
    stamps = cp.zeros(polls + 1, dtype=cp.uint64)
    wrong = cp.zeros(1, dtype=cp.uint32)
    stop = cp.zeros(1, dtype=cp.int32)
    moved = cp.zeros(1, dtype=cp.uint64)
    sink = cp.zeros(1, dtype=cp.uint32)
    stream = cp.cuda.Stream(non_blocking=True)
    dev = cp.empty(64 << 20, dtype=cp.uint8)
    copier = cp.cuda.Stream(non_blocking=True)
    for name, mode in (("reads", 1), ("writes", 2), ("both", 3), ("ce-in", 4), ("ce-out", 5)):
        for t in (0, 2, 4, 8, 16, 32) if mode < 4 else (200,):
            if t == 0 and mode != 1:
                continue
            whost[:] = 0xFFFFFFFF
            with stream:
                stop.fill(0)
                moved.fill(0)
                wrong.fill(0)
            copies = t if mode >= 4 else 0
            blocks = 1 if mode >= 4 else 1 + t
            if copies:
                # Copy-engine traffic: t copies of 4 MiB queued on another stream before the
                # poller starts (about 16 ms at 50 GB/s: longer than the polls).
                for c in range(copies):
                    o = (c % 16) << 22
                    if mode == 4:
                        cp.cuda.runtime.memcpyAsync(dev.data.ptr + o, rmem.ptr + o, 4 << 20,
                                                    cp.cuda.runtime.memcpyHostToDevice,
                                                    copier.ptr)
                    else:
                        cp.cuda.runtime.memcpyAsync(wmem.ptr + o, dev.data.ptr + o, 4 << 20,
                                                    cp.cuda.runtime.memcpyDeviceToHost,
                                                    copier.ptr)
            f((blocks,), (256,), (np.uint64(pmem.ptr), np.uint64(polls), stamps, wrong,
                                 np.uint64(rmem.ptr), np.uint64((64 << 20) // 16),
                                 np.uint64(wmem.ptr), np.uint64((64 << 20) // 16),
                                 np.int32(mode), stop, moved, sink), stream=stream)
            stream.synchronize()
            copier.synchronize()
            s = stamps.get()
            lat = np.sort(s[:polls]) / 1000.0
            secs = s[polls] / 1e9
            gbps = int(moved.get()[0]) / secs / 1e9
            if copies:
                gbps = float("nan")  # the copies outlast the poller: not a rate of its time
            bad = int(wrong.get()[0])
            # Some block wrote a round: the host sees (round, round, round, block) there.
            w = whost.reshape(-1, 4)
            wrote = w[w[:, 3] != 0xFFFFFFFF]
            ok = (wrote[:, 0] == wrote[:, 1]).all() and (wrote[:, 1] == wrote[:, 2]).all()
            wcheck = "" if mode in (1, 4, 5) else f" written {len(wrote)} ok {bool(ok)}"
            print(f"{name:6} T {t:2}: read p50 {lat[polls // 2]:.2f} p99 "
                  f"{lat[polls * 99 // 100]:.2f} max {lat[-1]:.2f} us; traffic "
                  f"{gbps:.1f} GB/s; wrong {bad}{wcheck}", flush=True)


if __name__ == "__main__":
    main()
