//! The demo's data: what each batch holds, what f, g and h compute, and the CPU reference.
//!
//! Everything is `u32` arithmetic, so the GPU kernels and the CPU reference agree bit for bit.
//!
//! A batch of `n` elements for seq `s` is a **header** of [`HEADER`] elements computed from `s`,
//! then a **body** copied from pattern `s % npatterns`. Patterns are filled once, so producing
//! a batch costs the host only the header; `npatterns` is a prime larger than every ring-buffer
//! lag, so a stage that reads a slot a lag too early or too late sees another seq's header
//! *and* another pattern's body.

/// Elements at the start of each batch that encode its seq.
pub const HEADER: usize = 16;

/// Element `i` of the header of seq `seq`.
#[inline]
pub fn header_elem(seq: i64, i: usize) -> u32 {
    mix((seq as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64 + 1))
}

/// Element `i` of body pattern `p`.
#[inline]
pub fn pattern_elem(p: usize, i: usize) -> u32 {
    mix(((p as u64) << 40) ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ 0x5EED)
}

#[inline]
fn mix(mut z: u64) -> u32 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as u32
}

/// Element `i` of the input batch of `seq`.
#[inline]
pub fn input_elem(seq: i64, i: usize, npatterns: usize) -> u32 {
    if i < HEADER {
        header_elem(seq, i)
    } else {
        pattern_elem(seq as usize % npatterns, i)
    }
}

/// f: `k` rounds of a linear congruential step.
#[inline]
pub fn f_elem(mut v: u32, k: u32) -> u32 {
    for _ in 0..k {
        v = v.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
    }
    v
}

/// g: `k` rounds of xorshift.
#[inline]
pub fn g_elem(mut v: u32, k: u32) -> u32 {
    for _ in 0..k {
        v ^= v << 13;
        v ^= v >> 17;
        v ^= v << 5;
    }
    v
}

/// h: combine x and y, then `k` rounds of a multiply-rotate.
#[inline]
pub fn h_elem(x: u32, y: u32, k: u32) -> u32 {
    let mut v = x ^ y.rotate_left(7);
    for _ in 0..k {
        v = v.wrapping_mul(0x2545_F491).rotate_left(11) ^ 0x9E37_79B9;
    }
    v
}

/// The expected output element `i` of `seq`.
#[inline]
pub fn reference_elem(seq: i64, i: usize, npatterns: usize, k: u32) -> u32 {
    let v = input_elem(seq, i, npatterns);
    h_elem(f_elem(v, k), g_elem(v, k), k)
}

/// The smallest prime larger than `min`.
pub fn prime_above(min: usize) -> usize {
    (min + 1..)
        .find(|&n| n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0))
        .expect("there is always a larger prime")
}

/// The same f, g, h as CUDA C, compiled at run time with NVRTC. Each kernel is a grid-stride
/// loop over `n` elements.
pub const CUDA_SOURCE: &str = r#"
__device__ __forceinline__ unsigned f_elem(unsigned v, unsigned k) {
    for (unsigned j = 0; j < k; j++) v = v * 1664525u + 1013904223u;
    return v;
}
__device__ __forceinline__ unsigned g_elem(unsigned v, unsigned k) {
    for (unsigned j = 0; j < k; j++) { v ^= v << 13; v ^= v >> 17; v ^= v << 5; }
    return v;
}
__device__ __forceinline__ unsigned h_elem(unsigned x, unsigned yy, unsigned k) {
    unsigned v = x ^ ((yy << 7) | (yy >> 25));
    for (unsigned j = 0; j < k; j++) {
        v = v * 0x2545F491u;
        v = ((v << 11) | (v >> 21)) ^ 0x9E3779B9u;
    }
    return v;
}
extern "C" __global__ void f_kernel(const unsigned *in, unsigned *x, unsigned long long n, unsigned k) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        x[i] = f_elem(in[i], k);
}
extern "C" __global__ void g_kernel(const unsigned *in, unsigned *y, unsigned long long n, unsigned k) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        y[i] = g_elem(in[i], k);
}
// A copy of n u32s (k unused: the kernels' common signature), 16 bytes a load where both
// addresses allow it: between device memory and pinned host memory read or written in place.
extern "C" __global__ void copy_kernel(const unsigned *src, unsigned *dst, unsigned long long n,
                                       unsigned k) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long done = 0;
    if ((((unsigned long long)src | (unsigned long long)dst) & 15) == 0) {
        const uint4 *s4 = (const uint4 *)src;
        uint4 *d4 = (uint4 *)dst;
        for (unsigned long long j = i; j < n / 4; j += stride) d4[j] = s4[j];
        done = n / 4 * 4;
    }
    for (unsigned long long j = done + i; j < n; j += stride) dst[j] = src[j];
}
extern "C" __global__ void h_kernel(const unsigned *x, const unsigned *y, unsigned *out,
                                    unsigned long long n, unsigned k) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        out[i] = h_elem(x[i], y[i], k);
}

