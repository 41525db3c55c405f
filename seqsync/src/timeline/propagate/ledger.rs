//! One stream's ledger: the waits enqueued on it that are not yet known to be satisfied, the
//! signals enqueued after them, and its poison (see the [parent module](super) for the rule).

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use super::{FailTarget, Propagation};
use crate::error::Error;
use crate::lock::{Guard, Lock};

/// A timeline as a ledger's entries name it: the address its `Weak`s point to. The ledger
/// keeps one `Weak` of each timeline its entries name (see [`LedgerState::timelines`]), which
/// keeps that address from being reused while the entries exist.
type TimelineId = usize;

fn id_of(timeline: &Weak<dyn FailTarget>) -> TimelineId {
    timeline.as_ptr() as *const () as usize
}

/// A wait or a signal enqueued on the stream (a wait entry may stand for a run of waits on one
/// timeline with nothing enqueued between them: see [`Ledger::add_wait`]).
struct Entry {
    seq: u64,
    timeline: TimelineId,
    value: u64,
}

/// `repr(C)`: what a wait that joins the last wait's entry reads (the lock's words,
/// `next_seq`, `last_wait` and `retired`) fills the ledger's first cache line (see [`Ledger`]).
#[derive(Default)]
#[repr(C)]
struct LedgerState {
    next_seq: u64,
    /// The newest wait entry, kept out of `waits` so that a wait that joins it touches no list
    /// (see [`Ledger::add_wait`]).
    last_wait: Option<Entry>,
    /// Removed from the registry by a sweep: entries must go to the stream's new ledger.
    retired: bool,
    /// Its stream is gone, but an entry was still pending then: a sweep retires it once its
    /// entries are settled, poisoned or not (see [`Ledger::retire_if_settled`]).
    gone: bool,
    /// Prune `waits` / `signals` of resolved entries when one grows to its limit (amortized:
    /// the next limits are twice what is left).
    prune_waits_at: u32,
    prune_signals_at: u32,
    /// The older wait entries, in enqueue order (all before `last_wait`).
    waits: Vec<Entry>,
    /// The earliest failed wait's sequence number, and its failure.
    poison: Option<(u64, Arc<Error>)>,
    /// The latest sequence number at which a failure released a wait (or a wait was enqueued
    /// on a failed timeline): with `poison`, what [`Ledger::settled_between`] needs to see a
    /// failure after one that poisoned the stream already.
    last_release: u64,
    signals: VecDeque<Entry>,
    /// One `Weak` per timeline that an entry names, so that an entry costs no reference count
    /// (a stream mostly waits on and signals a few timelines: a scan of a short list).
    timelines: Vec<Weak<dyn FailTarget>>,
}

/// Where the waits before a mark stand ([`Ledger::settled_before`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkState {
    /// Every one reached: nothing before the mark can be released by a failure any more.
    Reached,
    /// Some not reached yet.
    Pending,
    /// One was released by a failure: what follows the mark on the stream may run before
    /// what that wait stood for.
    Failed,
}

/// When a ledger may be retired ([`Ledger::retire_if_idle`], [`Ledger::retire_if_settled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retire {
    /// Its stream lives on: nothing pending and no poison.
    Idle,
    /// Its stream is gone: nothing pending, poisoned or not.
    Settled,
}

/// The ledger was retired by a sweep: look the stream's ledger up again.
#[derive(Debug)]
pub(crate) struct Retired;

/// Why a signal was not added.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The stream is poisoned: fail the timeline with this cause instead.
    Poisoned(Arc<Error>),
    /// See [`Retired`].
    Retired,
}

/// One stream's waits and signals (see the [module docs](self)). Its lock is the crate's
/// short-section lock: every section is a few field updates (and, amortized, a prune).
///
/// Aligned to a cache line, so that an ordered `wait_on` that joins the last wait's entry
/// touches one line of it (every line an enqueue touches costs: BENCHMARKS.md §5, "Cache
/// lines, not locks").
#[repr(align(64))]
pub(crate) struct Ledger {
    state: Lock<LedgerState>,
}

