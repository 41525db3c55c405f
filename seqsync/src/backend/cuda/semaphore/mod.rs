//! Timelines on CUDA: the semaphore word, by one of three mechanisms (see
//! [`crate::backend::Mechanism`]).
//!
//! It may use: the rest of `backend/cuda` (driver, context, events, deferred errors) and
//! `backend/semaphore.rs` (the word's contract), and the crate's short-section `lock`; nothing
//! above `backend/`.
//!
//! - **stream memory operations** (`memops`): the default where the
//!   device runs them. Every signal writes the word, every wait waits on it, on the device: a
//!   wait holds everything enqueued after it, whether its signal is enqueued yet or not, and a
//!   failure (the failed word) releases every wait at once, wherever its signal is stuck;
//! - **events + stream memory operations** (`hybrid`), when asked for:
//!   a wait whose signal is already enqueued is an event wait (an event record + wait costs
//!   about a seventh of a memory-operation write + wait: BENCHMARKS.md §5); only a wait
//!   enqueued before its signal waits on the word. *Limit*: an event wait cannot be released
//!   early, so a failure releases such a wait only once the signal's stream gets to the signal
//!   (a stream stuck before it keeps the waiter waiting);
//! - **events per timepoint** (`events`): the fallback, or when asked for; a wait before its
//!   signal is refused ([`crate::Error::WaitBeforeSignalUnsupported`], nothing enqueued: an
//!   event that was never recorded does not wait); its waits are event waits, with the
//!   hybrid's limit.
//!
//! Which one a backend uses is decided at its first timeline: [`TimelineMechanism::Auto`]
//! probes stream memory operations once (a write, a wait on it and a second write on a fresh
//! stream, which must complete within a second and leave the second value in the word) and falls
//! back to events with the probe's error as the reason ([`crate::timeline::Timeline::mechanism`]
//! shows it). The environment variable `SEQSYNC_TIMELINE_MECHANISM` (`auto`, `hybrid`,
//! `memops`, `events`) overrides the choice of [`super::CudaBackend::new`], so a whole test
//! suite can run with any.
//!
//! Events are reused (`event_pool`): a signal creates none once the pool is warm.

mod event_pool;
mod events;
mod hybrid;
mod mapped;
mod memops;
mod points;
mod repair;
mod write_order;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::backend::cuda::driver;
use cudarc::driver::{sys, CudaContext, CudaStream};

use super::Deferred;
use crate::backend::semaphore::{Mechanism, Semaphore, MAX_VALUE};
use crate::error::{BackendError, Error, Result};
use event_pool::EventPool;
use events::EventsWord;
use hybrid::{HybridWord, WordOps};
use mapped::MappedWords;
use memops::MemOpsWord;

use super::stream_reserve::StreamReserve;

/// Which mechanism a CUDA backend's timelines use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimelineMechanism {
    /// Stream memory operations ([`TimelineMechanism::MemOps`]) if the device runs
    /// them, else events: the mechanism that keeps the whole timeline contract where it can
    /// (a failure releases every wait).
    #[default]
    Auto,
    /// Events for waits whose signal is enqueued, stream memory operations for waits before
    /// their signal; creating a timeline fails where memory operations do not work.
    Hybrid,
    /// Stream memory operations; creating a timeline fails where they do not work.
    MemOps,
    /// Events per timepoint, with host-side deferral.
    Events,
}

impl std::str::FromStr for TimelineMechanism {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(TimelineMechanism::Auto),
            "hybrid" => Ok(TimelineMechanism::Hybrid),
            "memops" => Ok(TimelineMechanism::MemOps),
            "events" => Ok(TimelineMechanism::Events),
            other => Err(Error::invalid(
                "timeline",
                format!(
                    "unknown timeline mechanism '{other}': expected auto, hybrid, memops or events"
                ),
            )),
        }
    }
}

impl TimelineMechanism {
    /// The choice `SEQSYNC_TIMELINE_MECHANISM` asks for (`Auto` if unset or unknown).
    pub fn from_env() -> Self {
        std::env::var("SEQSYNC_TIMELINE_MECHANISM")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_default()
    }
}

/// A backend's timeline machinery: the choice, the decision, the word pool, the event pool.
pub(crate) struct TimelineSupport {
    choice: TimelineMechanism,
    /// `Ok(())`: memory operations work; `Err(reason)`: they do not. A property of the
    /// device: shared with the machinery of the backend's rebuilds ([`Self::with_choice`]).
    probed: Arc<OnceLock<std::result::Result<(), String>>>,
    pool: Arc<Mutex<MappedWords>>,
    events: Arc<EventPool>,
    word_ops: Arc<WordOps>,
}

impl std::fmt::Debug for TimelineSupport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimelineSupport")
            .field("choice", &self.choice)
            .field("probed", &self.probed.get())
            .finish_non_exhaustive()
    }
}

