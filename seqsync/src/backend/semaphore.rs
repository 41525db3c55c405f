//! What a [timeline](crate::timeline) needs of a backend: a 64-bit *semaphore word* that the
//! host and streams write and wait on.
//!
//! The word holds the timeline's value, `< 2^63`. A word with bit 63 set ([`FAILED_BIT`]) means
//! the timeline failed; the low bits then keep the last value reached before the failure. Every
//! wait for a value above that is released by the failure, so nothing waits forever on a failed
//! timeline: on CUDA the word is compared with `cuStreamWaitValue64`'s `GEQ` (a cyclic compare,
//! `(int64)(word - v) >= 0`), which holds for `word = 2^63 | c` and every `c < v < 2^63`.
//!
//! The word is only the mechanism. Which value may be signalled, who failed it and why, and how
//! a failure spreads to other timelines is the timeline layer's business.

use std::sync::Arc;

use crate::error::{Error, Result};

/// Bit 63 of a semaphore word: the timeline failed. Values at or above it are reserved.
pub const FAILED_BIT: u64 = 1 << 63;

/// The largest value a timeline can take (`2^63 - 1`).
pub const MAX_VALUE: u64 = FAILED_BIT - 1;

/// The word of a timeline that failed when its value was `last_value`.
pub const fn failed_word(last_value: u64) -> u64 {
    FAILED_BIT | (last_value & MAX_VALUE)
}

/// Called by the backend after a stream wrote the word, so that parked host waiters can look
/// again. Backends whose streams cannot call back (CUDA: the GPU writes the word) never call it;
/// host waiters poll them instead (see [`Semaphore::notifies`]).
pub type SemaphoreWaker = Arc<dyn Fn() + Send + Sync>;

/// Called by the backend, on the stream that found it, when a stream that signals the word had
/// failed before the signal (a host closure panicked): the failure and the value the word had
/// then. The timeline fails itself from it, spreading the failure before the word releases any
/// stream wait (see [`Semaphore::on_stream_failure`]); `true` when the timeline takes care of
/// failing the word (it did, or a failure under way elsewhere will), `false` when the backend
/// must (the timeline is gone).
pub type StreamFailureHook = Arc<dyn Fn(Error, u64) -> bool + Send + Sync>;

/// How a backend implements timelines: see [`crate::timeline::Timeline::mechanism`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mechanism {
    /// The host backend: an atomic word; stream operations on the worker threads write it and
    /// wait on it, and wake parked host waiters.
    HostWord,
    /// CUDA events for waits whose signal is already enqueued, and stream memory operations
    /// (on a word as in [`Mechanism::MemOps`]) only for waits enqueued before their
    /// signal: those wait on the device, so everything enqueued after them on the stream waits
    /// too. A host query is a load of the word and, while signals are pending, an event query.
    /// Limit: a failure releases an event wait only once the signal's stream gets there
    /// ([`Mechanism::releases_every_wait_on_failure`] is false).
    Hybrid,
    /// CUDA stream memory operations: `cuStreamWriteValue64` / `cuStreamWaitValue64` on a word
    /// in pinned, device-mapped host memory; a host query is a load of that word. The CUDA
    /// default.
    MemOps,
    /// CUDA events, one per signalled value; a wait whose signal is not enqueued yet is refused
    /// ([`crate::Error::WaitBeforeSignalUnsupported`]: nothing on the device could hold the
    /// kernels and copies enqueued after it). Limits: see
    /// [`Mechanism::holds_commands`] and [`Mechanism::releases_every_wait_on_failure`].
    Events {
        /// Why stream memory operations are not used (`None` when events were asked for).
        fallback_reason: Option<String>,
    },
}

impl Mechanism {
    /// Does a stream wait enqueued before its signal hold *every* later operation of the
    /// stream (commands too)? False for [`Mechanism::Events`], which refuses such a wait.
    pub fn holds_commands(&self) -> bool {
        !matches!(self, Mechanism::Events { .. })
    }

