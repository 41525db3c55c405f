//! Replay: the path to a state, from the search's parent links, told step by step.

use super::model::{State, Status};
use super::search::Search;
use super::verdict::Step;

impl Search<'_> {
    /// The steps from the start to state `id`, described by replaying them.
    pub(super) fn replay(&self, id: u32) -> Vec<Step> {
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
                Status::Done => "has run every batch".to_string(),
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
