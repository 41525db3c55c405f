//! Deadlock check: explores every interleaving of the threads' loops.
//!
//! A state is, per thread, its iteration (batch number) and its index into its
//! loop body. Every ring counter follows from these: the producer's thread
//! position says how many seqs are recorded; a consumer at lag `L` that has
//! executed its op in iteration `t` has released every seq `< t - L + 1`
//! (negative seqs never count). A thread cannot step when it is in a blocking
//! wait on an unrecorded seq or a blocking record on a full ring; a
//! *non-blocking* call in that situation is an error state (the program would
//! throw), reported like a deadlock but with its own wording.
//!
//! Iterations are unbounded, but threads linked by rings stay within bounded
//! distance of each other, so states are keyed by (indices, iterations minus
//! the smallest, min(smallest iteration, largest lag)): beyond the largest lag
//! no seq is negative any more and behaviour is translation-invariant. Threads
//! not linked by any ring are checked separately. The search is breadth-first,
//! so a reported trace is a shortest interleaving reaching the stuck state.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use serde::Serialize;

use super::derive::{Op, Plan};
use super::error::PlanError;
use super::spec::MAX_VALUE;

/// Default cap on explored states before the check gives up as inconclusive.
pub const DEFAULT_MAX_STATES: usize = 2_000_000;

/// Options of [`check_deadlock_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// Give up (inconclusive) after this many distinct states.
    pub max_states: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            max_states: DEFAULT_MAX_STATES,
        }
    }
}

/// One step of an interleaving: a thread executes one op.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The thread that moves.
    pub thread: String,
    /// What it does, in words.
    pub text: String,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.thread, self.text)
    }
}

/// An interleaving from the start to a stuck state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trace {
    /// The steps taken, in order (a valid interleaving from the start).
    pub steps: Vec<Step>,
    /// Each stuck thread's situation (`BLOCKED: ...` or `FAILS: ...`).
    pub stuck: Vec<Step>,
    /// One line naming which thread waits for what.
    pub summary: String,
}

impl Trace {
    /// The steps with every run of more than `keep` consecutive steps of one
    /// thread folded into one line (`thread: N steps: first … last`). The
    /// order of runs is kept, so the lines still read as a valid interleaving.
    pub fn compact(&self, keep: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.steps.len() {
            let thread = &self.steps[i].thread;
            let run = self.steps[i..]
                .iter()
                .take_while(|s| &s.thread == thread)
                .count();
            if run > keep.max(2) {
                let (first, last) = (&self.steps[i], &self.steps[i + run - 1]);
                out.push(format!(
                    "{thread}: {run} steps: {} … {}",
                    first.text, last.text
                ));
            } else {
                out.extend(self.steps[i..i + run].iter().map(Step::to_string));
            }
            i += run;
        }
        out.extend(self.stuck.iter().map(Step::to_string));
        out.push(self.summary.clone());
        out
    }
}

impl fmt::Display for Trace {
    /// Every step, one per line, then the stuck threads and the summary.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for s in self.steps.iter().chain(&self.stuck) {
            writeln!(f, "{s}")?;
        }
        write!(f, "{}", self.summary)
    }
}

/// The outcome of a deadlock check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// No interleaving gets stuck.
    DeadlockFree {
        /// Distinct states explored.
        states: usize,
    },
    /// Some interleaving reaches a state where every thread is blocked.
    Deadlock {
        /// How to get there.
        trace: Trace,
    },
    /// Some interleaving makes a non-blocking call fail (`NotYetProduced` or `Overflow`).
    WouldFail {
        /// How to get there.
        trace: Trace,
    },
    /// The state cap was reached before the search finished.
    Inconclusive {
        /// Distinct states explored.
        states: usize,
    },
}

impl Verdict {
    /// True only for [`Verdict::DeadlockFree`].
    pub fn is_deadlock_free(&self) -> bool {
        matches!(self, Verdict::DeadlockFree { .. })
    }

    /// The trace of a deadlock or failure.
    pub fn trace(&self) -> Option<&Trace> {
        match self {
            Verdict::Deadlock { trace } | Verdict::WouldFail { trace } => Some(trace),
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::DeadlockFree { states } => {
                write!(f, "deadlock-free ({states} states explored)")
            }
            Verdict::Deadlock { trace } => write!(f, "DEADLOCK:\n{trace}"),
            Verdict::WouldFail { trace } => write!(f, "WOULD FAIL:\n{trace}"),
            Verdict::Inconclusive { states } => write!(
                f,
                "inconclusive: gave up after {states} states (raise the cap or shrink the sizes)"
            ),
        }
    }
}

