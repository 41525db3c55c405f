//! [`Dag`]: the structure of a command buffer (names, kinds, dependencies), validated; and
//! [`DagBuilder`], which records it from commands, `after` lists and execution barriers.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use serde::Serialize;

use super::error::GraphError;

/// What a command does. The structure (and every lowering) is the same for all kinds; the kind
/// says which backend call runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandKind {
    /// A kernel launch (host backend: a closure on the stream).
    Kernel,
    /// A copy between two memories.
    Copy,
    /// A fill of memory with a 32-bit pattern.
    Fill,
    /// A host function, run in stream order.
    Host,
}

impl CommandKind {
    /// `"kernel"`, `"copy"`, `"fill"` or `"host"`.
    pub fn as_str(self) -> &'static str {
        match self {
            CommandKind::Kernel => "kernel",
            CommandKind::Copy => "copy",
            CommandKind::Fill => "fill",
            CommandKind::Host => "host",
        }
    }

    /// Parse `"kernel"`, `"copy"`, `"fill"` or `"host"`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "kernel" => CommandKind::Kernel,
            "copy" => CommandKind::Copy,
            "fill" => CommandKind::Fill,
            "host" => CommandKind::Host,
            _ => return None,
        })
    }
}

impl std::fmt::Display for CommandKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated dependency graph of commands: names are unique, every dependency exists, there
/// is no cycle. Commands are numbered in recording order; [`Dag::topo`] is an order that puts
/// every command after its dependencies (recording order wherever that is one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dag {
    names: Vec<String>,
    kinds: Vec<CommandKind>,
    preds: Vec<Vec<usize>>,
    succs: Vec<Vec<usize>>,
    topo: Vec<usize>,
}

impl Dag {
    /// How many commands.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// No commands?
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The name of command `i`.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// The kind of command `i`.
    pub fn kind(&self, i: usize) -> CommandKind {
        self.kinds[i]
    }

    /// The commands `i` depends on directly (ascending, no duplicates).
    pub fn preds(&self, i: usize) -> &[usize] {
        &self.preds[i]
    }

    /// The commands that depend directly on `i` (ascending).
    pub fn succs(&self, i: usize) -> &[usize] {
        &self.succs[i]
    }

    /// Every command after its dependencies.
    pub fn topo(&self) -> &[usize] {
        &self.topo
    }

    /// The index of the command named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Number of direct dependencies (edges).
    pub fn edges(&self) -> usize {
        self.preds.iter().map(Vec::len).sum()
    }

    /// A graph from dependency lists (`preds[i]` = what `i` waits for), named `c0`, `c1`, …,
    /// all kernels. For generated graphs and tests.
    ///
    /// # Errors
    /// [`GraphError::UnknownName`] for an index out of range, [`GraphError::Cycle`].
    pub fn from_preds(preds: &[Vec<usize>]) -> Result<Dag, GraphError> {
        let mut b = DagBuilder::new();
        for p in preds {
            let after: Vec<String> = p.iter().map(|j| format!("c{j}")).collect();
            b.command(&format!("c{}", b.len()), CommandKind::Kernel, &after);
        }
        b.build()
    }
}

/// The most commands a graph may hold: its analysis keeps a transitive closure and reduction
/// of `n²` bits and barriers add up to `n²/4` edges, so 4096 commands take about 0.2 s and
/// 100 MB (BENCHMARKS.md §8), and twice as many four times that.
pub const MAX_COMMANDS: usize = 4096;

/// Records a command buffer's structure: commands in order, each with an optional `after`
/// list (names, which may come later in the recording), and execution barriers. A command
/// recorded after a barrier depends on every command recorded between that barrier and the
/// barrier (or start) before it — and so, transitively, on everything before the barrier.
///
/// ```
/// use seqsync::internal::graph::{CommandKind, DagBuilder};
/// let mut b = DagBuilder::new();
/// b.command("a", CommandKind::Fill, &[] as &[&str]);
/// b.command("b", CommandKind::Fill, &[] as &[&str]);
/// b.barrier();
/// b.command("c", CommandKind::Kernel, &[] as &[&str]);
/// b.command("d", CommandKind::Copy, &["c"]);
/// let dag = b.build()?;
/// assert_eq!(dag.preds(2), [0, 1]); // c after a and b (the barrier)
/// assert_eq!(dag.preds(3), [0, 1, 2]); // d after the barrier and after c
///
/// let mut bad = DagBuilder::new();
/// bad.command("x", CommandKind::Kernel, &["y"]);
/// bad.command("y", CommandKind::Kernel, &["x"]);
/// assert_eq!(bad.build().unwrap_err().to_string(), "entry 1 (`x`): dependency cycle `x` -> `y` -> `x`");
/// # Ok::<(), seqsync::graph::GraphError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct DagBuilder {
    entries: usize,
    names: Vec<String>,
    kinds: Vec<CommandKind>,
    entry_of: Vec<usize>,
    after: Vec<Vec<String>>,
    implicit: Vec<Vec<usize>>,
    /// Commands recorded since the last barrier.
    segment: Vec<usize>,
    /// The commands the last barrier closed (what new commands depend on).
    barrier_preds: Vec<usize>,
}

