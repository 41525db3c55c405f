//! [`PoolConfig`]: how a [`Pool`](super::Pool) is sized.

/// How a [`Pool`](super::Pool) is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Bytes of one slab: blocks of a size class are carved from slabs of this size (a larger
    /// block gets a slab of its own).
    pub slab_bytes: usize,
    /// The most bytes the pool may hold; beyond it, a request is served by reuse, an allowed
    /// wait, or not at all.
    pub max_bytes: usize,
    /// The largest single allocation (at most `max_bytes`).
    pub max_alloc: usize,
    /// Every block's address is a multiple of this (a power of two).
    pub alignment: usize,
    /// After a free, while the pool holds more than this, it gives back slabs that are wholly
    /// free and whose frees have completed (checked without waiting). `usize::MAX` (the
    /// default): keep everything until [`Pool::trim_to`](super::Pool::trim_to).
    pub release_threshold: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            slab_bytes: 2 << 20,
            max_bytes: usize::MAX,
            max_alloc: usize::MAX,
            alignment: 256,
            release_threshold: usize::MAX,
        }
    }
}

impl PoolConfig {
    /// A pool of exactly `count` blocks of `block_bytes` each (IREE's "fixed-block pool"):
    /// slabs of one block, room for `count` of them. A block takes its size class (
    /// `block_bytes` rounded up to the alignment, and above four alignments to a quarter of
    /// its power of two), so slabs and the maximum are counted in classes.
    pub fn fixed_blocks(block_bytes: usize, count: usize) -> Self {
        let d = PoolConfig::default();
        let class = super::size_class::class_size(block_bytes, d.alignment).unwrap_or(usize::MAX);
        PoolConfig {
            slab_bytes: class,
            max_bytes: class.saturating_mul(count),
            max_alloc: block_bytes,
            ..d
        }
    }
}
