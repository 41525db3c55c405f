//! [`GraphBackend`]: a backend that can build a whole command graph once and replay it with one
//! launch — a CUDA graph (`cuGraphInstantiate`, `cuGraphLaunch`) on CUDA; on the host backend,
//! one closure that runs the nodes in a topological order.

use super::command::{Command, CommandBackend};
use crate::error::Result;

/// A backend that instantiates and replays graphs.
pub trait GraphBackend: CommandBackend {
    /// An instantiated graph.
    type GraphExec: Send;

    /// Build a graph whose node `i` runs `ops[i]` after every node in `deps[i]`, and
    /// instantiate it. `order` lists every node after its dependencies. A dependency
    /// `ops.len() + k` is *join* `k`: an empty node that runs after every op in `joins[k]`
    /// (shared dependencies, `a + b` edges instead of `a × b`).
    fn instantiate_graph(
        &self,
        ops: &[Command<Self>],
        deps: &[Vec<usize>],
        joins: &[Vec<usize>],
        order: &[usize],
    ) -> Result<Self::GraphExec>;

    /// Enqueue one run of the whole graph on `stream`: after the stream's earlier work, before
    /// its later work.
    fn launch_graph(&self, exec: &Self::GraphExec, stream: &Self::Stream) -> Result<()>;

    /// Prepare `exec` on the device in `stream`'s order, so that its first launch costs what
    /// a later one does (CUDA: `cuGraphUpload`; a first launch uploads otherwise). Runs
    /// nothing of the graph. The default does nothing.
    fn upload_graph(&self, exec: &Self::GraphExec, stream: &Self::Stream) -> Result<()> {
        let _ = (exec, stream);
        Ok(())
    }

    /// Replace kernel node `node`'s kernel (its parameters) for later launches; the node's
    /// function must stay the same.
    fn update_graph_kernel(
        &self,
        exec: &mut Self::GraphExec,
        node: usize,
        kernel: &Self::Kernel,
    ) -> Result<()>;
}