// ---- the resident kernel (Engine::Resident; the words: resident_words.rs) ----
//
// ctl (pinned host memory, u64, one word a 64-byte line: CTL_LINE): [0] arrived (host), [1]
// stop (host), [2 + slot] done (device: 1 + the newest batch complete in that slot). words
// (device memory, zeroed by resident_reset before the launch, one word a 128-byte line:
// DEV_LINE): [0] the next ticket, [1] arrived as seen, [2] stop as seen, [3 + slot] tiles done
// in that slot, ever, [3 + slots] tiles finished reading, ever (the cap on tiles reading at
// once). A line a word: the line the waiting blocks poll (`arrived as seen`)
// holds neither the ticket nor a count that working blocks update atomically, and a host
// thread polling one `done` word shares its line with neither `arrived` nor another slot's.
//
// Ticket t is tile t % tiles of batch t / tiles (tiles = ceil(n / tile)): blocks take them in
// order, so the oldest batch is worked on first. One block polls the host's words (the first
// tile of the next batch to arrive), the others the copies in device memory, less often the
// further their batch is from arriving.
#define CTL_LINE 8ull
#define DEV_LINE 16ull
#define CTL(i) ctl[(i) * CTL_LINE]
#define DEV(i) words[(i) * DEV_LINE]

__device__ __forceinline__ unsigned fgh_elem(unsigned v, unsigned k) {
    return h_elem(f_elem(v, k), g_elem(v, k), k);
}
// A pause between polls of `ahead` short pauses (~0.1 us each, at most 16), as __nanosleep is
// not in every architecture.
__device__ __forceinline__ void resident_pause(unsigned long long ahead) {
    const long long t0 = clock64(), len = 200 * (long long)min(ahead, 16ull);
    while (clock64() - t0 < len) {}
}
extern "C" __global__ void resident_reset(unsigned long long *words, unsigned long long count) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
         i += (unsigned long long)gridDim.x * blockDim.x)
        words[i] = 0;
}
extern "C" __global__ void resident_kernel(const unsigned *hin, unsigned *hout,
        unsigned long long n, unsigned k, unsigned long long slots, unsigned long long batches,
        unsigned long long tile, volatile unsigned long long *ctl, unsigned long long *words,
        unsigned long long readers) {
    __shared__ unsigned long long s_ticket;
    __shared__ int s_go;
    const unsigned long long tiles = (n + tile - 1) / tile;
    volatile unsigned long long *seen_arrived = &DEV(1);
    volatile unsigned long long *seen_stop = &DEV(2);
    for (;;) {
        if (threadIdx.x == 0) {
            const unsigned long long t = atomicAdd(&DEV(0), 1ull);
            const unsigned long long s = t / tiles;
            int go = s < batches;
            while (go) {
                const unsigned long long a = *seen_arrived;
                if (a > s) break;
                if (*seen_stop) { go = 0; break; }
                if (a == s && t % tiles == 0) {
                    // Arrived first: a stop ends only the waits for batches that never came.
                    const unsigned long long h = CTL(0);
                    if (h > a) {
                        // The host's inputs before the copy the other blocks read.
                        __threadfence_system();
                        atomicMax((unsigned long long *)seen_arrived, h);
                        continue;
                    }
                    if (CTL(1)) { *seen_stop = 1; go = 0; break; }
                }
                resident_pause(s - a + 1);
            }
            // At most `readers` tiles read at once (0: no cap; cuda_device.rs, resident_readers):
            // tile t starts once all but readers - 1 of the tiles before it have finished.
            // Every tile before t belongs to a batch that has arrived, so each finishes; a stop
            // lifts the cap.
            if (go && readers) {
                volatile unsigned long long *finished = &DEV(3 + slots);
                while (*finished + readers <= t && !*seen_stop) resident_pause(1);
            }
            // The batch's input (written by the host before its arrival) is read after this.
            // A device-scope fence suffices: the block that read `arrived` from the host
            // fenced at system scope before it raised `arrived as seen`, which this block read,
            // so the host's writes happen before that raise and, through this fence, before
            // the reads below. (A system-scope fence here, once a tile, cost 3-10 % of the
            // throughput at 256 KiB and 1 MiB: BENCHMARKS.md §13, run P.)
            __threadfence();
            s_ticket = t;
            s_go = go;
        }
        __syncthreads();
        if (!s_go) return;
        const unsigned long long t = s_ticket, s = t / tiles, slot = s % slots;
        const unsigned *in = hin + slot * n;
        unsigned *out = hout + slot * n;
        const unsigned long long lo = (t % tiles) * tile;
        const unsigned long long hi = min(n, lo + tile);
        unsigned long long rest = lo;
        // Host memory read uncached (.cv): a slot's next batch is new data at the same address.
        if ((((unsigned long long)in | (unsigned long long)out | lo * 4) & 15) == 0) {
            const unsigned long long vend = lo + (hi - lo) / 4 * 4;
            const unsigned long long step = 4ull * blockDim.x;
            for (unsigned long long i = lo + 4ull * threadIdx.x; i < vend; i += 4 * step) {
                uint4 v[4];
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (i + j * step < vend) v[j] = __ldcv((const uint4 *)(in + i + j * step));
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (i + j * step < vend) {
                        uint4 r;
                        r.x = fgh_elem(v[j].x, k);
                        r.y = fgh_elem(v[j].y, k);
                        r.z = fgh_elem(v[j].z, k);
                        r.w = fgh_elem(v[j].w, k);
                        *(uint4 *)(out + i + j * step) = r;
                    }
            }
            rest = vend;
        }
        for (unsigned long long i = rest + threadIdx.x; i < hi; i += blockDim.x)
            out[i] = fgh_elem(__ldcv(in + i), k);
        __syncthreads();
        if (threadIdx.x == 0) {
            if (readers) atomicAdd(&DEV(3 + slots), 1ull);
            // Every thread's writes of the tile (ordered by the barrier) before its count; the
            // block that counts the batch's last tile makes them all visible to the host
            // before its done word.
            __threadfence();
            const unsigned long long c = atomicAdd(&DEV(3 + slot), 1ull) + 1;
            if (c == tiles * (s / slots + 1)) {
                __threadfence_system();
                CTL(2 + slot) = s + 1;
            }
        }
        __syncthreads();
    }
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes() {
        assert_eq!(prime_above(0), 2);
        assert_eq!(prime_above(2), 3);
        assert_eq!(prime_above(7), 11);
    }

    #[test]
    fn seqs_differ_in_header_and_body() {
        let p = 5;
        for (a, b) in [(0, 1), (3, 5), (7, 9)] {
            assert_ne!(input_elem(a, 0, p), input_elem(b, 0, p));
            assert_ne!(input_elem(a, 100, p), input_elem(b, 100, p));
        }
    }
}
