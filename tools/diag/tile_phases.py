#!/usr/bin/env python3
"""Where a resident-kernel tile's time goes (CuPy, on a GPU).

usage: tools/diag/tile_phases.py

B blocks of 256 threads (B = 1, 4, 24) each take one tile of 4096 u32s (16 KiB, the resident
kernel's tile at 64 KiB) from a pinned host buffer read in place, and do what the resident
kernel does with it: four 16-byte loads a thread (`__ldcv`), f, g and h at intensity k, the
stores, a device-scope fence and a system-scope fence. Barriers between the steps let each
block stamp `%globaltimer` after each one:

    loads    the block's loads have landed (a barrier whose predicate uses a value of every
             load)
    compute  every thread has its 16 results (a barrier whose predicate uses all 16)
    stores   every thread has issued its stores (a barrier)
    fence    thread 0 after __threadfence()
    sysfence thread 0 after __threadfence_system() (the resident kernel's before `done`)

and `fused` is main's loop as it is (no barriers between the steps: loads, then compute and
store), from the start to the end of the same fences. Each line: the medians (and p90) in µs
over every block of 200 launches, by k (0, 8), where the outputs go (pinned host memory or
device memory) and the compute's form: `loop` is main's (`fgh_elem` with k at run time),
`fixed8` the same with k = 8 known when compiled (its loops unrolled; k = 8 only), `quad` a
uint4's four
elements in the same loops (k at run time), `quad4` a thread's four uint4s in the same loops.
f, g, h and `fgh_elem` are the demo's own (its `CUDA_SOURCE`, read from workload.rs), and
each form's outputs are checked against tools/resident-kernel.py's NumPy reference.

Diagnostic only (issue 22): main's tile takes about 8 µs where its reads alone would take
about 3 (BENCHMARKS.md §13, run Z). First run: run AA (H100), with an earlier form of this
script: the same kernels, with copies of f, g, h and the reference, the device output filled
on another stream, and the compute barrier's predicate on 4 of the 16 results. Not run on a
GPU in this form yet. At k = 8 the compute is 5.0 µs of
a lone tile's 8.2 (`loop`); `quad4`, the form of tools/diag/fgh-sixteen.patch, takes 2.1. With
24 blocks at once the loads take 8.9 µs (384 KiB in flight), and the two fences together
8-11 µs where the outputs go to the host, against 1.3 µs for a block alone or with the
outputs in device memory.
"""
import importlib.util
import os

import cupy as cp
import numpy as np

# The demo's kernels (its CUDA_SOURCE, with f_elem, g_elem, h_elem and fgh_elem) and the NumPy
# reference, as tools/resident-kernel.py reads and defines them.
_SPEC = importlib.util.spec_from_file_location(
    "resident_kernel", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "resident-kernel.py"))
RK = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(RK)

