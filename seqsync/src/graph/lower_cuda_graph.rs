//! Lowering to a CUDA graph: one node per command and one edge per transitive-reduction edge,
//! instantiated once ([`Graph::instantiate`]) and replayed any number of times
//! ([`StreamPool::submit_graph`](super::StreamPool::submit_graph)), with kernel parameters
//! changed between replays ([`GraphExecutable::set_kernel`]).
//!
//! A graph launch is one operation in its stream's order: ordering with other work (the queue's
//! previous submission, other streams) is made on the launch stream, before and after it. On
//! the host backend the "graph" runs its nodes in one topological order on the launch stream.

use super::dag::Dag;
use super::error::GraphError;
use super::record::Graph;
use super::reduce::Analysis;
use super::schedule::{lower_bound, Assigned, Report, Schedule, Wait};
use crate::backend::replay::GraphBackend;
use crate::error::Result;

/// The order a graph of `dag`'s reduction edges makes, as a schedule with each command on a
/// stream of its own and each edge a wait.
pub fn graph_schedule(dag: &Dag, analysis: &Analysis) -> Schedule {
    let waits = (0..dag.len())
        .flat_map(|c| {
            analysis.reduced[c]
                .iter()
                .map(move |&p| Wait { from: p, to: c })
        })
        .collect();
    Schedule::new(dag.topo().to_vec(), (0..dag.len()).collect(), waits)
}

/// The report of the CUDA graph lowering: one launch stream, no events, each command's index
/// its position in the topological order the graph was built in.
pub fn graph_report(dag: &Dag, analysis: &Analysis) -> Report {
    let (false_dependencies, missing) = graph_schedule(dag, analysis).compare(analysis);
    let mut position = vec![0; dag.len()];
    for (k, &c) in dag.topo().iter().enumerate() {
        position[c] = k;
    }
    Report {
        commands: dag.len(),
        width: analysis.width,
        streams: 1,
        events: 0,
        events_lower_bound: lower_bound(0, dag.len(), 1),
        false_dependencies,
        missing_dependencies: missing,
        assignment: (0..dag.len())
            .map(|c| Assigned {
                name: dag.name(c).to_owned(),
                stream: 0,
                index: position[c],
            })
            .collect(),
        waits: Vec::new(),
    }
}

/// A graph instantiated on a backend, ready to replay.
pub struct GraphExecutable<B: GraphBackend> {
    pub(crate) graph: Graph<B>,
    pub(crate) exec: B::GraphExec,
    pub(crate) backend: B,
    report: Report,
}

impl<B: GraphBackend> Graph<B> {
    /// Build the graph (nodes, reduction edges) on `backend` and instantiate it.
    ///
    /// # Errors
    /// A failing backend call, or an out-of-bounds copy or fill.
    pub fn instantiate(self, backend: &B) -> Result<GraphExecutable<B>> {
        let exec = backend.instantiate_graph(&self.ops, &self.analysis.reduced, self.dag.topo())?;
        let report = graph_report(&self.dag, &self.analysis);
        Ok(GraphExecutable {
            graph: self,
            exec,
            backend: backend.clone(),
            report,
        })
    }
}

impl<B: GraphBackend> GraphExecutable<B> {
    /// The graph.
    pub fn graph(&self) -> &Graph<B> {
        &self.graph
    }

    /// Width, false dependencies (0), assignment.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Enqueue one replay on `stream`, with no ordering beyond the stream's own: the caller
    /// orders it against other work (events or a ring on `stream`, before and after). A
    /// [`StreamPool`](super::StreamPool) does that through
    /// [`submit_graph`](super::StreamPool::submit_graph).
    ///
    /// # Errors
    /// A failing backend call.
    pub fn launch(&self, stream: &B::Stream) -> Result<()> {
        self.backend.launch_graph(&self.exec, stream)
    }

    /// Change command `i`'s kernel (same function, new parameters) for later replays.
    ///
    /// # Errors
    /// [`GraphError`] (as [`crate::Error::InvalidArgument`]) when `i` is not a kernel command;
    /// a failing backend call.
    pub fn set_kernel(&mut self, i: usize, kernel: B::Kernel) -> Result<()> {
        self.graph
            .set_kernel(i, kernel.clone())
            .map_err(|e: GraphError| crate::Error::invalid("graph", e.to_string()))?;
        self.backend.update_graph_kernel(&mut self.exec, i, &kernel)
    }
}
