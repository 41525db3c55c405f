//! What an allocation hands out, how it may be served, and the interface both pools share.

use super::{Point, PoolStats, Wait};
use crate::backend::MemoryBackend;
use crate::error::Result;

/// A block of device memory handed out by a pool. A plain value (`Copy`): the pool checks
/// every free against what it handed out, so freeing one twice, or an address it never
/// handed out, is a named error — also once the address was handed out again (each
/// allocation is a new generation, and a block of an older one is a double free).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Block {
    pub(crate) addr: u64,
    pub(crate) size: usize,
    pub(crate) capacity: usize,
    /// Which allocation at `addr` this is (a pool's count of its allocations); 0 for
    /// [`from_raw`](Self::from_raw), which names whatever is live there.
    pub(crate) generation: u64,
}

impl Block {
    /// A block from a raw address and size, as pointer-based APIs pass them around. A pool
    /// checks every block it is given: one it did not hand out is
    /// [`Error::ForeignMemory`](crate::Error::ForeignMemory). An address carries no
    /// generation: such a block names whatever allocation is live there.
    pub fn from_raw(addr: u64, size: usize) -> Block {
        Block {
            addr,
            size,
            capacity: size,
            generation: 0,
        }
    }

    /// Does this block name the allocation of `generation` (a raw block names any)?
    pub(crate) fn is_generation(&self, generation: u64) -> bool {
        self.generation == 0 || self.generation == generation
    }

    /// The device address (on the host backend, a host pointer).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The bytes asked for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The bytes usable: the size rounded up to its class (`>= size`).
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// How an allocation may be served beyond reuse and fresh memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocFlags {
    /// When no freed block is ordered before the requester and the pool cannot grow, serve a
    /// freed block by enqueuing a wait on its free on the requester's stream (counted in
    /// [`PoolStats::waits`]). Off: [`Error::Exhausted`](crate::Error::Exhausted) instead.
    pub allow_wait: bool,
    /// Record an event after the allocation, so that other streams can wait for it
    /// ([`Allocation::ready`] is then `Some`).
    pub signal: bool,
}

impl AllocFlags {
    /// Allow an inserted stream wait.
    pub fn allow_wait(mut self) -> Self {
        self.allow_wait = true;
        self
    }

    /// Record a ready point.
    pub fn signal(mut self) -> Self {
        self.signal = true;
        self
    }
}

/// An allocation: the block, at once, and when it is usable.
pub struct Allocation<B: MemoryBackend> {
    /// The block.
    pub block: Block,
    /// `None`: usable by any work enqueued on the allocating stream from now on, and no event
    /// was recorded. `Some(point)` (with [`AllocFlags::signal`]): usable by work ordered after
    /// `point`, on any stream.
    pub ready: Option<Point<B>>,
}

impl<B: MemoryBackend> std::fmt::Debug for Allocation<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("block", &self.block)
            .field("ready", &self.ready)
            .finish()
    }
}

/// A stream-ordered allocator: [`Pool`](super::Pool) (seqsync's own) and
/// [`NativePool`](super::NativePool) (the backend's) behind one interface.
pub trait StreamAllocator<B: MemoryBackend>: Send + Sync {
    /// Allocate `size` bytes for work on `stream`, after `waits`. Returns at once.
    fn alloc_with(
        &self,
        stream: &B::Stream,
        size: usize,
        waits: &[Wait<'_, B>],
        flags: AllocFlags,
    ) -> Result<Allocation<B>>;

    /// Free `block` once `stream` gets here, after `waits`; returns the point after which it
    /// is free.
    fn free(&self, stream: &B::Stream, block: Block, waits: &[Wait<'_, B>]) -> Result<Point<B>>;

    /// Record a point at the current end of `stream` (to put in other calls' wait lists).
    fn record(&self, stream: &B::Stream) -> Result<Point<B>>;

    /// Make `stream`'s later work wait for `point`.
    fn wait(&self, stream: &B::Stream, point: &Point<B>) -> Result<()>;

    /// The statistics.
    fn stats(&self) -> PoolStats;

    /// Release memory no block needs, down to `keep` bytes where possible, without waiting;
    /// returns the bytes released.
    fn trim_to(&self, keep: usize) -> Result<usize>;
}
