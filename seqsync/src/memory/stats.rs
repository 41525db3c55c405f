//! What a pool reports.

/// A pool's statistics: bytes (current and high water since creation or
/// [`reset_high`](super::Pool::reset_high)) and event counts since creation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Bytes held from the backend (slabs).
    pub reserved_current: usize,
    /// The most bytes held at once.
    pub reserved_high: usize,
    /// Bytes of blocks handed out and not yet freed (whole size classes).
    pub used_current: usize,
    /// The most bytes handed out at once.
    pub used_high: usize,
    /// Slabs held now.
    pub slabs: usize,
    /// Allocations served.
    pub allocs: u64,
    /// Frees done.
    pub frees: u64,
    /// Allocations served with a freed block the requester was already ordered after: no
    /// event, no wait.
    pub reuse: u64,
    /// Allocations that found freed blocks of their class but none ordered before them.
    pub reuse_miss: u64,
    /// Allocations served with never-used space (carved from a slab, or a new slab).
    pub fresh: u64,
    /// Allocations served with a freed block by inserting a stream wait on its free (only
    /// when the caller allowed it).
    pub waits: u64,
    /// Allocations refused with [`Error::Exhausted`](crate::Error::Exhausted).
    pub exhausted: u64,
    /// Slabs taken from the backend (a synchronous device allocation each).
    pub slab_allocs: u64,
    /// Slabs given back to the backend (a synchronous device free each; on CUDA `cuMemFree`
    /// may wait for the device).
    pub slab_releases: u64,
    /// Freed blocks held back now: their free waited on timeline values not yet reached when
    /// it was called (named in its wait list, or waited on by the stream of a point it names
    /// before that point), so they are handed out again only once the host sees every value
    /// reached (a failure that releases such a wait must not free the block under its
    /// readers).
    pub quarantined: u64,
    /// Freed blocks never handed out again: a timeline their free waited on failed before
    /// reaching the value, or a stream their free waited on failed (a host closure
    /// panicked), so their readers may still run (their memory stays reserved until the pool
    /// drops, and is leaked then rather than freed under a reader).
    pub leaked: u64,
    /// Times the pool blocked the host on the device: it never does (a pool dropped with
    /// frees still pending leaks their slabs instead).
    pub host_syncs: u64,
}
