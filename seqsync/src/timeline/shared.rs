//! A timeline's shared state: the backend word, what the host knows about it (highest value
//! enqueued, failure), its parked host waiters, and the stream waits enqueued on it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::propagate::{self, FailTarget, Propagation};
use super::wait::Waiters;
use crate::backend::semaphore::{FAILED_BIT, MAX_VALUE};
use crate::backend::{Backend, Semaphore};
use crate::error::{Error, Result};
use crate::lock::{Guard, Lock};
use crate::primitive::{AtomicBool, AtomicU64, Ordering};

/// A failure: why, and the last value reached before it.
#[derive(Clone)]
pub(crate) struct Failure {
    pub(crate) cause: Arc<Error>,
    pub(crate) value: u64,
}

#[repr(C)]
pub(crate) struct State {
    /// The highest value signalled or enqueued (a signal must exceed it).
    pub(crate) last_enqueued: u64,
    pub(crate) failure: Option<Failure>,
}

/// `repr(C, align(64))`: what an ordered `signal_on` + `wait_on` reads lies in two cache lines
/// (the lock, the state, the flags, the floor and the word's address in the first; the
/// semaphore's handle, `target` and `last_free` in the second). Every cache line an enqueue
/// touches costs
/// (BENCHMARKS.md §5, "Cache lines, not locks").
#[repr(C, align(64))]
pub(crate) struct Shared<B: Backend> {
    /// The crate's short-section lock (`lock/`): `signal_on` holds it from admission to the
    /// backend's enqueue.
    pub(crate) state: Lock<State>,
    /// Set once `state.failure` is (a fast path for the hot calls).
    pub(crate) failed: AtomicBool,
    /// A stream wait on it was ever added to a ledger. While not, the last handle's drop need
    /// not search the ledgers (a search takes every ledger's lock: a lock biased to another
    /// thread is taken away from it). Set through a handle, read by the last handle's drop,
    /// whose acquire decrement of `handles` sees it.
    pub(crate) stream_waited: std::sync::atomic::AtomicBool,
    /// The highest value the host has seen reached: a word may briefly read lower on CUDA while
    /// a stream's older write lands after a host signal (see the CUDA backend).
    pub(crate) floor: AtomicU64,
    pub(crate) sem: B::Semaphore,
    /// This timeline as the ledgers see it (made once: cloning a `Weak` is one atomic add).
    pub(crate) target: Weak<dyn FailTarget>,
    /// The highest value enqueued in a signal that no ledger kept (no wait listed ahead of it
    /// on its stream), so that no wait of this timeline holds it: what a dropped timeline
    /// counts on ([`Shared::reachable`]). Written under the lock, by `signal_on`: beside
    /// `target`, which that call reads anyway.
    pub(crate) last_free: std::sync::atomic::AtomicU64,
    pub(crate) backend: B,
    pub(crate) name: String,
    pub(crate) waiters: Arc<Waiters>,
    /// `Timeline` handles alive: the last one to go fails the timeline if streams still wait
    /// on it (while this is alive, so the ledgers' entries for it are still found).
    pub(crate) handles: std::sync::atomic::AtomicUsize,
}

impl<B: Backend> Shared<B> {
    /// The layout the `repr(C, align(64))` comment on [`Shared`] claims: the lock, the state,
    /// the flags and the floor lie in the first cache line, the semaphore starts in it, and
    /// `target` lies in the second. Evaluated for every backend a build makes timelines on
    /// (`new` names it), so a layout that breaks the claim does not compile. Not under loom,
    /// whose lock and atomics are larger.
    #[cfg(not(seqsync_loom))]
    const LINES: () = {
        use std::mem::{offset_of, size_of};
        assert!(offset_of!(Self, state) + size_of::<Lock<State>>() <= 64);
        assert!(offset_of!(Self, failed) < 64 && offset_of!(Self, stream_waited) < 64);
        assert!(offset_of!(Self, floor) + size_of::<AtomicU64>() <= 64);
        assert!(offset_of!(Self, sem) < 64);
        assert!(offset_of!(Self, target) >= 64);
        assert!(offset_of!(Self, target) + size_of::<Weak<dyn FailTarget>>() <= 128);
        assert!(offset_of!(Self, last_free) + size_of::<AtomicU64>() <= 128);
    };

