//! [`Schedule`]: a graph lowered to streams and cross-stream waits, the order it makes, and its
//! [`Report`].

use serde::Serialize;

use super::bitset::BitSet;
use super::dag::Dag;
use super::reduce::Analysis;

/// One cross-stream wait: an event recorded on `from`'s stream right after `from`, waited on by
/// `to`'s stream right before `to`. (In [`Schedule::joins`]: recorded right *before* `from`,
/// after `from`'s own waits.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Wait {
    /// The command the event is recorded after.
    pub from: usize,
    /// The command whose stream waits before it.
    pub to: usize,
}

/// A graph lowered to (virtual) streams: which stream runs each command, in what order, and the
/// waits between streams. Streams are virtual here; [`Queues`](super::Queues) maps them onto
/// real streams that span submissions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The stream of each command.
    pub stream_of: Vec<usize>,
    /// The position of each command on its stream.
    pub index_of: Vec<usize>,
    /// Each stream's commands, in order.
    pub streams: Vec<Vec<usize>>,
    /// Every cross-stream wait on an event recorded after a command.
    pub waits: Vec<Wait>,
    /// Every wait on a *join*: an event recorded on `from`'s stream right before `from`, once
    /// its stream has waited for everything `from` waits for. A command whose dependencies are
    /// exactly another's (the commands after an execution barrier) waits for that one's join
    /// instead of for each dependency: `a + b` waits for a barrier between `a` and `b`
    /// commands, not `a × b`.
    pub joins: Vec<Wait>,
    /// The order in which commands are enqueued (every wait's `from` before its `to`).
    pub order: Vec<usize>,
}

impl Schedule {
    /// Build a schedule from an enqueue order, each command's stream, and the waits.
    pub fn new(order: Vec<usize>, stream_of: Vec<usize>, waits: Vec<Wait>) -> Schedule {
        let nstreams = stream_of.iter().map(|&s| s + 1).max().unwrap_or(0);
        let mut streams = vec![Vec::new(); nstreams];
        let mut index_of = vec![0; stream_of.len()];
        for &c in &order {
            index_of[c] = streams[stream_of[c]].len();
            streams[stream_of[c]].push(c);
        }
        Schedule {
            stream_of,
            index_of,
            streams,
            waits,
            joins: Vec::new(),
            order,
        }
    }

    /// The same schedule with these waits on joins (see [`Schedule::joins`]).
    pub fn with_joins(mut self, joins: Vec<Wait>) -> Schedule {
        self.joins = joins;
        self
    }

    /// `joins_into()[c]`: the commands whose joins `c`'s stream waits for right before `c`.
    pub fn joins_into(&self) -> Vec<Vec<usize>> {
        into_each(self.stream_of.len(), &self.joins)
    }

    /// `joined()[c]`: some other stream waits for `c`'s join, so an event is recorded right
    /// before it.
    pub fn joined(&self) -> Vec<bool> {
        waited_for(self.stream_of.len(), &self.joins)
    }

    /// `waits_into()[c]`: the commands whose events `c`'s stream waits for right before `c`.
    pub fn waits_into(&self) -> Vec<Vec<usize>> {
        into_each(self.stream_of.len(), &self.waits)
    }

    /// `recorded()[c]`: some other stream waits for `c`, so an event is recorded after it.
    pub fn recorded(&self) -> Vec<bool> {
        waited_for(self.stream_of.len(), &self.waits)
    }

    /// `ordered_before()[c]`: every command the schedule runs before `c` — through stream
    /// order, waits and joins, transitively.
    pub fn ordered_before(&self) -> Vec<BitSet> {
        let n = self.stream_of.len();
        let into = self.waits_into();
        let joins = self.joins_into();
        let mut before = vec![BitSet::new(n); n];
        for &c in &self.order {
            let mut b = BitSet::new(n);
            let i = self.index_of[c];
            let mut add = |p: usize, before: &[BitSet]| {
                b.insert(p);
                b.union_with(&before[p]);
            };
            if i > 0 {
                add(self.streams[self.stream_of[c]][i - 1], &before);
            }
            for &p in &into[c] {
                add(p, &before);
            }
            // A join is what `j` was ordered after, not `j` itself.
            for &j in &joins[c] {
                b.union_with(&before[j]);
            }
            before[c] = b;
        }
        before
    }

