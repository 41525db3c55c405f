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
//! ledger in place (`registry.rs`), so it takes no reference either.
//!
//! # Entries cost no reference count
//!
//! An entry names its timeline by address; the ledger keeps one `Weak` per timeline its
//! entries name (which keeps the address from being reused), cloned when a timeline first
//! appears and dropped by the prune after its last entry. The ledger's lock is the crate's
//! short-section lock, biased to the thread that enqueues on the stream (`lock/`). A wait right
//! after a wait on the same timeline joins its entry (see `Ledger::add_wait`). So an ordered
//! `wait_on` costs the ledger two plain stores, a load and a push (or an update in place).
//!
//! | file | what it is |
//! |---|---|
//! | `mod.rs` | the rule: what a failure fails ([`apply`], [`is_poisoned`], [`waits_on`]) |
//! | `ledger.rs` | one stream's ledger: its waits, signals and poison, pruned as values land |
//! | `registry.rs` | every stream's ledger by stream id, and each thread's cache of lookups |

use std::sync::Arc;

use crate::error::Error;

mod ledger;
mod registry;
#[cfg(all(test, not(seqsync_loom)))]
mod tests;

pub(crate) use ledger::{Ledger, MarkState, Refused, Retired};
pub(crate) use registry::{
    look_up, signals_before_own_waits, signals_past_open_waits, waits_on, with_cached_ledger,
    with_ledger,
};

/// What the ledger needs of a timeline (object-safe, so one ledger serves every backend).
pub(crate) trait FailTarget: Send + Sync {
    /// The highest value the timeline reached successfully (a failed timeline: the value it
    /// reached before failing; a word that cannot be read: 0). A wait for `v` or a signal of
    /// `v` is resolved once this is `>= v`.
    fn reached_value(&self) -> u64;
    /// Has it failed? A signal of a failed timeline never lands and fails nothing more (for
    /// retiring an idle ledger). Default: no.
    fn is_failed(&self) -> bool {
        false
    }
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

/// A place on a stream: the timeline waits enqueued there before it (see [`stream_mark`]).
#[derive(Clone)]
pub(crate) struct StreamMark {
    ledger: Arc<Ledger>,
    to: u64,
}

impl StreamMark {
    /// Where those waits stand now (a lock of the stream's ledger and a read of each timeline
    /// it names; never blocks).
    pub(crate) fn state(&self) -> MarkState {
        self.ledger.settled_before(self.to)
    }

    /// As [`state`](Self::state), for the waits enqueued after mark `since` only (an earlier
    /// mark of the same stream): a failure that released a wait before it does not count.
    /// `None`, or a mark of a ledger since retired (everything listed now came after it):
    /// every wait before this mark counts.
    pub(crate) fn state_since(&self, since: Option<&StreamMark>) -> MarkState {
        match since {
            Some(m) if Arc::ptr_eq(&m.ledger, &self.ledger) => {
                self.ledger.settled_between(m.to, self.to)
            }
            _ => self.state(),
        }
    }
}

/// A mark at stream `stream_id`'s current place, if a timeline wait enqueued on it so far may
/// still be released by a failure (`None`: none can; the stream never waited on a timeline,
/// or its waits were reached and pruned). Work enqueued after the mark runs after what those
/// waits stand for only once [`StreamMark::state`] says they were reached.
pub(crate) fn stream_mark(stream_id: u64) -> Option<StreamMark> {
    with_ledger(stream_id, false, |l| match l {
        None => Ok(None),
        Some(l) => Ok(l.mark()?.map(|to| StreamMark {
            ledger: l.clone(),
            to,
        })),
    })
}

/// Is stream `stream_id` poisoned (a wait on it was released by a failure, so the timelines
/// it signals from now on fail)?
pub(crate) fn is_poisoned(stream_id: u64) -> bool {
    with_ledger(stream_id, false, |l| match l {
        None => Ok(false),
        Some(l) => l.is_poisoned(),
    })
}
