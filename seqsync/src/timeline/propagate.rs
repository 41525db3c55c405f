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
//! A poisoned stream stays poisoned (like a CUDA stream after a fault, or a host stream after a
//! panic): use a new stream after a failure.

use std::collections::{HashMap, VecDeque};
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
}

/// One stream's waits and signals (see the [module docs](self)).
pub(crate) struct Ledger {
    stream_id: u64,
    state: Mutex<LedgerState>,
}

fn registry() -> &'static Mutex<HashMap<u64, Arc<Ledger>>> {
    static LEDGERS: OnceLock<Mutex<HashMap<u64, Arc<Ledger>>>> = OnceLock::new();
    LEDGERS.get_or_init(Default::default)
}

impl Ledger {
    /// The ledger of stream `stream_id`, if it has one.
    pub(crate) fn find(stream_id: u64) -> Option<Arc<Ledger>> {
        registry()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&stream_id)
            .cloned()
    }

    /// The ledger of stream `stream_id`, made if needed.
    pub(crate) fn get(stream_id: u64) -> Arc<Ledger> {
        registry()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(stream_id)
            .or_insert_with(|| {
                Arc::new(Ledger {
                    stream_id,
                    state: Mutex::new(LedgerState::default()),
                })
            })
            .clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A wait for `value` of `timeline` is being enqueued: returns its sequence number.
    pub(crate) fn add_wait(&self, timeline: Weak<dyn FailTarget>, value: u64) -> u64 {
        let mut st = self.lock();
        let seq = st.next_seq;
        st.next_seq += 1;
        st.prune_waits();
        st.waits.push(PendingWait { timeline, value });
        seq
    }

    /// A signal of `timeline` is being enqueued. `Err(cause)`: the stream is poisoned, fail the
    /// timeline instead.
    pub(crate) fn add_signal(
        &self,
        timeline: Weak<dyn FailTarget>,
        value: u64,
    ) -> Result<(), Arc<Error>> {
        let mut st = self.lock();
        if let Some((_, cause)) = &st.poison {
            return Err(cause.clone());
        }
        let seq = st.next_seq;
        st.next_seq += 1;
        st.prune_waits();
        // A signal after only satisfied waits can never be poisoned: no need to keep it.
        if !st.waits.is_empty() {
            st.prune_signals();
            st.signals.push_back(PendingSignal {
                seq,
                timeline,
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

    /// Forget this ledger if it holds nothing worth keeping (no poison, nothing pending; pruned
    /// amortized, so a ledger may stay a while after its last wait resolved).
    pub(crate) fn release_if_idle(self: &Arc<Self>) {
        let mut reg = registry().lock().unwrap_or_else(|e| e.into_inner());
        let mut st = self.lock();
        st.prune_waits();
        if st.waits.is_empty() {
            st.signals.clear();
        }
        if st.poison.is_none() && st.waits.is_empty() {
            if let Some(l) = reg.get(&self.stream_id) {
                if Arc::ptr_eq(l, self) {
                    reg.remove(&self.stream_id);
                }
            }
        }
    }
}

impl LedgerState {
    fn prune_waits(&mut self) {
        if self.waits.len() >= self.prune_waits_at {
            self.waits.retain(|w| !is_resolved(w));
            self.prune_waits_at = (self.waits.len() * 2).max(8);
        }
    }

    fn prune_signals(&mut self) {
        if self.signals.len() >= self.prune_signals_at {
            // A signal that landed can no longer be failed by the stream's waits.
            self.signals
                .retain(|s| s.timeline.upgrade().is_some_and(|t| !t.reached(s.value)));
            self.prune_signals_at = (self.signals.len() * 2).max(8);
        }
    }
}

fn is_resolved(w: &PendingWait) -> bool {
    // A dropped timeline was failed first if the wait was pending, which poisoned the stream;
    // so a wait on a dropped timeline is resolved either way.
    w.timeline.upgrade().is_none_or(|t| t.reached(w.value))
}
