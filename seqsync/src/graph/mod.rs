//! Command buffers and graphs (seed 001): record kernel launches, copies, fills and host
//! functions, ordered by execution barriers or explicit dependencies, and lower the exact
//! dependency graph to streams + events — with no false dependency and an event only for a
//! transitive-reduction edge between streams — or to one graph replayed as a whole (a CUDA
//! graph on CUDA), or, as a baseline, to fork-join levels.
//!
//! It may use: `backend`, through the [`Backend`](crate::backend::Backend),
//! [`CommandBackend`](crate::backend::CommandBackend) and
//! [`GraphBackend`](crate::backend::GraphBackend) traits only, and `timeline` (a submission's
//! wait and signal lists), and `name` (names shown in errors) below it.
//!
//! | module | concept |
//! |---|---|
//! | [`dag`] | [`Dag`], [`DagBuilder`]: structure, barriers, validation (duplicate, unknown name, cycle) |
//! | [`record`] | [`CommandBuffer`], [`Op`], [`Graph`]: commands and what they run |
//! | [`reduce`] | [`Analysis`]: transitive closure, transitive reduction, width |
//! | [`lower_streams`](mod@lower_streams) | the exact lowering to streams + events |
//! | [`lower_cuda_graph`] | one CUDA graph: nodes and reduction edges, instantiated once, replayed with new kernel parameters |
//! | [`lower_levels`](mod@lower_levels) | the fork-join-levels baseline (IREE's) |
//! | [`schedule`] | [`Schedule`] and its [`Report`] (false dependencies counted, not assumed) |
//! | `executable.rs` | [`Executable`]: a graph lowered to a schedule, ready to submit |
//! | [`exec`] | [`StreamPool`] (streams spanning submissions), [`Affinity`], [`Submit`] (timeline waits and signals) |
//! | [`spec_toml`] | the `seqsync graph` file format |
//! | [`error`] | [`GraphError`] |
//!
//! See [`CommandBuffer`] for an example.

#![forbid(unsafe_code)]

pub mod bitset;
pub mod dag;
pub mod error;
pub mod exec;
mod executable;
pub mod lower_cuda_graph;
pub mod lower_levels;
pub mod lower_streams;
pub mod record;
pub mod reduce;
pub mod schedule;
pub mod spec_toml;

pub use dag::{CommandKind, Dag, DagBuilder};
pub use error::GraphError;
pub use exec::{Affinity, Executable, StreamPool, Submit, Submitted};
pub use lower_cuda_graph::{graph_report, GraphExecutable};
pub use lower_levels::lower_levels;
pub use lower_streams::lower_streams;
pub use record::{CommandBuffer, Graph, Op};
pub use reduce::Analysis;
pub use schedule::{Report, Schedule, Wait};

/// How a graph is lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lowering {
    /// Streams + events, exact: no false dependency ([`lower_streams()`]).
    Streams,
    /// Fork-join levels ([`lower_levels()`]), the baseline.
    Levels,
    /// One graph of nodes and reduction edges ([`lower_cuda_graph`]): a CUDA graph on CUDA.
    CudaGraph,
}

impl std::str::FromStr for Lowering {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "streams" => Ok(Lowering::Streams),
            "levels" => Ok(Lowering::Levels),
            "cuda-graph" => Ok(Lowering::CudaGraph),
            other => Err(crate::Error::invalid(
                "graph",
                format!("unknown lowering '{other}': expected streams, levels or cuda-graph"),
            )),
        }
    }
}

/// Lower `dag` to a stream schedule. For [`Lowering::CudaGraph`] this is the order the graph's
/// edges make, each command on a stream of its own ([`lower_cuda_graph::graph_schedule`]); the
/// graph itself is built by [`Graph::instantiate`].
pub fn lower(dag: &Dag, analysis: &Analysis, lowering: Lowering) -> Schedule {
    match lowering {
        Lowering::Streams => lower_streams(dag, analysis),
        Lowering::Levels => lower_levels(dag, analysis),
        Lowering::CudaGraph => lower_cuda_graph::graph_schedule(dag, analysis),
    }
}

/// What `lowering` makes of `dag` (`seqsync graph` prints it).
pub fn report(dag: &Dag, analysis: &Analysis, lowering: Lowering) -> Report {
    match lowering {
        Lowering::CudaGraph => graph_report(dag, analysis),
        _ => lower(dag, analysis, lowering).report(dag, analysis),
    }
}
