//! How a graph is lowered: the choice, and what each choice makes of a graph.

use super::{
    graph_report, lower_cuda_graph, lower_levels, lower_streams, Analysis, Dag, Report, Schedule,
};

/// How a graph is lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lowering {
    /// Streams + events, exact: no false dependency (`lower_streams.rs`).
    Streams,
    /// Fork-join levels (`lower_levels.rs`), the baseline.
    Levels,
    /// One graph of nodes and reduction edges (`lower_cuda_graph.rs`): a CUDA graph on CUDA.
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
/// edges make, each command on a stream of its own (`lower_cuda_graph::graph_schedule`); the
/// graph itself is built by [`Graph::instantiate`](super::Graph::instantiate).
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
