//! The bookkeeping of the event-based mechanisms, apart from the driver calls (so it is tested
//! on the host): which signalled values have an event ("points"), which values are known
//! reached, and, for the `events+memops` mechanism, which stream waits on the word still need a
//! word write.
//!
//! `E` is the event type (`CudaEvent` in the backend, anything in tests).

use std::collections::VecDeque;

/// Points of one timeline: enqueued signals not yet known complete, in ascending value order.
pub(crate) struct Points<E> {
    /// The highest value known reached (an event completed, a host store, a word load).
    reached: u64,
    /// The failed word, once the timeline failed.
    failed: Option<u64>,
    /// `(value, lane, event)`, ascending by value, every value above `reached`. The lane is
    /// the stream the event was recorded on: on one lane, events complete in value order.
    pending: VecDeque<(u64, usize, E)>,
    /// The lanes of `pending` and how many points each has there (usually one lane), so that
    /// a poll knows without a scan whether a single bisection covers every point.
    lanes: Vec<(usize, usize)>,
}

/// What a stream wait for a value needs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WaitPlan<'a, E> {
    /// Nothing: the value is reached, or the timeline failed (a failure releases waits).
    Nothing,
    /// A wait on this event: the lowest enqueued point at or above the value.
    Event(&'a E),
    /// No point covers the value yet: the wait must be on the word (or be deferred).
    NoPoint,
}

impl<E> Points<E> {
    pub(crate) fn new(initial: u64) -> Self {
        Points {
            reached: initial,
            failed: None,
            pending: VecDeque::new(),
            lanes: Vec::new(),
        }
    }

    pub(crate) fn reached(&self) -> u64 {
        self.reached
    }

    pub(crate) fn failed(&self) -> Option<u64> {
        self.failed
    }

    pub(crate) fn fail(&mut self, word: u64) {
        self.failed = Some(word);
    }

    /// Enqueued points not yet known complete.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Add the point of `value`, recorded on stream `lane` (values normally come in ascending
    /// order: an append).
    pub(crate) fn push(&mut self, value: u64, lane: usize, ev: E) {
        match self.lanes.iter_mut().find(|(l, _)| *l == lane) {
            Some((_, count)) => *count += 1,
            None => self.lanes.push((lane, 1)),
        }
        match self.pending.back() {
            Some((last, _, _)) if *last >= value => {
                let at = self.pending.partition_point(|(v, _, _)| *v < value);
                self.pending.insert(at, (value, lane, ev));
            }
            _ => self.pending.push_back((value, lane, ev)),
        }
    }

    /// The point at the front is gone: count it off its lane.
    fn forget_front(&mut self) -> Option<E> {
        let (_, lane, ev) = self.pending.pop_front()?;
        if let Some(i) = self.lanes.iter().position(|(l, _)| *l == lane) {
            self.lanes[i].1 -= 1;
            if self.lanes[i].1 == 0 {
                self.lanes.swap_remove(i);
            }
        }
        Some(ev)
    }

    /// How a stream waits for `value`.
    pub(crate) fn plan_wait(&self, value: u64) -> WaitPlan<'_, E> {
        if self.failed.is_some() || self.reached >= value {
            return WaitPlan::Nothing;
        }
        // Mostly a wait for the value signalled last: its point is the last one.
        let n = self.pending.len();
        if let Some((last, _, ev)) = self.pending.back() {
            if *last >= value && (n == 1 || self.pending[n - 2].0 < value) {
                return WaitPlan::Event(ev);
            }
        }
        let at = self.pending.partition_point(|(v, _, _)| *v < value);
        match self.pending.get(at) {
            Some((_, _, ev)) => WaitPlan::Event(ev),
            None => WaitPlan::NoPoint,
        }
    }

    /// `value` is reached: the points at or below it are done; `free` gets their events (nobody
    /// needs them any more: a later wait for those values needs nothing, and a stream wait
    /// already enqueued on an event took its state when it was enqueued).
    pub(crate) fn reach(&mut self, value: u64, mut free: impl FnMut(E)) {
        self.reached = self.reached.max(value);
        while self
            .pending
            .front()
            .is_some_and(|(v, _, _)| *v <= self.reached)
        {
            free(self.forget_front().expect("front exists"));
        }
    }

    /// The highest pending point for which `done` says yes, then [`Points::reach`] it;
    /// returns the value known reached.
    ///
    /// Once a point is complete every lower value is reached, so the answer is the highest
    /// complete point. Events of one stream (lane) complete in recording order, which is value
    /// order, so each lane is searched on its own: its highest point, then its lowest, then a
    /// bisection between the lowest known complete and the highest known not. That is at most
    /// `2 + log2(points)` questions per lane in flight (usually one or two lanes), where asking
    /// every point from the highest down took one question per point still in flight (a host
    /// query behind a busy GPU). The answer is exact.
    pub(crate) fn poll<X>(
        &mut self,
        mut done: impl FnMut(&E) -> Result<bool, X>,
        free: impl FnMut(E),
    ) -> Result<u64, X> {
        let best = if self.lanes.len() == 1 {
            // One lane (the usual case): every point, no list of indices to build.
            let n = self.pending.len();
            highest_done(n, |k| k, |i| done(&self.pending[i].2))?.map(|i| self.pending[i].0)
        } else {
            let mut lanes: Vec<usize> = Vec::new();
            for (_, lane, _) in self.pending.iter().rev() {
                if !lanes.contains(lane) {
                    lanes.push(*lane);
                }
            }
            let mut best: Option<u64> = None;
            for lane in lanes {
                // This lane's points, ascending; only those above the best found so far matter.
                let idx: Vec<usize> = (0..self.pending.len())
                    .filter(|&i| {
                        let (v, l, _) = &self.pending[i];
                        *l == lane && best.is_none_or(|b| *v > b)
                    })
                    .collect();
                if let Some(i) = highest_done(idx.len(), |k| idx[k], |i| done(&self.pending[i].2))?
                {
                    best = Some(self.pending[i].0);
                }
            }
            best
        };
        if let Some(v) = best {
            self.reach(v, free);
        }
        Ok(self.reached)
    }

    /// Every pending event (the timeline is going away).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = E> + '_ {
        self.lanes.clear();
        self.pending.drain(..).map(|(_, _, e)| e)
    }
}