    /// A panic under the lock (a backend call) leaves `last_enqueued` at most one signal
    /// behind or ahead: a later signal of that value is refused or let through, as it would
    /// be without the panic.
    pub(crate) fn lock(&self) -> Guard<'_, State> {
        self.state.lock()
    }

    pub(crate) fn new(backend: &B, name: &str, initial: u64) -> Result<Arc<Self>> {
        #[cfg(not(seqsync_loom))]
        let () = Self::LINES;
        if initial > MAX_VALUE {
            return Err(out_of_range(name, initial));
        }
        let waiters = Arc::new(Waiters::new());
        let w = Arc::downgrade(&waiters);
        let sem = backend.create_semaphore(
            initial,
            Arc::new(move || {
                if let Some(w) = w.upgrade() {
                    w.wake_all();
                }
            }),
        )?;
        let shared = Arc::new_cyclic(|me: &Weak<Shared<B>>| Shared {
            target: me.clone(),
            handles: std::sync::atomic::AtomicUsize::new(1),
            last_free: std::sync::atomic::AtomicU64::new(initial),
            stream_waited: std::sync::atomic::AtomicBool::new(false),
            backend: backend.clone(),
            name: name.to_owned(),
            sem,
            state: Lock::new(State {
                last_enqueued: initial,
                failure: None,
            }),
            failed: AtomicBool::new(false),
            floor: AtomicU64::new(initial),
            waiters,
        });
        // A stream's failure that the backend finds (a host closure panicked before a signal
        // of this timeline) fails the timeline as `fail` does: marked and spread before the
        // word releases any stream wait.
        let me = Arc::downgrade(&shared);
        shared.sem.on_stream_failure(Arc::new(move |cause, last| {
            // Failed now (marked, spread, then the word released), or marked already by a
            // failure whose thread releases the word once it has spread.
            me.upgrade()
                .map(|s| s.fail(cause, Some(last & MAX_VALUE)))
                .is_some()
        }));
        Ok(shared)
    }

    pub(crate) fn failed_error(&self, f: &Failure) -> Error {
        Error::TimelineFailed {
            timeline: self.name.clone(),
            value: f.value,
            cause: f.cause.clone(),
        }
    }

    /// The value now, or the failure. Adopts a failure the backend found on its own (a failed
    /// stream that signals it, a faulted CUDA context).
    pub(crate) fn observe(self: &Arc<Self>) -> Result<u64> {
        if self.failed.load(Ordering::Acquire) {
            return Err(self.current_failure());
        }
        match self.sem.load() {
            Ok(word) if word & FAILED_BIT == 0 => {
                // Raise the floor only when the word is above it: most loads are not, and a
                // load costs less than a read-modify-write.
                let floor = self.floor.load(Ordering::Acquire);
                if word > floor {
                    self.floor.fetch_max(word, Ordering::AcqRel);
                }
                Ok(floor.max(word))
            }
            Ok(word) => {
                // Failed by the host (then `failure` is set under the lock before the word) or
                // by the backend.
                let cause = self.sem.failure().unwrap_or_else(|| {
                    Error::Cancelled("the backend failed the timeline's word".into())
                });
                self.fail(cause, Some(word & MAX_VALUE));
                Err(self.current_failure())
            }
            Err(e) => {
                self.fail(e, None);
                Err(self.current_failure())
            }
        }
    }

    /// May `v` be signalled now (by the host or enqueued)? Not on a failed timeline, nor if it
    /// does not exceed every value signalled or enqueued so far.
    pub(crate) fn admit(&self, st: &State, v: u64) -> Result<()> {
        if let Some(f) = &st.failure {
            return Err(self.failed_error(f));
        }
        if v <= st.last_enqueued {
            return Err(Error::NonMonotonic {
                timeline: self.name.clone(),
                current: st.last_enqueued,
                got: v,
            });
        }
        Ok(())
    }

    /// As [`Shared::observe`], from what the backend knows without asking the device
    /// ([`Semaphore::peek`]): possibly lower than `observe`, never higher. For `wait_on`'s "is
    /// a wait needed at all?", where a low answer only costs a wait that is released at once.
    pub(crate) fn observe_known(self: &Arc<Self>) -> Result<u64> {
        if self.failed.load(Ordering::Acquire) {
            return Err(self.current_failure());
        }
        match self.sem.peek() {
            Some(word) if word & FAILED_BIT == 0 => {
                Ok(word.max(self.floor.load(Ordering::Acquire)))
            }
            _ => self.observe(),
        }
    }

    fn current_failure(&self) -> Error {
        let st = self.lock();
        let f = st
            .failure
            .as_ref()
            .expect("failed flag set without a failure");
        self.failed_error(f)
    }

    /// Fail the timeline (ignored if it already failed), then spread the failure: every
    /// failure of the chain is marked before any word is released.
    pub(crate) fn fail(&self, cause: Error, last_value: Option<u64>) {
        if let Some(more) = self.mark(Arc::new(cause), last_value) {
            propagate::apply(more);
            self.release_word();
        }
    }

    /// Mark the timeline failed (host side); `None` if it had failed already, else the
    /// failures it causes downstream.
    fn mark(&self, cause: Arc<Error>, last_value: Option<u64>) -> Option<Vec<Propagation>> {
        let mut st = self.lock();
        if st.failure.is_some() {
            return None;
        }
        let value = last_value.unwrap_or_else(|| match self.sem.load() {
            Ok(w) if w & FAILED_BIT == 0 => w.max(self.floor.load(Ordering::Acquire)),
            Ok(w) => w & MAX_VALUE,
            Err(_) => self.floor.load(Ordering::Acquire),
        });
        let failure = Failure {
            cause: cause.clone(),
            value,
        };
        let err = Arc::new(self.failed_error(&failure));
        st.failure = Some(failure);
        // Marked before the ledgers are searched: a `wait_on` adds its entry, then looks at
        // this flag, so either the search finds the entry or the `wait_on` sees the flag.
        self.failed.store(true, Ordering::Release);
        drop(st);
        Some(
            propagate::waits_on(self.id(), value)
                .into_iter()
                .flat_map(|(ledger, seq)| ledger.poison_from(seq, err.clone()))
                .collect(),
        )
    }

    /// This timeline's identity in the ledgers (the address its `Weak`s point to).
    fn id(&self) -> *const () {
        self as *const Self as *const ()
    }

    /// Release the failed word and wake host waiters.
    fn release_word(&self) {
        let value = self.lock().failure.as_ref().map_or(0, |f| f.value);
        self.sem.fail(value);
        self.waiters.wake_all();
    }
}

