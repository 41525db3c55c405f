//! Across processes: [`SharedRing`], the [`EventRingbuf`](crate::EventRingbuf) contract for
//! one producer process and consumers in other processes of the same user on one host, and
//! [`SharedTimeline`], a [`Timeline`](crate::timeline::Timeline) every such process signals
//! and waits on, [`SharedBuffer`], memory they all map, and [`SharedPool`], a stream-ordered
//! pool whose allocations they import.
//!
//! It may use: `backend`, through the [`Backend`](crate::backend::Backend) trait only (host
//! work on a stream, whether such work may block, events other processes can open, and the
//! interruptible host wait), `ring` (its [`Blocking`](crate::Blocking) flag) and `timeline`
//! (its value limit).
//!
//! | module | what |
//! |---|---|
//! | `segment` | the shared memory: a sealed memory file of mode 0600, its layout (a ring's or a timeline's), the checks `open` makes |
//! | `rendezvous` | finding a ring or timeline by name: an abstract Unix socket that hands the segment over (`SCM_RIGHTS`) |
//! | `peers` | which processes share a segment and whether they still live |
//! | `wake` | sleeping on a segment (a process-shared futex) until something changes, checking the peers meanwhile |
//! | `shared_ring` | the ring's contract |
//! | `ring_events` | the ring's IPC-event mechanism (CUDA): an event per slot, opened by handle |
//! | `shared_timeline` | the timeline's contract, on host jobs and on device streams (memops) |
//! | `shared_buffer` | memory other processes map: device memory by IPC handle, or the segment itself; who frees and unmaps when |
//! | `shared_pool` | a stream-ordered pool whose allocations other processes import: a driver pool by file descriptor, or the segment itself; allocations seen only once complete, freed by importers first |
//!
//! Linux only (memory files, futexes, abstract sockets, `/proc`).

mod peers;
mod rendezvous;
mod ring_events;
mod segment;
mod shared_buffer;
mod shared_pool;
mod shared_ring;
mod shared_timeline;
mod wake;

pub use shared_buffer::SharedBuffer;
pub use shared_pool::{ExportId, ImportedAllocation, PoolAllocation, SharedPool, MAX_EXPORTS};
pub use shared_ring::{Mechanism, SharedRing};
pub use shared_timeline::SharedTimeline;
