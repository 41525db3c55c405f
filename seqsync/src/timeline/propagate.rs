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
//! # The rule
//!
//! When timeline `y` fails at value `c` (the last value it reached), every stream wait on `y`
//! for a value above `c` is released, and the stream is poisoned from that wait on: each
//! signal enqueued on it after the wait fails its timeline, **unless that timeline has reached
//! the signal's value already** when the failure arrives (by another route: a host signal, a
//! signal of another stream). Such a signal could only land below a value the timeline has,
//! so there is nothing left to fail. Bookkeeping never changes the outcome: a prune drops a
//! wait only once its value is reached (no failure can release it any more) and a signal only
//! once its value is reached (the rule fails nothing for it), so a pruned ledger and an
//! unpruned one spread a failure to exactly the same timelines.
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
//! its entry, and looks the stream up again. A hit runs the caller's update on the cached
//! ledger in place ([`with_ledger`]), so it takes no reference either.
//!
//! # Entries cost no reference count
//!
//! An entry names its timeline by address; the ledger keeps one `Weak` per timeline its
//! entries name (which keeps the address from being reused), cloned when a timeline first
//! appears and dropped by the prune after its last entry. The ledger's lock is the crate's
//! short-section lock, biased to the thread that enqueues on the stream (`lock/`). A wait right
//! after a wait on the same timeline joins its entry (see [`Ledger::add_wait`]). So an ordered
//! `wait_on` costs the ledger two plain stores, a load and a push (or an update in place).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
#[cfg(not(seqsync_loom))]
use std::sync::OnceLock;
use std::sync::{Arc, Weak};

use crate::primitive::{AtomicU64, Mutex, MutexGuard};

use crate::error::Error;
use crate::lock::{Guard, Lock};

/// What the ledger needs of a timeline (object-safe, so one ledger serves every backend).
pub(crate) trait FailTarget: Send + Sync {
    /// The highest value the timeline reached successfully (a failed timeline: the value it
    /// reached before failing; a word that cannot be read: 0). A wait for `v` or a signal of
    /// `v` is resolved once this is `>= v`.
    fn reached_value(&self) -> u64;
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
    /// Prune `waits` / `signals` of resolved entries when one grows to its limit (amortized:
    /// the next limits are twice what is left).
    prune_waits_at: u32,
    prune_signals_at: u32,
    /// The older wait entries, in enqueue order (all before `last_wait`).
    waits: Vec<Entry>,
    /// The earliest failed wait's sequence number, and its failure.
    poison: Option<(u64, Arc<Error>)>,
    signals: VecDeque<Entry>,
    /// One `Weak` per timeline that an entry names, so that an entry costs no reference count
    /// (a stream mostly waits on and signals a few timelines: a scan of a short list).
    timelines: Vec<Weak<dyn FailTarget>>,
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

struct Registry {
    ledgers: HashMap<u64, Arc<Ledger>>,
    /// Sweep idle ledgers when the map grows to this size.
    sweep_at: usize,
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

/// Smallest registry size that triggers a sweep.
const SWEEP_MIN: usize = 64;

fn new_registry() -> Registry {
    Registry {
        ledgers: HashMap::new(),
        sweep_at: SWEEP_MIN,
    }
}

#[cfg(not(seqsync_loom))]
fn registry() -> &'static Mutex<Registry> {
    static LEDGERS: OnceLock<Mutex<Registry>> = OnceLock::new();
    LEDGERS.get_or_init(|| Mutex::new(new_registry()))
}

/// Moves (under the registry's lock) whenever a ledger is added to or removed from it.
#[cfg(not(seqsync_loom))]
static EPOCH: AtomicU64 = AtomicU64::new(0);

// Under loom the registry, its epoch and the lookup caches are loom's: made anew for each
// model iteration (a ledger's lock is a loom atomic), and a model thread that waits for the
// registry's lock lets the others run.
#[cfg(seqsync_loom)]
loom::lazy_static! {
    static ref LEDGERS: Mutex<Registry> = Mutex::new(new_registry());
    static ref EPOCH: AtomicU64 = AtomicU64::new(0);
}

#[cfg(seqsync_loom)]
fn registry() -> &'static Mutex<Registry> {
    &LEDGERS
}

fn lock_registry() -> MutexGuard<'static, Registry> {
    registry().lock().unwrap_or_else(|e| e.into_inner())
}

/// How many lookups a thread remembers.
const CACHE_ENTRIES: usize = 8;

/// A thread's recent lookups (stream id, its ledger or none), valid for one epoch. Held in
/// place (no list on the heap): a lookup reads the thread's own storage and the epoch.
struct Cache {
    epoch: u64,
    /// The first `len` are lookups; the next one replaced is `next` (round robin).
    entries: [(u64, Option<Arc<Ledger>>); CACHE_ENTRIES],
    len: usize,
    next: usize,
}

