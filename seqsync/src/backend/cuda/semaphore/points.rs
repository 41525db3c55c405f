//! The bookkeeping of the event-based mechanisms, apart from the driver calls (so it is tested
//! on the host): which signalled values have an event ("points"), which values are known
//! reached, and, for the `hybrid` mechanism, which stream waits on the word still need a
//! word write.
//!
//! `E` is the event type (`CudaEvent` in the backend, anything in tests).

use crate::backend::semaphore::FAILED_BIT;

/// Points of one timeline: enqueued signals not yet known complete, in ascending value order,
/// in a ring of slots that each hold an event. The slots after the points hold the spare
/// events, recorded again in place by the next signals: a signal moves no event, and a point
/// that completes leaves its event where the ring reuses it.
///
/// `repr(C)`: what a signal or a stream wait reads comes first, in 64 bytes (one cache line
/// where the owner aligns it: see the `hybrid` word).
#[repr(C)]
pub(crate) struct Points<E> {
    /// The ring: `len` points from `head` on (wrapping), ascending by value, every value above
    /// `reached`; then the free slots, whose events nobody waits on any more.
    slots: Vec<PointEvent<E>>,
    head: usize,
    len: usize,
    /// The highest value known reached (an event completed, a host store, a word load).
    reached: u64,
    /// The failed word once the timeline failed (it has [`FAILED_BIT`] set), else 0.
    failed: u64,
    /// The lane every point is on, or [`MIXED`] (not known to be one), so that a poll knows
    /// without a scan whether a single bisection covers every point.
    lane: usize,
    /// The most points in flight seen at a [`reach`](Self::reach) since
    /// [`spare_beyond`](Self::spare_beyond) last looked.
    peak: usize,
}

/// A point (`value`, recorded on stream `lane`: on one lane, events complete in value order),
/// or, past the points, a spare event.
struct PointEvent<E> {
    value: u64,
    lane: usize,
    ev: E,
}

/// What a stream wait for a value needs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WaitPlan<'a, E> {
    /// Nothing: the value is reached, or the timeline failed (a failure releases waits).
    Nothing,
    /// A wait on this event: the lowest enqueued point at or above the value.
    Event(&'a E),
    /// No point covers the value yet: the wait must be on the word (or is refused).
    NoPoint,
}

/// [`Points::lane`] when the points may be on more than one lane.
const MIXED: usize = usize::MAX;

impl<E> Points<E> {
    pub(crate) fn new(initial: u64) -> Self {
        Points {
            slots: Vec::new(),
            head: 0,
            len: 0,
            reached: initial,
            failed: 0,
            lane: MIXED,
            peak: 0,
        }
    }

    pub(crate) fn reached(&self) -> u64 {
        self.reached
    }

    pub(crate) fn failed(&self) -> Option<u64> {
        (self.failed != 0).then_some(self.failed)
    }

    pub(crate) fn fail(&mut self, word: u64) {
        debug_assert!(word & FAILED_BIT != 0);
        self.failed = word;
    }