/// Checks `plan` with the default state cap.
///
/// # Errors
/// [`PlanError::InvalidPlan`] if the plan is inconsistent (a ring recorded
/// twice or never, nconsumers not matching the ops, a max_size of 0).
pub fn check_deadlock(plan: &Plan) -> Result<Verdict, PlanError> {
    check_deadlock_with(plan, CheckOptions::default())
}

/// Checks `plan` with explicit options.
///
/// # Errors
/// As [`check_deadlock`].
pub fn check_deadlock_with(plan: &Plan, options: CheckOptions) -> Result<Verdict, PlanError> {
    let model = Model::new(plan)?;
    let mut total = 0;
    let mut inconclusive = false;
    for component in model.components() {
        match Search::new(&model, component, options.max_states).run() {
            Verdict::DeadlockFree { states } => total += states,
            Verdict::Inconclusive { states } => {
                total += states;
                inconclusive = true;
            }
            stuck => return Ok(stuck),
        }
    }
    Ok(if inconclusive {
        Verdict::Inconclusive { states: total }
    } else {
        Verdict::DeadlockFree { states: total }
    })
}

/// One op of a thread's loop, with rings as indices.
#[derive(Debug, Clone)]
enum MOp {
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
struct MConsumer {
    thread: usize,
    op: usize,
    lag: i64,
    stage: String,
}

#[derive(Debug, Clone)]
struct MRing {
    name: String,
    max_size: i64,
    producer: Option<(usize, usize, String)>,
    consumers: Vec<MConsumer>,
}

#[derive(Debug)]
struct Model {
    threads: Vec<(String, Vec<MOp>)>,
    rings: Vec<MRing>,
    max_lag: i64,
}

fn invalid(message: String) -> PlanError {
    PlanError::InvalidPlan { message }
}

fn to_i64(what: &str, v: u64) -> Result<i64, PlanError> {
    if v > MAX_VALUE {
        return Err(invalid(format!("{what} = {v} is larger than {MAX_VALUE}")));
    }
    i64::try_from(v).map_err(|_| invalid(format!("{what} = {v} is too large")))
}

impl Model {
    fn new(plan: &Plan) -> Result<Self, PlanError> {
        let mut rings = Vec::with_capacity(plan.rings.len());
        for r in &plan.rings {
            if r.max_size == 0 {
                return Err(invalid(format!("ring `{}` has max_size 0", r.name)));
            }
            rings.push(MRing {
                name: r.name.clone(),
                max_size: to_i64("max_size", r.max_size)?,
                producer: None,
                consumers: Vec::new(),
            });
        }
        let mut threads = Vec::new();
        let mut max_lag = 0;
        for (t, tp) in plan.threads.iter().enumerate() {
            let mut ops = Vec::with_capacity(tp.ops.len());
            for (k, op) in tp.ops.iter().enumerate() {
                let m = lower_op(plan, op)?;
                match &m {
                    MOp::Consume {
                        ring, lag, stage, ..
                    } => {
                        max_lag = max_lag.max(*lag);
                        rings[*ring].consumers.push(MConsumer {
                            thread: t,
                            op: k,
                            lag: *lag,
                            stage: stage.clone(),
                        });
                    }
                    MOp::Record { ring, stage, .. } => {
                        if rings[*ring].producer.is_some() {
                            return Err(invalid(format!(
                                "ring `{}` is recorded twice",
                                rings[*ring].name
                            )));
                        }
                        rings[*ring].producer = Some((t, k, stage.clone()));
                    }
                    MOp::Launch { .. } => {}
                }
                ops.push(m);
            }
            threads.push((tp.name.clone(), ops));
        }
        check_counts(plan, &rings)?;
        Ok(Model {
            threads,
            rings,
            max_lag,
        })
    }

