//! The host backend: streams are in-order worker threads, events are points in their order.
//!
//! It may use: the [`Backend`] trait and the error type; no CUDA.
//!
//! It is a real executor, not a mock: the seed pipeline runs on it with real data, and with
//! [`Chaos`] every stream operation first sleeps a random time, so a missing wait shows up as
//! a wrong result instead of passing by luck. It is also how everything is tested without a
//! GPU.
//!
//! ```
//! use seqsync::{backend::Backend, HostBackend};
//! use std::sync::{Arc, Mutex};
//!
//! let host = HostBackend::new();
//! let (a, b) = (host.new_stream("a")?, host.new_stream("b")?);
//! let log = Arc::new(Mutex::new(Vec::new()));
//! let ev = host.create_event(Default::default())?;
//! let l = log.clone();
//! a.launch(move || { std::thread::sleep(std::time::Duration::from_millis(5)); l.lock().unwrap().push("a"); });
//! host.record(&ev, &a)?;
//! host.wait(&b, &ev)?;          // b runs nothing more until a's closure has run
//! let l = log.clone();
//! b.launch(move || l.lock().unwrap().push("b"));
//! b.synchronize()?;
//! assert_eq!(*log.lock().unwrap(), ["a", "b"]);
//! # Ok::<(), seqsync::Error>(())
//! ```

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

mod chaos;
pub(crate) mod command;
pub(crate) mod event;
pub(crate) mod memory;
pub(crate) mod semaphore;
pub(crate) mod stream;

pub use chaos::Chaos;
pub use stream::HostStream;

pub(crate) use event::HostEvent;
pub(crate) use memory::{HostAsyncPool, HostRawMemory};
pub(crate) use semaphore::HostSemaphore;

use super::{Backend, EventOptions, Interrupt, NeverInterrupt, SemaphoreWaker, SyncOutcome};
use crate::error::Result;
use chaos::SplitMix64;
use stream::Job;

/// The host backend. Cheap to clone; clones share chaos settings and counters.
#[derive(Clone, Debug, Default)]
pub struct HostBackend {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    chaos: Option<Chaos>,
    /// Host waits poll instead of being woken (see [`HostBackend::polling`]).
    polling: bool,
    streams_made: AtomicU64,
    pauses_made: AtomicU64,
    live_events: Arc<AtomicUsize>,
}

impl HostBackend {
    /// A host backend without chaos.
    pub fn new() -> Self {
        Self::default()
    }

    /// A host backend whose streams sleep a random time before every operation.
    pub fn with_chaos(chaos: Chaos) -> Self {
        HostBackend {
            inner: Arc::new(Inner {
                chaos: Some(chaos),
                ..Inner::default()
            }),
        }
    }

    /// A host backend whose host waits are never woken, like CUDA's: an event's or a
    /// timeline's completion on a stream tells no waiting host thread, which must poll
    /// ([`Semaphore::notifies`](crate::backend::Semaphore::notifies) is false, and a ring's host
    /// `synchronize` polls the event by the wait strategy (`wait_strategy.rs`)). Streams
    /// still wake each other. For measuring and testing host waits without a GPU.
    ///
    /// ```
    /// use seqsync::{timeline::Timeline, HostBackend};
    /// use std::time::Duration;
    ///
    /// let host = HostBackend::polling();
    /// let s = host.new_stream("work")?;
    /// let t = Timeline::new(&host, "t", 0)?;
    /// s.launch(|| std::thread::sleep(Duration::from_millis(2)));
    /// t.signal_on(&s, 1)?;
    /// t.wait(1, Duration::from_secs(5))?; // noticed by polling the word
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    pub fn polling() -> Self {
        HostBackend {
            inner: Arc::new(Inner {
                polling: true,
                ..Inner::default()
            }),
        }
    }

    /// Do host waits poll (see [`polling`](Self::polling))?
    pub fn is_polling(&self) -> bool {
        self.inner.polling
    }

    /// The chaos settings, if any.
    pub fn chaos(&self) -> Option<Chaos> {
        self.inner.chaos
    }

    /// Start a new stream (a worker thread) named `name`: [`Backend::new_stream`], callable
    /// without the trait in scope.
    ///
    /// # Errors
    /// [`Error::Backend`](crate::Error::Backend) if the operating system cannot start the
    /// stream's worker thread (out of threads or memory).
    pub fn new_stream(&self, name: &str) -> Result<HostStream> {
        let n = self.inner.streams_made.fetch_add(1, Ordering::Relaxed);
        let chaos = self.inner.chaos.map(|c| {
            (
                c,
                SplitMix64::new(c.seed ^ n.wrapping_mul(0xA24B_AED4_963E_E407)),
            )
        });
        HostStream::spawn(name, chaos)
    }

