//! The model the search explores: threads' loops with rings as indices, and what a state
//! (each thread's iteration and position) implies for every ring.

use std::collections::HashMap;

/// One op of a thread's loop, with rings as indices.
#[derive(Debug, Clone)]
pub(super) enum MOp {
    Consume {
        ring: usize,
        lag: i64,
        blocking: bool,
        stage: String,
        sync: bool,
    },
    Record {
        ring: usize,
        blocking: bool,
        stage: String,
    },
    Launch {
        stage: String,
    },
}

#[derive(Debug, Clone)]
pub(super) struct MConsumer {
    pub(super) thread: usize,
    pub(super) op: usize,
    pub(super) lag: i64,
    pub(super) stage: String,
}

#[derive(Debug, Clone)]
pub(super) struct MRing {
    pub(super) name: String,
    pub(super) max_size: i64,
    pub(super) producer: Option<(usize, usize, String)>,
    pub(super) consumers: Vec<MConsumer>,
}

#[derive(Debug, Clone)]
pub(super) struct Model {
    pub(super) threads: Vec<(String, Vec<MOp>)>,
    pub(super) rings: Vec<MRing>,
    pub(super) max_lag: i64,
    /// `Some(n)`: a run of `n` batches (seqs `0..n`), as the runtime runs it: a thread that has
    /// finished iteration `n - 1` stops. `None`: endless loops.
    pub(super) end: Option<i64>,
}

impl Model {
    /// Groups threads linked by rings; threads with empty loops are dropped.
    pub(super) fn components(&self) -> Vec<Vec<usize>> {
        let n = self.threads.len();
        let mut parent: Vec<usize> = (0..n).collect();
        for r in &self.rings {
            if let Some((p, _, _)) = &r.producer {
                for c in &r.consumers {
                    union(&mut parent, *p, c.thread);
                }
            }
        }
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut root_to_group: HashMap<usize, usize> = HashMap::new();
        for t in (0..n).filter(|&t| !self.threads[t].1.is_empty()) {
            let root = find_root(&mut parent, t);
            let g = *root_to_group.entry(root).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(t);
        }
        groups
    }
}

pub(super) fn find_root(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

pub(super) fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find_root(parent, a), find_root(parent, b));
    parent[ra.max(rb)] = ra.min(rb);
}

/// Per thread: (iteration, index into its loop body).
pub(super) type State = Vec<(i64, usize)>;

/// What a thread does next from a state.
#[derive(Debug)]
pub(super) enum Status {
    /// It can step; the text says what the step does.
    Go(String),
    /// It has run every batch of a finite run.
    Done,
    /// It waits (blocking call); the text says on what, `why` names the culprit.
    Blocked { text: String, why: String },
    /// A non-blocking call would fail.
    Fail(String),
}

/// Ring counters derived from a state.
impl Model {
    pub(super) fn recorded(&self, st: &State, ring: usize) -> i64 {
        match &self.rings[ring].producer {
            Some((t, k, _)) => {
                let (it, pc) = st[*t];
                it + i64::from(*k < pc)
            }
            None => 0,
        }
    }

    pub(super) fn released(&self, st: &State, c: &MConsumer) -> i64 {
        let (it, pc) = st[c.thread];
        let last = if c.op < pc { it } else { it - 1 };
        (last + 1 - c.lag).max(0)
    }

    /// Oldest unreleased seq and the consumers that still hold it.
    pub(super) fn oldest(&self, st: &State, ring: usize) -> Option<(i64, Vec<&MConsumer>)> {
        let cs = &self.rings[ring].consumers;
        let min = cs.iter().map(|c| self.released(st, c)).min()?;
        let holders = cs.iter().filter(|c| self.released(st, c) == min).collect();
        Some((min, holders))
    }

    pub(super) fn thread_name(&self, t: usize) -> &str {
        &self.threads[t].0
    }

    /// Has thread `t` run every batch (finite runs only)?
    pub(super) fn done(&self, st: &State, t: usize) -> bool {
        self.end.is_some_and(|n| st[t].0 >= n)
    }