    /// Groups threads linked by rings; threads with empty loops are dropped.
    fn components(&self) -> Vec<Vec<usize>> {
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

fn find_root(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find_root(parent, a), find_root(parent, b));
    parent[ra.max(rb)] = ra.min(rb);
}

/// `op` for the model: its ring checked against the plan, its stage as a name, its lag in range.
fn lower_op(plan: &Plan, op: &Op) -> Result<MOp, PlanError> {
    let ring = |r: usize| {
        if r < plan.rings.len() {
            Ok(r)
        } else {
            Err(invalid(format!(
                "op names ring #{r}, but the plan has {} rings",
                plan.rings.len()
            )))
        }
    };
    let stage = |g: usize| {
        plan.stages.get(g).map(|s| s.name.clone()).ok_or_else(|| {
            invalid(format!(
                "op names stage #{g}, but the plan has {} stages",
                plan.stages.len()
            ))
        })
    };
    let lag = |lag: i64| {
        if (0..=MAX_VALUE as i64).contains(&lag) {
            Ok(lag)
        } else {
            Err(invalid(format!("lag = {lag} is not in 0..={MAX_VALUE}")))
        }
    };
    Ok(match *op {
        Op::Wait {
            stage: g,
            ring: r,
            lag: l,
            blocking,
            ..
        } => MOp::Consume {
            ring: ring(r)?,
            lag: lag(l)?,
            blocking,
            stage: stage(g)?,
            sync: false,
        },
        Op::Synchronize {
            stage: g,
            ring: r,
            lag: l,
            blocking,
        } => MOp::Consume {
            ring: ring(r)?,
            lag: lag(l)?,
            blocking,
            stage: stage(g)?,
            sync: true,
        },
        Op::Launch { stage: g } => MOp::Launch { stage: stage(g)? },
        Op::Record {
            stage: g,
            ring: r,
            blocking,
            ..
        } => MOp::Record {
            ring: ring(r)?,
            blocking,
            stage: stage(g)?,
        },
    })
}

fn check_counts(plan: &Plan, rings: &[MRing]) -> Result<(), PlanError> {
    for (r, m) in plan.rings.iter().zip(rings) {
        if r.nconsumers as usize != m.consumers.len() {
            return Err(invalid(format!(
                "ring `{}` has nconsumers {} but {} ops consume it",
                r.name,
                r.nconsumers,
                m.consumers.len()
            )));
        }
        if m.producer.is_none() && !m.consumers.is_empty() {
            return Err(invalid(format!(
                "ring `{}` is consumed but never recorded",
                r.name
            )));
        }
    }
    Ok(())
}

/// Per thread: (iteration, index into its loop body).
type State = Vec<(i64, usize)>;

/// What a thread does next from a state.
#[derive(Debug)]
enum Status {
    /// It can step; the text says what the step does.
    Go(String),
    /// It waits (blocking call); the text says on what, `why` names the culprit.
    Blocked { text: String, why: String },
    /// A non-blocking call would fail.
    Fail(String),
}

/// Ring counters derived from a state.
impl Model {
    fn recorded(&self, st: &State, ring: usize) -> i64 {
        match &self.rings[ring].producer {
            Some((t, k, _)) => {
                let (it, pc) = st[*t];
                it + i64::from(*k < pc)
            }
            None => 0,
        }
    }

    fn released(&self, st: &State, c: &MConsumer) -> i64 {
        let (it, pc) = st[c.thread];
        let last = if c.op < pc { it } else { it - 1 };
        (last + 1 - c.lag).max(0)
    }

    /// Oldest unreleased seq and the consumers that still hold it.
    fn oldest(&self, st: &State, ring: usize) -> Option<(i64, Vec<&MConsumer>)> {
        let cs = &self.rings[ring].consumers;
        let min = cs.iter().map(|c| self.released(st, c)).min()?;
        let holders = cs.iter().filter(|c| self.released(st, c) == min).collect();
        Some((min, holders))
    }

    fn thread_name(&self, t: usize) -> &str {
        &self.threads[t].0
    }

