//! Every stream's ledger, by stream id, in one process-wide map; and each thread's cache of its
//! recent lookups, valid while the map's epoch has not moved (see the [parent module](super)).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
#[cfg(not(seqsync_loom))]
use std::sync::OnceLock;

use super::ledger::{Ledger, Retired};
use super::FailTarget;
use crate::primitive::{AtomicU64, Mutex, MutexGuard};

pub(super) struct Registry {
    ledgers: HashMap<u64, Arc<Ledger>>,
    /// Sweep idle ledgers when the map grows to this size.
    sweep_at: usize,
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
    LEDGERS.get_or_init(|| {
        // From the first ledger on, a stream that goes has its ledger forgotten (retired once
        // settled): a poisoned stream's, which no sweep retires, would stay for good.
        crate::backend::on_stream_gone(forget);
        Mutex::new(new_registry())
    })
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

pub(super) fn lock_registry() -> MutexGuard<'static, Registry> {
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
                let l = Arc::new(Ledger::new());
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
}

/// Stream `stream_id` is gone, with nothing left to run on it: drop its ledger from the
/// registry, poisoned or not (a sweep never retires a poisoned ledger, since the stream would
/// fail what it signals next; with the stream gone, nothing is signalled), unless an entry
/// listed there can still matter (a wait not reached, a signal not landed: work enqueued
/// there that its owner did not know of). Marks that hold the ledger keep it.
pub(crate) fn forget(stream_id: u64) {
    let mut reg = lock_registry();
    let Some(l) = reg.ledgers.get(&stream_id).cloned() else {
        return;
    };
    let mut dropped = Vec::new();
    // The epoch moves before the mark: whoever sees the mark sees the move.
    EPOCH.fetch_add(1, Ordering::Release);
    // Not settled yet: marked gone, for a later sweep to retire once it is.
    if l.retire_if_settled(&mut dropped) {
        reg.ledgers.remove(&stream_id);
    }
    drop(reg);
    drop(dropped);
}

impl Registry {
    /// Remove the idle ledgers (no poison, every wait satisfied), marking them retired; the
    /// timelines looked at go to `dropped`, to be dropped outside the locks.
    pub(super) fn sweep(&mut self, dropped: &mut Vec<Arc<dyn FailTarget>>) {
        // The epoch moves before any ledger is marked: whoever sees a mark sees the move.
        EPOCH.fetch_add(1, Ordering::Release);
        self.ledgers.retain(|_, l| !l.retire_if_idle(dropped));
        self.sweep_at = (self.ledgers.len() * 2).max(SWEEP_MIN);
    }
}

/// Over every stream, the highest value above `above` that a listed signal of the timeline
/// whose `Weak`s point to `timeline` brings it to with no wait of it above `above` ahead on
/// its stream (0: none; see `Ledger::signals_before_own_wait`).
pub(crate) fn signals_before_own_waits(timeline: *const (), above: u64) -> u64 {
    let reg = lock_registry();
    reg.ledgers
        .values()
        .map(|l| l.signals_before_own_wait(timeline, above))
        .max()
        .unwrap_or(0)
}

/// Over every stream, the highest value above `above` that a listed signal of the timeline
/// whose `Weak`s point to `timeline` brings it to with no open wait (of any timeline) ahead of
/// it on its stream (0: none; see `Ledger::signals_past_open_waits`).
pub(crate) fn signals_past_open_waits(timeline: *const (), above: u64) -> u64 {
    let mut dropped = Vec::new();
    let reach = {
        let reg = lock_registry();
        reg.ledgers
            .values()
            .map(|l| l.signals_past_open_waits(timeline, above, &mut dropped))
            .max()
            .unwrap_or(0)
    };
    // Outside the registry's lock: a timeline dropped here may settle others.
    drop(dropped);
    reach
}

/// The waits enqueued on any stream for values above `above` of the timeline whose `Weak`s
/// point to `timeline`, not yet pruned (a run of waits with nothing between them is one entry):
/// their ledgers and sequence numbers. A failure poisons their streams from there; a timeline
/// dropped with some fails first.
pub(crate) fn waits_on(timeline: *const (), above: u64) -> Vec<(Arc<Ledger>, u64)> {
    let reg = lock_registry();
    let mut found = Vec::new();
    for ledger in reg.ledgers.values() {
        found.extend(
            ledger
                .waits_above(timeline, above)
                .into_iter()
                .map(|seq| (ledger.clone(), seq)),
        );
    }
    found
}
