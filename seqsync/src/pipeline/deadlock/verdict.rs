//! The outcome of a deadlock check: a verdict and, when stuck, the interleaving that got there.

use std::fmt;

use serde::Serialize;

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
        /// Distinct states the search explored: 0 where every group of linked threads makes
        /// only blocking calls, which the cycles of their dependencies decide without a search.
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
            Verdict::DeadlockFree { states: 0 } => write!(
                f,
                "deadlock-free (proved: every cycle of its dependencies has a positive lag)"
            ),
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
