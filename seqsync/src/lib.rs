//! # seqsync
//!
//! Order GPU work across CUDA streams and host threads by **sequence id**.
//!
//! A pipeline moves batches 0, 1, 2, … through copies and kernels on several streams and host
//! threads; a stage may start batch `s` only once other stages have finished batch `s` (its
//! inputs) or batch `s - N` (the ring-buffer slot it overwrites). seqsync makes that ordering
//! explicit and cheap.
//!
//! ## Layers
//!
//! Each layer uses only the layers below it, and only through the [`Backend`](backend::Backend)
//! trait: nothing above `backend` names a concrete backend.
//!
//! ```text
//!   pipeline (spec, derive,      graph (command buffers,      memory (pool, handoff)
//!     deadlock, runtime,           lowerings, queues)            |
//!     throughput)                        |                        |    hazard (vector clocks,
//!           |                            v                        |    checks any backend)
//!           v                    timeline (values, waits, <-------+           |
//!   ring (EventRingbuf)            failure)                                   |
//!           |                            |                                    |
//!           +-------------+--------------+------------------------------------+
//!                         v
//!     backend: the Backend trait (streams, host work, events; commands, graphs, memory)
//!              host (worker threads, chaos) | cuda (cudarc) | any (picked at run time)
//!
//!     below them all: error, lock, wait_strategy, name, primitive, happens_before (the vector
//!     clocks that hazard and memory's handoff share)
//! ```
//!
//! Every layer also uses `backend` itself. Each folder's `mod.rs` says what it may use, and
//! `tests/layers.rs` holds the code to it.
//!
//! | layer | module | what it is |
//! |---|---|---|
//! | backend | [`backend`] | streams and events: [`HostBackend`] (worker threads), `CudaBackend` (cudarc), [`AnyBackend`] (picked at run time) |
//! | ring | [`EventRingbuf`] | one producer records an event per seq; consumers wait on it from streams or host threads |
//! | timeline | [`timeline`] | 64-bit values that streams and host threads signal and wait on; wait-before-signal; failure propagates |
//! | pipeline | [`pipeline`] | declare threads, streams, buffers and stages; seqsync derives every ring, proves the schedule deadlock-free |
//! | memory | [`memory`] | buffer handoff by epochs (moving a buffer between streams waits only for what no event or synchronize ordered), and stream-ordered allocation (pools whose alloc/free are enqueued on streams with wait lists, reusing memory with no hidden synchronization) |
//! | graph | [`graph`] | command buffers lowered to streams + events with no false dependency, or to fork-join levels |
//! | hazard | [`hazard`] | validation mode: a backend wrapper that tracks happens-before with vector clocks and reports unordered buffer accesses |
//!
//! The application code is not here: the seed pipeline demo, its baselines, the benchmarks and
//! the built-in checking stages live in the `seqsync-demo` crate, the `seqsync` command in
//! `seqsync-cli`.
//!
//! ```
//! use seqsync::{Blocking, EventRingbuf, HostBackend};
//!
//! let host = HostBackend::new();
//! let (copy, kernel) = (host.new_stream("copy")?, host.new_stream("kernel")?);
//! let copied = EventRingbuf::new(&host, "copy", 1, 4)?;
//! for seq in 0..8 {
//!     copy.launch(move || { /* copy batch `seq` in */ });
//!     copied.record(&copy, seq, Blocking::No)?;
//!     copied.wait(&kernel, seq, Blocking::No)?; // the kernel of batch `seq` waits for its copy
//!     kernel.launch(move || { /* compute batch `seq` */ });
//! }
//! kernel.synchronize()?;
//! # Ok::<(), seqsync::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod backend;
mod error;
pub mod graph;
pub(crate) mod happens_before;
pub mod hazard;
#[cfg(target_os = "linux")]
pub mod ipc;
mod lock;
pub mod memory;
mod name;
pub mod pipeline;
mod primitive;
pub mod ring;
pub mod timeline;
pub(crate) mod wait_strategy;

#[cfg(all(test, seqsync_loom))]
mod tests;

/// The README's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

pub use backend::host::HostBackend;
pub use backend::{AnyBackend, BackendKind};
#[cfg(feature = "cuda")]
pub use cudarc;
pub use error::{BackendError, Error, Result};
pub use ring::{Blocking, EventRingbuf};
pub use timeline::Timeline;

/// Not API: what this workspace's demo, benchmarks, CLI and tests read about the crate's
/// internals, one module per layer. Nothing here is documented or stable: it may change or go
/// in any release. Applications use the public modules above.
#[doc(hidden)]
pub mod internal {
    /// The backend layer's internals: command and graph-replay traits, semaphores, interrupts,
    /// memory usage, the run-time-picked handles.
    pub mod backend {
        pub use crate::backend::any::*;
        pub use crate::backend::command::*;
        pub use crate::backend::interrupt::*;
        pub use crate::backend::memory::*;
        pub use crate::backend::replay::*;
        pub use crate::backend::semaphore::*;
        pub use crate::backend::{Backend, EventOptions};

