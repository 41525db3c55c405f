//! A timeline's shared state: the backend word, what the host knows about it (highest value
//! enqueued, failure), its parked host waiters, and the stream waits enqueued on it.

use std::sync::{Arc, Weak};

use super::propagate::{self, FailTarget, Ledger, Propagation};
use super::wait::Waiters;
use crate::backend::semaphore::{FAILED_BIT, MAX_VALUE};
use crate::backend::{Backend, Semaphore};
use crate::error::{Error, Result};
use crate::primitive::{AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};

/// A failure: why, and the last value reached before it.
#[derive(Clone)]
pub(crate) struct Failure {
    pub(crate) cause: Arc<Error>,
    pub(crate) value: u64,
}

/// A stream wait enqueued on this timeline, not yet known satisfied.
pub(crate) struct StreamWait {
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) value: u64,
    pub(crate) seq: u64,
}

pub(crate) struct State {
    /// The highest value signalled or enqueued (a signal must exceed it).
    pub(crate) last_enqueued: u64,
    pub(crate) failure: Option<Failure>,
    pub(crate) stream_waits: Vec<StreamWait>,
    /// Prune `stream_waits` when it grows to this length.
    prune_at: usize,
}

pub(crate) struct Shared<B: Backend> {
    pub(crate) backend: B,
    pub(crate) name: String,
    pub(crate) sem: B::Semaphore,
    pub(crate) state: Mutex<State>,
    /// Set once `state.failure` is (a fast path for the hot calls).
    pub(crate) failed: AtomicBool,
    /// The highest value the host has seen reached: a word may briefly read lower on CUDA while
    /// a stream's older write lands after a host signal (see the CUDA backend).
    pub(crate) floor: AtomicU64,
    pub(crate) waiters: Arc<Waiters>,
    /// This timeline as the ledgers see it (made once: cloning a `Weak` is one atomic add).
    pub(crate) target: Weak<dyn FailTarget>,
}

impl<B: Backend> Shared<B> {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn new(backend: &B, name: &str, initial: u64) -> Result<Arc<Self>> {
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
        Ok(Arc::new_cyclic(|me: &Weak<Shared<B>>| Shared {
            target: me.clone(),
            backend: backend.clone(),
            name: name.to_owned(),
            sem,
            state: Mutex::new(State {
                last_enqueued: initial,
                failure: None,
                stream_waits: Vec::new(),
                prune_at: 16,
            }),
            failed: AtomicBool::new(false),
            floor: AtomicU64::new(initial),
            waiters,
        }))
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
        self.failed.store(true, Ordering::Release);
        let waits = std::mem::take(&mut st.stream_waits);
        drop(st);
        Some(
            waits
                .into_iter()
                .filter(|w| w.value > value)
                .flat_map(|w| w.ledger.poison_from(w.seq, err.clone()))
                .collect(),
        )
    }

    /// Release the failed word and wake host waiters.
    fn release_word(&self) {
        let value = self.lock().failure.as_ref().map_or(0, |f| f.value);
        self.sem.fail(value);
        self.waiters.wake_all();
    }

    /// Record a stream wait (its ledger entry was just made), pruning satisfied ones.
    pub(crate) fn add_stream_wait(st: &mut State, current: u64, wait: StreamWait) {
        if st.stream_waits.len() >= st.prune_at {
            st.stream_waits.retain(|w| w.value > current);
            st.prune_at = (st.stream_waits.len() * 2).max(16);
        }
        st.stream_waits.push(wait);
    }

    /// Stream waits for values above the current one.
    pub(crate) fn pending_stream_waits(&self, st: &State) -> usize {
        let current = match self.sem.load() {
            Ok(w) if w & FAILED_BIT == 0 => w,
            _ => return 0,
        };
        st.stream_waits.iter().filter(|w| w.value > current).count()
    }
}

impl<B: Backend> FailTarget for Shared<B> {
    fn reached(&self, value: u64) -> bool {
        match self.sem.load() {
            Ok(w) if w & FAILED_BIT == 0 => w.max(self.floor.load(Ordering::Acquire)) >= value,
            Ok(w) => w & MAX_VALUE >= value,
            Err(_) => false,
        }
    }

    fn mark_failed(&self, cause: Arc<Error>) -> Option<Vec<Propagation>> {
        self.mark(cause, None)
    }

    fn release(&self) {
        self.release_word()
    }
}

impl<B: Backend> Drop for Shared<B> {
    fn drop(&mut self) {
        let st = self.lock();
        let pending = self.pending_stream_waits(&st);
        let value = st.last_enqueued;
        let failed = st.failure.is_some();
        drop(st);
        if pending > 0 && !failed {
            let cause = Error::TimelineDropped {
                timeline: self.name.clone(),
                value: self.floor.load(Ordering::Acquire).min(value),
                pending,
            };
            self.fail(cause, None);
        }
    }
}

pub(crate) fn out_of_range(name: &str, got: u64) -> Error {
    Error::ValueOutOfRange {
        timeline: name.to_owned(),
        got,
        max: MAX_VALUE,
    }
}