const EMPTY: (u64, Option<Arc<Ledger>>) = (0, None);

#[cfg(not(seqsync_loom))]
thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            epoch: u64::MAX,
            entries: [EMPTY; CACHE_ENTRIES],
            len: 0,
            next: 0,
        })
    };
}

#[cfg(seqsync_loom)]
loom::thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache {
        epoch: u64::MAX,
        entries: [EMPTY; CACHE_ENTRIES],
        len: 0,
        next: 0,
    });
}

impl Cache {
    #[inline(always)]
    fn find(&self, stream_id: u64) -> Option<&Option<Arc<Ledger>>> {
        self.entries[..self.len]
            .iter()
            .find(|(id, _)| *id == stream_id)
            .map(|(_, l)| l)
    }
}

/// Remember a lookup made under the registry's lock in `epoch` (skipped if the cache is in
/// use further up this thread's stack).
fn remember(epoch: u64, stream_id: u64, ledger: Option<Arc<Ledger>>) {
    let _ = CACHE.try_with(|c| {
        let Ok(mut c) = c.try_borrow_mut() else {
            return;
        };
        let c = &mut *c;
        if c.epoch != epoch {
            c.entries = [EMPTY; CACHE_ENTRIES];
            c.len = 0;
            c.next = 0;
            c.epoch = epoch;
        }
        let len = c.len;
        if let Some(e) = c.entries[..len].iter_mut().find(|(id, _)| *id == stream_id) {
            e.1 = ledger;
            return;
        }
        let at = if len < CACHE_ENTRIES {
            c.len += 1;
            len
        } else {
            let at = c.next;
            c.next = (at + 1) % CACHE_ENTRIES;
            at
        };
        c.entries[at] = (stream_id, ledger);
    });
}

/// Run `f` on stream `stream_id`'s ledger: made if needed when `create`, else `None` when the
/// stream has none. `f` runs again on the stream's new ledger if a sweep retired the one it
/// got.
///
/// The fast path runs `f` on the ledger this thread cached in the current epoch, without
/// taking a reference (no atomic operation besides the epoch's load); `f` must not call this
/// again (it would only miss the cache). A miss takes the registry's lock.
#[inline]
pub(crate) fn with_ledger<R>(
    stream_id: u64,
    create: bool,
    mut f: impl FnMut(Option<&Arc<Ledger>>) -> Result<R, Retired>,
) -> R {
    match cached(stream_id, create, &mut f) {
        Some(Ok(r)) => r,
        _ => with_ledger_fresh(stream_id, create, f),
    }
}

/// [`with_ledger`] (never making a ledger) from this thread's cache only: `None` on a miss (or
/// a retired ledger), so that a caller holding a lock can [`look_up`] without it and retry.
#[inline]
pub(crate) fn with_cached_ledger<R>(
    stream_id: u64,
    mut f: impl FnMut(Option<&Arc<Ledger>>) -> Result<R, Retired>,
) -> Option<R> {
    match cached(stream_id, false, &mut f) {
        Some(Ok(r)) => Some(r),
        _ => None,
    }
}

/// Look stream `stream_id`'s ledger up in the registry, for this thread's cache.
#[cold]
pub(crate) fn look_up(stream_id: u64) {
    drop(Ledger::find_fresh(stream_id));
}

/// `f` on the ledger this thread cached for `stream_id` in the current epoch; `None` if there
/// is no such entry (or, with `create`, the entry says the stream has no ledger).
#[inline]
fn cached<R>(
    stream_id: u64,
    create: bool,
    f: &mut impl FnMut(Option<&Arc<Ledger>>) -> Result<R, Retired>,
) -> Option<Result<R, Retired>> {
    let epoch = EPOCH.load(Ordering::Acquire);
    CACHE
        .try_with(|c| {
            let c = c.try_borrow().ok()?;
            if c.epoch != epoch {
                return None;
            }
            match c.find(stream_id)? {
                Some(ledger) => Some(f(Some(ledger))),
                None if !create => Some(f(None)),
                None => None,
            }
        })
        .ok()
        .flatten()
}

/// [`with_ledger`] from the registry itself.
#[cold]
fn with_ledger_fresh<R>(
    stream_id: u64,
    create: bool,
    mut f: impl FnMut(Option<&Arc<Ledger>>) -> Result<R, Retired>,
) -> R {
    loop {
        let ledger = if create {
            Some(Ledger::get_fresh(stream_id))
        } else {
            Ledger::find_fresh(stream_id)
        };
        if let Ok(r) = f(ledger.as_ref()) {
            return r;
        }
    }
}

