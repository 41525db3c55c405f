//! Lowering to a CUDA graph: one node per command and one edge per transitive-reduction edge
//! (a set of dependencies several commands share goes through one empty node: a join),
//! instantiated once ([`Graph::instantiate`]) and replayed any number of times
//! ([`Queues::submit_graph`](super::Queues::submit_graph)), with kernel parameters
//! changed between replays ([`GraphExecutable::set_kernel`]).
//!
//! A graph launch is one operation in its stream's order: ordering with other work (the queue's
//! previous submission, other streams) is made on the launch stream, before and after it. On
//! the host backend the "graph" runs its nodes in one topological order on the launch stream.

use std::collections::HashMap;

use super::dag::Dag;
use super::error::GraphError;
use super::record::Graph;
use super::reduce::Analysis;
use super::schedule::{lower_bound, Assigned, Report, Schedule, Wait};
use crate::backend::replay::GraphBackend;
use crate::error::Result;

/// Each command's dependencies in the CUDA graph, and the graph's joins: a set of two or more
/// reduction predecessors that several commands share becomes one empty node (join `k`,
/// named `dag.len() + k` in the dependencies), so a barrier between `a` and `b` commands is
/// `a + b` edges, not `a × b`.
pub fn graph_edges(dag: &Dag, analysis: &Analysis) -> (Vec<Vec<usize>>, Vec<Vec<usize>>) {
    let mut sharing: HashMap<&[usize], usize> = HashMap::new();
    for p in &analysis.reduced {
        if p.len() >= 2 {
            *sharing.entry(p.as_slice()).or_default() += 1;
        }
    }
    let mut join_of: HashMap<&[usize], usize> = HashMap::new();
    let mut joins = Vec::new();
    let deps = analysis
        .reduced
        .iter()
        .map(|p| {
            if sharing.get(p.as_slice()).copied().unwrap_or(0) < 2 {
                return p.clone();
            }
            let k = *join_of.entry(p.as_slice()).or_insert_with(|| {
                joins.push(p.clone());
                joins.len() - 1
            });
            vec![dag.len() + k]
        })
        .collect();
    (deps, joins)
}

/// The order a graph of `dag`'s reduction edges makes, as a schedule with each command on a
/// stream of its own and each edge a wait; a join of shared dependencies is the first such
/// command's join (see [`graph_edges`]).
pub fn graph_schedule(dag: &Dag, analysis: &Analysis) -> Schedule {
    let (deps, joins) = graph_edges(dag, analysis);
    let n = dag.len();
    // The first command (in topological order) whose dependencies are join `k`.
    let mut first = vec![usize::MAX; joins.len()];
    let (mut waits, mut join_waits) = (Vec::new(), Vec::new());
    for &c in dag.topo() {
        for &p in &deps[c] {
            match p.checked_sub(n) {
                None => waits.push(Wait { from: p, to: c }),
                Some(k) if first[k] == usize::MAX => {
                    first[k] = c;
                    waits.extend(joins[k].iter().map(|&q| Wait { from: q, to: c }));
                }
                Some(k) => join_waits.push(Wait {
                    from: first[k],
                    to: c,
                }),
            }
        }
    }
    Schedule::new(dag.topo().to_vec(), (0..n).collect(), waits).with_joins(join_waits)
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
        let (deps, joins) = graph_edges(&self.dag, &self.analysis);
        let exec = backend.instantiate_graph(&self.ops, &deps, &joins, self.dag.topo())?;
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

    /// Enqueue one replay on `stream`, after the work enqueued on `stream` before it and after
    /// every earlier replay of this graph, on any stream (one replay runs at a time, on CUDA
    /// as `cuGraphLaunch` does and on the host backend alike); no other ordering: the caller
    /// orders it against other work (events or a ring on `stream`, before and after). A
    /// [`Queues`](super::Queues) does that through
    /// [`submit_graph`](super::Queues::submit_graph).
    ///
    /// # Errors
    /// A failing backend call.
    pub fn launch(&self, stream: &B::Stream) -> Result<()> {
        self.backend.launch_graph(&self.exec, stream)
    }

    /// Prepare it on the device in `stream`'s order, so that its first replay costs what a
    /// later one does (CUDA: `cuGraphUpload`; the host backend has nothing to prepare).
    ///
    /// # Errors
    /// A failing backend call.
    pub fn upload(&self, stream: &B::Stream) -> Result<()> {
        self.backend.upload_graph(&self.exec, stream)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dag::{CommandKind, DagBuilder};

    /// Three commands, `d` after two of them, a barrier, then four commands: those four share
    /// their reduction predecessors (`a2` and `d`) through one join (6 edges, not 8); `d`'s own
    /// two are its alone. The schedule it makes orders exactly what the graph does.
    #[test]
    fn commands_that_share_their_dependencies_go_through_one_join() {
        let mut b = DagBuilder::new();
        for i in 0..3 {
            b.command(&format!("a{i}"), CommandKind::Kernel, &[] as &[&str]);
        }
        b.command("d", CommandKind::Kernel, &["a0", "a1"]);
        b.barrier();
        for i in 0..4 {
            b.command(&format!("b{i}"), CommandKind::Kernel, &[] as &[&str]);
        }
        let dag = b.build().unwrap();
        let a = Analysis::of(&dag);
        let (deps, joins) = graph_edges(&dag, &a);
        assert_eq!(joins, [vec![2, 3]]);
        assert_eq!(deps[3], [0, 1], "d's dependencies are its own");
        for (c, d) in deps.iter().enumerate().skip(4) {
            assert_eq!(d, &[dag.len()], "{}", dag.name(c));
        }
        assert_eq!(graph_schedule(&dag, &a).compare(&a), (0, 0));
    }
}
