//! The pipeline layer: declare host threads, streams, data ring buffers and
//! the stages that read and write them; seqsync derives every EventRingbuf's
//! `nconsumers`, `max_size` and blocking flags, lists the exact waits and
//! records each thread must make, and proves the schedule deadlock-free.
//!
//! It may use: `ring`, and `backend` through the [`Backend`](crate::backend::Backend) trait
//! only; it never names a concrete backend; and `name` (names checked and shown) below it.
//!
//! This replaces the seed's "mental checklist": instead of filling in ring
//! parameters by hand, write a [`PipelineSpec`] (in Rust with
//! [`PipelineSpec::builder`], or in TOML with [`PipelineSpec::from_toml`]), call
//! [`derive()`] to get a [`Plan`], and [`check_deadlock`] to prove that no interleaving of
//! the threads' loops gets stuck (from the cycles of the dependencies, or by a search). [`run`] then executes
//! [`Plan::threads`] op by op, one OS thread per plan thread.
//!
//! | module | concept |
//! |---|---|
//! | `spec/` | the declaration model ([`PipelineSpec`]) and its builder |
//! | `spec_toml.rs` | the TOML format, with line numbers in errors |
//! | `derive.rs` | the derivation rules ([`derive()`]) |
//! | `plan.rs` | the [`Plan`]: rings and threads' ops with resolved indices |
//! | `deadlock/` | the state-space exploration and its [`Trace`] |
//! | `error/plan.rs` (crate root) | [`PlanError`] |
//! | `runtime/` | running a [`Plan`] with one closure per stage ([`run`]) |
//! | `throughput/` | the period a plan runs at, from its stages' times, and the cycle that sets it ([`predict`]) |
//!
//! # Example
//!
//! The seed's example: thread `h2g` copies batches in and runs `f`, `g`, `h`;
//! thread `g2h` copies results out and synchronizes on them.
//!
//! ```
//! use seqsync::pipeline::{check_deadlock, derive, PipelineSpec, StageSpec};
//!
//! # fn main() -> Result<(), seqsync::pipeline::PlanError> {
//! let spec = PipelineSpec::builder()
//!     .param("nin", 2).param("nx", 4).param("ny", 3).param("nout", 2)
//!     .buffer("in", "nin").buffer("x", "nx").buffer("y", "ny").buffer("out", "nout")
//!     .thread("h2g")
//!     .stage("h2g", StageSpec::on_stream("s_h2g").writes("in"))
//!     .stage("f", StageSpec::on_stream("s_f").reads("in").writes("x"))
//!     .stage("g", StageSpec::on_stream("s_g").reads("in").writes("y"))
//!     .stage("h", StageSpec::on_stream("s_h").reads("x").reads("y").writes("out"))
//!     .thread("g2h")
//!     .stage("g2h", StageSpec::on_stream("s_g2h").reads("out").sync())
//!     .build()?;
//!
//! let plan = derive(&spec)?;
//! let h = plan.ring("h").unwrap();
//! assert_eq!((h.nconsumers, h.max_size), (3, 4)); // max(max(nx, ny), nout)
//! assert!(h.record_blocking);
//! assert!(check_deadlock(&plan).is_deadlock_free());
//! println!("{plan}");
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub(crate) mod deadlock;
pub(crate) mod derive;
pub(crate) mod plan;
pub(crate) mod runtime;
pub(crate) mod spec;
pub(crate) mod spec_toml;
pub(crate) mod throughput;

pub use crate::error::PlanError;
pub use deadlock::{
    check_deadlock, check_deadlock_with, minimum_sizes, CheckOptions, SizeBound, Trace, Verdict,
};
pub use derive::derive;
pub use plan::{Consumer, ConsumerKind, Op, Plan, Ring, StagePlan, ThreadPlan};
pub use runtime::{
    new_streams, run, LatencySummary, RunConfig, RunLatency, RunStats, StageCtx, StageLatency,
    Stages,
};
pub use spec::{PipelineBuilder, PipelineSpec, Place, StageSpec};
pub use throughput::{predict, Prediction, StageTimes};