/// Smallest list length that triggers a prune. A prune reads each timeline's value, which may
/// ask the device: on `hybrid` a bisection of the points in flight, a few CUDA event
/// queries. At 64 entries the prune was a visible share of an ordered `signal_on` + `wait_on`
/// pair on the H200 (BENCHMARKS.md §5, "Biased locks, coalesced waits"); at 256 it is a quarter
/// of that, for at most 6 KiB of entries per list and stream between prunes when the device
/// keeps up.
const PRUNE_MIN: usize = 256;

/// The next prune limit of a list with `left` entries after a prune.
fn limit(left: usize) -> u32 {
    (left.saturating_mul(2))
        .max(PRUNE_MIN)
        .try_into()
        .unwrap_or(u32::MAX)
}

impl Ledger {
    /// An empty ledger.
    pub(super) fn new() -> Self {
        Ledger {
            state: Lock::new(LedgerState::default()),
        }
    }

    /// Whether a failure poisoned the stream; [`Retired`] if a sweep retired this ledger.
    pub(super) fn is_poisoned(&self) -> Result<bool, Retired> {
        let st = self.lock();
        if st.retired {
            return Err(Retired);
        }
        Ok(st.poison.is_some())
    }

    /// The sequence numbers of the wait entries on the timeline at address `timeline` for
    /// values above `above`.
    pub(super) fn waits_above(&self, timeline: *const (), above: u64) -> Vec<u64> {
        let st = self.lock();
        st.all_waits()
            .filter(|w| w.value > above && w.timeline == timeline as usize)
            .map(|w| w.seq)
            .collect()
    }

    /// The highest value above `above` of the timeline at address `timeline` that a signal
    /// listed here brings it to with no wait of that timeline for a value above `above` ahead
    /// of it on this stream (0: none). A signal behind such a wait lands only once the wait
    /// is reached: what a dropped timeline's signals can still reach is read from this.
    pub(super) fn signals_before_own_wait(&self, timeline: *const (), above: u64) -> u64 {
        let st = self.lock();
        let id = timeline as usize;
        let first_wait = st
            .all_waits()
            .filter(|w| w.value > above && w.timeline == id)
            .map(|w| w.seq)
            .min()
            .unwrap_or(u64::MAX);
        st.highest_signal_before(id, above, first_wait)
    }

    /// The highest value above `above` of the timeline at address `timeline` that a signal
    /// listed here brings it to with no *open* wait ahead of it on this stream (0: none): no
    /// wait, of any timeline, that is neither reached nor released by a failure. Such a signal
    /// is held by its stream's own work only (kernels, copies, host work), not by a value that
    /// may never come. The timelines read go to `dropped`, to be dropped outside the locks.
    pub(super) fn signals_past_open_waits(
        &self,
        timeline: *const (),
        above: u64,
        dropped: &mut Vec<Arc<dyn FailTarget>>,
    ) -> u64 {
        let st = self.lock();
        let id = timeline as usize;
        let mut now = Reached::new(&st.timelines);
        let first_open = st
            .all_waits()
            .filter(|w| !now.resolves(w.timeline, w.value) && !now.failed(w.timeline))
            .map(|w| w.seq)
            .min()
            .unwrap_or(u64::MAX);
        let reach = st.highest_signal_before(id, above, first_open);
        dropped.extend(now.into_upgraded());
        reach
    }

    /// For a sweep: retire the ledger if it is idle (no poison, every wait satisfied, every
    /// signal landed: a signal still in flight stays where a dropped timeline's settling
    /// finds it), or, if its stream is gone, settled; and say so. The timelines it looked at go to `dropped`, to be dropped
    /// outside the locks.
    pub(super) fn retire_if_idle(&self, dropped: &mut Vec<Arc<dyn FailTarget>>) -> bool {
        self.retire_if(dropped, Retire::Idle)
    }

    /// For a stream that is gone: retire the ledger if every entry is settled (each wait
    /// reached or failed, each signal landed or failed), poisoned or not, and say so. The
    /// timelines it looked at go to `dropped`, to be dropped outside the locks.
    pub(super) fn retire_if_settled(&self, dropped: &mut Vec<Arc<dyn FailTarget>>) -> bool {
        self.retire_if(dropped, Retire::Settled)
    }