impl Ledger {
    /// The ledger of stream `stream_id`, if it has one, from the registry.
    fn find_fresh(stream_id: u64) -> Option<Arc<Ledger>> {
        let reg = lock_registry();
        let epoch = EPOCH.load(Ordering::Relaxed);
        let ledger = reg.ledgers.get(&stream_id).cloned();
        drop(reg);
        remember(epoch, stream_id, ledger.clone());
        ledger
    }

    /// The ledger of stream `stream_id`, made if needed, from the registry.
    fn get_fresh(stream_id: u64) -> Arc<Ledger> {
        let mut reg = lock_registry();
        let mut dropped = Vec::new();
        let ledger = match reg.ledgers.get(&stream_id) {
            Some(l) => l.clone(),
            None => {
                if reg.ledgers.len() >= reg.sweep_at {
                    reg.sweep(&mut dropped);
                }
                let l = Arc::new(Ledger {
                    state: Lock::new(LedgerState::default()),
                });
                reg.ledgers.insert(stream_id, l.clone());
                EPOCH.fetch_add(1, Ordering::Release);
                l
            }
        };
        let epoch = EPOCH.load(Ordering::Relaxed);
        drop(reg);
        // Timelines the sweep looked at go only now, outside every lock.
        drop(dropped);
        remember(epoch, stream_id, Some(ledger.clone()));
        ledger
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

    /// A signal of `timeline` is being enqueued (see [`Refused`] for when it is not).
    #[inline(always)]
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
        let upgraded = if st.wait_count() >= st.prune_waits_at as usize
            || st.signals.len() >= st.prune_signals_at as usize
        {
            st.prune()
        } else {
            Vec::new()
        };
        // A signal after only satisfied waits can never be poisoned: no need to keep it.
        if st.last_wait.is_some() || !st.waits.is_empty() {
            let timeline = st.name(timeline);
            st.signals.push_back(Entry {
                seq,
                timeline,
                value,
            });
        }
        drop(st);
        drop(upgraded);
        Ok(())
    }

