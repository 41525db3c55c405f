//! Seeded random delays for the host backend: a missing wait shows up as a wrong result.

use std::time::Duration;

/// SplitMix64: a tiny, seedable, statistically decent generator. Chaos only needs
/// reproducible jitter, not cryptographic quality.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`0` when `n == 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// Chaos settings: every stream operation (and every [`super::HostBackend::chaos_pause`]) first
/// sleeps a random time in `0..=max_delay`, drawn from a generator seeded with `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chaos {
    /// Seed of the delays; the same seed gives the same delay sequence per stream.
    pub seed: u64,
    /// Longest delay.
    pub max_delay: Duration,
}

impl Chaos {
    /// Chaos with the given seed and a longest delay of 200 µs.
    pub fn new(seed: u64) -> Self {
        Chaos {
            seed,
            max_delay: Duration::from_micros(200),
        }
    }

    pub(crate) fn delay(&self, rng: &mut SplitMix64) {
        let max = self.max_delay.as_nanos() as u64;
        let ns = rng.below(max + 1);
        // Half of the operations run without delay so that fast interleavings occur too.
        if ns.is_multiple_of(2) && ns > 0 {
            std::thread::sleep(Duration::from_nanos(ns));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(SplitMix64::new(7).next_u64(), SplitMix64::new(8).next_u64());
    }

    #[test]
    fn below_stays_below() {
        let mut r = SplitMix64::new(1);
        assert_eq!(r.below(0), 0);
        assert!((0..1000).all(|_| r.below(10) < 10));
    }
}
