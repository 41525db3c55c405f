//! [`ValidatingBackend`]: wraps any [`Backend`], forwards every call to it, and feeds a
//! [`HazardChecker`] with the ordering each call creates.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::checker::{Access, EventId, HazardChecker};
use crate::backend::{
    Backend, EventOptions, Interrupt, Mechanism, MemoryBackend, MemoryUsage, Semaphore,
    SemaphoreWaker, SyncOutcome,
};
use crate::error::{Error, Result};
use crate::happens_before::{ActorId, VectorClock};

/// A backend that checks for hazards: every record, stream wait, host synchronize (and query
/// that reports completion) goes to the inner backend and to a shared [`HazardChecker`];
/// accesses are declared with [`access`](Self::access) and [`host_access`](Self::host_access).
///
/// The calling host thread is identified by [`std::thread::current`] (its name, or its id when
/// unnamed). Because it implements [`Backend`], an
/// [`EventRingbuf`](crate::EventRingbuf)`<ValidatingBackend<_>>` feeds the checker through its
/// own records, waits and synchronizes. Use streams and events of one `ValidatingBackend` (and
/// its clones) only: their actor and event ids belong to its checker.
///
/// See the [module docs](super) for an example.
#[derive(Debug, Clone)]
pub struct ValidatingBackend<B: Backend> {
    inner: B,
    checker: Arc<HazardChecker>,
}

/// A stream of a [`ValidatingBackend`]: the inner stream plus its actor in the checker.
#[derive(Debug)]
pub struct ValidatingStream<S> {
    inner: S,
    actor: ActorId,
    name: String,
}

impl<S> ValidatingStream<S> {
    /// The inner backend's stream (launch work on it).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The stream's actor in the checker.
    pub fn actor(&self) -> ActorId {
        self.actor
    }

    /// The name the stream was wrapped with (as it appears in reports).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// An event of a [`ValidatingBackend`]: the inner event plus its id in the checker.
#[derive(Debug)]
pub struct ValidatingEvent<E> {
    inner: E,
    id: EventId,
}

impl<E> ValidatingEvent<E> {
    /// The inner backend's event.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// The event's id in the checker.
    pub fn id(&self) -> EventId {
        self.id
    }
}

/// A timeline word of a [`ValidatingBackend`]: the inner word, plus a checker event per value
/// signalled on a stream.
///
/// A stream wait orders the stream after what every signal `>=` its value already enqueued
/// covers (their meet: the word only grows, so whichever lands first releases the wait; a
/// host signal that reached the value already means no wait is enqueued at all). A wait
/// enqueued before any such signal, and host waits, add no ordering to the checker (which then
/// errs on the side of reporting a hazard). Not seen: a signal enqueued after the wait, on a
/// stream not ordered after the others, that lands first.
pub struct ValidatingSemaphore<S> {
    inner: S,
    points: Mutex<BTreeMap<u64, EventId>>,
}

impl<S> std::fmt::Debug for ValidatingSemaphore<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValidatingSemaphore")
            .finish_non_exhaustive()
    }
}

impl<S: Semaphore> Semaphore for ValidatingSemaphore<S> {
    fn load(&self) -> Result<u64> {
        self.inner.load()
    }
    fn peek(&self) -> Option<u64> {
        self.inner.peek()
    }
    fn store(&self, value: u64) -> Result<()> {
        self.inner.store(value)
    }
    fn fail(&self, last_value: u64) {
        self.inner.fail(last_value)
    }
    fn failure(&self) -> Option<Error> {
        self.inner.failure()
    }
    fn on_stream_failure(&self, hook: crate::backend::semaphore::StreamFailureHook) {
        self.inner.on_stream_failure(hook)
    }
    fn check(&self) -> Result<()> {
        self.inner.check()
    }
    fn notifies(&self) -> bool {
        self.inner.notifies()
    }
    fn mechanism(&self) -> Mechanism {
        self.inner.mechanism()
    }
    fn holds_commands_for(&self, value: u64) -> bool {
        self.inner.holds_commands_for(value)
    }
}

impl<B: Backend> ValidatingBackend<B> {
    /// Wrap `inner`, with a new checker.
    pub fn new(inner: B) -> Self {
        Self::with_checker(inner, Arc::new(HazardChecker::new()))
    }