impl TimelineSupport {
    pub(crate) fn new(choice: TimelineMechanism, errors: &Arc<Deferred>) -> Self {
        TimelineSupport {
            choice,
            probed: Arc::default(),
            pool: Arc::new(Mutex::new(MappedWords::new(errors.clone()))),
            events: Arc::new(EventPool::new(errors)),
            word_ops: Arc::default(),
        }
    }

    /// New machinery for `choice`, with this one's probe answer.
    pub(crate) fn with_choice(&self, choice: TimelineMechanism, errors: &Arc<Deferred>) -> Self {
        TimelineSupport {
            probed: self.probed.clone(),
            ..Self::new(choice, errors)
        }
    }

    pub(crate) fn choice(&self) -> TimelineMechanism {
        self.choice
    }

    /// Word writes and word waits enqueued by `hybrid` timelines so far.
    pub(crate) fn word_ops(&self) -> (u64, u64) {
        (
            self.word_ops
                .writes
                .load(std::sync::atomic::Ordering::Relaxed),
            self.word_ops
                .waits
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The probe's answer, probed at the first call on a stream from `streams`. `Err`: no
    /// stream for it now ([`Error::NoStreamWhileWaitsOpen`]), nothing answered: a later call
    /// probes.
    fn probe(
        &self,
        ctx: &Arc<CudaContext>,
        streams: &StreamReserve,
    ) -> Result<std::result::Result<(), String>> {
        if let Some(answer) = self.probed.get() {
            return Ok(answer.clone());
        }
        let answer = match streams.take(ctx) {
            Ok(stream) => probe_memops(ctx, &self.pool, stream),
            Err(e @ Error::NoStreamWhileWaitsOpen { .. }) => return Err(e),
            Err(e) => Err(e.to_string()), // names cuStreamCreate already
        };
        Ok(self.probed.get_or_init(|| answer).clone())
    }

    pub(crate) fn create(
        &self,
        ctx: &Arc<CudaContext>,
        streams: &StreamReserve,
        initial: u64,
    ) -> Result<CudaSemaphore> {
        let use_events = |reason: Option<String>| CudaSemaphore {
            at: None,
            word: Word::Events(Arc::new(EventsWord::new(ctx, &self.events, initial))),
            mechanism: Mechanism::Events {
                fallback_reason: reason,
            },
        };
        match self.choice {
            TimelineMechanism::Events => Ok(use_events(None)),
            TimelineMechanism::Auto => match self.probe(ctx, streams)? {
                Ok(()) => self.memops(ctx, initial),
                Err(why) => Ok(use_events(Some(why))),
            },
            TimelineMechanism::Hybrid => {
                self.probe_or_fail(ctx, streams)?;
                self.hybrid(ctx, initial)
            }
            TimelineMechanism::MemOps => {
                self.probe_or_fail(ctx, streams)?;
                self.memops(ctx, initial)
            }
        }
    }

    fn memops(&self, ctx: &Arc<CudaContext>, initial: u64) -> Result<CudaSemaphore> {
        let word = MemOpsWord::new(ctx, &self.pool, initial)?;
        Ok(CudaSemaphore {
            at: Some(word.at()),
            word: Word::MemOps(Box::new(word)),
            mechanism: Mechanism::MemOps,
        })
    }

    pub(crate) fn probe_or_fail(
        &self,
        ctx: &Arc<CudaContext>,
        streams: &StreamReserve,
    ) -> Result<()> {
        self.probe(ctx, streams)?.map_err(|why| {
            Error::Backend(BackendError::new(
                "cuda",
                "timeline (stream memory operations)",
                format!("stream memory operations are not usable here: {why}"),
            ))
        })
    }

    fn hybrid(&self, ctx: &Arc<CudaContext>, initial: u64) -> Result<CudaSemaphore> {
        let word = HybridWord::new(ctx, &self.pool, &self.events, &self.word_ops, initial)?;
        Ok(CudaSemaphore {
            at: Some(word.at()),
            word: Word::Hybrid(Box::new(word)),
            mechanism: Mechanism::Hybrid,
        })
    }
}

/// Try stream memory operations once: write 1, wait for it, write 2, on a fresh stream.
fn probe_memops(
    ctx: &Arc<CudaContext>,
    pool: &Arc<Mutex<MappedWords>>,
    stream: Arc<CudaStream>,
) -> std::result::Result<(), String> {
    let attr = {
        let mut v = 0i32;
        let a = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS;
        // SAFETY: `v` is a valid out-pointer and the device handle comes from a live context.
        let r = unsafe { driver::device_get_attribute(&mut v, a, ctx.cu_device()) };
        match r.code() {
            sys::CUresult::CUDA_SUCCESS => format!("{v}"),
            other => format!("{other:?}"),
        }
    };
    let fail = |what: String| {
        format!("{what} (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = {attr})")
    };
    let word = MemOpsWord::new(ctx, pool, 0).map_err(|e| fail(e.to_string()))?;
    word.signal_on(&stream, 1)
        .and_then(|()| word.wait_on(&stream, 1))
        .and_then(|()| word.signal_on(&stream, 2))
        .map_err(|e| fail(e.to_string()))?;
    let start = Instant::now();
    loop {
        // SAFETY: a live stream handle; cuStreamQuery only reads its state.
        match unsafe { driver::stream_query(stream.cu_stream()) }.code() {
            sys::CUresult::CUDA_SUCCESS => break,
            sys::CUresult::CUDA_ERROR_NOT_READY if start.elapsed() < Duration::from_secs(1) => {
                std::thread::sleep(Duration::from_micros(50))
            }
            sys::CUresult::CUDA_ERROR_NOT_READY => {
                // The stream may never finish: keep it (and the word) alive forever.
                std::mem::forget(stream);
                std::mem::forget(word);
                return Err(fail(
                    "a probe stream waiting on its own write did not finish in 1 s".into(),
                ));
            }
            other => return Err(fail(format!("cuStreamQuery: {other:?}"))),
        }
    }
    match word.load() {
        2 => Ok(()),
        w => Err(fail(format!("the probe word holds {w}, expected 2"))),
    }
}

enum Word {
    Hybrid(Box<HybridWord>),
    MemOps(Box<MemOpsWord>),
    Events(Arc<EventsWord>),
}

/// A CUDA semaphore word: events with stream memory operations for waits before their signal,
/// stream memory operations only, or events per value with host-side deferral (see
/// [`Mechanism`] and [`TimelineMechanism`]).
///
/// `repr(C)`: the word's address first, so that [`Semaphore::peek`] reads it next to whatever
/// holds this (a timeline's hot fields) and then the word, nothing between.
#[repr(C)]
pub struct CudaSemaphore {
    /// The word in host memory (`hybrid` and stream memory operations), owned by `word`.
    at: Option<&'static AtomicU64>,
    word: Word,
    mechanism: Mechanism,
}

impl std::fmt::Debug for CudaSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaSemaphore")
            .field("mechanism", &self.mechanism)
            .finish()
    }
}