/// The highest of `len` points of one lane (the `k`-th, ascending, is pending index `at(k)`)
/// for which `ask` says done, or `None`: the highest, then the lowest, then a bisection between
/// the lowest known done and the highest known not (points of a lane complete in order).
fn highest_done<X>(
    len: usize,
    at: impl Fn(usize) -> usize,
    mut ask: impl FnMut(usize) -> Result<bool, X>,
) -> Result<Option<usize>, X> {
    if len == 0 {
        return Ok(None);
    }
    if ask(at(len - 1))? {
        return Ok(Some(at(len - 1)));
    }
    if len == 1 || !ask(at(0))? {
        return Ok(None);
    }
    // at(lo) is done, at(hi) is not.
    let (mut lo, mut hi) = (0, len - 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ask(at(mid))? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(at(lo)))
}

/// Stream waits on the word (`events+memops`) that no word write enqueued so far releases.
#[derive(Debug, Default)]
pub(crate) struct WordWaits {
    uncovered: Vec<u64>,
}

impl WordWaits {
    /// A stream now waits on the word for `value`.
    pub(crate) fn add(&mut self, value: u64) {
        self.uncovered.push(value);
    }

    /// A signal of `value` is being enqueued: must it also write the word? Yes when a word
    /// wait for a value `<= value` has no write yet; those waits are then covered.
    pub(crate) fn signal_needs_write(&mut self, value: u64) -> bool {
        if !self.uncovered.iter().any(|w| *w <= value) {
            return false;
        }
        self.uncovered.retain(|w| *w > value);
        true
    }

    /// The host wrote the word (a store of `value`): waits up to it are released.
    pub(crate) fn stored(&mut self, value: u64) {
        self.uncovered.retain(|w| *w > value);
    }