impl DagBuilder {
    /// An empty recording.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many commands so far.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// No commands yet?
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Record a command; returns its index. Names are checked in [`build`](Self::build).
    pub fn command<S: AsRef<str>>(&mut self, name: &str, kind: CommandKind, after: &[S]) -> usize {
        self.entries += 1;
        let i = self.names.len();
        self.names.push(name.to_owned());
        self.kinds.push(kind);
        self.entry_of.push(self.entries);
        self.after
            .push(after.iter().map(|s| s.as_ref().to_owned()).collect());
        self.implicit.push(self.barrier_preds.clone());
        self.segment.push(i);
        i
    }

    /// Record an execution barrier: every later command runs after every earlier one. Two
    /// barriers in a row are one.
    pub fn barrier(&mut self) {
        self.entries += 1;
        if !self.segment.is_empty() {
            self.barrier_preds = std::mem::take(&mut self.segment);
        }
    }

    /// Validate and build the graph (at most [`MAX_COMMANDS`] commands).
    ///
    /// # Errors
    /// [`GraphError::Duplicate`], [`GraphError::UnknownName`], [`GraphError::Cycle`], each
    /// naming the entry.
    pub fn build(self) -> Result<Dag, GraphError> {
        let n = self.names.len();
        if n > MAX_COMMANDS {
            return Err(GraphError::TooLarge {
                commands: n,
                max: MAX_COMMANDS,
            });
        }
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(n);
        for (i, name) in self.names.iter().enumerate() {
            if let Some(&first) = index.get(name.as_str()) {
                return Err(GraphError::Duplicate {
                    entry: self.entry_of[i],
                    name: name.clone(),
                    first: self.entry_of[first],
                });
            }
            index.insert(name, i);
        }
        let mut preds = Vec::with_capacity(n);
        for i in 0..n {
            let mut p = self.implicit[i].clone();
            for a in &self.after[i] {
                match index.get(a.as_str()) {
                    Some(&j) => p.push(j),
                    None => {
                        return Err(GraphError::UnknownName {
                            entry: self.entry_of[i],
                            name: self.names[i].clone(),
                            unknown: a.clone(),
                        })
                    }
                }
            }
            p.sort_unstable();
            p.dedup();
            preds.push(p);
        }
        let mut succs = vec![Vec::new(); n];
        for (i, p) in preds.iter().enumerate() {
            for &j in p {
                succs[j].push(i);
            }
        }
        // Kahn's algorithm, smallest index first: recording order wherever it is a topological
        // order.
        let mut missing: Vec<usize> = preds.iter().map(Vec::len).collect();
        let mut ready: BinaryHeap<Reverse<usize>> =
            (0..n).filter(|&i| missing[i] == 0).map(Reverse).collect();
        let mut topo = Vec::with_capacity(n);
        while let Some(Reverse(i)) = ready.pop() {
            topo.push(i);
            for &s in &succs[i] {
                missing[s] -= 1;
                if missing[s] == 0 {
                    ready.push(Reverse(s));
                }
            }
        }
        if topo.len() < n {
            return Err(self.cycle(&preds, &missing));
        }
        Ok(Dag {
            names: self.names,
            kinds: self.kinds,
            preds,
            succs,
            topo,
        })
    }

    /// A cycle among the commands Kahn's algorithm could not order (`missing > 0`).
    fn cycle(&self, preds: &[Vec<usize>], missing: &[usize]) -> GraphError {
        // Every unordered command has an unordered predecessor: walk predecessors until one
        // repeats.
        let start = (0..preds.len()).find(|&i| missing[i] > 0).expect("a cycle");
        let mut seen = vec![usize::MAX; preds.len()];
        let mut walk = Vec::new();
        let mut at = start;
        while seen[at] == usize::MAX {
            seen[at] = walk.len();
            walk.push(at);
            at = *preds[at]
                .iter()
                .find(|&&p| missing[p] > 0)
                .expect("an unordered command has an unordered predecessor");
        }
        // walk[seen[at]..] is the cycle, each entry waiting for the next; reverse it so each
        // name is followed by what runs after it, and start at the earliest entry.
        let mut cyc: Vec<usize> = walk[seen[at]..].iter().rev().copied().collect();
        let first = (0..cyc.len()).min_by_key(|&k| cyc[k]).unwrap_or(0);
        cyc.rotate_left(first);
        cyc.push(cyc[0]);
        GraphError::Cycle {
            entry: self.entry_of[cyc[0]],
            name: self.names[cyc[0]].clone(),
            cycle: cyc.iter().map(|&i| self.names[i].clone()).collect(),
        }
    }
}