    fn retire_if(&self, dropped: &mut Vec<Arc<dyn FailTarget>>, when: Retire) -> bool {
        let mut st = self.lock();
        let st = &mut *st;
        let mut now = Reached::new(&st.timelines);
        // Gone, a stream's wait on a failed timeline is settled too: its failure was applied
        // (the poison), and nothing is signalled there any more.
        let settled_rule = when == Retire::Settled || st.gone;
        let retire = (settled_rule || st.poison.is_none())
            && st.all_waits().all(|w| {
                now.resolves(w.timeline, w.value) || (settled_rule && now.failed(w.timeline))
            })
            && st
                .signals
                .iter()
                .all(|s| now.resolves(s.timeline, s.value) || now.failed(s.timeline));
        dropped.extend(now.into_upgraded());
        st.retired = retire;
        // Gone with entries pending: a later sweep retires it once they are settled.
        st.gone |= when == Retire::Settled;
        retire
    }

    /// A panic under the lock (a prune's read of a timeline's value, made before the prune
    /// changes anything) leaves at worst entries not yet pruned.
    fn lock(&self) -> Guard<'_, LedgerState> {
        self.state.lock()
    }

    /// A wait for `value` of `timeline` is being enqueued: returns its sequence number (that of
    /// the run of waits it joins).
    #[inline(always)]
    pub(crate) fn add_wait(
        &self,
        timeline: &Weak<dyn FailTarget>,
        value: u64,
    ) -> Result<u64, Retired> {
        let mut st = self.lock();
        if st.retired {
            return Err(Retired);
        }
        // A stream forgotten as gone that still waits is alive after all.
        st.gone = false;
        // A wait right after a wait on the same timeline, with nothing enqueued on the stream
        // between them, only raises that wait's value: a failure below the higher value
        // poisons the stream from the first wait on, which is the same signals as from the
        // second (none was enqueued between), and one above reaches both. So a stream that
        // waits on one timeline again and again keeps one entry.
        let next = st.next_seq;
        let id = id_of(timeline);
        if let Some(last) = &mut st.last_wait {
            if last.seq + 1 == next && last.timeline == id {
                last.value = last.value.max(value);
                return Ok(last.seq);
            }
        }
        let seq = next;
        st.next_seq += 1;
        let upgraded = if st.wait_count() >= st.prune_waits_at as usize {
            st.prune()
        } else {
            Vec::new()
        };
        let timeline = st.name(timeline);
        let older = st.last_wait.replace(Entry {
            seq,
            timeline,
            value,
        });
        st.waits.extend(older);
        drop(st);
        drop(upgraded);
        Ok(seq)
    }

    /// A signal of `timeline` is being enqueued (see [`Refused`] for when it is not): whether
    /// the ledger keeps it (it does while waits are listed: a failure of one may fail it).
    #[inline(always)]
    pub(crate) fn add_signal(
        &self,
        timeline: &Weak<dyn FailTarget>,
        value: u64,
    ) -> Result<bool, Refused> {
        let mut st = self.lock();
        if st.retired {
            return Err(Refused::Retired);
        }
        st.gone = false;
        if let Some((_, cause)) = &st.poison {
            return Err(Refused::Poisoned(cause.clone()));
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        let upgraded = if st.wait_count() >= st.prune_waits_at as usize
            || st.signals.len() >= st.prune_signals_at as usize
        {
            st.prune()
        } else {
            Vec::new()
        };
        // A signal after only satisfied waits can never be poisoned: no need to keep it.
        let kept = st.last_wait.is_some() || !st.waits.is_empty();
        if kept {
            let timeline = st.name(timeline);
            st.signals.push_back(Entry {
                seq,
                timeline,
                value,
            });
        }
        drop(st);
        drop(upgraded);
        Ok(kept)
    }

    /// A wait is being "enqueued" on a timeline that failed before reaching its value: the
    /// stream is poisoned from here on (what it signals from now fails), and nothing is listed
    /// (a failed word releases the wait at once; listing it would only grow the ledger on
    /// every such call).
    pub(crate) fn poison_now(&self, cause: Arc<Error>) -> Result<(), Retired> {
        let mut st = self.lock();
        if st.retired {
            return Err(Retired);
        }
        st.gone = false;
        let seq = st.next_seq;
        st.next_seq += 1;
        st.last_release = st.last_release.max(seq);
        if st.poison.is_none() {
            // Every signal listed came before: none fails.
            st.poison = Some((seq, cause));
        }
        Ok(())
    }

    /// A mark at the stream's current place, for a later [`settled_before`](Self::settled_before):
    /// `None` when no wait listed can still be released by a failure (none is listed, and no
    /// failure has poisoned the stream). The mark takes a sequence number of its own, so every
    /// entry listed so far has a lower one and no later wait joins them (a join would raise
    /// the value the mark waits for).
    pub(crate) fn mark(&self) -> Result<Option<u64>, Retired> {
        let mut st = self.lock();
        if st.retired {
            return Err(Retired);
        }
        if st.wait_count() == 0 && st.poison.is_none() {
            return Ok(None);
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        Ok(Some(seq))
    }

    /// Where the waits enqueued on the stream before mark `to` stand: all reached; some not
    /// reached yet; or one released by a failure (the stream was poisoned before the mark, or
    /// a wait before it is on a failed timeline). A retired ledger was idle, or its stream
    /// gone, when retired: it changes no more.
    pub(crate) fn settled_before(&self, to: u64) -> MarkState {
        self.settled_between(0, to)
    }

    /// As [`settled_before`](Self::settled_before), for the waits enqueued after mark `from`
    /// and before mark `to` only (a failure that released only waits before `from` does not
    /// count).
    pub(crate) fn settled_between(&self, from: u64, to: u64) -> MarkState {
        let st = self.lock();
        // Releases between the earliest and the latest are not kept: any overlap with
        // `from..to` counts (at worst a release after `to` is taken for one before it).
        if st
            .poison
            .as_ref()
            .is_some_and(|(p, _)| *p < to && st.last_release >= from)
        {
            return MarkState::Failed;
        }
        let mut now = Reached::new(&st.timelines);
        let mut state = MarkState::Reached;
        for w in st.all_waits().filter(|w| (from..to).contains(&w.seq)) {
            if now.resolves(w.timeline, w.value) {
                continue;
            }
            if now.failed(w.timeline) {
                state = MarkState::Failed;
                break;
            }
            state = MarkState::Pending;
        }
        let upgraded: Vec<_> = now.into_upgraded().collect();
        drop(st);
        drop(upgraded);
        state
    }

    /// Entries listed (waits and signals), for the tests of bounded memory.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let st = self.lock();
        st.wait_count() + st.signals.len()
    }

    /// A wait enqueued as `seq` was released by the failure `cause`: poison the stream from
    /// there, and return the failures of the signals enqueued after it whose timelines have
    /// not reached their values (see [the rule](self#the-rule)).
    pub(crate) fn poison_from(&self, seq: u64, cause: Arc<Error>) -> Vec<Propagation> {
        let failed: Vec<(Weak<dyn FailTarget>, u64)> = {
            let mut guard = self.lock();
            let st = &mut *guard;
            st.last_release = st.last_release.max(seq);
            if st.poison.as_ref().is_some_and(|(p, _)| *p <= seq) {
                return Vec::new(); // everything after `seq` already failed
            }
            st.poison = Some((seq, cause.clone()));
            // Signals are in enqueue order: those after the wait fail, earlier ones stay (an
            // earlier wait may still fail them).
            let keep = st.signals.iter().take_while(|s| s.seq < seq).count();
            st.signals
                .drain(keep..)
                .filter_map(|s| {
                    let t = st.timelines.iter().find(|t| id_of(t) == s.timeline)?;
                    Some((t.clone(), s.value))
                })
                .collect()
        };
        // Read outside the ledger's lock. A signal whose value its timeline reached already
        // (another route got there first) fails nothing: whether a prune dropped its entry
        // first must not matter, and a prune drops exactly those.
        failed
            .into_iter()
            .filter_map(|(t, value)| t.upgrade().filter(|t| t.reached_value() < value))
            .map(|t| (t, cause.clone()))
            .collect()
    }
}

