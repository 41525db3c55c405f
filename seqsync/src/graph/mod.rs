//! Command buffers and graphs (seed 001): record kernel launches, copies, fills and host
//! functions, ordered by execution barriers or explicit dependencies, and lower the exact
//! dependency graph to streams + events — with no false dependency and an event only for a
//! transitive-reduction edge between streams — or to one graph replayed as a whole (a CUDA
//! graph on CUDA), or, as a baseline, to fork-join levels.
//!
//! It may use: `backend`, through the [`Backend`](crate::backend::Backend),
//! [`CommandBackend`](crate::backend::CommandBackend) and
//! `GraphBackend` traits only, and `timeline` (a submission's
//! wait and signal lists), and `name` (names shown in errors) below it.
//!
//! | module | concept |
//! |---|---|
//! | `dag.rs` | the graph's structure, barriers, validation (duplicate, unknown name, cycle) |
//! | `record.rs` | [`CommandBuffer`], [`Graph`]: commands and what they run |
//! | `reduce.rs` | transitive closure, transitive reduction, width |
//! | `lower_streams.rs` | the exact lowering to streams + events |
//! | `lower_cuda_graph.rs` | one CUDA graph ([`GraphExecutable`]): nodes and reduction edges, instantiated once, replayed with new kernel parameters |
//! | `lower_levels.rs` | the fork-join-levels baseline (IREE's) |
//! | `schedule.rs` | the schedule a lowering makes and its [`Report`] (false dependencies counted, not assumed) |
//! | `executable.rs` | [`Executable`]: a graph lowered to a schedule, ready to submit |
//! | `queues.rs` | [`Queues`] (streams spanning submissions), [`Affinity`], [`Submit`] (timeline waits and signals) |
//! | `spec_toml.rs` | the `seqsync graph` file format |
//! | `error.rs` | [`GraphError`] |
//!
//! See [`CommandBuffer`] for an example.

#![forbid(unsafe_code)]

pub(crate) mod bitset;
pub(crate) mod dag;
pub(crate) mod error;
pub(crate) mod executable;
pub(crate) mod lower_cuda_graph;
pub(crate) mod lower_levels;
pub(crate) mod lower_streams;
pub(crate) mod lowering;
pub(crate) mod queues;
pub(crate) mod record;
pub(crate) mod reduce;
pub(crate) mod schedule;
pub(crate) mod spec_toml;

pub use error::GraphError;
pub use executable::Executable;
pub use lower_cuda_graph::GraphExecutable;
pub(crate) use lowering::lower;
pub use lowering::Lowering;
pub use queues::{Affinity, Queues, Submission, Submit};
pub use record::{CommandBuffer, Graph};
pub use schedule::Report;

pub(crate) use dag::Dag;
pub(crate) use lower_cuda_graph::graph_report;
pub(crate) use lower_levels::lower_levels;
pub(crate) use lower_streams::lower_streams;
pub(crate) use reduce::Analysis;
pub(crate) use schedule::Schedule;
