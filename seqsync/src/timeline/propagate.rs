//! Failure propagation: a stream that waited on a timeline which then failed fails every
//! timeline it signals after that wait.
//!
//! Each stream used with timelines has a [`Ledger`] (kept by [`Backend::stream_id`]
//! (crate::backend::Backend::stream_id)): the waits enqueued on it that are not yet known to be
//! satisfied, and the signals enqueued after them. When a timeline fails, every stream with a
//! wait on it for a value it never reached is *poisoned* from that wait on: the signals
//! enqueued on it after the wait fail their timelines at once (which propagates further), and
//! so does every signal enqueued on it later. This happens eagerly, on the host, at the
//! failure; the device then only has to release its waits (the failed word does that), so no
//! kernel or host function runs per signal.
//!
//! A timeline keeps no list of the stream waits on it: a failure (rare) finds them by searching
//! every ledger ([`waits_on`]), so that `wait_on` takes only its stream's ledger lock. The
//! timeline is marked failed before the search, and `wait_on` looks at that mark after adding
//! its entry, so no wait is missed. A timeline whose last handle goes while streams still wait
//! on it fails first, from the same search, while it is alive (so no prune has dropped the
//! entries of a timeline that is going: a prune counts a dead timeline's waits as resolved).
//!
//! A poisoned stream stays poisoned (like a CUDA stream after a fault, or a host stream after a
//! panic): use a new stream after a failure.
//!
//! # Finding a stream's ledger cheaply
//!
//! Ledgers live in a process-wide registry (a map under a lock), but `signal_on` and `wait_on`
//! do not take its lock: each thread keeps its recent lookups (found or not) in a small cache
//! that is valid while the registry's *epoch* has not moved. The epoch moves whenever a ledger
//! is added or removed, so a lookup is an atomic load and a scan of a few entries. Idle ledgers
//! (no poison, every wait satisfied) are not removed on the hot path either: the registry is
//! swept when it has doubled since the last sweep. A swept ledger is marked retired under its
//! lock (after the epoch moved), so a thread that raced with the sweep sees it when it adds
//! its entry, and looks the stream up again.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::error::Error;

/// What the ledger needs of a timeline (object-safe, so one ledger serves every backend).
pub(crate) trait FailTarget: Send + Sync {
    /// Has the timeline reached `value` (successfully)? A dropped or failed-below timeline has
    /// not.
    fn reached(&self, value: u64) -> bool;
    /// Mark it failed because work that signals it waited on a failed timeline (host side
    /// only: its word is not released yet). `None` if it had failed already; else the further
    /// failures this causes (applied by the caller, so chains do not recurse).
    fn mark_failed(&self, cause: Arc<Error>) -> Option<Vec<Propagation>>;
    /// Release its word (stream waits on it go on) and wake its host waiters. Called once every
    /// failure of the chain is marked: otherwise a stream released early could signal a
    /// downstream timeline before that one is marked failed.
    fn release(&self);
}

/// A failure still to be applied: fail `target` with `cause`.
pub(crate) type Propagation = (Arc<dyn FailTarget>, Arc<Error>);

/// Mark every failure of the chain, then release the words of those newly failed.
pub(crate) fn apply(mut work: Vec<Propagation>) {
    let mut marked = Vec::new();
    while let Some((target, cause)) = work.pop() {
        if let Some(more) = target.mark_failed(cause) {
            work.extend(more);
            marked.push(target);
        }
    }
    for t in marked {
        t.release();
    }
}

struct PendingWait {
    seq: u64,
    timeline: Weak<dyn FailTarget>,
    value: u64,
}

struct PendingSignal {
    seq: u64,
    timeline: Weak<dyn FailTarget>,
    value: u64,
}

#[derive(Default)]
struct LedgerState {
    next_seq: u64,
    waits: Vec<PendingWait>,
    signals: VecDeque<PendingSignal>,
    /// Prune `waits` / `signals` of resolved entries when they grow to these lengths (amortized:
    /// the next limit is twice what is left).
    prune_waits_at: usize,
    prune_signals_at: usize,
    /// The earliest failed wait's sequence number, and its failure.
    poison: Option<(u64, Arc<Error>)>,
    /// Removed from the registry by a sweep: entries must go to the stream's new ledger.
    retired: bool,
}

/// The ledger was retired by a sweep: look the stream's ledger up again.
#[derive(Debug)]
pub(crate) struct Retired;

