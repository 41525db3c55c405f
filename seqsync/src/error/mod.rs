//! The one error type of seqsync.
//!
//! Every variant names the ring it comes from and the numbers involved, so that the message
//! alone tells which call was wrong. Errors are `Clone + Send + Sync + 'static`: a stopped ring
//! hands the same first error to every thread that calls it afterwards.

mod plan;

pub use plan::PlanError;

use std::fmt;
use std::sync::Arc;

/// Result alias used throughout seqsync.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in seqsync.
///
/// The variants are the rows of the `EventRingbuf` contract (see [`crate::EventRingbuf`]) plus
/// the two ways a backend can fail: no device at all, or a failing backend call.
///
/// ```
/// use seqsync::{Blocking, Error, EventRingbuf, HostBackend};
///
/// let host = HostBackend::new();
/// let stream = host.new_stream("s")?;
/// let ring = EventRingbuf::new(&host, "f", 1, 2)?;
/// let err = ring.record(&stream, 1, Blocking::No).unwrap_err();
/// assert!(matches!(err, Error::OutOfOrder { expected: 0, got: 1, .. }));
/// assert_eq!(err.to_string(), "ring 'f': record out of order: expected seq 0, got 1");
/// # Ok::<(), seqsync::Error>(())
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A constructor or call got an argument outside its domain (`max_size == 0`, too many
    /// consumers, a stream of the wrong backend, …).
    #[error("ring '{ring}': invalid argument: {message}")]
    InvalidArgument {
        /// The ring (or object) the call was made on.
        ring: String,
        /// What was wrong, with the numbers.
        message: String,
    },

    /// `record(seq)` was called with a seq other than the next one (0, 1, 2, …).
    #[error("ring '{ring}': record out of order: expected seq {expected}, got {got}")]
    OutOfOrder {
        /// The ring.
        ring: String,
        /// The seq the ring expected next.
        expected: i64,
        /// The seq the caller passed.
        got: i64,
    },

    /// `record(seq, Blocking::No)` found `max_size` entries not yet released by every consumer.
    #[error(
        "ring '{ring}': overflow recording seq {seq}: max_size={max_size} entries are not yet \
         released by all nconsumers={nconsumers} consumers (oldest unreleased seq {oldest}); \
         max_size is too small or nconsumers too large"
    )]
    Overflow {
        /// The ring.
        ring: String,
        /// The seq the producer tried to record.
        seq: i64,
        /// The oldest seq still held by some consumer.
        oldest: i64,
        /// The ring's capacity.
        max_size: usize,
        /// How many consumers must release each seq.
        nconsumers: u32,
    },

    /// `wait`/`synchronize(seq, Blocking::No)` asked for a seq that is not recorded yet: either
    /// the producer has not reached it (`next <= seq`) or its record is in flight (`next > seq`:
    /// the producer claimed it, its event is not published yet).
    #[error(
        "ring '{ring}': seq {seq} not yet produced ({}) and blocking is off",
        not_yet_detail(*.seq, *.next)
    )]
    NotYetProduced {
        /// The ring.
        ring: String,
        /// The seq asked for.
        seq: i64,
        /// The next seq the producer will claim; greater than `seq` while `seq`'s record is in
        /// flight.
        next: i64,
    },

    /// The seq was released by every consumer and its slot already holds a later seq.
    #[error(
        "ring '{ring}': seq {seq} is stale: all nconsumers={nconsumers} consumers released it and \
         its slot was recycled for seq {current} (max_size={max_size})"
    )]
    Stale {
        /// The ring.
        ring: String,
        /// The seq asked for.
        seq: i64,
        /// The seq its slot holds now.
        current: i64,
        /// The ring's capacity.
        max_size: usize,
        /// How many consumers release each seq.
        nconsumers: u32,
    },

    /// The seq was already consumed `nconsumers` times (its slot is not recycled yet).
    #[error("ring '{ring}': seq {seq} consumed more than nconsumers={nconsumers} times")]
    OverConsumed {
        /// The ring.
        ring: String,
        /// The seq asked for.
        seq: i64,
        /// How many consumers the ring was built for.
        nconsumers: u32,
    },

    /// The ring was stopped, by [`crate::EventRingbuf::stop`] or by an earlier error.
    #[error("ring '{ring}' is stopped: {reason}")]
    Stopped {
        /// The ring.
        ring: String,
        /// Why: the text given to `stop`, or the first error's message.
        reason: Arc<str>,
        /// The first error, when an error stopped the ring.
        #[source]
        cause: Option<Arc<Error>>,
    },

    /// The pipeline runtime cannot run a stage as asked: no closure, no stream, or the
    /// stage's closure panicked. Stage closures may return it too.
    #[error("pipeline stage '{stage}': {message}")]
    Stage {
        /// The stage (or, for a name given to the runtime that the plan lacks, that name).
        stage: String,
        /// What is wrong.
        message: String,
    },

    /// A stream-ordered pool has no block for the request that the requester is already
    /// ordered after, cannot grow (`reserved + needed > max`), and the caller did not allow an
    /// inserted stream wait (or no freed block of the size exists to wait for).
    #[error(
        "pool '{pool}': exhausted allocating {requested} bytes: {reserved} of max {max} bytes \
         reserved, {stale} freed block(s) of the size not yet ordered before the request{hint}"
    )]
    Exhausted {
        /// The pool.
        pool: String,
        /// The bytes asked for.
        requested: usize,
        /// Bytes the pool holds.
        reserved: usize,
        /// The most bytes it may hold.
        max: usize,
        /// Freed blocks of the request's size class that would need a stream wait.
        stale: usize,
        /// What would help.
        hint: &'static str,
    },

    /// A block was freed that is not live: it was freed already.
    #[error("pool '{pool}': double free of block {addr:#x}")]
    DoubleFree {
        /// The pool.
        pool: String,
        /// The block's address.
        addr: u64,
    },

    /// A block was freed that this pool never handed out.
    #[error("pool '{pool}': {addr:#x} is not a block of this pool")]
    ForeignMemory {
        /// The pool.
        pool: String,
        /// The address given.
        addr: u64,
    },

    /// An allocation of 0 bytes, or of more than the pool's largest allocation.
    #[error("pool '{pool}': cannot allocate {size} bytes: sizes must be 1..={max}")]
    AllocSize {
        /// The pool.
        pool: String,
        /// The size asked for.
        size: usize,
        /// The pool's largest allocation.
        max: usize,
    },

    /// A timeline signal that does not grow the value.
    #[error(
        "timeline '{timeline}': signal of {got} is not above {current}, the highest value \
         signalled or enqueued so far"
    )]
    NonMonotonic {
        /// The timeline.
        timeline: String,
        /// The highest value signalled or enqueued on it so far.
        current: u64,
        /// The value the caller passed.
        got: u64,
    },

    /// A timeline value at or above `2^63` (reserved for failure).
    #[error("timeline '{timeline}': value {got} is out of range (the largest is {max})")]
    ValueOutOfRange {
        /// The timeline.
        timeline: String,
        /// The value the caller passed.
        got: u64,
        /// The largest allowed value, `2^63 - 1`.
        max: u64,
    },

    /// A host wait on timelines did not end in time; nothing changed, it can be repeated.
    #[error("timed out after {timeout:?} waiting for {waited_for}")]
    Timeout {
        /// What was awaited, with the values: `timeline 'a' to reach 3 (at 2)`.
        waited_for: String,
        /// The timeout the caller gave.
        timeout: std::time::Duration,
    },

    /// The timeline failed: by [`crate::timeline::Timeline::fail`], by a failure of a timeline
    /// that work signalling it waited on, by a failed stream, or by being dropped with stream
    /// waits pending.
    #[error("timeline '{timeline}' failed at value {value}: {cause}")]
    TimelineFailed {
        /// The timeline.
        timeline: String,
        /// The last value it reached before failing.
        value: u64,
        /// Why: the error given to `fail`, or the upstream timeline's failure.
        #[source]
        cause: Arc<Error>,
    },

    /// Work was cancelled on purpose (a reason to pass to
    /// [`crate::timeline::Timeline::fail`]).
    #[error("cancelled: {0}")]
    Cancelled(String),

    /// A timeline was dropped while streams still waited on it (the cause its failure carries).
    #[error(
        "timeline '{timeline}' dropped at value {value} with {pending} stream wait(s) pending"
    )]
    TimelineDropped {
        /// The timeline.
        timeline: String,
        /// Its value when dropped.
        value: u64,
        /// Stream waits for higher values it still had (waits of one stream on it one right
        /// after the other, with nothing enqueued between them, count once).
        pending: usize,
    },

    /// Commands (a command buffer or a graph launch) were to be enqueued after a stream wait for
    /// a timeline value whose signal is not signalled or enqueued yet, on a mechanism that holds
    /// only later *timeline operations* behind such a wait, not commands (CUDA `events`). The
    /// commands would run early, so nothing was enqueued.
    #[error(
        "timeline '{timeline}': commands cannot wait for value {value} before its signal is \
         enqueued (highest signalled or enqueued: {enqueued}) with the {mechanism} mechanism: \
         enqueue the signal first, or use a mechanism that holds commands (memops, the default)"
    )]
    WaitBeforeSignalUnsupported {
        /// The timeline waited on.
        timeline: String,
        /// The value waited for.
        value: u64,
        /// The highest value signalled or enqueued when the commands were submitted.
        enqueued: u64,
        /// The timeline's mechanism.
        mechanism: String,
    },

    /// A CUDA stream was asked for while a stream wait for a value nothing has written yet was
    /// open, none of the streams made ahead for that case was left (the reserve the backends
    /// of a device share, `made_ahead` streams when full; it fills at the first stream made
    /// with no such wait open), and the waits stayed open for a second more. The driver's
    /// `cuStreamCreate` may then wait for the device to drain, which waits for the host: a
    /// hang, so nothing was made. Make streams before enqueuing waits ahead of their signals,
    /// or once those waits are past, or keep more made ahead
    /// (`CudaBackend::with_streams_made_ahead`).
    #[error(
        "no CUDA stream can be made now: {open} stream wait(s) for values nothing has written \
         yet are open and stayed open for 1 s (cuStreamCreate could wait for them: a hang), \
         and no stream made ahead for this is left (a reserve of {made_ahead}); make streams \
         before such waits or after them, or keep more made ahead \
         (CudaBackend::with_streams_made_ahead)"
    )]
    NoStreamWhileWaitsOpen {
        /// The stream waits open (those listed, whose words were below their values).
        open: usize,
        /// The size of the reserve of streams made ahead (when full).
        made_ahead: usize,
    },

    /// Work running on a host stream waited for work behind it on the same stream (a
    /// synchronize of its own stream, or of an event recorded there after it): it would wait
    /// for itself forever. The wait returns this at once instead.
    #[error("stream '{stream}': its own work waited for work queued behind it on the same stream")]
    WaitsForItself {
        /// The stream.
        stream: String,
    },

    /// A pool of streams ([`Queues`](crate::graph::Queues)) would need a stream beyond its
    /// limit: the submission needs `needed` streams at once, and `busy` of the pool's streams
    /// are not free for it (work not done yet, or kept for a queue's order, or broken by a
    /// failure that no replacement has cleared). Nothing was enqueued. Where `needed` alone
    /// passes `limit`, no wait helps: submit a graph with fewer parallel branches (its
    /// lowering needs a stream per branch); else synchronize, or let earlier submissions
    /// finish, first.
    #[error(
        "queues: a submission needing {needed} streams at once, with {busy} streams not free \
         (work not done, a queue's, or broken), passes the {limit} a pool may hold{}",
        if .needed > .limit {
            "; the graph alone needs more: give it fewer parallel branches"
        } else {
            "; wait for earlier submissions before submitting more"
        }
    )]
    TooManyStreams {
        /// The most streams a pool holds.
        limit: usize,
        /// Streams the submission needs at once.
        needed: usize,
        /// The pool's streams not free for it.
        busy: usize,
    },

    /// The pipeline runtime's stall watchdog fired: no thread made progress for the timeout.
    /// Every ring was stopped; `threads` says, per thread, what it was blocked on and who
    /// had to act.
    #[error("pipeline stalled: no thread made progress for {timeout_ms} ms: {}", stalled_threads(.threads))]
    Stalled {
        /// The watchdog's timeout.
        timeout_ms: u64,
        /// One entry per plan thread: `thread NAME: what it is blocked on (who must act)`.
        /// The message shows the first 16 of them.
        threads: Vec<String>,
    },

    /// A process that shared the ring ([`SharedRing`](crate::ipc::SharedRing)) or timeline
    /// ([`SharedTimeline`](crate::ipc::SharedTimeline)) died without closing it (killed, or
    /// exited with it open): every call blocked on the ring in every surviving process returns
    /// this, and the ring is stopped; a shared timeline fails with this as the cause.
    #[error("'{ring}': peer lost: the {role} process {pid} died with it open")]
    PeerLost {
        /// The ring or timeline.
        ring: String,
        /// The dead process's id.
        pid: u32,
        /// `producer` or `consumer`.
        role: &'static str,
    },

    /// Another process failed a shared timeline
    /// ([`SharedTimeline::fail`](crate::ipc::SharedTimeline::fail)): the cause of the
    /// [`Error::TimelineFailed`] every other process sees, with that process's message.
    #[error("failed by process {pid}: {message}")]
    FailedElsewhere {
        /// The process that failed it.
        pid: u32,
        /// Its error, as text.
        message: String,
    },

    /// A shared segment that [`SharedRing::open`](crate::ipc::SharedRing::open) refuses:
    /// malformed, truncated, of another layout version or user, or not sealed against
    /// resizing. Nothing in it was used.
    #[error("ring '{ring}': refused shared segment: {message}")]
    BadSegment {
        /// The ring name asked for.
        ring: String,
        /// What was wrong with it.
        message: String,
    },

    /// A [`SharedBuffer`](crate::ipc::SharedBuffer)'s exporter may not free it yet: other
    /// processes still map it (the driver's rule: every importer unmaps before the exporter
    /// frees). Nothing was freed.
    #[error("buffer '{buffer}': still mapped by {importers} other process(es)")]
    StillImported {
        /// The buffer.
        buffer: String,
        /// Living processes that map it.
        importers: usize,
    },

    /// No CUDA driver or no GPU: the CUDA backend cannot be used here.
    #[error("no CUDA device: {0}")]
    NoDevice(String),

    /// A backend call failed (a CUDA driver error, or a host stream whose closure panicked).
    #[error(transparent)]
    Backend(#[from] BackendError),

    /// A pipeline spec or plan that cannot be parsed, derived, checked or run: the pipeline
    /// layer's [`PlanError`](crate::pipeline::PlanError), so that `derive`, `check_deadlock`
    /// and `runtime::run` compose with `?`.
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// A failed backend call: which backend, which operation, and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendError {
    /// `"cuda"` or `"host"`.
    pub backend: &'static str,
    /// The operation, e.g. `"cuEventRecord"` or `"stream wait"`.
    pub op: &'static str,
    /// The backend's own code (a `CUresult`), when it has one.
    pub code: Option<i64>,
    /// The backend's message.
    pub message: String,
}