EXTRA = r'''
template <unsigned K> __device__ __forceinline__ unsigned fgh_fixed(unsigned v) {
    unsigned x = v, y = v;
#pragma unroll
    for (unsigned j = 0; j < K; j++) x = x * 1664525u + 1013904223u;
#pragma unroll
    for (unsigned j = 0; j < K; j++) { y ^= y << 13; y ^= y >> 17; y ^= y << 5; }
    unsigned r = x ^ ((y << 7) | (y >> 25));
#pragma unroll
    for (unsigned j = 0; j < K; j++) {
        r = r * 0x2545F491u;
        r = ((r << 11) | (r >> 21)) ^ 0x9E3779B9u;
    }
    return r;
}
// f, g and h of a uint4's four elements in the same loops (k at run time): four chains a loop.
__device__ __forceinline__ uint4 fgh_quad(uint4 v, unsigned k) {
    uint4 x = v, y = v, r;
    for (unsigned j = 0; j < k; j++) {
        x.x = x.x * 1664525u + 1013904223u; x.y = x.y * 1664525u + 1013904223u;
        x.z = x.z * 1664525u + 1013904223u; x.w = x.w * 1664525u + 1013904223u;
        y.x ^= y.x << 13; y.x ^= y.x >> 17; y.x ^= y.x << 5;
        y.y ^= y.y << 13; y.y ^= y.y >> 17; y.y ^= y.y << 5;
        y.z ^= y.z << 13; y.z ^= y.z >> 17; y.z ^= y.z << 5;
        y.w ^= y.w << 13; y.w ^= y.w >> 17; y.w ^= y.w << 5;
    }
    r.x = x.x ^ ((y.x << 7) | (y.x >> 25)); r.y = x.y ^ ((y.y << 7) | (y.y >> 25));
    r.z = x.z ^ ((y.z << 7) | (y.z >> 25)); r.w = x.w ^ ((y.w << 7) | (y.w >> 25));
    for (unsigned j = 0; j < k; j++) {
        r.x *= 0x2545F491u; r.x = ((r.x << 11) | (r.x >> 21)) ^ 0x9E3779B9u;
        r.y *= 0x2545F491u; r.y = ((r.y << 11) | (r.y >> 21)) ^ 0x9E3779B9u;
        r.z *= 0x2545F491u; r.z = ((r.z << 11) | (r.z >> 21)) ^ 0x9E3779B9u;
        r.w *= 0x2545F491u; r.w = ((r.w << 11) | (r.w >> 21)) ^ 0x9E3779B9u;
    }
    return r;
}
// The same for four uint4s at once: sixteen chains a loop.
__device__ __forceinline__ void fgh_quad4(const uint4 *v, uint4 *r, unsigned k) {
    unsigned x[16], y[16], o[16];
#pragma unroll
    for (int e = 0; e < 16; e++) {
        const uint4 q = v[e / 4];
        x[e] = y[e] = (e % 4 == 0) ? q.x : (e % 4 == 1) ? q.y : (e % 4 == 2) ? q.z : q.w;
    }
    for (unsigned j = 0; j < k; j++) {
#pragma unroll
        for (int e = 0; e < 16; e++) {
            x[e] = x[e] * 1664525u + 1013904223u;
            y[e] ^= y[e] << 13; y[e] ^= y[e] >> 17; y[e] ^= y[e] << 5;
        }
    }
#pragma unroll
    for (int e = 0; e < 16; e++) o[e] = x[e] ^ ((y[e] << 7) | (y[e] >> 25));
    for (unsigned j = 0; j < k; j++) {
#pragma unroll
        for (int e = 0; e < 16; e++) {
            o[e] *= 0x2545F491u;
            o[e] = ((o[e] << 11) | (o[e] >> 21)) ^ 0x9E3779B9u;
        }
    }
#pragma unroll
    for (int q = 0; q < 4; q++) r[q] = make_uint4(o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3]);
}
__device__ __forceinline__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
template <int FORM>
__device__ __forceinline__ uint4 fgh4(uint4 v, unsigned k) {
    uint4 r;
    if (FORM == 0) {
        r.x = fgh_elem(v.x, k); r.y = fgh_elem(v.y, k); r.z = fgh_elem(v.z, k); r.w = fgh_elem(v.w, k);
    } else if (FORM == 2) {
        r = fgh_quad(v, k);
    } else {
        r.x = fgh_fixed<8>(v.x); r.y = fgh_fixed<8>(v.y); r.z = fgh_fixed<8>(v.z); r.w = fgh_fixed<8>(v.w);
    }
    return r;
}
// FORM 0: loop (k at run time); 1: fixed8 (k = 8 when compiled, its loops unrolled); 2: quad
// (a uint4's four elements in the same loops); 3: quad4 (four uint4s in the same loops).
// FUSED: main's loop without barriers between the steps.
template <int FORM, int FUSED>
__global__ void tile_steps(const unsigned *in, unsigned *out, unsigned k, unsigned long long *stamps,
                     unsigned *flag) {
    const unsigned long long n = 4096, step = 1024;
    const unsigned *bin = in + blockIdx.x * n;
    unsigned *bout = out + blockIdx.x * n;
    const unsigned long long i = 4ull * threadIdx.x;
    __syncthreads();
    const unsigned long long t0 = now();
    unsigned long long t1 = 0, t2 = 0, t3 = 0;
    uint4 v[4], r[4];
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = __ldcv((const uint4 *)(bin + i + j * step));
    if (FUSED) {
        if (FORM == 3) {
            fgh_quad4(v, r, k);
#pragma unroll
            for (int j = 0; j < 4; j++) *(uint4 *)(bout + i + j * step) = r[j];
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) *(uint4 *)(bout + i + j * step) = fgh4<FORM>(v[j], k);
        }
        __syncthreads();
    } else {
        __syncthreads_or((v[0].x ^ v[1].x ^ v[2].x ^ v[3].x) == 0x9E3779B9u);
        t1 = now();
        if (FORM == 3) {
            fgh_quad4(v, r, k);
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) r[j] = fgh4<FORM>(v[j], k);
        }
        unsigned all = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) all ^= r[j].x ^ r[j].y ^ r[j].z ^ r[j].w;
        __syncthreads_or(all == 0x9E3779B9u);
        t2 = now();
#pragma unroll
        for (int j = 0; j < 4; j++) *(uint4 *)(bout + i + j * step) = r[j];
        __syncthreads();
        t3 = now();
    }
    if (threadIdx.x == 0) {
        __threadfence();
        const unsigned long long t4 = now();
        __threadfence_system();
        const unsigned long long t5 = now();
        *(volatile unsigned *)(flag + blockIdx.x * 16) = 1;
        unsigned long long *s = stamps + blockIdx.x * 8;
        s[0] = t0; s[1] = t1; s[2] = t2; s[3] = t3; s[4] = t4; s[5] = t5;
    }
}
'''
FORMS = {"loop": 0, "fixed8": 1, "quad": 2, "quad4": 3}
BLOCKS = (1, 4, 24)
REPS = 200
N = 4096