impl<B: Backend> FailTarget for Shared<B> {
    fn reached_value(&self) -> u64 {
        match self.sem.load() {
            Ok(w) if w & FAILED_BIT == 0 => w.max(self.floor.load(Ordering::Acquire)),
            Ok(w) => w & MAX_VALUE,
            Err(_) => 0,
        }
    }

    fn mark_failed(&self, cause: Arc<Error>) -> Option<Vec<Propagation>> {
        self.mark(cause, None)
    }

    fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    fn release(&self) {
        self.release_word()
    }
}

impl<B: Backend> Shared<B> {
    /// The last `Timeline` handle is going. Values whose signal is enqueued arrive: if some are
    /// still in flight the timeline is kept alive until they land ([`super::drain`]); then
    /// (or at once) the stream waits on it for values nothing enqueued reaches fail it, so
    /// that they go on. Returns whether it looked at the ledgers.
    pub(crate) fn last_handle_dropped(self: &Arc<Self>) -> bool {
        if !self
            .stream_waited
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return false;
        }
        if !self.settle_dropped(None, true) {
            super::drain::keep(self.clone());
        }
        true
    }

    /// After the last handle went: `false` while signals enqueued are still in flight (unless
    /// they are stuck, by `still`'s stall, and streams wait for values above every signal
    /// enqueued: then it fails, see [`super::drain`]); else fail the timeline if streams wait on it for values above the
    /// last one enqueued (no signal can come any more), and `true`.
    fn settle_dropped(&self, still: Option<Duration>, look: bool) -> bool {
        let st = self.lock();
        let (last, failed) = (st.last_enqueued, st.failure.is_some());
        drop(st);
        if failed {
            return true;
        }
        let current = match self.sem.load() {
            Ok(w) if w & FAILED_BIT == 0 => w.max(self.floor.load(Ordering::Acquire)),
            // Failed by the backend: the failure releases its waits.
            _ => return true,
        };
        // Stuck for good: stalled, with waits above everything enqueued, and no signal left
        // that only its stream's own work holds (that one lands: waited for up to
        // `SLOW_WORK`).
        let stuck = still.is_some_and(|d| {
            !propagate::waits_on(self.id(), last).is_empty()
                && (d >= super::drain::SLOW_WORK || !self.held_by_work_only(current))
        });
        if current < last && !stuck {
            // Signals in flight land, unless a wait of this timeline ahead of them on their
            // stream holds them and nothing else reaches it: then only what can land is
            // waited for, and the waits left fail below. Looked for at the drop and while the
            // value stands still (`look`), and only while a signal no ledger kept (which
            // lands) does not reach the last value.
            let free = self.last_free.load(std::sync::atomic::Ordering::Relaxed);
            if !look || free >= last || current < free {
                return false;
            }
            // (The value read again after the search: a signal that landed meanwhile may have
            // been pruned from its ledger.)
            let reach = self.reachable(current).max(self.reached_value());
            if reach >= last || current < reach {
                return false;
            }
        }
        let pending = propagate::waits_on(self.id(), current).len();
        if pending > 0 {
            let cause = Error::TimelineDropped {
                timeline: self.name.clone(),
                value: current,
                pending,
            };
            self.fail(cause, None);
        }
        true
    }

    /// Is a signal still in flight above `current` held by its stream's own work only: one no
    /// ledger kept (its stream had no open timeline wait), or one with no open wait of any
    /// timeline ahead of it on its stream? Such a signal lands once that work ends.
    fn held_by_work_only(&self, current: u64) -> bool {
        self.last_free.load(std::sync::atomic::Ordering::Relaxed) > current
            || propagate::signals_past_open_waits(self.id(), current) > current
    }

    /// The highest value the signals enqueued so far bring the timeline to from `current`
    /// without waiting on it any further: those with no wait of this timeline above `current`
    /// ahead of them on their stream (as far as this timeline goes: waits on others are
    /// theirs to settle). A signal behind such a wait lands only if these reach it, which the
    /// next look sees (its wait is then at or below `current`); if `current` stands at this
    /// value and such waits are left, what they hold never lands.
    fn reachable(&self, current: u64) -> u64 {
        current
            .max(self.last_free.load(std::sync::atomic::Ordering::Relaxed))
            .max(propagate::signals_before_own_waits(self.id(), current))
    }
}

impl<B: Backend> super::drain::Draining for Shared<B> {
    fn settle(&self, still: Option<Duration>, look: bool) -> bool {
        self.settle_dropped(still, look)
    }

    fn progress(&self) -> u64 {
        self.reached_value()
    }
}

pub(crate) fn out_of_range(name: &str, got: u64) -> Error {
    Error::ValueOutOfRange {
        timeline: name.to_owned(),
        got,
        max: MAX_VALUE,
    }
}
