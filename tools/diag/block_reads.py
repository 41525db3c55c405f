#!/usr/bin/env python3
"""How fast one block reads pinned host memory in place, against the loads it keeps in flight
(CuPy, on a GPU).

usage: tools/diag/block_reads.py

For L = 1, 2, 4, 8 and 16 sixteen-byte loads a thread issued before the first is used (256
threads a block, so 4 to 64 KiB in flight a block) and 1 to 132 blocks, each block reading
chunks of 256 x L x 16 bytes of a 64 MiB pinned buffer in turn: GB/s in all and per block,
best of three. Each sum is checked against NumPy's.

Diagnostic only (issue 22, BENCHMARKS.md §13 run Y): the resident kernel's blocks keep 16 KiB
of host reads in flight (L = 4) and each moves about 2 GB/s, so a 64 KiB batch alone is read
at four blocks' pace and the link fills only with many batches reading at once. If a block's
rate grows with L, fewer blocks fill the link, and the oldest batch could be served first.
First run: BENCHMARKS.md §13 run Z (H100). One block reads at most about 11 GB/s, reached with
16 KiB in flight, and the link fills with about 128 KiB in flight, so the resident kernel's
2 GB/s a reading block is not its read rate.
"""
import cupy as cp
import numpy as np

SOURCE = r'''
template <int L>
__global__ void reads(const uint4 *src, unsigned long long n4, unsigned *sum) {
    const unsigned long long chunk = 256ull * L;
    unsigned acc = 0;
    for (unsigned long long base = blockIdx.x * chunk; base + chunk <= n4;
         base += (unsigned long long)gridDim.x * chunk) {
        uint4 v[L];
#pragma unroll
        for (int j = 0; j < L; j++) v[j] = __ldcv(src + base + j * 256 + threadIdx.x);
#pragma unroll
        for (int j = 0; j < L; j++) acc += v[j].x + v[j].y + v[j].z + v[j].w;
    }
    atomicAdd(sum, acc);
}
'''
LOADS = (1, 2, 4, 8, 16)
BLOCKS = (1, 2, 4, 8, 16, 32)


def main():
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), sms, "SMs", flush=True)
    names = [f"reads<{n}>" for n in LOADS]
    mod = cp.RawModule(code=SOURCE, name_expressions=names)
    nbytes = 64 << 20
    mem = cp.cuda.alloc_pinned_memory(nbytes)
    host = np.frombuffer(mem, np.uint32, nbytes // 4)
    host[:] = np.arange(nbytes // 4, dtype=np.uint32)
    stream = cp.cuda.Stream(non_blocking=True)
    total = cp.zeros(1, dtype=cp.uint32)
    for n in LOADS:
        f = mod.get_function(f"reads<{n}>")
        chunk = 256 * n * 16
        # Whole chunks only: each block reads chunks blockIdx, blockIdx + blocks, ...
        used = nbytes // chunk * chunk
        want = int(host[: used // 4].astype(np.uint64).sum() % (1 << 32))
        row = []
        for blocks in BLOCKS + (sms,):
            best = 0.0
            for _ in range(3):
                total.fill(0)
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(stream)
                f((blocks,), (256,), (np.uint64(mem.ptr), np.uint64(nbytes // 16), total),
                  stream=stream)
                e1.record(stream)
                e1.synchronize()
                if int(total.get()[0]) != want:
                    print(f"  L {n} blocks {blocks}: WRONG sum", flush=True)
                best = max(best, used / cp.cuda.get_elapsed_time(e0, e1) / 1e6)
            row.append(f"{blocks}: {best:.1f} ({best / blocks:.2f}/block)")
        print(f"L {n} ({256 * n * 16 >> 10} KiB in flight a block): GB/s " + ", ".join(row),
              flush=True)


if __name__ == "__main__":
    main()