    /// A wait enqueued as `seq` was released by the failure `cause`: poison the stream from
    /// there, and return the failures of the signals enqueued after it whose timelines have
    /// not reached their values (see [the rule](self#the-rule)).
    pub(crate) fn poison_from(&self, seq: u64, cause: Arc<Error>) -> Vec<Propagation> {
        let failed: Vec<(Weak<dyn FailTarget>, u64)> = {
            let mut guard = self.lock();
            let st = &mut *guard;
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

/// Is stream `stream_id` poisoned (a wait on it was released by a failure, so the timelines
/// it signals from now on fail)?
pub(crate) fn is_poisoned(stream_id: u64) -> bool {
    with_ledger(stream_id, false, |l| match l {
        None => Ok(false),
        Some(l) => {
            let st = l.lock();
            if st.retired {
                return Err(Retired);
            }
            Ok(st.poison.is_some())
        }
    })
}

/// The waits enqueued on any stream for values above `above` of the timeline whose `Weak`s
/// point to `timeline`, not yet pruned (a run of waits with nothing between them is one entry):
/// their ledgers and sequence numbers. A failure poisons their streams from there; a timeline
/// dropped with some fails first.
pub(crate) fn waits_on(timeline: *const (), above: u64) -> Vec<(Arc<Ledger>, u64)> {
    let reg = lock_registry();
    let mut found = Vec::new();
    for ledger in reg.ledgers.values() {
        let st = ledger.lock();
        found.extend(
            st.all_waits()
                .filter(|w| w.value > above && w.timeline == timeline as usize)
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
            let st = &mut *st;
            let mut now = Reached::new(&st.timelines);
            let idle =
                st.poison.is_none() && st.all_waits().all(|w| now.resolves(w.timeline, w.value));
            dropped.extend(now.into_upgraded());
            st.retired = idle;
            !idle
        });
        self.sweep_at = (self.ledgers.len() * 2).max(SWEEP_MIN);
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

    /// The timelines upgraded, to be dropped where no lock is held.
    fn into_upgraded(self) -> impl Iterator<Item = Arc<dyn FailTarget>> {
        self.read.into_iter().filter_map(|(t, _)| t)
    }
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    use super::*;
    use crate::timeline::Timeline;
    use crate::{AnyBackend, BackendKind};
    use std::time::Duration;

    /// The host backend, through the `Backend` trait (this layer names no concrete backend).
    fn host() -> AnyBackend {
        AnyBackend::new(BackendKind::Host).unwrap()
    }

    fn find(id: u64) -> Option<Arc<Ledger>> {
        with_ledger(id, false, |l| Ok(l.cloned()))
    }

    fn get(id: u64) -> Arc<Ledger> {
        with_ledger(id, true, |l| Ok(l.expect("made when asked").clone()))
    }

    fn sweep_now() {
        let mut dropped = Vec::new();
        lock_registry().sweep(&mut dropped);
    }

    fn unique_id() -> u64 {
        static NEXT: AtomicU64 = AtomicU64::new(1 << 61);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// The last handle's drop searches the ledgers (taking every ledger's lock, so taking
    /// biased ones away from their threads) only for a timeline some stream waited on.
    #[test]
    fn only_a_timeline_a_stream_waited_on_searches_the_ledgers_when_dropped() {
        let b = host();
        let s = b.new_stream("s").unwrap();
        let signalled = Timeline::new(&b, "signalled", 0).unwrap();
        signalled.signal_on(&s, 1).unwrap();
        signalled.signal(2).unwrap();
        assert!(signalled.wait(2, Duration::from_secs(5)).is_ok());
        assert!(
            !signalled.shared.last_handle_dropped(),
            "no stream waited on it"
        );
        let waited = Timeline::new(&b, "waited", 0).unwrap();
        waited.wait_on(&s, 5).unwrap();
        waited.signal(5).unwrap();
        assert!(waited.shared.last_handle_dropped(), "a stream waited on it");
        assert!(!waited.is_failed(), "nothing was pending");
    }

    #[test]
    fn a_lookup_sees_a_ledger_made_after_it_was_cached() {
        let id = unique_id();
        // Never reached (and alive to the end): a wait on it keeps the ledger through the
        // other tests' sweeps.
        let (_never_reached, target) = fake();
        assert!(find(id).is_none());
        assert!(find(id).is_none()); // from the cache
                                     // Made by another thread: this one's cache must not hide it.
        let made = std::thread::spawn(move || {
            let l = get(id);
            l.add_wait(&target, 1).unwrap();
            l
        })
        .join()
        .unwrap();
        let found = find(id).expect("the epoch moved: looked up again");
        assert!(Arc::ptr_eq(&made, &found));
        assert!(Arc::ptr_eq(&get(id), &made));
    }

    #[test]
    fn a_swept_idle_ledger_is_retired_and_its_stream_gets_a_new_one() {
        let id = unique_id();
        let old = get(id);
        sweep_now();
        let dead: Weak<dyn FailTarget> = Weak::<Fake>::new();
        assert!(old.add_wait(&dead, 1).is_err());
        assert!(matches!(old.add_signal(&dead, 1), Err(Refused::Retired)));
        assert!(!Arc::ptr_eq(&old, &get(id)));
    }

    #[test]
    fn a_sweep_keeps_ledgers_with_pending_waits_so_failures_still_spread() {
        let host = host();
        let s = host.new_stream("s").unwrap();
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

    #[test]
    fn a_signal_sees_the_poison_of_a_ledger_another_thread_made_after_this_one_looked() {
        let host = host();
        let s = host.new_stream("s").unwrap();
        let (a, b) = (
            Timeline::new(&host, "a", 0).unwrap(),
            Timeline::new(&host, "b", 0).unwrap(),
        );
        // This thread looks `s` up and caches "no ledger".
        b.signal_on(&s, 1).unwrap();
        // Another thread's wait makes the ledger (the epoch moves), then `a` fails.
        std::thread::scope(|scope| {
            scope.spawn(|| a.wait_on(&s, 1).unwrap()).join().unwrap();
        });
        a.fail(Error::Cancelled("upstream".into()));
        // The cached "no ledger" is stale: the signal must find the poisoned ledger.
        b.signal_on(&s, 2).unwrap();
        let err = b.wait(2, Duration::from_secs(5)).unwrap_err();
        assert!(err.to_string().contains("upstream"), "{err}");
    }

    /// A timeline for the ledger alone: its value is set by hand, and it counts the reads.
    struct Fake {
        value: AtomicU64,
        reads: AtomicU64,
    }

    impl FailTarget for Fake {
        fn reached_value(&self) -> u64 {
            self.reads.fetch_add(1, Ordering::Relaxed);
            self.value.load(Ordering::Relaxed)
        }
        fn mark_failed(&self, _: Arc<Error>) -> Option<Vec<Propagation>> {
            None
        }
        fn release(&self) {}
    }

    fn fake() -> (Arc<Fake>, Weak<dyn FailTarget>) {
        let t = Arc::new(Fake {
            value: AtomicU64::new(0),
            reads: AtomicU64::new(0),
        });
        let arc: Arc<dyn FailTarget> = t.clone();
        let weak = Arc::downgrade(&arc);
        (t, weak)
    }

    fn ledger() -> Ledger {
        Ledger {
            state: Lock::new(LedgerState::default()),
        }
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
