//! The breadth-first search over one group of linked threads; the first stuck state found is
//! reached by a shortest interleaving.

use std::collections::{HashMap, VecDeque};

use super::model::{Model, State, Status};
use super::verdict::{Step, Trace, Verdict};

/// Breadth-first search over one group of linked threads.
pub(super) struct Search<'m> {
    pub(super) model: &'m Model,
    pub(super) active: Vec<usize>,
    pub(super) max_states: usize,
    pub(super) ids: HashMap<Vec<u32>, u32>,
    /// Per state id: (parent id, thread that stepped); the root is its own parent.
    pub(super) parents: Vec<(u32, usize)>,
}

impl<'m> Search<'m> {
    pub(super) fn new(model: &'m Model, active: Vec<usize>, max_states: usize) -> Self {
        Search {
            model,
            active,
            max_states,
            ids: HashMap::new(),
            parents: Vec::new(),
        }
    }

    pub(super) fn key(&self, st: &State) -> Vec<u32> {
        // A finite run is not translation-invariant (its end is fixed): absolute iterations.
        let min = match self.model.end {
            Some(_) => 0,
            None => self.active.iter().map(|&t| st[t].0).min().unwrap_or(0),
        };
        let clamp = |v: i64| u32::try_from(v).unwrap_or(u32::MAX);
        let mut key = Vec::with_capacity(1 + 2 * self.active.len());
        key.push(clamp(min.min(self.model.max_lag)));
        for &t in &self.active {
            key.push(clamp(st[t].0 - min));
            key.push(clamp(st[t].1 as i64));
        }
        key
    }

    pub(super) fn run(mut self) -> Verdict {
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
    pub(super) fn stuck_verdict(&self, id: u32, statuses: &[(usize, Status)]) -> Option<Verdict> {
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
        // Some thread can step, or (a finite run) every thread has finished.
        if statuses.iter().any(|(_, s)| matches!(s, Status::Go(_)))
            || statuses.iter().all(|(_, s)| matches!(s, Status::Done))
        {
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
        let summary = match self.model.end {
            None => format!("deadlock: every thread is blocked: {}", waits.join("; ")),
            Some(n) => {
                let done: Vec<String> = statuses
                    .iter()
                    .filter(|(_, s)| matches!(s, Status::Done))
                    .map(|(t, _)| name(*t))
                    .collect();
                format!(
                    "deadlock at the end of a run of {n} batches: {} finished, every other \
                     thread is blocked: {}",
                    if done.is_empty() {
                        "no thread".to_string()
                    } else {
                        format!("thread {}", done.join(", "))
                    },
                    waits.join("; ")
                )
            }
        };
        Some(Verdict::Deadlock {
            trace: Trace {
                steps: self.replay(id),
                stuck,
                summary,
            },
        })
    }
}