    /// The word failed: every wait is released.
    pub(crate) fn clear(&mut self) {
        self.uncovered.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ordered_wait_uses_the_lowest_point_at_or_above_it() {
        let mut p = Points::new(0);
        p.push(2, 0, "e2");
        p.push(5, 0, "e5");
        assert_eq!(p.plan_wait(1), WaitPlan::Event(&"e2"));
        assert_eq!(p.plan_wait(3), WaitPlan::Event(&"e5"));
        assert_eq!(p.plan_wait(5), WaitPlan::Event(&"e5"));
        assert_eq!(p.plan_wait(6), WaitPlan::NoPoint);
    }

    #[test]
    fn points_out_of_order_are_kept_sorted() {
        let mut p = Points::new(0);
        p.push(5, 0, "e5");
        p.push(2, 0, "e2");
        assert_eq!(p.plan_wait(1), WaitPlan::Event(&"e2"));
        assert_eq!(p.plan_wait(4), WaitPlan::Event(&"e5"));
    }

    #[test]
    fn reaching_a_value_frees_the_points_at_or_below_it() {
        let mut p = Points::new(0);
        for v in 1..=4 {
            p.push(v, 0, v);
        }
        let mut freed = vec![];
        p.reach(2, |e| freed.push(e));
        assert_eq!(freed, [1, 2]);
        assert_eq!(p.reached(), 2);
        assert_eq!(p.pending(), 2);
        assert_eq!(p.plan_wait(2), WaitPlan::Nothing);
        assert_eq!(p.plan_wait(3), WaitPlan::Event(&3));
        // Reaching never goes back.
        p.reach(1, |e| freed.push(e));
        assert_eq!(p.reached(), 2);
    }

    #[test]
    fn poll_asks_the_highest_then_the_lowest_then_bisects() {
        let mut p = Points::new(0);
        for v in 1..=5 {
            p.push(v, 0, v);
        }
        let mut asked = vec![];
        let mut freed = vec![];
        let r: Result<u64, ()> = p.poll(
            |e| {
                asked.push(*e);
                Ok(*e <= 3)
            },
            |e| freed.push(e),
        );
        assert_eq!(r, Ok(3));
        assert_eq!(asked, [5, 1, 3, 4]);
        assert_eq!(freed, [1, 2, 3]);
        assert_eq!(p.poll(|_| Err("driver"), |_| ()), Err("driver"));
    }

    #[test]
    fn poll_of_many_points_in_flight_asks_few_questions() {
        let mut p = Points::new(0);
        for v in 1..=1000u64 {
            p.push(v, 0, v);
        }
        // Nothing complete: the highest and the lowest only.
        let mut asked = 0;
        let r: Result<u64, ()> = p.poll(
            |_| {
                asked += 1;
                Ok(false)
            },
            |_| (),
        );
        assert_eq!((r, asked), (Ok(0), 2));
        // The first 700 complete: found exactly, in at most 2 + log2(1000) questions.
        let mut asked = 0;
        let r: Result<u64, ()> = p.poll(
            |e| {
                asked += 1;
                Ok(*e <= 700)
            },
            |_| (),
        );
        assert_eq!(r, Ok(700));
        assert!(asked <= 12, "{asked} questions");
        assert_eq!(p.pending(), 300);
    }

    #[test]
    fn poll_finds_the_highest_complete_point_across_lanes() {
        // Lane 0 holds 1, 3, 5 (5 not complete); lane 1 holds 2, 4, 6 (only 2 complete): the
        // answer is 3, although 4 (lane 1) is not complete and 5 (lane 0) neither.
        let mut p = Points::new(0);
        for v in 1..=6u64 {
            p.push(v, (v % 2 == 0) as usize, v);
        }
        let r: Result<u64, ()> = p.poll(|e| Ok(*e <= 3), |_| ());
        assert_eq!(r, Ok(3));
        // A higher point complete on a lane whose lower points are not (another lane's lower
        // point is slow): still found.
        let mut p = Points::new(0);
        p.push(5, 0, 5);
        p.push(6, 1, 6);
        p.push(7, 0, 7);
        let r: Result<u64, ()> = p.poll(|e| Ok(*e == 6), |_| ());
        assert_eq!(r, Ok(6));
    }

    #[test]
    fn lanes_are_counted_through_push_and_reach() {
        let mut p = Points::new(0);
        p.push(1, 7, 1);
        p.push(2, 8, 2);
        p.push(3, 7, 3);
        assert_eq!(p.lanes.len(), 2);
        p.reach(2, |_| ());
        // Lane 8's only point is gone: one lane left, so a poll bisects all points at once.
        assert_eq!(p.lanes, [(7, 1)]);
        p.push(4, 9, 4);
        assert_eq!(p.lanes.len(), 2);
        // Two lanes again: lane 9's point completes while lane 7's does not.
        let r: Result<u64, ()> = p.poll(|e| Ok(*e == 4), |_| ());
        assert_eq!(r, Ok(4));
        assert!(p.lanes.is_empty());
    }

    #[test]
    fn a_failed_timeline_needs_no_wait() {
        let mut p = Points::<u8>::new(0);
        p.fail(1 << 63);
        assert_eq!(p.plan_wait(9), WaitPlan::Nothing);
        assert_eq!(p.failed(), Some(1 << 63));
    }

    #[test]
    fn a_signal_writes_the_word_only_for_an_uncovered_word_wait() {
        let mut w = WordWaits::default();
        assert!(!w.signal_needs_write(1), "no word wait: no write");
        w.add(3);
        assert!(!w.signal_needs_write(2), "the wait is for 3");
        assert!(w.signal_needs_write(3));
        assert!(!w.signal_needs_write(4), "covered by the write of 3");
        w.add(6);
        w.add(8);
        assert!(w.signal_needs_write(7));
        w.stored(8);
        assert!(!w.signal_needs_write(9), "the host store released 8");
        w.add(10);
        w.clear();
        assert!(!w.signal_needs_write(11), "a failure released it");
    }
}