    /// With chaos on, sleep a random time: call it in host threads between steps so that
    /// thread interleavings vary too. Without chaos, does nothing.
    pub fn chaos_pause(&self) {
        if let Some(c) = self.inner.chaos {
            let n = self.inner.pauses_made.fetch_add(1, Ordering::Relaxed);
            let mut rng = SplitMix64::new(c.seed ^ n.wrapping_mul(0x9FB2_1C65_1E98_DF25));
            c.delay(&mut rng);
        }
    }

    /// Events of this backend (and its clones) that exist right now.
    pub fn live_events(&self) -> usize {
        self.inner.live_events.load(Ordering::Relaxed)
    }
}

impl Backend for HostBackend {
    type Stream = HostStream;
    type Event = HostEvent;

    fn name(&self) -> &'static str {
        "host"
    }

    fn new_stream(&self, name: &str) -> Result<HostStream> {
        HostBackend::new_stream(self, name)
    }

    fn launch_host(
        &self,
        stream: &HostStream,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<()> {
        stream.shared.enqueue(Job::Run(f));
        Ok(())
    }

    fn launch_host_always(
        &self,
        stream: &HostStream,
        f: Box<dyn FnOnce(Option<Arc<str>>) + Send + 'static>,
    ) -> Result<()> {
        stream.shared.enqueue(Job::Always(f));
        Ok(())
    }

    fn launch_host_wait(
        &self,
        stream: &HostStream,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<()> {
        stream.shared.enqueue(Job::Wait(f));
        Ok(())
    }

    fn host_work_may_block(&self) -> bool {
        true
    }

    fn addresses_host_memory(&self) -> bool {
        true
    }

    /// Host streams address host memory: memory shared with other processes is the shared
    /// segment itself.
    fn ipc_memory_export(&self, _bytes: usize) -> Result<crate::backend::IpcExport> {
        Ok(crate::backend::IpcExport::InSegment)
    }

    fn synchronize_stream(&self, stream: &HostStream) -> Result<()> {
        stream.synchronize()
    }

    fn create_event(&self, _options: EventOptions) -> Result<HostEvent> {
        Ok(HostEvent::new(self.inner.live_events.clone()))
    }

    fn record(&self, event: &HostEvent, stream: &HostStream) -> Result<()> {
        let pos = stream.shared.lock().enqueued;
        event.set(stream.shared.clone(), pos);
        Ok(())
    }

    fn wait(&self, stream: &HostStream, event: &HostEvent) -> Result<()> {
        if let Some((on, pos)) = event.snapshot() {
            // Work already ordered by the stream itself needs no gate.
            if !Arc::ptr_eq(&on, &stream.shared) {
                stream.shared.enqueue(Job::Gate { on, pos });
            }
        }
        Ok(())
    }

    fn synchronize(&self, event: &HostEvent) -> Result<()> {
        self.synchronize_interruptible(event, &NeverInterrupt)
            .map(|_| ())
    }

    fn synchronize_interruptible(
        &self,
        event: &HostEvent,
        interrupt: &dyn Interrupt,
    ) -> Result<SyncOutcome> {
        if self.inner.polling {
            // The recording checked is the one polled (a record meanwhile does not move it).
            let Some((stream, pos)) = event.snapshot() else {
                return Ok(SyncOutcome::Complete);
            };
            stream.check_not_waiting_for_itself(pos)?;
            let done = || stream.poll(pos).transpose().map(|o| o.is_some());
            return super::synchronize_by_polling(done, interrupt);
        }
        match event.snapshot() {
            None => Ok(SyncOutcome::Complete),
            Some((stream, pos)) => stream.wait_for(pos, interrupt),
        }
    }

    fn query(&self, event: &HostEvent) -> Result<bool> {
        match event.snapshot() {
            None => Ok(true),
            Some((stream, pos)) => stream.poll(pos).transpose().map(|o| o.is_some()),
        }
    }

    type Semaphore = HostSemaphore;

    fn stream_id(&self, stream: &HostStream) -> u64 {
        stream.shared.id
    }

    fn create_semaphore(&self, initial: u64, waker: SemaphoreWaker) -> Result<HostSemaphore> {
        if self.inner.polling {
            // Nobody is told of a stream's write: host waiters poll.
            return Ok(HostSemaphore::new(initial, Arc::new(|| {}), false));
        }
        Ok(HostSemaphore::new(initial, waker, true))
    }

    fn signal_on(&self, stream: &HostStream, sem: &HostSemaphore, value: u64) -> Result<()> {
        let word = sem.word.clone();
        let name = stream.shared.name.clone();
        stream.shared.enqueue(Job::Always(Box::new(move |failure| {
            word.signal_from_stream(value, &name, failure)
        })));
        Ok(())
    }

    fn wait_on(&self, stream: &HostStream, sem: &HostSemaphore, value: u64) -> Result<()> {
        let word = sem.word.clone();
        stream.shared.enqueue(stream::Job::Wait(Box::new(move || {
            word.wait_at_least(value)
        })));
        Ok(())
    }
}
