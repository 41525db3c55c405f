//! Memory: buffers whose uses on streams are tracked, so that moving one between streams (and
//! host threads) waits only for what is not already ordered; and device memory allocated and
//! freed in stream order.
//!
//! It may use: `backend` through the [`Backend`](crate::backend::Backend) trait, the vector
//! clocks of `happens_before`, `timeline` (the timelines of a wait list) and the crate's short-section
//! `lock` below it.
//!
//! | module | what it is |
//! |---|---|
//! | [`handoff`] | [`TrackingBackend`](handoff::TrackingBackend): epochs, the *completed* and *ordered* facts, [`Tracked`](handoff::Tracked) buffers (seed 003) |
//! | [`Pool`], [`PoolConfig`] | stream-ordered allocation (seed 004): size classes carved from slabs, reuse by stream order |
//! | [`NativePool`] | the backend's own stream-ordered pool behind the same API ([`StreamAllocator`]) |
//! | [`Block`], [`Allocation`], [`AllocFlags`] | what an allocation returns, how it may be served |
//! | [`Point`], [`Wait`] | points the pools record, and wait list entries |
//! | [`PoolStats`] | reserved/used bytes, reuse/fresh/wait/exhausted counts, host synchronizations |
//!
//! **Stream-ordered allocation.** [`Pool::alloc`] and [`Pool::free`] are enqueued on a
//! stream with a wait list: the memory comes back at once, with the point at which it is
//! usable; a free gives back the point after which the memory is free. A block is handed out
//! again only where that needs no hidden synchronization: on the stream that freed it, on a
//! stream already ordered after its free, as never-used memory, or — only if the caller
//! allows it — after a stream wait the pool enqueues. Otherwise the call fails with
//! [`Error::Exhausted`](crate::Error::Exhausted). The pool never blocks the host.
//! [`NativePool`] puts the backend's own stream-ordered allocator (CUDA's
//! `cuMemAllocFromPoolAsync`) behind the same calls.

pub(crate) mod allocation;
pub mod handoff;
pub(crate) mod native;
mod point;
mod pool;
mod pool_config;
mod size_class;
mod stats;

pub use allocation::{AllocFlags, Allocation, Block, StreamAllocator};
pub use native::NativePool;
pub use point::{Point, Wait};
pub use pool::Pool;
pub use pool_config::PoolConfig;
pub use stats::PoolStats;