impl LedgerState {
    /// Wait entries.
    fn wait_count(&self) -> usize {
        self.waits.len() + usize::from(self.last_wait.is_some())
    }

    /// Every wait entry, in enqueue order.
    fn all_waits(&self) -> impl Iterator<Item = &Entry> {
        self.waits.iter().chain(&self.last_wait)
    }

    /// The highest value above `above` of timeline `id` that a signal listed before sequence
    /// number `before` brings it to (0: none).
    fn highest_signal_before(&self, id: TimelineId, above: u64, before: u64) -> u64 {
        self.signals
            .iter()
            .filter(|s| s.seq < before && s.value > above && s.timeline == id)
            .map(|s| s.value)
            .max()
            .unwrap_or(0)
    }

    /// The id of `timeline`, listed if new.
    #[inline]
    fn name(&mut self, timeline: &Weak<dyn FailTarget>) -> TimelineId {
        let id = id_of(timeline);
        if !self.timelines.iter().any(|t| id_of(t) == id) {
            self.timelines.push(timeline.clone());
        }
        id
    }

    /// Drop the resolved entries: waits whose value is reached (they can no longer release
    /// anything by failing), signals whose value landed (they can no longer be failed), then
    /// the timelines no entry names. One value read per timeline.
    /// Returns the timelines it upgraded, to be dropped once the ledger's lock is given back
    /// (the last reference to a timeline may be among them).
    #[cold]
    #[must_use]
    fn prune(&mut self) -> Vec<Arc<dyn FailTarget>> {
        let mut now = Reached::new(&self.timelines);
        self.waits.retain(|w| !now.resolves(w.timeline, w.value));
        if let Some(w) = &self.last_wait {
            if now.resolves(w.timeline, w.value) {
                self.last_wait = None;
            }
        }
        self.signals.retain(|s| !now.resolves(s.timeline, s.value));
        let upgraded: Vec<_> = now.into_upgraded().collect();
        let mut timelines = std::mem::take(&mut self.timelines);
        timelines.retain(|t| {
            let id = id_of(t);
            self.all_waits().any(|w| w.timeline == id)
                || self.signals.iter().any(|s| s.timeline == id)
        });
        self.timelines = timelines;
        self.prune_waits_at = limit(self.wait_count());
        self.prune_signals_at = limit(self.signals.len());
        upgraded
    }
}

