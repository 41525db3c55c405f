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
    /// `(value, event)`, ascending by value, every value above `reached`.
    pending: VecDeque<(u64, E)>,
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

    /// Add the point of `value` (values normally come in ascending order: an append).
    pub(crate) fn push(&mut self, value: u64, ev: E) {
        match self.pending.back() {
            Some((last, _)) if *last >= value => {
                let at = self.pending.partition_point(|(v, _)| *v < value);
                self.pending.insert(at, (value, ev));
            }
            _ => self.pending.push_back((value, ev)),
        }
    }

    /// How a stream waits for `value`.
    pub(crate) fn plan_wait(&self, value: u64) -> WaitPlan<'_, E> {
        if self.failed.is_some() || self.reached >= value {
            return WaitPlan::Nothing;
        }
        let at = self.pending.partition_point(|(v, _)| *v < value);
        match self.pending.get(at) {
            Some((_, ev)) => WaitPlan::Event(ev),
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
            .is_some_and(|(v, _)| *v <= self.reached)
        {
            let (_, ev) = self.pending.pop_front().expect("front exists");
            free(ev);
        }
    }

    /// The highest pending point for which `done` says yes, asking from the highest down
    /// (once one is complete every lower one is reached), then [`Points::reach`] it.
    pub(crate) fn poll<X>(
        &mut self,
        mut done: impl FnMut(&E) -> Result<bool, X>,
        free: impl FnMut(E),
    ) -> Result<u64, X> {
        let mut hit = None;
        for (v, ev) in self.pending.iter().rev() {
            if done(ev)? {
                hit = Some(*v);
                break;
            }
        }
        if let Some(v) = hit {
            self.reach(v, free);
        }
        Ok(self.reached)
    }

    /// Every pending event (the timeline is going away).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = E> + '_ {
        self.pending.drain(..).map(|(_, e)| e)
    }
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
        p.push(2, "e2");
        p.push(5, "e5");
        assert_eq!(p.plan_wait(1), WaitPlan::Event(&"e2"));
        assert_eq!(p.plan_wait(3), WaitPlan::Event(&"e5"));
        assert_eq!(p.plan_wait(5), WaitPlan::Event(&"e5"));
        assert_eq!(p.plan_wait(6), WaitPlan::NoPoint);
    }

    #[test]
    fn points_out_of_order_are_kept_sorted() {
        let mut p = Points::new(0);
        p.push(5, "e5");
        p.push(2, "e2");
        assert_eq!(p.plan_wait(1), WaitPlan::Event(&"e2"));
        assert_eq!(p.plan_wait(4), WaitPlan::Event(&"e5"));
    }

    #[test]
    fn reaching_a_value_frees_the_points_at_or_below_it() {
        let mut p = Points::new(0);
        for v in 1..=4 {
            p.push(v, v);
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
    fn poll_asks_from_the_highest_point_down_and_stops_at_the_first_done() {
        let mut p = Points::new(0);
        for v in 1..=5 {
            p.push(v, v);
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
        assert_eq!(asked, [5, 4, 3]);
        assert_eq!(freed, [1, 2, 3]);
        assert_eq!(p.poll(|_| Err("driver"), |_| ()), Err("driver"));
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