    /// Pairs the schedule orders that the graph does not (false dependencies), and pairs the
    /// graph orders that the schedule does not (missing: must be 0).
    pub fn compare(&self, analysis: &Analysis) -> (usize, usize) {
        let sched = self.ordered_before();
        let false_deps = sched
            .iter()
            .zip(&analysis.ancestors)
            .map(|(s, a)| s.count_minus(a))
            .sum();
        let missing = analysis
            .ancestors
            .iter()
            .zip(&sched)
            .map(|(a, s)| a.count_minus(s))
            .sum();
        (false_deps, missing)
    }

    /// The report of this schedule for `dag`.
    pub fn report(&self, dag: &Dag, analysis: &Analysis) -> Report {
        let (false_dependencies, missing) = self.compare(analysis);
        let streams = self.streams.iter().filter(|s| !s.is_empty()).count();
        Report {
            commands: dag.len(),
            width: analysis.width,
            streams,
            events: self.waits.len() + self.joins.len(),
            events_lower_bound: lower_bound(analysis.reduced_edges(), dag.len(), streams),
            false_dependencies,
            missing_dependencies: missing,
            assignment: (0..dag.len())
                .map(|c| Assigned {
                    name: dag.name(c).to_owned(),
                    stream: self.stream_of[c],
                    index: self.index_of[c],
                })
                .collect(),
            waits: self
                .waits
                .iter()
                .map(|w| (w, false))
                .chain(self.joins.iter().map(|w| (w, true)))
                .map(|(w, join)| WaitNames {
                    from: dag.name(w.from).to_owned(),
                    to: dag.name(w.to).to_owned(),
                    join,
                })
                .collect(),
        }
    }
}

/// Per command of `n`, the `from`s of the waits into it.
fn into_each(n: usize, waits: &[Wait]) -> Vec<Vec<usize>> {
    let mut w = vec![Vec::new(); n];
    for x in waits {
        w[x.to].push(x.from);
    }
    w
}

/// Per command of `n`, whether some wait is for it.
fn waited_for(n: usize, waits: &[Wait]) -> Vec<bool> {
    let mut r = vec![false; n];
    for x in waits {
        r[x.from] = true;
    }
    r
}

/// The fewest cross-stream waits any lowering onto `streams` streams can make without adding
/// commands or joins: every reduction edge needs a wait of its own unless its two ends are neighbours on
/// one stream, and `streams` streams have `commands - streams` neighbour pairs.
pub fn lower_bound(reduced_edges: usize, commands: usize, streams: usize) -> usize {
    reduced_edges.saturating_sub(commands.saturating_sub(streams))
}

/// A command's place: its stream and its position there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Assigned {
    /// The command.
    pub name: String,
    /// Its stream.
    pub stream: usize,
    /// Its position on the stream (0 = first).
    pub index: usize,
}

/// A cross-stream wait, by command names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitNames {
    /// The command the event is recorded after (before, for a join).
    pub from: String,
    /// The command whose stream waits.
    pub to: String,
    /// A wait on `from`'s join: the event recorded right before `from`, after its waits.
    pub join: bool,
}

/// What a lowering made of a graph (`seqsync graph --json` prints it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Commands in the graph.
    pub commands: usize,
    /// The most commands that can run at once.
    pub width: usize,
    /// Streams used.
    pub streams: usize,
    /// Cross-stream waits (each an event record plus a stream wait), joins included.
    pub events: usize,
    /// [`lower_bound`]: reduction edges − (commands − streams), the fewest waits without
    /// joins (with them, a barrier's waits come below it).
    pub events_lower_bound: usize,
    /// Ordered pairs the lowering adds that the graph does not order.
    pub false_dependencies: usize,
    /// Ordered pairs of the graph the lowering does not order (always 0; a bug otherwise).
    #[serde(skip)]
    pub missing_dependencies: usize,
    /// Each command's stream and position.
    pub assignment: Vec<Assigned>,
    /// Each cross-stream wait, the waits on joins last.
    pub waits: Vec<WaitNames>,
}