def q(xs, p):
    return float(np.percentile(xs, p)) / 1000


def main():
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), flush=True)
    names = [f"tile_steps<{f},{u}>" for f in FORMS.values() for u in (0, 1)]
    mod = cp.RawModule(code=RK.CUDA + EXTRA, name_expressions=names, options=("-std=c++14",))
    nb = max(BLOCKS)
    hin_mem = cp.cuda.alloc_pinned_memory(nb * N * 4)
    hin = np.frombuffer(hin_mem, np.uint32, nb * N)
    hin[:] = np.random.default_rng(7).integers(0, 1 << 32, nb * N, dtype=np.uint64).astype(
        np.uint32)
    hout_mem = cp.cuda.alloc_pinned_memory(nb * N * 4)
    hout = np.frombuffer(hout_mem, np.uint32, nb * N)
    dout = cp.zeros(nb * N, dtype=cp.uint32)
    flag_mem = cp.cuda.alloc_pinned_memory(nb * 64)
    stamps = cp.zeros(nb * 8, dtype=cp.uint64)
    stream = cp.cuda.Stream(non_blocking=True)
    for k in (0, 8):
        want = RK.reference(hin, k)
        for out_name in ("host", "device"):
            for form, fid in FORMS.items():
                if k != 8 and form == "fixed8":
                    continue
                for fused in (0, 1):
                    f = mod.get_function(f"tile_steps<{fid},{fused}>")
                    for blocks in BLOCKS:
                        ph = {n: [] for n in ("loads", "compute", "stores", "fence", "sysfence",
                                              "total")}
                        for rep in range(REPS):
                            hout[:] = 0
                            with stream:  # the kernel's stream, so the fill is done before it
                                dout.fill(0)
                            optr = hout_mem.ptr if out_name == "host" else dout.data.ptr
                            f((blocks,), (256,), (np.uint64(hin_mem.ptr), np.uint64(optr),
                                                  np.uint32(k), stamps,
                                                  np.uint64(flag_mem.ptr)), stream=stream)
                            stream.synchronize()
                            s = stamps.get().reshape(nb, 8)[:blocks].astype(np.int64)
                            if rep == 0:
                                got = hout if out_name == "host" else dout.get()
                                if not np.array_equal(got[: blocks * N], want[: blocks * N]):
                                    print(f"  WRONG outputs: k {k} {out_name} {form} fused "
                                          f"{fused} blocks {blocks}", flush=True)
                            ph["total"] += list(s[:, 5] - s[:, 0])
                            if not fused:
                                ph["loads"] += list(s[:, 1] - s[:, 0])
                                ph["compute"] += list(s[:, 2] - s[:, 1])
                                ph["stores"] += list(s[:, 3] - s[:, 2])
                                ph["fence"] += list(s[:, 4] - s[:, 3])
                                ph["sysfence"] += list(s[:, 5] - s[:, 4])
                        cells = " ".join(f"{n} {q(x, 50):.2f} ({q(x, 90):.2f})"
                                         for n, x in ph.items() if x)
                        print(f"k {k} out {out_name:6} {form:8} {'fused' if fused else 'split'} "
                              f"blocks {blocks:2}: {cells}", flush=True)


if __name__ == "__main__":
    main()
