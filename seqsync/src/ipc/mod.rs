//! Across processes: [`SharedRing`], the [`EventRingbuf`](crate::EventRingbuf) contract for
//! one producer process and consumers in other processes of the same user on one host.
//!
//! It may use: `backend`, through the [`Backend`](crate::backend::Backend) trait only (host
//! work on a stream, and whether such work may block), and `ring` (its
//! [`Blocking`](crate::Blocking) flag).
//!
//! | module | what |
//! |---|---|
//! | `segment` | the shared memory: a sealed memory file of mode 0600, its layout, the checks `open` makes |
//! | `rendezvous` | finding a ring by name: an abstract Unix socket that hands the segment over (`SCM_RIGHTS`) |
//! | `peers` | which processes share a ring and whether they still live |
//! | `shared_ring` | the contract |
//!
//! Linux only (memory files, futexes, abstract sockets, `/proc`).

mod peers;
mod rendezvous;
mod segment;
mod shared_ring;

pub use shared_ring::{Mechanism, SharedRing};
