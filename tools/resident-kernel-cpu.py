#!/usr/bin/env python3
"""The resident kernels' CUDA C, run on the CPU: a check of their protocol without a GPU.

usage: tools/resident-kernel-cpu.py [--kernel resident_kernel] [--extra-block] [--k 2] [CASE ...]

Each CASE is `n,slots,batches,blocks,threads,p7,p10[,stop_at]`: batches of n u32s over `slots`
slots, `blocks` blocks of `threads` threads, p7 and p10 the kernel's 7th and 10th arguments
(resident_kernel: the tile in elements and the read cap; a kernel of the same signature from
tools/diag/sliced-resident-kernel.patch: the most batches a turn and the loads a thread), and
where given, the host stops after releasing `stop_at` batches. Without a CASE, a set of cases
with sizes of 17 to 4096 elements, sizes that are not multiples of four, 1 to 24 slots and
stops part way. `--k` is the intensity that the kernel runs and the check expects (default 2;
the demo's is 8).

The kernel source is the demo's `CUDA_SOURCE` (seqsync-demo/src/demo/workload.rs) as it is in
this checkout, compiled with g++ (C++20): every CUDA thread is an OS thread, `__syncthreads` a
barrier of the block's threads, `__shared__` variables one per block, atomics and fences
sequentially consistent, and `__ldcv` a volatile load. A host thread plays get_data and
process_data: it fills batch s's input slot once batch s - slots was checked, raises
`arrived`, and checks every element of each batch once its `done` word says so; at the end it
raises `stop`. A case fails when an element is wrong or the kernel does not end (a timeout).

What it catches: a lost or early `done`, a slot overwritten while read, a batch skipped or
taken twice, a hang on stop. What it cannot: the GPU's memory model (the emulation is stronger),
timing, or throughput. Break the kernel (say, count a batch done one tile early) and watch a
case fail before trusting it.

CI runs the default cases on main's kernel at k = 2 and k = 8 (.ci/run; skipped, saying so,
where there is no g++). Needs g++ with C++20 (<barrier>). BENCHMARKS.md §13 run Z has its first use.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "seqsync-demo", "src", "demo", "workload.rs")

PRELUDE = r'''
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
struct uint4 { unsigned x, y, z, w; };
struct Dim3 { unsigned x, y, z; };
thread_local Dim3 threadIdx, blockIdx;
Dim3 blockDim, gridDim;
std::vector<std::barrier<> *> BARRIERS;
template <class T, int ID> T *shared_of() { static T per_block[4096]; return per_block; }
inline long long clock64() {  // the pauses' clock: a spinning thread lets the others run
    std::this_thread::yield();
    return std::chrono::steady_clock::now().time_since_epoch().count();
}
inline void __syncthreads() { BARRIERS[blockIdx.x]->arrive_and_wait(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v) {
    unsigned long long o = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (o < v && !__atomic_compare_exchange_n(p, &o, v, false, __ATOMIC_SEQ_CST,
                                                 __ATOMIC_SEQ_CST)) {}
    return o;
}
inline uint4 __ldcv(const uint4 *p) {
    const volatile unsigned *q = (const volatile unsigned *)p;
    return uint4{q[0], q[1], q[2], q[3]};
}
inline unsigned __ldcv(const unsigned *p) { return *(const volatile unsigned *)p; }
using std::max;
using std::min;
'''

HARNESS = r'''
static unsigned input_of(unsigned long long s, unsigned long long i) {
    return (unsigned)(s * 2654435761u + i * 40503u + 7);
}
int main(int argc, char **argv) {
    if (argc < 8) return 2;
    const unsigned long long n = atoll(argv[1]), slots = atoll(argv[2]), batches = atoll(argv[3]);
    const unsigned blocks = atoi(argv[4]), threads = atoi(argv[5]);
    const unsigned long long p7 = atoll(argv[6]), p10 = atoll(argv[7]);
    const long long stop_at = argc > 8 ? atoll(argv[8]) : -1;
    const unsigned k = INTENSITY;
    if (blocks < 1 || blocks > 4096 || threads < 1 || slots < 1) return 2;
    gridDim = {blocks, 1, 1};
    blockDim = {threads, 1, 1};
    for (unsigned b = 0; b < blocks; b++) BARRIERS.push_back(new std::barrier<>(threads));
    std::vector<uint4> in4(slots * n / 4 + 1), out4(slots * n / 4 + 1);
    unsigned *hin = (unsigned *)in4.data(), *hout = (unsigned *)out4.data();
    // Host words: arrived, stop, done[slot] (a 64-byte line each); the kernel's device words.
    std::vector<unsigned long long> ctl(8 * (2 + 2 * slots), 0), words(16 * (4 + slots), 0);
    std::vector<std::thread> pool;
    for (unsigned b = 0; b < blocks; b++)
        for (unsigned t = 0; t < threads; t++)
            pool.emplace_back([&, b, t] {
                blockIdx = {b, 0, 0};
                threadIdx = {t, 0, 0};
                KERNEL(hin, hout, n, k, slots, batches, p7, ctl.data(), words.data(), p10);
            });
    std::mt19937 rng((unsigned)(n * 31 + slots * 7 + batches));
    long long bad = 0, checked = 0;
    auto check = [&](unsigned long long s) {
        const unsigned long long slot = s % slots;
        while (__atomic_load_n(&ctl[(2 + slot) * 8], __ATOMIC_SEQ_CST) < s + 1)
            std::this_thread::yield();
        for (unsigned long long i = 0; i < n; i++)
            if (hout[slot * n + i] != fgh_elem(input_of(s, i), k)) {
                if (bad < 3) printf("  wrong: batch %llu element %llu\n", s, i);
                bad++;
            }
        checked++;
    };
    unsigned long long released = batches;
    for (unsigned long long s = 0; s < batches; s++) {
        if ((long long)s == stop_at) { released = s; break; }
        if (s >= slots) check(s - slots);
        for (unsigned long long i = 0; i < n; i++) hin[(s % slots) * n + i] = input_of(s, i);
        if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
        __atomic_store_n(&ctl[0], s + 1, __ATOMIC_SEQ_CST);
    }
    for (unsigned long long s = released > slots ? released - slots : 0; s < released; s++)
        check(s);
    __atomic_store_n(&ctl[8], 1, __ATOMIC_SEQ_CST);
    for (auto &t : pool) t.join();
    printf("%s", bad ? "FAILED" : "ok");
    printf(": n %llu slots %llu batches %llu (released %llu) blocks %u threads %u p7 %llu p10 %llu"
           " k %u: %lld checked, %lld wrong\n", n, slots, batches, released, blocks, threads, p7,
           p10, k, checked, bad);
    return bad != 0;
}
'''

# n, slots, batches, blocks, threads, p7, p10[, stop_at]
# (n from 16, the demo's header: resident_kernel divides by the tiles a batch).
DEFAULT_CASES = [
    "64,4,50,5,8,8,2", "65,4,50,5,8,8,2", "17,3,40,5,8,8,2", "19,3,40,5,8,4,1",
    "1000,6,200,7,16,8,2", "1001,6,200,7,16,12,1", "4096,24,300,13,32,64,3",
    "64,4,100,5,8,8,2,37", "64,4,100,5,8,8,2,0", "21,4,0,5,8,8,2", "64,1,30,3,8,4,1",
    "4096,6,100,9,32,1024,0",
]


def kernel_source():
    """The demo's CUDA_SOURCE, its `__shared__` declarations made one a block."""
    text = open(WORKLOAD).read()
    src = text.split('pub const CUDA_SOURCE: &str = r#"', 1)[1].split('"#;', 1)[0]
    counter = [0]

    def per_block(m):
        ty, names = m.group(1), [x.strip() for x in m.group(2).split(",")]
        refs = []
        for name in names:
            counter[0] += 1
            refs.append(f"&{name} = shared_of<{ty}, {counter[0]}>()[blockIdx.x]")
        return f"{ty} " + ", ".join(refs) + ";"

    return re.sub(r"__shared__\s+((?:unsigned\s+)?(?:long\s+long|int|long|unsigned))\s+"
                  r"([A-Za-z_][\w\s,]*);", per_block, src)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", default="resident_kernel")
    ap.add_argument("--extra-block", action="store_true",
                    help="launch one block more than each case's (a kernel with a poller block)")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--k", type=int, default=2,
                    help="the intensity (f, g and h rounds) the kernel and the check use")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    if f"void {args.kernel}(" not in open(WORKLOAD).read():
        sys.exit(f"no kernel {args.kernel} in {WORKLOAD}")
    with tempfile.TemporaryDirectory() as d:
        cpp, exe = os.path.join(d, "emu.cpp"), os.path.join(d, "emu")
        with open(cpp, "w") as f:
            f.write(PRELUDE + kernel_source() + f"\n#define KERNEL {args.kernel}\n"
                    f"#define INTENSITY {args.k}u\n" + HARNESS)
        r = subprocess.run(["g++", "-O2", "-std=c++20", "-pthread", "-w", cpp, "-o", exe],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("g++ failed:\n" + r.stderr[-3000:])
        failed = 0
        for case in args.cases or DEFAULT_CASES:
            v = case.split(",")
            if len(v) not in (7, 8):
                sys.exit(f"a case is n,slots,batches,blocks,threads,p7,p10[,stop_at]: {case}")
            if args.extra_block:
                v[3] = str(int(v[3]) + 1)
            try:
                p = subprocess.run([exe] + v, capture_output=True, text=True,
                                   timeout=args.timeout)
                print(p.stdout.rstrip() or f"FAILED: {case}: exit {p.returncode}", flush=True)
                failed += p.returncode != 0
            except subprocess.TimeoutExpired:
                print(f"FAILED: {case}: no end within {args.timeout} s (a hang)", flush=True)
                failed += 1
        sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