    /// Wrap `inner`, feeding an existing `checker`.
    pub fn with_checker(inner: B, checker: Arc<HazardChecker>) -> Self {
        ValidatingBackend { inner, checker }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The checker this backend feeds.
    pub fn checker(&self) -> &Arc<HazardChecker> {
        &self.checker
    }

    /// Wrap a stream of the inner backend, registering it as an actor named `name`.
    pub fn wrap_stream(&self, inner: B::Stream, name: &str) -> ValidatingStream<B::Stream> {
        ValidatingStream {
            inner,
            actor: self.checker.add_stream(name),
            name: name.to_owned(),
        }
    }

    /// The calling thread enqueues `access` on `stream` (call it where the work is launched,
    /// before the stream's next record).
    pub fn access(&self, stream: &ValidatingStream<B::Stream>, access: Access) {
        let by = self.checker.current_thread();
        self.checker.access(by, stream.actor, access);
    }

    /// The calling thread makes `access` itself, on the host.
    pub fn host_access(&self, access: Access) {
        let by = self.checker.current_thread();
        self.checker.access(by, by, access);
    }
}

impl<B: Backend> Backend for ValidatingBackend<B> {
    type Stream = ValidatingStream<B::Stream>;
    type Event = ValidatingEvent<B::Event>;

    /// The inner backend's name.
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    /// A new stream of the inner backend, wrapped as an actor named `name`.
    fn new_stream(&self, name: &str) -> Result<Self::Stream> {
        Ok(self.wrap_stream(self.inner.new_stream(name)?, name))
    }