/// Why a signal was not added.
pub(crate) enum Refused {
    /// The stream is poisoned: fail the timeline with this cause instead.
    Poisoned(Arc<Error>),
    /// See [`Retired`].
    Retired,
}

/// One stream's waits and signals (see the [module docs](self)).
pub(crate) struct Ledger {
    state: Mutex<LedgerState>,
}

struct Registry {
    ledgers: HashMap<u64, Arc<Ledger>>,
    /// Sweep idle ledgers when the map grows to this size.
    sweep_at: usize,
}

/// Smallest registry size that triggers a sweep.
const SWEEP_MIN: usize = 64;

fn registry() -> &'static Mutex<Registry> {
    static LEDGERS: OnceLock<Mutex<Registry>> = OnceLock::new();
    LEDGERS.get_or_init(|| {
        Mutex::new(Registry {
            ledgers: HashMap::new(),
            sweep_at: SWEEP_MIN,
        })
    })
}

fn lock_registry() -> std::sync::MutexGuard<'static, Registry> {
    registry().lock().unwrap_or_else(|e| e.into_inner())
}

/// Moves (under the registry's lock) whenever a ledger is added to or removed from it.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// How many lookups a thread remembers.
const CACHE_ENTRIES: usize = 8;

/// A thread's recent lookups (stream id, its ledger or none), valid for one epoch.
struct Cache {
    epoch: u64,
    entries: Vec<(u64, Option<Arc<Ledger>>)>,
}

thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            epoch: u64::MAX,
            entries: Vec::new(),
        })
    };
}

/// `Some(lookup)` if this thread looked `stream_id` up in the current epoch.
fn cached(stream_id: u64) -> Option<Option<Arc<Ledger>>> {
    let epoch = EPOCH.load(Ordering::Acquire);
    CACHE
        .try_with(|c| {
            let mut c = c.borrow_mut();
            if c.epoch != epoch {
                c.entries.clear();
                c.epoch = epoch;
                return None;
            }
            c.entries
                .iter()
                .find(|(id, _)| *id == stream_id)
                .map(|(_, l)| l.clone())
        })
        .ok()
        .flatten()
}

/// Remember a lookup made under the registry's lock in `epoch`.
fn remember(epoch: u64, stream_id: u64, ledger: Option<Arc<Ledger>>) {
    let _ = CACHE.try_with(|c| {
        let mut c = c.borrow_mut();
        if c.epoch != epoch {
            c.entries.clear();
            c.epoch = epoch;
        }
        if let Some(e) = c.entries.iter_mut().find(|(id, _)| *id == stream_id) {
            e.1 = ledger;
            return;
        }
        if c.entries.len() >= CACHE_ENTRIES {
            c.entries.remove(0);
        }
        c.entries.push((stream_id, ledger));
    });
}

impl Ledger {
    /// The ledger of stream `stream_id`, if it has one.
    pub(crate) fn find(stream_id: u64) -> Option<Arc<Ledger>> {
        match cached(stream_id) {
            Some(hit) => hit,
            None => Self::find_fresh(stream_id),
        }
    }

    /// [`find`](Self::find), from the registry itself.
    pub(crate) fn find_fresh(stream_id: u64) -> Option<Arc<Ledger>> {
        let reg = lock_registry();
        let epoch = EPOCH.load(Ordering::Relaxed);
        let ledger = reg.ledgers.get(&stream_id).cloned();
        drop(reg);
        remember(epoch, stream_id, ledger.clone());
        ledger
    }

    /// The ledger of stream `stream_id`, made if needed.
    pub(crate) fn get(stream_id: u64) -> Arc<Ledger> {
        match cached(stream_id) {
            Some(Some(ledger)) => ledger,
            _ => Self::get_fresh(stream_id),
        }
    }