    pub(super) fn status(&self, st: &State, t: usize) -> Status {
        if self.done(st, t) {
            return Status::Done;
        }
        let (it, pc) = st[t];
        match &self.threads[t].1[pc] {
            MOp::Consume {
                ring,
                lag,
                blocking,
                stage,
                sync,
            } => self.consume_status(st, *ring, it - lag, *blocking, stage, *sync),
            MOp::Record {
                ring,
                blocking,
                stage,
            } => self.record_status(st, t, *ring, it, *blocking, stage),
            MOp::Launch { stage } => Status::Go(format!("launches stage {stage} for batch {it}")),
        }
    }

    pub(super) fn consume_status(
        &self,
        st: &State,
        ring: usize,
        seq: i64,
        blocking: bool,
        stage: &str,
        sync: bool,
    ) -> Status {
        let r = &self.rings[ring];
        let verb = if sync { "synchronizes on" } else { "waits on" };
        let call = if sync { "synchronize" } else { "wait" };
        if seq < 0 {
            return Status::Go(format!(
                "stage {stage} {verb} ring {} at seq {seq} (no-op)",
                r.name
            ));
        }
        let recorded = self.recorded(st, ring);
        if seq < recorded {
            return Status::Go(format!("stage {stage} {verb} ring {} at seq {seq}", r.name));
        }
        let producer = match &r.producer {
            Some((pt, _, ps)) => format!("stage {ps} on thread {}", self.thread_name(*pt)),
            None => "nobody".to_string(),
        };
        let detail = format!(
            "{call} on ring {} at seq {seq}, not yet recorded ({recorded} recorded so far, by {producer})",
            r.name
        );
        if blocking {
            Status::Blocked {
                text: format!("BLOCKED: {detail}"),
                why: format!("ring {} to record seq {seq} ({producer})", r.name),
            }
        } else {
            Status::Fail(format!("FAILS: non-blocking {detail}: NotYetProduced"))
        }
    }

    pub(super) fn record_status(
        &self,
        st: &State,
        t: usize,
        ring: usize,
        seq: i64,
        blocking: bool,
        stage: &str,
    ) -> Status {
        let r = &self.rings[ring];
        let Some((oldest, holders)) = self.oldest(st, ring) else {
            return Status::Go(format!(
                "stage {stage} records seq {seq} on ring {} (no consumers)",
                r.name
            ));
        };
        let unreleased = seq - oldest;
        if unreleased < r.max_size {
            return Status::Go(format!(
                "stage {stage} records seq {seq} on ring {}",
                r.name
            ));
        }
        let who: Vec<String> = holders
            .iter()
            .map(|c| {
                let finished = if self.done(st, c.thread) {
                    format!(
                        " (finished its {} batches at lag {}: it never will)",
                        self.end.unwrap_or_default(),
                        c.lag
                    )
                } else {
                    String::new()
                };
                format!(
                    "{} on thread {}{finished}",
                    c.stage,
                    self.thread_name(c.thread)
                )
            })
            .collect();
        let who = who.join(" and ");
        let itself = if holders.iter().any(|c| c.thread == t) {
            " (this same thread, which is stuck here: it never will)"
        } else {
            ""
        };
        let detail = format!(
            "record {} seq {seq}, ring full ({unreleased} of max_size {} unreleased; oldest {oldest} waits for {who})",
            r.name, r.max_size
        );
        if blocking {
            Status::Blocked {
                text: format!("BLOCKED: {detail}"),
                why: format!(
                    "room in ring {}: seq {oldest} must first be released by {who}{itself}",
                    r.name
                ),
            }
        } else {
            Status::Fail(format!("FAILS: non-blocking {detail}: Overflow"))
        }
    }

    pub(super) fn advance(&self, st: &mut State, t: usize) {
        let (it, pc) = st[t];
        st[t] = if pc + 1 == self.threads[t].1.len() {
            (it + 1, 0)
        } else {
            (it, pc + 1)
        };
    }
}