    /// Forwards. Declare what `f` touches with [`access`](Self::access) on the same stream.
    fn launch_host(
        &self,
        stream: &Self::Stream,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<()> {
        self.inner.launch_host(&stream.inner, f)
    }

    /// Forwards (as `launch_host`).
    fn launch_host_always(
        &self,
        stream: &Self::Stream,
        f: Box<dyn FnOnce(Option<std::sync::Arc<str>>) + Send + 'static>,
    ) -> Result<()> {
        self.inner.launch_host_always(&stream.inner, f)
    }

    fn host_work_may_block(&self) -> bool {
        self.inner.host_work_may_block()
    }

    fn check_stream(&self, stream: &Self::Stream) -> Result<()> {
        self.inner.check_stream(&stream.inner)
    }

    /// Forwards.
    fn launch_host_wait(
        &self,
        stream: &Self::Stream,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<()> {
        self.inner.launch_host_wait(&stream.inner, f)
    }

    /// Forwards; once it returns, the calling thread is ordered after everything enqueued on
    /// the stream before the call.
    fn synchronize_stream(&self, stream: &Self::Stream) -> Result<()> {
        let snapshot = self.checker.stream_snapshot(stream.actor);
        self.inner.synchronize_stream(&stream.inner)?;
        let by = self.checker.current_thread();
        self.checker.join_thread(by, Some(&snapshot));
        Ok(())
    }

    fn create_event(&self, options: EventOptions) -> Result<Self::Event> {
        Ok(ValidatingEvent {
            inner: self.inner.create_event(options)?,
            id: self.checker.new_event(),
        })
    }

    fn record(&self, event: &Self::Event, stream: &Self::Stream) -> Result<()> {
        self.inner.record(&event.inner, &stream.inner)?;
        let by = self.checker.current_thread();
        self.checker.record(by, event.id, stream.actor);
        Ok(())
    }

    /// Forwards; a later wait or synchronize on `event` is then ordered after everything the
    /// calling thread did so far (as well as what `event` stood for before).
    fn record_host(&self, event: &Self::Event) {
        self.inner.record_host(&event.inner);
        let by = self.checker.current_thread();
        self.checker.host_record(by, event.id);
    }

    fn wait(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()> {
        self.inner.wait(&stream.inner, &event.inner)?;
        let by = self.checker.current_thread();
        self.checker.stream_wait(by, stream.actor, event.id);
        Ok(())
    }

    fn synchronize(&self, event: &Self::Event) -> Result<()> {
        let snapshot = self.checker.snapshot(event.id);
        self.inner.synchronize(&event.inner)?;
        let by = self.checker.current_thread();
        self.checker.join_thread(by, snapshot.as_ref());
        Ok(())
    }

    fn synchronize_interruptible(
        &self,
        event: &Self::Event,
        interrupt: &dyn Interrupt,
    ) -> Result<SyncOutcome> {
        let snapshot = self.checker.snapshot(event.id);
        let outcome = self
            .inner
            .synchronize_interruptible(&event.inner, interrupt)?;
        if outcome == SyncOutcome::Complete {
            let by = self.checker.current_thread();
            self.checker.join_thread(by, snapshot.as_ref());
        }
        Ok(outcome)
    }

    /// Forwards; a `true` answer orders the calling thread after the event, as a synchronize
    /// does.
    fn query(&self, event: &Self::Event) -> Result<bool> {
        let snapshot = self.checker.snapshot(event.id);
        let done = self.inner.query(&event.inner)?;
        if done {
            let by = self.checker.current_thread();
            self.checker.join_thread(by, snapshot.as_ref());
        }
        Ok(done)
    }

    type Semaphore = ValidatingSemaphore<B::Semaphore>;

    fn stream_id(&self, stream: &Self::Stream) -> u64 {
        self.inner.stream_id(&stream.inner)
    }

    fn create_semaphore(&self, initial: u64, waker: SemaphoreWaker) -> Result<Self::Semaphore> {
        Ok(ValidatingSemaphore {
            inner: self.inner.create_semaphore(initial, waker)?,
            points: Mutex::new(BTreeMap::new()),
        })
    }

    fn signal_on(&self, stream: &Self::Stream, sem: &Self::Semaphore, value: u64) -> Result<()> {
        self.inner.signal_on(&stream.inner, &sem.inner, value)?;
        let id = self.checker.new_event();
        let by = self.checker.current_thread();
        self.checker.record(by, id, stream.actor);
        sem.points
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(value, id);
        Ok(())
    }

    /// Forwards; the stream is ordered after what every signal enqueued so far for `value` or
    /// above covers (their meet): the word only grows, so whichever of them lands first
    /// releases the wait. None enqueued yet (a wait before its signal): after nothing.
    fn wait_on(&self, stream: &Self::Stream, sem: &Self::Semaphore, value: u64) -> Result<()> {
        self.inner.wait_on(&stream.inner, &sem.inner, value)?;
        let points: Vec<EventId> = sem
            .points
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .range(value..)
            .map(|(_, id)| *id)
            .collect();
        let mut meet: Option<VectorClock> = None;
        for id in points {
            let Some(snapshot) = self.checker.snapshot(id) else {
                continue;
            };
            match &mut meet {
                None => meet = Some(snapshot),
                Some(m) => m.meet(&snapshot),
            }
        }
        if let Some(m) = meet {
            let by = self.checker.current_thread();
            self.checker.stream_wait_after(by, stream.actor, &m);
        }
        Ok(())
    }
}

/// Memory calls go to the inner backend unchanged; the checker sees the pools' ordering
/// through their records and waits.
impl<B: MemoryBackend> MemoryBackend for ValidatingBackend<B> {
    type RawMemory = B::RawMemory;
    type AsyncPool = B::AsyncPool;

    fn alloc_memory(&self, bytes: usize) -> Result<B::RawMemory> {
        self.inner.alloc_memory(bytes)
    }

    fn memory_addr(&self, memory: &B::RawMemory) -> u64 {
        self.inner.memory_addr(memory)
    }

    fn create_async_pool(&self, release_threshold: u64) -> Result<B::AsyncPool> {
        self.inner.create_async_pool(release_threshold)
    }

    fn alloc_async(&self, pool: &B::AsyncPool, stream: &Self::Stream, bytes: usize) -> Result<u64> {
        self.inner.alloc_async(pool, &stream.inner, bytes)
    }

    fn free_async(&self, pool: &B::AsyncPool, stream: &Self::Stream, addr: u64) -> Result<()> {
        self.inner.free_async(pool, &stream.inner, addr)
    }

    fn trim_async_pool(&self, pool: &B::AsyncPool, keep: usize) -> Result<()> {
        self.inner.trim_async_pool(pool, keep)
    }

    fn async_pool_usage(&self, pool: &B::AsyncPool) -> Result<MemoryUsage> {
        self.inner.async_pool_usage(pool)
    }
}
