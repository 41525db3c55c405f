//! Timelines on CUDA: the semaphore word, by one of two mechanisms (see
//! [`crate::backend::Mechanism`]).
//!
//! - **stream memory operations** (`memops`): the default where the device runs them;
//! - **events per timepoint** (`events`): the fallback, or when asked for.
//!
//! Which one a backend uses is decided at its first timeline: [`TimelineMechanism::Auto`]
//! probes stream memory operations once (a write, a wait on it and a second write on a fresh
//! stream, which must complete within a second and leave the second value in the word) and falls
//! back to events with the probe's error as the reason ([`crate::timeline::Timeline::mechanism`]
//! shows it). The environment variable `SEQSYNC_TIMELINE_MECHANISM` (`auto`, `memops`,
//! `events`) overrides the choice of [`super::CudaBackend::new`], so a whole test suite can run
//! with either.

mod events;
mod memops;
mod slots;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::Deferred;
use crate::backend::semaphore::{failed_word, Mechanism, Semaphore, MAX_VALUE};
use crate::error::{BackendError, Error, Result};
use events::{DeferredQueues, EventsWord};
use memops::MemOpsWord;
use slots::Pool;

/// Which mechanism a CUDA backend's timelines use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimelineMechanism {
    /// Stream memory operations if the device runs them, else events.
    #[default]
    Auto,
    /// Stream memory operations; creating a timeline fails where they do not work.
    StreamMemOps,
    /// Events per timepoint, with host-side deferral.
    Events,
}

impl std::str::FromStr for TimelineMechanism {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(TimelineMechanism::Auto),
            "memops" | "stream-mem-ops" => Ok(TimelineMechanism::StreamMemOps),
            "events" => Ok(TimelineMechanism::Events),
            other => Err(Error::invalid(
                "timeline",
                format!("unknown timeline mechanism '{other}': expected auto, memops or events"),
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

/// A backend's timeline machinery: the choice, the decision, the word pool, the deferred queues.
pub(crate) struct TimelineSupport {
    choice: TimelineMechanism,
    /// `Ok(())`: memory operations work; `Err(reason)`: they do not.
    probed: OnceLock<std::result::Result<(), String>>,
    pool: Arc<Mutex<Pool>>,
    deferred: Arc<DeferredQueues>,
    errors: Arc<Deferred>,
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
            probed: OnceLock::new(),
            pool: Arc::new(Mutex::new(Pool::new(errors.clone()))),
            deferred: Arc::new(DeferredQueues::default()),
            errors: errors.clone(),
        }
    }

    pub(crate) fn choice(&self) -> TimelineMechanism {
        self.choice
    }

    /// Timeline operations held on the host, waiting for their signal (events mechanism).
    pub(crate) fn deferred_held(&self) -> usize {
        self.deferred.held()
    }

    fn probe(&self, ctx: &Arc<CudaContext>) -> std::result::Result<(), String> {
        self.probed
            .get_or_init(|| probe_memops(ctx, &self.pool))
            .clone()
    }

    pub(crate) fn create(&self, ctx: &Arc<CudaContext>, initial: u64) -> Result<CudaSemaphore> {
        let use_events = |reason: Option<String>| CudaSemaphore {
            word: Word::Events(Arc::new(EventsWord::new(
                ctx,
                &self.errors,
                &self.deferred,
                initial,
            ))),
            mechanism: Mechanism::Events {
                fallback_reason: reason,
            },
        };
        match self.choice {
            TimelineMechanism::Events => Ok(use_events(None)),
            TimelineMechanism::Auto => match self.probe(ctx) {
                Ok(()) => self.memops(ctx, initial),
                Err(why) => Ok(use_events(Some(why))),
            },
            TimelineMechanism::StreamMemOps => match self.probe(ctx) {
                Ok(()) => self.memops(ctx, initial),
                Err(why) => Err(Error::Backend(BackendError::new(
                    "cuda",
                    "timeline (stream memory operations)",
                    format!("stream memory operations are not usable here: {why}"),
                ))),
            },
        }
    }

    fn memops(&self, ctx: &Arc<CudaContext>, initial: u64) -> Result<CudaSemaphore> {
        Ok(CudaSemaphore {
            word: Word::MemOps(Box::new(MemOpsWord::new(ctx, &self.pool, initial)?)),
            mechanism: Mechanism::StreamMemOps,
        })
    }
}

/// Try stream memory operations once: write 1, wait for it, write 2, on a fresh stream.
fn probe_memops(
    ctx: &Arc<CudaContext>,
    pool: &Arc<Mutex<Pool>>,
) -> std::result::Result<(), String> {
    let attr = {
        let mut v = 0i32;
        let a = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS;
        // SAFETY: `v` is a valid out-pointer and the device handle comes from a live context.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, ctx.cu_device()) };
        match r {
            sys::CUresult::CUDA_SUCCESS => format!("{v}"),
            other => format!("{other:?}"),
        }
    };
    let fail = |what: String| {
        format!("{what} (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = {attr})")
    };
    let word = MemOpsWord::new(ctx, pool, 0).map_err(|e| fail(e.to_string()))?;
    let stream = ctx
        .new_stream()
        .map_err(|e| fail(format!("cuStreamCreate: {e}")))?;
    word.signal_on(&stream, 1)
        .and_then(|()| word.wait_on(&stream, 1))
        .and_then(|()| word.signal_on(&stream, 2))
        .map_err(|e| fail(e.to_string()))?;
    let start = Instant::now();
    loop {
        // SAFETY: a live stream handle; cuStreamQuery only reads its state.
        match unsafe { sys::cuStreamQuery(stream.cu_stream()) } {
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
    MemOps(Box<MemOpsWord>),
    Events(Arc<EventsWord>),
}

/// A CUDA semaphore word: stream memory operations on pinned memory, or events per value with
/// host-side deferral (see [`Mechanism`] and [`TimelineMechanism`]).
pub struct CudaSemaphore {
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
    pub(crate) fn signal_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        match &self.word {
            Word::MemOps(w) => w.signal_on(stream, value),
            Word::Events(w) => w.signal_on(stream, value),
        }
    }

    pub(crate) fn wait_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        match &self.word {
            Word::MemOps(w) => w.wait_on(stream, value),
            Word::Events(w) => w.wait_on(stream, value),
        }
    }
}

impl Semaphore for CudaSemaphore {
    fn load(&self) -> Result<u64> {
        match &self.word {
            Word::MemOps(w) => Ok(w.load()),
            Word::Events(w) => w.load(),
        }
    }

    fn store(&self, value: u64) -> Result<()> {
        debug_assert!(value <= MAX_VALUE);
        match &self.word {
            Word::MemOps(w) => w.store(value),
            Word::Events(w) => w.store(value),
        }
    }

    fn fail(&self, last_value: u64) {
        match &self.word {
            // An error here means a stream could not get the re-write; its own failure shows.
            Word::MemOps(w) => drop(w.store(failed_word(last_value))),
            Word::Events(w) => w.fail(last_value),
        }
    }

    fn failure(&self) -> Option<Error> {
        match &self.word {
            Word::MemOps(w) => w.failure(),
            Word::Events(w) => w.failure(),
        }
    }

    fn check(&self) -> Result<()> {
        match &self.word {
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
}