    /// Enqueued points not yet known complete.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.len
    }

    /// The slot of the `i`-th point (or, from `len` on, spare event).
    #[inline]
    fn at(&self, i: usize) -> usize {
        let j = self.head + i;
        if j >= self.slots.len() {
            j - self.slots.len()
        } else {
            j
        }
    }

    #[inline]
    fn point(&self, i: usize) -> &PointEvent<E> {
        &self.slots[self.at(i)]
    }

    /// The event the next point will be recorded on, `None` if every slot holds a point (then
    /// [`add_spare`](Self::add_spare) first).
    #[inline]
    pub(crate) fn next_event(&self) -> Option<&E> {
        (self.len < self.slots.len()).then(|| &self.point(self.len).ev)
    }

    /// Add spare events (after the points).
    #[cold]
    pub(crate) fn add_spare(&mut self, evs: impl IntoIterator<Item = E>) {
        // Straighten the ring first, so that the new slots follow the last spare one.
        self.slots.rotate_left(self.head);
        self.head = 0;
        self.slots.extend(evs.into_iter().map(|ev| PointEvent {
            value: 0,
            lane: 0,
            ev,
        }));
    }

    /// The event [`next_event`](Self::next_event) gave was recorded on stream `lane` as the
    /// point of `value` (values normally come in ascending order: an append).
    #[inline(always)]
    pub(crate) fn push(&mut self, value: u64, lane: usize) {
        debug_assert!(self.len < self.slots.len(), "no spare event to record");
        let i = self.len;
        let s = self.at(i);
        let slot = &mut self.slots[s];
        slot.value = value;
        slot.lane = lane;
        self.len += 1;
        if i == 0 {
            self.lane = lane;
        } else if self.lane != lane {
            self.lane = MIXED;
        }
        if i > 0 && self.point(i - 1).value >= value {
            self.sort_last();
        }
    }

    /// The last point came out of order: move it down to its place.
    #[cold]
    fn sort_last(&mut self) {
        let mut i = self.len - 1;
        while i > 0 && self.point(i - 1).value >= self.point(i).value {
            let (a, b) = (self.at(i - 1), self.at(i));
            self.slots.swap(a, b);
            i -= 1;
        }
    }

    /// The point at the front is done: its event becomes spare.
    fn forget_front(&mut self) {
        self.head = self.at(1);
        self.len -= 1;
    }

    /// Look at the points' lanes again (after a poll of points on several lanes).
    fn relane(&mut self) {
        self.lane = match self.len {
            0 => MIXED,
            n => {
                let first = self.point(0).lane;
                if (1..n).all(|i| self.point(i).lane == first) {
                    first
                } else {
                    MIXED
                }
            }
        };
    }

    /// The index of the lowest point whose value is `>= value` (`len` if none).
    fn first_at_or_above(&self, value: u64) -> usize {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.point(mid).value < value {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// How a stream waits for `value`.
    #[inline(always)]
    pub(crate) fn plan_wait(&self, value: u64) -> WaitPlan<'_, E> {
        if self.failed != 0 || self.reached >= value {
            return WaitPlan::Nothing;
        }
        // Mostly a wait for the value signalled last: its point is the last one.
        let n = self.len;
        if n > 0 {
            let last = self.point(n - 1);
            if last.value >= value && (n == 1 || self.point(n - 2).value < value) {
                return WaitPlan::Event(&last.ev);
            }
        }
        match self.first_at_or_above(value) {
            i if i < n => WaitPlan::Event(&self.point(i).ev),
            _ => WaitPlan::NoPoint,
        }
    }

    /// `value` is reached: the points at or below it are done, and their events spare (nobody
    /// needs them any more: a later wait for those values needs nothing, and a stream wait
    /// already enqueued on an event took its state when it was enqueued).
    pub(crate) fn reach(&mut self, value: u64) {
        self.peak = self.peak.max(self.len);
        self.reached = self.reached.max(value);
        while self.len > 0 && self.point(0).value <= self.reached {
            self.forget_front();
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
    ) -> Result<u64, X> {
        let mixed = self.lane == MIXED;
        let best = if !mixed {
            // One lane (the usual case): every point, no list of indices to build.
            highest_done(self.len, |k| k, |i| done(&self.point(i).ev))?.map(|i| self.point(i).value)
        } else {
            let mut lanes: Vec<usize> = Vec::new();
            for i in (0..self.len).rev() {
                let lane = self.point(i).lane;
                if !lanes.contains(&lane) {
                    lanes.push(lane);
                }
            }
            let mut best: Option<u64> = None;
            for lane in lanes {
                // This lane's points, ascending; only those above the best found so far matter.
                let idx: Vec<usize> = (0..self.len)
                    .filter(|&i| {
                        let p = self.point(i);
                        p.lane == lane && best.is_none_or(|b| p.value > b)
                    })
                    .collect();
                if let Some(i) = highest_done(idx.len(), |k| idx[k], |i| done(&self.point(i).ev))? {
                    best = Some(self.point(i).value);
                }
            }
            best
        };
        if let Some(v) = best {
            self.reach(v);
        }
        if mixed {
            self.relane();
        }
        Ok(self.reached)
    }

    /// Spare events beyond what the timeline needs, for another to use: asked from time to
    /// time, it keeps `keep_at_least` slots, or twice the most points seen in flight since it
    /// last looked if that is more.
    pub(crate) fn spare_beyond(&mut self, keep_at_least: usize) -> Vec<E> {
        let keep = keep_at_least.max(2 * self.peak).max(self.len);
        self.peak = self.len;
        if self.slots.len() <= keep {
            return Vec::new();
        }
        self.slots.rotate_left(self.head);
        self.head = 0;
        self.slots.drain(keep..).map(|s| s.ev).collect()
    }

    /// Slots in the ring (points and spare events).
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Every event, pending or spare (the timeline is going away).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = E> + '_ {
        self.lane = MIXED;
        self.head = 0;
        self.len = 0;
        self.slots.drain(..).map(|s| s.ev)
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

/// Stream waits on the word (`hybrid`) that no word write enqueued so far releases.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct WordWaits {
    /// The lowest of `uncovered` (`u64::MAX` if none): a signal below it needs no write, which
    /// it learns from this word alone.
    lowest: u64,
    uncovered: Vec<u64>,
}

impl Default for WordWaits {
    fn default() -> Self {
        WordWaits {
            lowest: u64::MAX,
            uncovered: Vec::new(),
        }
    }
}

impl WordWaits {
    /// A stream now waits on the word for `value`.
    pub(crate) fn add(&mut self, value: u64) {
        self.uncovered.push(value);
        self.lowest = self.lowest.min(value);
    }

    /// A signal of `value` is being enqueued: must it also write the word? Yes when a word
    /// wait for a value `<= value` has no write yet; those waits are then covered.
    #[inline(always)]
    pub(crate) fn signal_needs_write(&mut self, value: u64) -> bool {
        if value < self.lowest {
            return false;
        }
        self.covered_up_to(value);
        true
    }

    /// The host wrote the word (a store of `value`): waits up to it are released.
    pub(crate) fn stored(&mut self, value: u64) {
        self.covered_up_to(value);
    }

    #[cold]
    fn covered_up_to(&mut self, value: u64) {
        self.uncovered.retain(|w| *w > value);
        self.lowest = self.uncovered.iter().copied().min().unwrap_or(u64::MAX);
    }

    /// The word failed: every wait is released.
    pub(crate) fn clear(&mut self) {
        self.uncovered.clear();
        self.lowest = u64::MAX;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Record `ev` as the point of `value` on `lane` (a test's events are named by what they
    /// stand for, so the spare event the ring would reuse is replaced by `ev`).
    fn push<E>(p: &mut Points<E>, value: u64, lane: usize, ev: E) {
        match p.next_event() {
            None => p.add_spare([ev]),
            Some(_) => {
                let s = p.at(p.len);
                p.slots[s].ev = ev;
            }
        }
        p.push(value, lane);
    }

    #[test]
    fn an_ordered_wait_uses_the_lowest_point_at_or_above_it() {
        let mut p = Points::new(0);
        push(&mut p, 2, 0, "e2");
        push(&mut p, 5, 0, "e5");
        assert_eq!(p.plan_wait(1), WaitPlan::Event(&"e2"));
        assert_eq!(p.plan_wait(3), WaitPlan::Event(&"e5"));
        assert_eq!(p.plan_wait(5), WaitPlan::Event(&"e5"));
        assert_eq!(p.plan_wait(6), WaitPlan::NoPoint);
    }

    #[test]
    fn points_out_of_order_are_kept_sorted() {
        let mut p = Points::new(0);
        push(&mut p, 5, 0, "e5");
        push(&mut p, 2, 0, "e2");
        assert_eq!(p.plan_wait(1), WaitPlan::Event(&"e2"));
        assert_eq!(p.plan_wait(4), WaitPlan::Event(&"e5"));
    }

    #[test]
    fn reaching_a_value_makes_the_points_at_or_below_it_spare() {
        let mut p = Points::new(0);
        for v in 1..=4 {
            push(&mut p, v, 0, v);
        }
        assert_eq!(p.next_event(), None, "every slot holds a point");
        p.reach(2);
        assert_eq!(p.reached(), 2);
        assert_eq!(p.pending(), 2);
        assert_eq!(p.plan_wait(2), WaitPlan::Nothing);
        assert_eq!(p.plan_wait(3), WaitPlan::Event(&3));
        // The oldest point's event is recorded again first.
        assert_eq!(p.next_event(), Some(&1));
        // Reaching never goes back.
        p.reach(1);
        assert_eq!(p.reached(), 2);
    }

    #[test]
    fn the_ring_reuses_its_events_in_place_and_wraps() {
        // A signal records the next spare event where it lies; points wrap around the ring.
        let mut p = Points::new(0);
        p.add_spare(["a", "b", "c"]);
        let mut used = vec![];
        for v in 1..=7u64 {
            used.push(*p.next_event().expect("a spare event"));
            p.push(v, 0);
            if v % 2 == 0 {
                p.reach(v - 1);
            }
        }
        assert_eq!(used, ["a", "b", "c", "a", "b", "c", "a"]);
        assert_eq!(p.slots(), 3, "no event was added");
        // 6 and 7 are in flight.
        assert_eq!(p.pending(), 2);
        assert_eq!(p.plan_wait(6), WaitPlan::Event(&"c"));
        assert_eq!(p.plan_wait(7), WaitPlan::Event(&"a"));
        assert_eq!(p.plan_wait(8), WaitPlan::NoPoint);
        // Spare events added to a wrapped ring come after the last spare slot.
        p.add_spare(["d"]);
        p.push(8, 0);
        p.push(9, 0);
        assert_eq!(p.plan_wait(8), WaitPlan::Event(&"b"));
        assert_eq!(p.plan_wait(9), WaitPlan::Event(&"d"));
        let mut all: Vec<_> = p.drain().collect();
        all.sort();
        assert_eq!(all, ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_point_out_of_order_is_sorted_across_the_wrap() {
        let mut p = Points::new(0);
        p.add_spare(["a", "b", "c"]);
        p.push(1, 0);
        p.push(2, 0);
        p.reach(1);
        p.push(5, 0); // on "c", the last slot
        p.push(3, 1); // on "a", the first slot (wrapped), below 5: moved before it
        assert_eq!(p.plan_wait(2), WaitPlan::Event(&"b"));
        assert_eq!(p.plan_wait(3), WaitPlan::Event(&"a"));
        assert_eq!(p.plan_wait(4), WaitPlan::Event(&"c"));
        assert_eq!(p.plan_wait(5), WaitPlan::Event(&"c"));
        p.reach(3);
        assert_eq!(p.pending(), 1);
        assert_eq!(p.plan_wait(4), WaitPlan::Event(&"c"));
    }

    #[test]
    fn spare_events_beyond_twice_the_peak_go_back() {
        let mut p = Points::new(0);
        for v in 1..=100u64 {
            push(&mut p, v, 0, v);
        }
        p.reach(100);
        // 100 in flight at the reach: up to 200 slots are kept.
        assert!(p.spare_beyond(8).is_empty());
        push(&mut p, 101, 0, 101);
        p.reach(101);
        // Since then one point at most: 8 slots are kept, the other 92 go.
        assert_eq!(p.spare_beyond(8).len(), 92);
        assert_eq!(p.slots(), 8);
        for v in 102..=120u64 {
            push(&mut p, v, 0, v);
        }
        assert_eq!(p.plan_wait(102), WaitPlan::Event(&102));
    }

    #[test]
    fn poll_asks_the_highest_then_the_lowest_then_bisects() {
        let mut p = Points::new(0);
        for v in 1..=5 {
            push(&mut p, v, 0, v);
        }
        let mut asked = vec![];
        let r: Result<u64, ()> = p.poll(|e| {
            asked.push(*e);
            Ok(*e <= 3)
        });
        assert_eq!(r, Ok(3));
        assert_eq!(asked, [5, 1, 3, 4]);
        assert_eq!(p.pending(), 2);
        assert_eq!(p.poll(|_| Err("driver")), Err("driver"));
    }

    #[test]
    fn poll_of_many_points_in_flight_asks_few_questions() {
        let mut p = Points::new(0);
        for v in 1..=1000u64 {
            push(&mut p, v, 0, v);
        }
        // Nothing complete: the highest and the lowest only.
        let mut asked = 0;
        let r: Result<u64, ()> = p.poll(|_| {
            asked += 1;
            Ok(false)
        });
        assert_eq!((r, asked), (Ok(0), 2));
        // The first 700 complete: found exactly, in at most 2 + log2(1000) questions.
        let mut asked = 0;
        let r: Result<u64, ()> = p.poll(|e| {
            asked += 1;
            Ok(*e <= 700)
        });
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
            push(&mut p, v, (v % 2 == 0) as usize, v);
        }
        let r: Result<u64, ()> = p.poll(|e| Ok(*e <= 3));
        assert_eq!(r, Ok(3));
        // A higher point complete on a lane whose lower points are not (another lane's lower
        // point is slow): still found.
        let mut p = Points::new(0);
        push(&mut p, 5, 0, 5);
        push(&mut p, 6, 1, 6);
        push(&mut p, 7, 0, 7);
        let r: Result<u64, ()> = p.poll(|e| Ok(*e == 6));
        assert_eq!(r, Ok(6));
    }

    #[test]
    fn a_poll_bisects_all_points_at_once_while_they_are_on_one_lane() {
        let mut p = Points::new(0);
        push(&mut p, 1, 7, 1);
        push(&mut p, 2, 8, 2);
        push(&mut p, 3, 7, 3);
        assert_eq!(p.lane, MIXED);
        // Two lanes: each is searched on its own (lane 8's 2 completes, lane 7's 1 too).
        let r: Result<u64, ()> = p.poll(|e| Ok(*e <= 2));
        assert_eq!(r, Ok(2));
        // Lane 7's 3 is left alone: one lane again.
        assert_eq!(p.lane, 7);
        push(&mut p, 4, 7, 4);
        assert_eq!(p.lane, 7);
        // A point on lane 9 makes them mixed.
        push(&mut p, 5, 9, 5);
        assert_eq!(p.lane, MIXED);
        // Lane 9's point completes while lane 7's do not.
        let r: Result<u64, ()> = p.poll(|e| Ok(*e == 5));
        assert_eq!(r, Ok(5));
        assert_eq!(p.pending(), 0);
        assert_eq!(p.lane, MIXED, "no points, no lane");
        push(&mut p, 6, 3, 6);
        assert_eq!(p.lane, 3);
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