impl BackendError {
    /// A backend error without a numeric code.
    pub fn new(backend: &'static str, op: &'static str, message: impl Into<String>) -> Self {
        BackendError {
            backend,
            op,
            code: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} backend: {} failed: {}",
            self.backend, self.op, self.message
        )?;
        if let Some(code) = self.code {
            write!(f, " (code {code})")?;
        }
        Ok(())
    }
}

impl std::error::Error for BackendError {}

impl Error {
    /// The error at the bottom of a chain of [`Error::TimelineFailed`] (the original reason a
    /// failure spread from timeline to timeline); `self` for any other error.
    pub fn root_cause(&self) -> &Error {
        let mut e = self;
        while let Error::TimelineFailed { cause, .. } = e {
            e = cause;
        }
        e
    }

    /// True for [`Error::Stopped`].
    pub fn is_stopped(&self) -> bool {
        matches!(self, Error::Stopped { .. })
    }

    pub(crate) fn invalid(ring: &str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            ring: ring.to_owned(),
            message: message.into(),
        }
    }
}

fn not_yet_detail(seq: i64, next: i64) -> String {
    if next > seq {
        format!("its record is in flight: the producer is recording seq {seq}")
    } else {
        format!("next seq to record is {next}")
    }
}

/// The message of a caught panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".into())
}