        /// The host backend's handles.
        pub mod host {
            pub use crate::backend::host::command::*;
            pub use crate::backend::host::event::*;
            pub use crate::backend::host::memory::*;
            pub use crate::backend::host::semaphore::*;
            pub use crate::backend::host::stream::*;
            pub use crate::backend::host::{Chaos, HostBackend};
        }

        /// The CUDA backend's handles and driver helpers.
        #[cfg(feature = "cuda")]
        pub mod cuda {
            pub use crate::backend::cuda::command::*;
            pub use crate::backend::cuda::driver::{driver_error, driver_present};
            pub use crate::backend::cuda::event::*;
            pub use crate::backend::cuda::graph_exec::*;
            pub use crate::backend::cuda::mempool::*;
            pub use crate::backend::cuda::semaphore::*;
            pub use crate::backend::cuda::{CudaBackend, DeviceBuffer, PinnedBuffer};
            pub use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
        }
    }

    /// The graph layer's internals: the DAG, its analysis, the lowerings and schedules, the
    /// `seqsync graph` file format.
    pub mod graph {
        pub use crate::graph::bitset::*;
        pub use crate::graph::dag::*;
        pub use crate::graph::executable::with_schedule_allowing_missing;
        pub use crate::graph::lower_cuda_graph::*;
        pub use crate::graph::lower_levels::*;
        pub use crate::graph::lower_streams::*;
        pub use crate::graph::lowering::*;
        pub use crate::graph::queues::*;
        pub use crate::graph::record::*;
        pub use crate::graph::reduce::*;
        pub use crate::graph::schedule::*;
        pub use crate::graph::{Executable, GraphError};

        /// The `seqsync graph` file format.
        pub mod spec_toml {
            pub use crate::graph::spec_toml::*;
        }
    }

    /// The pipeline layer's internals: the spec's parts, the derivation without its deadlock
    /// check, the deadlock search's options and traces, the runtime's and the throughput
    /// model's helpers.
    pub mod pipeline {
        pub use crate::pipeline::deadlock::*;
        pub use crate::pipeline::derive::*;
        pub use crate::pipeline::plan::*;
        pub use crate::pipeline::runtime::*;
        pub use crate::pipeline::spec::*;
        pub use crate::pipeline::spec_toml::*;
        pub use crate::pipeline::throughput::*;
        pub use crate::pipeline::PlanError;

        /// `plan` without `stage`'s waits (and synchronizes) on `ring`: a plan that misorders
        /// on purpose, for negative controls. `None` if `stage` has no such wait.
        pub fn without_wait(plan: Plan, stage: &str, ring: &str) -> Option<Plan> {
            plan.without_wait(stage, ring)
        }

        /// `plan` with every wait and synchronize of `thread` given the blocking flag
        /// `blocking`, for tests of the deadlock check. `None` if there is no such thread.
        pub fn with_waits_blocking(plan: Plan, thread: &str, blocking: bool) -> Option<Plan> {
            plan.with_waits_blocking(thread, blocking)
        }
    }

    /// The memory layer's internals: the allocator trait both pools implement, the native pool,
    /// the handoff layer's statistics and events.
    pub mod memory {
        pub use crate::memory::allocation::*;
        pub use crate::memory::handoff::backend::*;
        pub use crate::memory::handoff::state::*;
        pub use crate::memory::native::*;
    }

    /// The hazard checker's internals: the checker itself, accesses, actors, the validating
    /// handles.
    pub mod hazard {
        pub use crate::happens_before::*;
        pub use crate::hazard::backend::*;
        pub use crate::hazard::checker::*;
        pub use crate::hazard::command::*;
        pub use crate::hazard::report::*;
    }

    /// Whether the crate's internal locks are *biased* to the thread that takes them: a timeline's
    /// admission state, its streams' failure ledgers, the CUDA timeline words' point lists and the
    /// buffer tracker's registries. A biased lock costs its thread two plain stores and a load
    /// instead of an atomic compare-and-swap; the first other thread that takes it makes it an
    /// ordinary lock for good, with one `membarrier(2)` call (a few microseconds).
    ///
    /// Biasing registers the whole process for `membarrier(2)`, so only a build with the crate's
    /// `biased-locks` feature (off by default) does it. `Err` says why locks are not biased in
    /// this process: the feature is off, not Linux, a kernel without private expedited
    /// `membarrier` (before 4.14) or a sandbox that refuses it, or (with the feature) the
    /// environment variable `SEQSYNC_BIASED_LOCKS` set to `off`, `0`, `no` or `false` (any case;
    /// read once, at the first lock). Nothing else changes: every lock is then an ordinary one
    /// from the start.
    ///
    /// ```
    /// match seqsync::internal::lock_biasing() {
    ///     Ok(()) => println!("locks are biased to their thread"),
    ///     Err(why) => println!("locks are not biased: {why}"),
    /// }
    /// ```
    #[cfg(not(seqsync_loom))]
    pub fn lock_biasing() -> std::result::Result<(), &'static str> {
        crate::lock::biasing()
    }
}