/// A timeline's upgrade, and the value it reached (`None`: dropped).
type Read = (Option<Arc<dyn FailTarget>>, Option<u64>);

/// The values the timelines of a ledger have reached, each read once (an upgrade is two
/// read-modify-writes and a read of the word may ask the device).
struct Reached<'a> {
    timelines: &'a [Weak<dyn FailTarget>],
    /// Per timeline (same index).
    read: Vec<Read>,
    /// The last timeline asked for and its index (entries come in runs of one timeline).
    last: Option<(TimelineId, usize)>,
}

impl<'a> Reached<'a> {
    /// Every listed timeline's upgrade and value, read now: before the prune changes anything
    /// (a panic in a read leaves the lists as they were).
    fn new(timelines: &'a [Weak<dyn FailTarget>]) -> Self {
        Reached {
            timelines,
            read: timelines
                .iter()
                .map(|w| {
                    let t = w.upgrade();
                    let value = t.as_ref().map(|t| t.reached_value());
                    (t, value)
                })
                .collect(),
            last: None,
        }
    }

    /// The upgrade and reached value of `id`.
    fn get(&mut self, id: TimelineId) -> &Read {
        let i = match self.last {
            Some((last, i)) if last == id => i,
            _ => {
                let i = self
                    .timelines
                    .iter()
                    .position(|t| id_of(t) == id)
                    .expect("an entry names a listed timeline");
                self.last = Some((id, i));
                i
            }
        };
        &self.read[i]
    }

    /// Is an entry for `value` of `id` resolved? A signal is once its value landed (or its
    /// timeline is gone: it fails nothing). A wait is once its value is reached; a dropped
    /// timeline was failed first if a wait on it was pending (by its last handle, while it was
    /// still alive), which poisoned the stream; so a wait on a dropped timeline is resolved
    /// either way.
    fn resolves(&mut self, id: TimelineId, value: u64) -> bool {
        self.get(id).1.is_none_or(|reached| reached >= value)
    }

    /// Has the timeline failed (a dropped one: no)?
    fn failed(&mut self, id: TimelineId) -> bool {
        self.get(id).0.as_ref().is_some_and(|t| t.is_failed())
    }

    /// The timelines upgraded, to be dropped where no lock is held.
    fn into_upgraded(self) -> impl Iterator<Item = Arc<dyn FailTarget>> {
        self.read.into_iter().filter_map(|(t, _)| t)
    }
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    use super::*;
    use crate::timeline::propagate::tests::fake;
    use std::sync::atomic::Ordering;

    fn ledger() -> Ledger {
        Ledger::new()
    }

