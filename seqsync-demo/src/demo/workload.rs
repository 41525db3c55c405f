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
extern "C" __global__ void f_kernel(const unsigned *in, unsigned *x, unsigned long long n, unsigned k) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned v = in[i];
        for (unsigned j = 0; j < k; j++) v = v * 1664525u + 1013904223u;
        x[i] = v;
    }
}
extern "C" __global__ void g_kernel(const unsigned *in, unsigned *y, unsigned long long n, unsigned k) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned v = in[i];
        for (unsigned j = 0; j < k; j++) { v ^= v << 13; v ^= v >> 17; v ^= v << 5; }
        y[i] = v;
    }
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
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned yy = y[i];
        unsigned v = x[i] ^ ((yy << 7) | (yy >> 25));
        for (unsigned j = 0; j < k; j++) {
            v = v * 0x2545F491u;
            v = ((v << 11) | (v >> 21)) ^ 0x9E3779B9u;
        }
        out[i] = v;
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