    /// Does a failure release *every* stream wait on the timeline at once, also a wait whose
    /// signal is enqueued on a stream that is stuck before it? True where every wait is on the
    /// word (the host word, stream memory operations); false where a wait whose signal is
    /// enqueued is a CUDA event wait ([`Mechanism::Hybrid`], [`Mechanism::Events`]): CUDA
    /// cannot release an event wait early, so such a wait goes on only when the signal's
    /// stream gets there (everything it signals afterwards still fails).
    pub fn releases_every_wait_on_failure(&self) -> bool {
        matches!(self, Mechanism::HostWord | Mechanism::MemOps)
    }

    /// A short name: `"host-word"`, `"hybrid"`, `"memops"` or `"events"`.
    pub fn name(&self) -> &'static str {
        match self {
            Mechanism::HostWord => "host-word",
            Mechanism::Hybrid => "hybrid",
            Mechanism::MemOps => "memops",
            Mechanism::Events { .. } => "events",
        }
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mechanism::Events {
                fallback_reason: Some(why),
            } => write!(f, "events (stream memory operations unusable: {why})"),
            m => f.write_str(m.name()),
        }
    }
}

/// A backend's semaphore word: 63 bits of value, the top bit set when the timeline failed.
///
/// Every call may be made from any thread.
pub trait Semaphore: Send + Sync + 'static {
    /// The word as the host sees it now (a value, or a word with [`FAILED_BIT`] set). Never
    /// blocks.
    ///
    /// # Errors
    /// A backend error (for CUDA: the context failed, e.g. a kernel faulted), meaning the word
    /// will never change again.
    fn load(&self) -> Result<u64>;

    /// The word as far as the host knows it without asking the device: never higher than
    /// [`Semaphore::load`] would return, possibly lower (CUDA events: the highest value known
    /// reached, without a `cuEventQuery`). `None` when only `load` can tell. For checks on hot
    /// paths (is a stream wait needed at all?) where a low answer only costs a wait.
    fn peek(&self) -> Option<u64> {
        self.load().ok()
    }

    /// Host signal: the word becomes `value` (the caller checked that it grows), and streams
    /// waiting for any value `<= value` are released.
    fn store(&self, value: u64) -> Result<()>;

    /// Mark the word failed ([`failed_word`]): every stream wait on it is released, and writes
    /// still pending on streams do not undo it (see the backend's docs for how).
    fn fail(&self, last_value: u64);

    /// Why the backend failed the word itself (a stream that signals it failed), if it did.
    fn failure(&self) -> Option<Error>;

    /// Where a backend whose streams find their own failures (the host backend: a stream whose
    /// closure panicked reaches a signal) reports them: `hook` runs before the word is failed,
    /// so that the timeline marks the failure and poisons the streams that wait on it before
    /// the failed word releases their waits (else the work after those waits would run and
    /// signal as if nothing had failed). The backend fails the word itself only where `hook`
    /// says the timeline does not.
    /// Backends that cannot call back (CUDA: the device finds the fault) ignore it: their
    /// failures are found by [`Semaphore::load`] and [`Semaphore::check`].
    fn on_stream_failure(&self, hook: StreamFailureHook) {
        let _ = hook;
    }

    /// Called by host waits while the word is below what they wait for: an error means it will
    /// never get there (CUDA: a stream that should write it failed). Rate-limited by the
    /// backend; the default finds nothing.
    fn check(&self) -> Result<()> {
        Ok(())
    }

    /// Does the backend call the [`SemaphoreWaker`] after every stream write? When false, host
    /// waiters poll [`Semaphore::load`].
    fn notifies(&self) -> bool;

    /// How this word is implemented.
    fn mechanism(&self) -> Mechanism;

    /// Would a stream wait for `value` enqueued now hold *every* later operation of its stream,
    /// commands too? Always where the mechanism [holds commands](Mechanism::holds_commands);
    /// with CUDA `events` only once the point of a signal at or above `value` exists on the
    /// device, or the value is reached, or the word failed. A word that wraps another forwards
    /// it (the default answers for the whole mechanism).
    fn holds_commands_for(&self, value: u64) -> bool {
        let _ = value;
        self.mechanism().holds_commands()
    }
}