    #[test]
    fn a_prune_reads_each_timeline_once_and_keeps_the_unreached_waits() {
        let (a, wa) = fake();
        let (b, wb) = fake();
        let l = ledger();
        for v in 1..=PRUNE_MIN as u64 {
            l.add_wait(if v % 2 == 0 { &wa } else { &wb }, v).unwrap();
        }
        a.value.store(PRUNE_MIN as u64, Ordering::Relaxed); // every wait on `a` is reached
        l.add_wait(&wb, 1000).unwrap(); // the list is full: this prunes first
        assert_eq!(a.reads.load(Ordering::Relaxed), 1);
        assert_eq!(b.reads.load(Ordering::Relaxed), 1);
        let st = l.lock();
        // b's waits, and the new one on b; `a` is named by no entry any more.
        assert_eq!(st.all_waits().count(), PRUNE_MIN / 2 + 1);
        assert_eq!(st.timelines.len(), 1);
    }

    #[test]
    fn a_prune_forgets_the_timelines_no_entry_names() {
        let (a, wa) = fake();
        let (_b, wb) = fake();
        let (_c, wc) = fake();
        let l = ledger();
        l.add_wait(&wa, 1).unwrap();
        l.add_signal(&wa, 2).unwrap();
        a.value.store(2, Ordering::Relaxed);
        for v in 1..=PRUNE_MIN as u64 {
            l.add_wait(if v % 2 == 0 { &wb } else { &wc }, v).unwrap();
        }
        let st = l.lock();
        assert_eq!(st.timelines.len(), 2, "only b and c are named now");
        assert!(st.signals.is_empty());
        drop(st);
        // With no `Weak` left in the ledger, a's allocation goes with its last `Arc`.
        assert_eq!(Arc::weak_count(&a), 1, "the test's own Weak only");
    }

    #[test]
    fn waits_on_one_timeline_with_nothing_between_share_an_entry() {
        let (_a, wa) = fake();
        let (_b, wb) = fake();
        let l = ledger();
        let first = l.add_wait(&wa, 3).unwrap();
        for v in [5, 4, 1000, 7] {
            assert_eq!(l.add_wait(&wa, v).unwrap(), first, "joins the run");
        }
        let other = l.add_wait(&wb, 1).unwrap();
        assert_ne!(other, first, "another timeline starts an entry");
        let st = l.lock();
        let waits: Vec<_> = st.all_waits().map(|w| (w.seq, w.value)).collect();
        assert_eq!(
            waits,
            [(first, 1000), (other, 1)],
            "the run keeps its highest value"
        );
    }

    #[test]
    fn a_signal_between_two_waits_keeps_them_apart() {
        let (_a, wa) = fake();
        let (b, wb) = fake();
        let l = ledger();
        let first = l.add_wait(&wa, 5).unwrap();
        l.add_signal(&wb, 1).unwrap();
        let second = l.add_wait(&wa, 10).unwrap();
        assert!(second > first);
        // `a` fails at 7: only the second wait was released by the failure, and b's signal
        // came before it, so b does not fail.
        assert!(l
            .poison_from(second, Arc::new(Error::Cancelled("a".into())))
            .is_empty());
        let first_wait = l.lock().all_waits().next().map(|w| (w.seq, w.value));
        assert_eq!(first_wait, Some((first, 5)));
        drop(b);
    }

    #[test]
    fn a_poison_fails_exactly_the_signals_after_the_wait() {
        let (_a, wa) = fake();
        let (b, wb) = fake();
        let (c, wc) = fake();
        let l = ledger();
        l.add_wait(&wa, 1).unwrap();
        l.add_signal(&wb, 1).unwrap();
        let seq = l.add_wait(&wa, 2).unwrap();
        l.add_signal(&wc, 1).unwrap();
        let failed = l.poison_from(seq, Arc::new(Error::Cancelled("a".into())));
        let ptrs: Vec<_> = failed
            .iter()
            .map(|(t, _)| Arc::as_ptr(t) as *const ())
            .collect();
        assert_eq!(ptrs, [Arc::as_ptr(&c) as *const ()]);
        assert!(!ptrs.contains(&(Arc::as_ptr(&b) as *const ())));
        assert!(matches!(l.add_signal(&wb, 2), Err(Refused::Poisoned(_))));
    }
}
