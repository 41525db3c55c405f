//! Recording: a [`CommandBuffer`] of kernel launches, copies, fills and host functions, ordered
//! by execution barriers and/or explicit dependencies; [`CommandBuffer::finish`] validates it
//! into a [`Graph`].

use std::sync::Arc;

use super::dag::{CommandKind, Dag, DagBuilder};
use super::error::GraphError;
use super::reduce::Analysis;
pub use crate::backend::command::Command;
use crate::backend::command::{CommandBackend, CopyOp, FillOp};

/// A command buffer being recorded. Commands not ordered by a barrier or a dependency may run
/// concurrently.
///
/// ```
/// use seqsync::graph::{CommandBuffer, Lowering, Queues};
/// use seqsync::backend::{CommandBackend, CopyOp, FillOp};
/// use seqsync::HostBackend;
///
/// let host = HostBackend::new();
/// let (src, dst) = (host.alloc_words(4)?, host.alloc_words(4)?);
/// let mut cb = CommandBuffer::<HostBackend>::new();
/// cb.fill("fill", FillOp { dst: src.clone(), offset: 0, words: 4, value: 0x1122_3344 }, &[]);
/// cb.barrier();
/// cb.copy("copy", CopyOp { src, src_offset: 0, dst: dst.clone(), dst_offset: 0, words: 4 }, &[]);
/// let mut exe = cb.finish()?.lower(Lowering::Streams);
/// assert_eq!(exe.report().false_dependencies, 0);
///
/// let mut pool = Queues::new(host.clone());
/// pool.submit(&mut exe, Default::default())?;
/// pool.synchronize()?;
/// assert_eq!(host.read_words(&dst)?, [0x1122_3344; 4]);
///
/// let mut bad = CommandBuffer::<HostBackend>::new();
/// bad.host("a", || {}, &["b"]);
/// assert_eq!(bad.finish().unwrap_err().to_string(), "entry 1 (`a`): after names unknown command `b`");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct CommandBuffer<B: CommandBackend> {
    dag: DagBuilder,
    ops: Vec<Command<B>>,
}

impl<B: CommandBackend> Default for CommandBuffer<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: CommandBackend> CommandBuffer<B> {
    /// An empty command buffer.
    pub fn new() -> Self {
        CommandBuffer {
            dag: DagBuilder::new(),
            ops: Vec::new(),
        }
    }

    /// Record a command running `op`, after the commands named in `after` (names may be
    /// recorded later) and after the last barrier; returns its index.
    pub fn push(&mut self, name: &str, op: Command<B>, after: &[&str]) -> usize {
        self.ops.push(op);
        self.dag
            .command(name, kind_of(self.ops.last().expect("pushed")), after)
    }

    /// Record a kernel launch.
    pub fn kernel(&mut self, name: &str, kernel: B::Kernel, after: &[&str]) -> usize {
        self.push(name, Command::Kernel(kernel), after)
    }

    /// Record a copy.
    pub fn copy(&mut self, name: &str, copy: CopyOp<B::Memory>, after: &[&str]) -> usize {
        self.push(name, Command::Copy(copy), after)
    }

    /// Record a fill.
    pub fn fill(&mut self, name: &str, fill: FillOp<B::Memory>, after: &[&str]) -> usize {
        self.push(name, Command::Fill(fill), after)
    }

    /// Record a host function (it runs once per submission).
    pub fn host(
        &mut self,
        name: &str,
        f: impl Fn() + Send + Sync + 'static,
        after: &[&str],
    ) -> usize {
        self.push(name, Command::Host(Arc::new(f)), after)
    }

    /// Record an execution barrier: every later command runs after every earlier one.
    pub fn barrier(&mut self) {
        self.dag.barrier();
    }

    /// Validate the recording.
    ///
    /// # Errors
    /// [`GraphError::Duplicate`], [`GraphError::UnknownName`], [`GraphError::Cycle`], naming
    /// the entry.
    pub fn finish(self) -> Result<Graph<B>, GraphError> {
        let dag = self.dag.build()?;
        Ok(Graph::new(dag, self.ops))
    }
}

/// A validated command buffer: its structure, its analysis (closure, transitive reduction,
/// width) and what each command runs.
pub struct Graph<B: CommandBackend> {
    pub(crate) dag: Dag,
    pub(crate) analysis: Analysis,
    pub(crate) ops: Vec<Command<B>>,
}

impl<B: CommandBackend> std::fmt::Debug for Graph<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").field("dag", &self.dag).finish()
    }
}

impl<B: CommandBackend> Graph<B> {
    /// A graph of `dag`'s structure running `ops` (one per command, in `dag`'s numbering).
    ///
    /// # Panics
    /// If the lengths differ.
    pub fn new(dag: Dag, ops: Vec<Command<B>>) -> Self {
        assert_eq!(dag.len(), ops.len(), "one op per command");
        let analysis = Analysis::of(&dag);
        Graph { dag, analysis, ops }
    }

    /// The structure.
    pub fn dag(&self) -> &Dag {
        &self.dag
    }

    /// The closure, reduction and width.
    pub fn analysis(&self) -> &Analysis {
        &self.analysis
    }

    /// What command `i` runs.
    pub fn op(&self, i: usize) -> &Command<B> {
        &self.ops[i]
    }

    /// Replace the kernel (its parameters) of command `i` for later submissions.
    ///
    /// # Errors
    /// [`GraphError::NoSuchCommand`], [`GraphError::NotAKernel`].
    pub fn set_kernel(&mut self, i: usize, kernel: B::Kernel) -> Result<(), GraphError> {
        let len = self.ops.len();
        match self.ops.get_mut(i) {
            None => Err(GraphError::NoSuchCommand { index: i, len }),
            Some(Command::Kernel(k)) => {
                *k = kernel;
                Ok(())
            }
            Some(other) => Err(GraphError::NotAKernel {
                name: self.dag.name(i).to_owned(),
                kind: other.kind(),
            }),
        }
    }
}

/// The structural kind of an op.
pub fn kind_of<B: CommandBackend>(op: &Command<B>) -> CommandKind {
    match op {
        Command::Kernel(_) => CommandKind::Kernel,
        Command::Copy(_) => CommandKind::Copy,
        Command::Fill(_) => CommandKind::Fill,
        Command::Host(_) => CommandKind::Host,
    }
}