/// Drop a caught panic's payload where its own drop cannot unwind further: a payload whose
/// drop panics is dropped under a guard, and that second panic's payload is leaked (its drop
/// could panic too).
pub(crate) fn drop_panic_payload(payload: Box<dyn std::any::Any + Send>) {
    let guarded = std::panic::AssertUnwindSafe(move || drop(payload));
    if let Err(again) = std::panic::catch_unwind(guarded) {
        std::mem::forget(again);
    }
}

/// The most threads a stall's message describes (the error's `threads` has every one).
pub(crate) const STALL_THREADS_SHOWN: usize = 16;

/// A stall's threads, the first [`STALL_THREADS_SHOWN`], and how many more.
fn stalled_threads(threads: &[String]) -> String {
    let mut text = threads
        .iter()
        .take(STALL_THREADS_SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("; ");
    if threads.len() > STALL_THREADS_SHOWN {
        text += &format!("; and {} more threads", threads.len() - STALL_THREADS_SHOWN);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stall of many threads is one bounded line: the first 16, and how many more (3 000
    /// threads made a line of 90 KB).
    #[test]
    fn a_stall_of_many_threads_shows_the_first_and_counts_the_rest() {
        let threads: Vec<String> = (0..40)
            .map(|i| format!("thread t{i}: not started"))
            .collect();
        let text = Error::Stalled {
            timeout_ms: 10,
            threads,
        }
        .to_string();
        assert!(
            text.contains("thread t15: not started; and 24 more threads"),
            "{text}"
        );
        assert!(!text.contains("thread t16"), "{text}");
        let few = Error::Stalled {
            timeout_ms: 10,
            threads: vec!["thread a: x".into(), "thread b: y".into()],
        };
        assert_eq!(
            few.to_string(),
            "pipeline stalled: no thread made progress for 10 ms: thread a: x; thread b: y"
        );
    }
}