    /// [`get`](Self::get), from the registry itself.
    pub(crate) fn get_fresh(stream_id: u64) -> Arc<Ledger> {
        let mut reg = lock_registry();
        let mut dropped = Vec::new();
        let ledger = match reg.ledgers.get(&stream_id) {
            Some(l) => l.clone(),
            None => {
                if reg.ledgers.len() >= reg.sweep_at {
                    reg.sweep(&mut dropped);
                }
                let l = Arc::new(Ledger {
                    state: Mutex::new(LedgerState::default()),
                });
                reg.ledgers.insert(stream_id, l.clone());
                EPOCH.fetch_add(1, Ordering::Release);
                l
            }
        };
        let epoch = EPOCH.load(Ordering::Relaxed);
        drop(reg);
        // Timelines the sweep looked at go only now, outside every lock (dropping the last
        // handle of one with pending stream waits fails it, which takes ledgers' locks).
        drop(dropped);
        remember(epoch, stream_id, Some(ledger.clone()));
        ledger
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A wait for `value` of `timeline` is being enqueued: returns its sequence number.
    pub(crate) fn add_wait(
        &self,
        timeline: &Weak<dyn FailTarget>,
        value: u64,
    ) -> Result<u64, Retired> {
        let mut st = self.lock();
        if st.retired {
            return Err(Retired);
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.prune_waits();
        st.waits.push(PendingWait {
            seq,
            timeline: timeline.clone(),
            value,
        });
        Ok(seq)
    }

    /// A signal of `timeline` is being enqueued (see [`Refused`] for when it is not).
    pub(crate) fn add_signal(
        &self,
        timeline: &Weak<dyn FailTarget>,
        value: u64,
    ) -> Result<(), Refused> {
        let mut st = self.lock();
        if st.retired {
            return Err(Refused::Retired);
        }
        if let Some((_, cause)) = &st.poison {
            return Err(Refused::Poisoned(cause.clone()));
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.prune_waits();
        // A signal after only satisfied waits can never be poisoned: no need to keep it.
        if !st.waits.is_empty() {
            st.prune_signals();
            st.signals.push_back(PendingSignal {
                seq,
                timeline: timeline.clone(),
                value,
            });
        }
        Ok(())
    }

    /// A wait enqueued as `seq` was released by the failure `cause`: poison the stream from
    /// there, and return the failures of the signals enqueued after it.
    pub(crate) fn poison_from(&self, seq: u64, cause: Arc<Error>) -> Vec<Propagation> {
        let mut st = self.lock();
        if st.poison.as_ref().is_some_and(|(p, _)| *p <= seq) {
            return Vec::new(); // everything after `seq` already failed
        }
        st.poison = Some((seq, cause.clone()));
        // Signals are in enqueue order: those after the wait fail, earlier ones stay (an
        // earlier wait may still fail them).
        let keep = st.signals.iter().take_while(|s| s.seq < seq).count();
        let failed: Vec<_> = st.signals.drain(keep..).collect();
        drop(st);
        failed
            .into_iter()
            .filter_map(|s| s.timeline.upgrade())
            .map(|t| (t, cause.clone()))
            .collect()
    }
}

/// The waits enqueued on any stream for values above `above` of the timeline whose `Weak`s
/// point to `timeline`, not yet pruned: their ledgers and sequence numbers. A failure poisons
/// their streams from there; a timeline dropped with some fails first.
pub(crate) fn waits_on(timeline: *const (), above: u64) -> Vec<(Arc<Ledger>, u64)> {
    let reg = lock_registry();
    let mut found = Vec::new();
    for ledger in reg.ledgers.values() {
        let st = ledger.lock();
        found.extend(
            st.waits
                .iter()
                .filter(|w| w.value > above && w.timeline.as_ptr() as *const () == timeline)
                .map(|w| (ledger.clone(), w.seq)),
        );
    }
    found
}

impl Registry {
    /// Remove the idle ledgers (no poison, every wait satisfied), marking them retired; the
    /// timelines looked at go to `dropped`, to be dropped outside the locks.
    fn sweep(&mut self, dropped: &mut Vec<Arc<dyn FailTarget>>) {
        // The epoch moves before any ledger is marked: whoever sees a mark sees the move.
        EPOCH.fetch_add(1, Ordering::Release);
        self.ledgers.retain(|_, l| {
            let mut st = l.lock();
            let idle = st.poison.is_none()
                && st.waits.iter().all(|w| match w.timeline.upgrade() {
                    Some(t) => {
                        let reached = t.reached(w.value);
                        dropped.push(t);
                        reached
                    }
                    None => true,
                });
            st.retired = idle;
            !idle
        });
        self.sweep_at = (self.ledgers.len() * 2).max(SWEEP_MIN);
    }
}

impl LedgerState {
    fn prune_waits(&mut self) {
        if self.waits.len() >= self.prune_waits_at {
            let mut timelines = Upgrades::default();
            self.waits
                .retain(|w| !is_resolved(timelines.get(&w.timeline), w.value));
            self.prune_waits_at = (self.waits.len() * 2).max(8);
        }
    }

    fn prune_signals(&mut self) {
        if self.signals.len() >= self.prune_signals_at {
            // A signal that landed can no longer be failed by the stream's waits.
            let mut timelines = Upgrades::default();
            self.signals.retain(|s| {
                timelines
                    .get(&s.timeline)
                    .is_some_and(|t| !t.reached(s.value))
            });
            self.prune_signals_at = (self.signals.len() * 2).max(8);
        }
    }
}

/// Upgrades of the timelines of consecutive entries, made once per run of entries on the same
/// timeline (a stream mostly waits on and signals a few timelines: an upgrade is two
/// read-modify-writes, the rest of a check two loads).
#[derive(Default)]
struct Upgrades {
    last: Option<(*const (), Option<Arc<dyn FailTarget>>)>,
}

impl Upgrades {
    fn get(&mut self, w: &Weak<dyn FailTarget>) -> Option<&Arc<dyn FailTarget>> {
        let ptr = w.as_ptr() as *const ();
        if !matches!(&self.last, Some((p, _)) if *p == ptr) {
            self.last = Some((ptr, w.upgrade()));
        }
        self.last.as_ref().and_then(|(_, t)| t.as_ref())
    }
}

fn is_resolved(timeline: Option<&Arc<dyn FailTarget>>, value: u64) -> bool {
    // A dropped timeline was failed first if the wait was pending (by its last handle, while
    // it was still alive), which poisoned the stream; so a wait on a dropped timeline is
    // resolved either way.
    timeline.is_none_or(|t| t.reached(value))
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    use super::*;
    use crate::timeline::Timeline;
    use crate::HostBackend;
    use std::time::Duration;

    fn sweep_now() {
        let mut dropped = Vec::new();
        lock_registry().sweep(&mut dropped);
    }

    fn unique_id() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1 << 61);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    #[test]
    fn a_lookup_sees_a_ledger_made_after_it_was_cached() {
        let id = unique_id();
        let host = HostBackend::new();
        let t = Timeline::new(&host, "never reached", 0).unwrap();
        let target = t.shared.target.clone();
        assert!(Ledger::find(id).is_none());
        assert!(Ledger::find(id).is_none()); // from the cache
                                             // Made by another thread (with a pending wait, so that the other tests' sweeps keep
                                             // it): this one's cache must not hide it.
        let made = std::thread::spawn(move || {
            let l = Ledger::get(id);
            l.add_wait(&target, 1).unwrap();
            l
        })
        .join()
        .unwrap();
        let found = Ledger::find(id).expect("the epoch moved: looked up again");
        assert!(Arc::ptr_eq(&made, &found));
        assert!(Arc::ptr_eq(&Ledger::get(id), &made));
    }

    #[test]
    fn a_swept_idle_ledger_is_retired_and_its_stream_gets_a_new_one() {
        let id = unique_id();
        let old = Ledger::get(id);
        sweep_now();
        let dead: Weak<dyn FailTarget> =
            Weak::<crate::timeline::shared::Shared<HostBackend>>::new();
        assert!(old.add_wait(&dead, 1).is_err());
        assert!(matches!(old.add_signal(&dead, 1), Err(Refused::Retired)));
        assert!(!Arc::ptr_eq(&old, &Ledger::get(id)));
    }

    #[test]
    fn a_sweep_keeps_ledgers_with_pending_waits_so_failures_still_spread() {
        let host = HostBackend::new();
        let s = host.new_stream("s");
        let (a, b) = (
            Timeline::new(&host, "a", 0).unwrap(),
            Timeline::new(&host, "b", 0).unwrap(),
        );
        a.wait_on(&s, 1).unwrap();
        sweep_now();
        b.signal_on(&s, 1).unwrap();
        sweep_now();
        a.fail(Error::Cancelled("upstream".into()));
        let err = b.wait(1, Duration::from_secs(5)).unwrap_err();
        assert!(err.to_string().contains("upstream"), "{err}");
        // The stream stays poisoned through later sweeps.
        sweep_now();
        let c = Timeline::new(&host, "c", 0).unwrap();
        c.signal_on(&s, 1).unwrap();
        assert!(c.wait(1, Duration::from_secs(5)).is_err());
    }
}