impl CudaSemaphore {
    #[inline(always)]
    pub(crate) fn signal_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        match &self.word {
            Word::Hybrid(w) => w.signal_on(stream, value),
            Word::MemOps(w) => w.signal_on(stream, value),
            Word::Events(w) => w.signal_on(stream, value),
        }
    }

    #[inline(always)]
    pub(crate) fn wait_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        match &self.word {
            Word::Hybrid(w) => w.wait_on(stream, value),
            Word::MemOps(w) => w.wait_on(stream, value),
            Word::Events(w) => w.wait_on(stream, value),
        }
    }
}

impl Semaphore for CudaSemaphore {
    fn load(&self) -> Result<u64> {
        match &self.word {
            Word::Hybrid(w) => w.load(),
            Word::MemOps(w) => Ok(w.load()),
            Word::Events(w) => w.load(),
        }
    }

    /// No driver call: the word as stored (stream memory operations, and `hybrid`,
    /// whose completed points may be ahead of it), or the highest value known reached
    /// (events).
    #[inline]
    fn peek(&self) -> Option<u64> {
        Some(match (self.at, &self.word) {
            (Some(at), _) => at.load(std::sync::atomic::Ordering::SeqCst),
            (None, Word::Events(w)) => w.peek(),
            (None, Word::Hybrid(w)) => w.at().load(std::sync::atomic::Ordering::SeqCst),
            (None, Word::MemOps(w)) => w.load(),
        })
    }

    fn store(&self, value: u64) -> Result<()> {
        debug_assert!(value <= MAX_VALUE);
        match &self.word {
            Word::Hybrid(w) => w.store(value),
            Word::MemOps(w) => w.store(value),
            Word::Events(w) => w.store(value),
        }
    }

    fn fail(&self, last_value: u64) {
        match &self.word {
            Word::Hybrid(w) => w.fail(last_value),
            Word::MemOps(w) => w.fail(last_value),
            Word::Events(w) => w.fail(last_value),
        }
    }

    fn failure(&self) -> Option<Error> {
        match &self.word {
            Word::Hybrid(w) => w.failure(),
            Word::MemOps(w) => w.failure(),
            Word::Events(w) => w.failure(),
        }
    }

    fn check(&self) -> Result<()> {
        match &self.word {
            Word::Hybrid(w) => w.check(),
            Word::MemOps(w) => w.health(),
            Word::Events(w) => w.load().map(drop),
        }
    }

    fn notifies(&self) -> bool {
        false
    }

    fn mechanism(&self) -> Mechanism {
        self.mechanism.clone()
    }

    fn holds_commands_for(&self, value: u64) -> bool {
        match &self.word {
            Word::Events(w) => w.holds_commands_for(value),
            _ => true,
        }
    }
}
