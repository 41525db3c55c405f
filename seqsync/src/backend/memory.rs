//! What the stream-ordered allocator ([`crate::memory`]) needs of a backend: a stable identity
//! per stream, plain device memory, and the backend's own stream-ordered pool (the baseline the
//! allocator is compared with).

use super::Backend;
use crate::error::Result;
use std::sync::atomic::{AtomicU64, Ordering};

/// Reserved and used bytes of a backend's own stream-ordered pool, current and high water (the
/// high marks since the pool was created).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Bytes the pool holds from the device (or the host allocator).
    pub reserved_current: u64,
    /// The most bytes it held at once.
    pub reserved_high: u64,
    /// Bytes handed out and not yet freed.
    pub used_current: u64,
    /// The most bytes handed out at once.
    pub used_high: u64,
}

/// Device memory and stream identity, for [`crate::memory`]'s pools.
///
/// | | host | cuda |
/// |---|---|---|
/// | [`stream_id`](Backend::stream_id) | a number given at stream creation | a number given on first sight of the stream (kept while the stream lives) |
/// | [`Memory`](Self::RawMemory) | zeroed host memory, 256-byte aligned | `cuMemAlloc` (`cuMemFree` on drop) |
/// | [`AsyncPool`](Self::AsyncPool) | host memory allocated at once, freed by the stream when it reaches the free | a `cuMemPoolCreate` pool: `cuMemAllocFromPoolAsync` / `cuMemFreeAsync` |
pub trait MemoryBackend: Backend {
    /// A block of device memory, released on drop. Release may wait for the device (CUDA's
    /// `cuMemFree` does), so a pool drops memory only off its hot path.
    type RawMemory: Send + Sync;
    /// The backend's own stream-ordered pool.
    type AsyncPool: Send + Sync;

    /// Allocate `bytes` (> 0) of device memory, at least 256-byte aligned. Synchronous.
    fn alloc_memory(&self, bytes: usize) -> Result<Self::RawMemory>;

    /// The device address of `memory` (on the host backend, a host pointer).
    fn memory_addr(&self, memory: &Self::RawMemory) -> u64;

    /// A new stream-ordered pool that keeps up to `release_threshold` bytes reserved. On CUDA
    /// its reuse follows event dependencies only (`CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES`
    /// on; `ALLOW_OPPORTUNISTIC` and `ALLOW_INTERNAL_DEPENDENCIES` off): no hidden waits.
    fn create_async_pool(&self, release_threshold: u64) -> Result<Self::AsyncPool>;

    /// Allocate `bytes` from `pool`, usable by work enqueued on `stream` from now on.
    fn alloc_async(
        &self,
        pool: &Self::AsyncPool,
        stream: &Self::Stream,
        bytes: usize,
    ) -> Result<u64>;

    /// Free `addr` (from [`alloc_async`](Self::alloc_async) of the same pool) once `stream`
    /// reaches this point.
    fn free_async(&self, pool: &Self::AsyncPool, stream: &Self::Stream, addr: u64) -> Result<()>;

    /// Release reserved memory of `pool` that no allocation needs, down to `keep` bytes where
    /// possible.
    fn trim_async_pool(&self, pool: &Self::AsyncPool, keep: usize) -> Result<()>;

    /// The pool's reserved and used bytes.
    fn async_pool_usage(&self, pool: &Self::AsyncPool) -> Result<MemoryUsage>;
}

/// What to do as a stream goes (its last handle dropped), given its id: set once, by the layer
/// that keeps state per stream id (the timelines' failure ledgers), so that a backend, which
/// knows nothing of that layer, still lets it drop the state of streams that are gone.
static STREAM_GONE: std::sync::OnceLock<fn(u64)> = std::sync::OnceLock::new();

/// Call `f` with the id of every stream that goes from now on (the first `f` set stays).
pub(crate) fn on_stream_gone(f: fn(u64)) {
    let _ = STREAM_GONE.set(f);
}

/// Stream `id` is gone: tell whoever asked ([`on_stream_gone`]), and note it in the journal
/// ([`streams_gone_since`]).
pub(crate) fn stream_gone(id: u64) {
    if let Some(f) = STREAM_GONE.get() {
        f(id);
    }
    let mut recent = GONE.lock().unwrap_or_else(|e| e.into_inner());
    if recent.len() == GONE_KEPT {
        recent.pop_front();
    }
    recent.push_back(id);
    GONE_COUNT.fetch_add(1, Ordering::Release);
}

/// Ids the journal keeps.
const GONE_KEPT: usize = 4096;

/// The journal: the streams that went lately, oldest first, for state kept per stream id by
/// many owners (each pool's clocks) that look now and then. Written by [`stream_gone`] (any
/// thread whose drop ends a stream), read by [`streams_gone_since`] (an owner, at its next
/// call). [`GONE_KEPT`] ids: an owner that looks less often than that many streams go learns
/// that it missed some.
static GONE: std::sync::Mutex<std::collections::VecDeque<u64>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// Streams gone so far (the journal's count; read without its lock on the fast path).
static GONE_COUNT: AtomicU64 = AtomicU64::new(0);

/// What [`streams_gone_since`] found.
pub(crate) enum GoneSince {
    /// No stream went since.
    Nothing,
    /// These ids went since (oldest first), and the count to look from next time.
    Ids(Vec<u64>, u64),
    /// More went than the journal keeps: some ids are lost; these are the ones it kept
    /// (oldest first), and the count to look from next time.
    Missed(Vec<u64>, u64),
}

/// The journal's count now: what an owner made now has seen.
pub(crate) fn streams_gone_now() -> u64 {
    GONE_COUNT.load(Ordering::Acquire)
}

/// The streams gone since the journal's count was `seen`.
#[inline]
pub(crate) fn streams_gone_since(seen: u64) -> GoneSince {
    if GONE_COUNT.load(Ordering::Acquire) == seen {
        return GoneSince::Nothing;
    }
    gone_since_slow(seen)
}

#[cold]
fn gone_since_slow(seen: u64) -> GoneSince {
    let recent = GONE.lock().unwrap_or_else(|e| e.into_inner());
    // Under the lock, the count and the journal agree.
    let now = GONE_COUNT.load(Ordering::Acquire);
    let new = now.saturating_sub(seen);
    if new > recent.len() as u64 {
        return GoneSince::Missed(recent.iter().copied().collect(), now);
    }
    let skip = recent.len() - new as usize;
    GoneSince::Ids(recent.iter().skip(skip).copied().collect(), now)
}

/// A fresh stream id: one counter for every backend, so ids never collide.
pub(crate) fn next_stream_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