    fn status(&self, st: &State, t: usize) -> Status {
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

    fn consume_status(
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

    fn record_status(
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
            .map(|c| format!("{} on thread {}", c.stage, self.thread_name(c.thread)))
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

    fn advance(&self, st: &mut State, t: usize) {
        let (it, pc) = st[t];
        st[t] = if pc + 1 == self.threads[t].1.len() {
            (it + 1, 0)
        } else {
            (it, pc + 1)
        };
    }
}

/// Breadth-first search over one group of linked threads.
struct Search<'m> {
    model: &'m Model,
    active: Vec<usize>,
    max_states: usize,
    ids: HashMap<Vec<u32>, u32>,
    /// Per state id: (parent id, thread that stepped); the root is its own parent.
    parents: Vec<(u32, usize)>,
}

impl<'m> Search<'m> {
    fn new(model: &'m Model, active: Vec<usize>, max_states: usize) -> Self {
        Search {
            model,
            active,
            max_states,
            ids: HashMap::new(),
            parents: Vec::new(),
        }
    }

    fn key(&self, st: &State) -> Vec<u32> {
        let min = self.active.iter().map(|&t| st[t].0).min().unwrap_or(0);
        let clamp = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        let mut key = Vec::with_capacity(1 + 2 * self.active.len());
        key.push(clamp(min.min(self.model.max_lag)));
        for &t in &self.active {
            key.push(clamp(st[t].0 - min));
            key.push(clamp(st[t].1 as i64));
        }
        key
    }

    fn run(mut self) -> Verdict {
        let start: State = vec![(0, 0); self.model.threads.len()];
        self.ids.insert(self.key(&start), 0);
        self.parents.push((0, usize::MAX));
        let mut queue = VecDeque::from([(0u32, start)]);
        while let Some((id, st)) = queue.pop_front() {
            let statuses: Vec<(usize, Status)> = self
                .active
                .iter()
                .map(|&t| (t, self.model.status(&st, t)))
                .collect();
            if let Some(v) = self.stuck_verdict(id, &statuses) {
                return v;
            }
            for (t, s) in &statuses {
                if matches!(s, Status::Go(_)) {
                    let mut next = st.clone();
                    self.model.advance(&mut next, *t);
                    let key = self.key(&next);
                    if self.ids.contains_key(&key) {
                        continue;
                    }
                    if self.parents.len() >= self.max_states {
                        return Verdict::Inconclusive {
                            states: self.parents.len(),
                        };
                    }
                    let nid = u32::try_from(self.parents.len()).unwrap_or(u32::MAX);
                    self.ids.insert(key, nid);
                    self.parents.push((id, *t));
                    queue.push_back((nid, next));
                }
            }
        }
        Verdict::DeadlockFree {
            states: self.parents.len(),
        }
    }

    /// A verdict if the state is stuck: some call fails, or no thread can step.
    fn stuck_verdict(&self, id: u32, statuses: &[(usize, Status)]) -> Option<Verdict> {
        let name = |t: usize| self.model.thread_name(t).to_string();
        if let Some((t, Status::Fail(text))) =
            statuses.iter().find(|(_, s)| matches!(s, Status::Fail(_)))
        {
            let trace = Trace {
                steps: self.replay(id),
                stuck: vec![Step {
                    thread: name(*t),
                    text: text.clone(),
                }],
                summary: format!(
                    "thread {} would fail here: a non-blocking call finds its ring not ready (make it blocking or fix the sizes)",
                    name(*t)
                ),
            };
            return Some(Verdict::WouldFail { trace });
        }
        if statuses.iter().any(|(_, s)| matches!(s, Status::Go(_))) {
            return None;
        }
        let mut stuck = Vec::new();
        let mut waits = Vec::new();
        for (t, s) in statuses {
            if let Status::Blocked { text, why } = s {
                stuck.push(Step {
                    thread: name(*t),
                    text: text.clone(),
                });
                waits.push(format!("{} waits for {why}", name(*t)));
            }
        }
        let summary = format!("deadlock: every thread is blocked: {}", waits.join("; "));
        Some(Verdict::Deadlock {
            trace: Trace {
                steps: self.replay(id),
                stuck,
                summary,
            },
        })
    }

    /// The steps from the start to state `id`, described by replaying them.
    fn replay(&self, id: u32) -> Vec<Step> {
        let mut threads = Vec::new();
        let mut cur = id;
        while cur != 0 {
            let (parent, t) = self.parents[cur as usize];
            threads.push(t);
            cur = parent;
        }
        threads.reverse();
        let mut st: State = vec![(0, 0); self.model.threads.len()];
        let mut steps = Vec::with_capacity(threads.len());
        for t in threads {
            let text = match self.model.status(&st, t) {
                Status::Go(text) => text,
                // Unreachable for a recorded path; keep the trace honest anyway.
                Status::Blocked { text, .. } | Status::Fail(text) => text,
            };
            steps.push(Step {
                thread: self.model.thread_name(t).to_string(),
                text,
            });
            self.model.advance(&mut st, t);
        }
        steps
    }
}
