//! [`TrackingBackend`]: wraps any [`Backend`]; its records, stream waits and synchronizes
//! close epochs and establish the *completed* and *ordered* facts, and
//! [`submit`](TrackingBackend::submit) inserts the waits a buffer's earlier uses need.

use std::sync::{Arc, Mutex, Weak};

use super::buffer::{Ctx, Registry, Submitted, Tracked, Use};
use super::state::{HandoffStats, State};
use super::task::with_current;
use crate::backend::{Backend, EventOptions, Interrupt, SemaphoreWaker, SyncOutcome};
use crate::error::{Error, Result};
use crate::happens_before::{AccessKind, ActorId};

/// A backend that tracks buffers: every call goes to the inner backend, and keeps the epoch
/// model of the [module docs](super) in step. Cheap to clone; clones share the tracker.
///
/// Streams are wrapped with [`wrap_stream`](Self::wrap_stream), values with
/// [`track`](Self::track); work that uses tracked values is enqueued through
/// [`submit`](Self::submit). Because it implements [`Backend`], an
/// [`EventRingbuf`](crate::EventRingbuf)`<TrackingBackend<_>>` closes epochs with its own
/// records, waits and synchronizes.
pub struct TrackingBackend<B: Backend> {
    inner: B,
    shared: Arc<Shared<B>>,
}

struct Shared<B: Backend> {
    registry: Arc<Registry>,
    /// Every tracked stream, by id, for the fallback wait on a buffer's old stream.
    streams: Mutex<Vec<Weak<B::Stream>>>,
    /// The event of the fallback wait (re-recorded each time: a wait already enqueued keeps
    /// the point it was made for).
    spare: Mutex<Option<B::Event>>,
}

impl<B: Backend> Clone for TrackingBackend<B> {
    fn clone(&self) -> Self {
        TrackingBackend {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for TrackingBackend<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackingBackend")
            .field("inner", &self.inner.name())
            .field("stats", &self.stats())
            .finish()
    }
}

/// A stream of a [`TrackingBackend`]: the inner stream plus its epochs. Dropping it
/// synchronizes it first (its work then counts as completed), so do not drop it while its
/// work waits for something only the dropping thread does later (a timeline value it has yet
/// to signal): the drop would wait for it.
pub struct TrackedStream<B: Backend> {
    inner: Arc<B::Stream>,
    id: ActorId,
    name: String,
    backend: TrackingBackend<B>,
}

impl<B: Backend> std::fmt::Debug for TrackedStream<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackedStream")
            .field("name", &self.name)
            .field("id", &self.id.index())
            .finish()
    }
}

impl<B: Backend> TrackedStream<B> {
    /// The inner backend's stream. Work enqueued on it directly is not seen by the tracker:
    /// use [`TrackingBackend::submit`] for work on tracked values.
    pub fn inner(&self) -> &B::Stream {
        &self.inner
    }

    /// The name it was wrapped with.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<B: Backend> Drop for TrackedStream<B> {
    fn drop(&mut self) {
        // Never fail in drop: a failed stream's work is over too, as far as waiting goes. But
        // dropped by its own work, the stream still has that work (and what follows) to run:
        // it stays tracked (a use elsewhere still waits for it) until a last closure of its
        // own marks it dropped, and only then lets it go.
        if let Err(Error::WaitsForItself { .. }) =
            self.backend.inner.synchronize_stream(&self.inner)
        {
            let (backend, id, keep) = (self.backend.clone(), self.id, self.inner.clone());
            let last = Box::new(move || {
                backend.lock().stream_dropped(id);
                drop(keep);
            });
            // Not enqueued (a backend error): its id stays taken and nothing counts as
            // completed, which only costs waits.
            let _ = self.backend.inner.launch_host(&self.inner, last);
            return;
        }
        self.backend.lock().stream_dropped(self.id);
    }
}

/// An event of a [`TrackingBackend`]: the inner event plus what its last record covers.
pub struct TrackedEvent<B: Backend> {
    inner: B::Event,
    id: usize,
    registry: Arc<Registry>,
}

impl<B: Backend> std::fmt::Debug for TrackedEvent<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackedEvent")
            .field("id", &self.id)
            .finish()
    }
}

impl<B: Backend> TrackedEvent<B> {
    /// The inner backend's event.
    pub fn inner(&self) -> &B::Event {
        &self.inner
    }
}

impl<B: Backend> Drop for TrackedEvent<B> {
    fn drop(&mut self) {
        self.registry.lock().remove_event(self.id);
    }
}

impl<B: Backend> TrackingBackend<B> {
    /// Track buffers over `inner`.
    pub fn new(inner: B) -> Self {
        TrackingBackend {
            inner,
            shared: Arc::new(Shared {
                registry: Arc::new(Registry::default()),
                streams: Mutex::new(Vec::new()),
                spare: Mutex::new(None),
            }),
        }
    }

    /// A tracker that ignores both facts: moving a buffer to another stream always waits for
    /// everything its old stream had queued, as CUDA.jl did before epochs and as cudarc's
    /// per-slice events do. The baseline the shortcuts are measured against.
    pub fn without_shortcuts(inner: B) -> Self {
        let tb = Self::new(inner);
        tb.lock().no_shortcuts = true;
        tb
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn lock(&self) -> crate::lock::Guard<'_, State> {
        self.shared.registry.lock()
    }

    /// Wrap a stream of the inner backend (no task owns it until one submits to it).
    pub fn wrap_stream(&self, inner: B::Stream, name: &str) -> TrackedStream<B> {
        let inner = Arc::new(inner);
        // The tracker's lock first, then the list of streams: the order `prepare` takes them
        // in (a submission planning its waits looks streams up under the tracker's lock).
        let mut state = self.lock();
        let mut streams = self
            .shared
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let id = state.add_stream();
        match streams.get_mut(id.index()) {
            // The id of a stream dropped before.
            Some(old) => *old = Arc::downgrade(&inner),
            None => {
                debug_assert_eq!(id.index(), streams.len());
                streams.push(Arc::downgrade(&inner));
            }
        }
        drop(streams);
        drop(state);
        TrackedStream {
            inner,
            id,
            name: name.to_owned(),
            backend: self.clone(),
        }
    }

    /// Track `value`: from now on, work that uses it goes through [`submit`](Self::submit).
    pub fn track<T>(&self, value: T) -> Tracked<T> {
        Tracked::new(value, self.shared.registry.clone())
    }

    /// What the tracker decided so far.
    pub fn stats(&self) -> HandoffStats {
        self.lock().stats
    }

    fn check_own(&self, stream: &TrackedStream<B>) -> Result<()> {
        if Arc::ptr_eq(&stream.backend.shared, &self.shared) {
            Ok(())
        } else {
            Err(Error::invalid(
                "handoff",
                format!("stream '{}' belongs to another tracker", stream.name),
            ))
        }
    }

    /// Host work is about to be enqueued on `stream`: the calling thread counts as a task
    /// submitting to it. The entry only has to come first: the work is no use of a tracked
    /// value, so where it lands among other threads' closes does not matter.
    fn enter_for_host_work(&self, stream: &TrackedStream<B>) -> Result<()> {
        self.check_own(stream)?;
        with_current(|task| self.lock().enter_stream(stream.id, task));
        Ok(())
    }

    fn check_event(&self, event: &TrackedEvent<B>) -> Result<()> {
        if Arc::ptr_eq(&event.registry, &self.shared.registry) {
            Ok(())
        } else {
            Err(Error::invalid(
                "handoff",
                format!("event #{} belongs to another tracker", event.id),
            ))
        }
    }

    fn check_uses(&self, uses: &[Use<'_>]) -> Result<()> {
        match uses
            .iter()
            .position(|u| !Arc::ptr_eq(u.registry, &self.shared.registry))
        {
            None => Ok(()),
            Some(i) => Err(Error::invalid(
                "handoff",
                format!("use #{i} is of a buffer of another tracker"),
            )),
        }
    }

    /// Plan a use on `stream` and insert its waits; returns how many.
    fn prepare(
        &self,
        state: &mut State,
        stream: &TrackedStream<B>,
        uses: impl Iterator<Item = (usize, AccessKind)> + Clone,
        task: Option<&Arc<super::task::Task>>,
    ) -> Result<usize> {
        let plan = state.plan(stream.id, uses.clone(), task);
        for &old in &plan.waits {
            let handle = self
                .shared
                .streams
                .lock()
                .unwrap_or_else(|e| e.into_inner())[old.index()]
            .upgrade();
            // A dropped stream was synchronized first: nothing of it is left to wait for.
            let Some(old_stream) = handle else { continue };
            let mut spare = self.shared.spare.lock().unwrap_or_else(|e| e.into_inner());
            if spare.is_none() {
                *spare = Some(self.inner.create_event(EventOptions::default())?);
            }
            let event = spare.as_ref().expect("created above");
            self.inner.record(event, &old_stream)?;
            self.inner.wait(&stream.inner, event)?;
            state.waited_for_stream(stream.id, old, task);
        }
        state.stamp_planned(stream.id, uses);
        Ok(plan.waits.len())
    }

    /// Enqueue work that uses tracked values on `stream`: first the stream waits that their
    /// earlier uses on other streams need (none for what the *completed* or *ordered* fact
    /// covers, none for a read after reads), then `f`, which enqueues the work on the inner
    /// stream and reaches the values through [`Tracked::get`]. Each use is stamped with the
    /// stream's epoch before `f` and again after it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a stream or buffer of another tracker; the inner
    /// backend's errors from the waits (then `f` is not called).
    ///
    /// # Examples
    ///
    /// ```
    /// use seqsync::memory::handoff::TrackingBackend;
    /// use seqsync::HostBackend;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    ///
    /// let host = HostBackend::new();
    /// let tb = TrackingBackend::new(host.clone());
    /// let (s, t) = (tb.wrap_stream(host.new_stream("s")?, "s"), tb.wrap_stream(host.new_stream("t")?, "t"));
    /// let a = tb.track(Arc::new(AtomicU32::new(0)));
    /// tb.submit(&s, &[a.write()], |s, cx| {
    ///     let a = a.get(cx).clone();
    ///     s.launch(move || a.store(1, Ordering::Relaxed));
    /// })?;
    /// // Nothing orders t after s yet: the tracker inserts one wait.
    /// let r = tb.submit(&t, &[a.read()], |t, cx| {
    ///     let a = a.get(cx).clone();
    ///     t.launch(move || assert_eq!(a.load(Ordering::Relaxed), 1));
    /// })?;
    /// assert_eq!(r.waits, 1);
    /// // t is ordered after s now: another read needs no wait.
    /// assert_eq!(tb.submit(&t, &[a.read()], |_, _| ())?.waits, 0);
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    pub fn submit<R>(
        &self,
        stream: &TrackedStream<B>,
        uses: &[Use<'_>],
        f: impl FnOnce(&B::Stream, &Ctx<'_>) -> R,
    ) -> Result<Submitted<R>> {
        self.check_own(stream)?;
        self.check_uses(uses)?;
        let kinds = uses.iter().map(|u| (u.id, u.kind));
        let waits = with_current(|task| {
            let mut state = self.lock();
            self.prepare(&mut state, stream, kinds.clone(), task)
        })?;
        let value = f(&stream.inner, &Ctx { uses });
        self.lock().stamp_submitted(stream.id, kinds);
        Ok(Submitted { value, waits })
    }

    /// Take `buffer`'s value out for work the tracker does not see (a kernel launched later,
    /// a library call), to be used on `stream`: inserts the waits a write on `stream` needs,
    /// stamps the buffer **once**, and marks it raw.
    ///
    /// A raw reference gets no shortcut: work enqueued through it after the epoch it was
    /// stamped with closed is not covered by that close (`raw; synchronize; launch(raw)` is
    /// not covered by the synchronize). So, until the buffer is used on another stream, any
    /// use elsewhere waits for everything submitted to `stream` so far, whatever the events
    /// and synchronizes say; that move ends the raw state. Work enqueued through the old
    /// reference after the move is not ordered with the new stream's work at all: order it
    /// yourself, or take the reference again.
    ///
    /// # Errors
    /// As [`submit`](Self::submit).
    pub fn raw<'a, T>(&self, buffer: &'a Tracked<T>, stream: &TrackedStream<B>) -> Result<&'a T> {
        self.check_own(stream)?;
        if !Arc::ptr_eq(buffer.registry(), &self.shared.registry) {
            return Err(Error::invalid(
                "handoff",
                "raw: the buffer belongs to another tracker",
            ));
        }
        with_current(|task| {
            let mut state = self.lock();
            let one = std::iter::once((buffer.id(), AccessKind::Write));
            self.prepare(&mut state, stream, one, task)?;
            state.taint(buffer.id(), stream.id);
            Ok(buffer.raw_value())
        })
    }
}

impl<B: Backend> Backend for TrackingBackend<B> {
    type Stream = TrackedStream<B>;
    type Event = TrackedEvent<B>;

    /// The inner backend's name.
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    /// A new stream of the inner backend, wrapped ([`wrap_stream`](Self::wrap_stream)).
    fn new_stream(&self, name: &str) -> Result<Self::Stream> {
        Ok(self.wrap_stream(self.inner.new_stream(name)?, name))
    }

    /// Forwards; the calling thread counts as a task submitting to the stream. `f` must not
    /// touch tracked values (use [`submit`](Self::submit) for that).
    fn launch_host(
        &self,
        stream: &Self::Stream,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<()> {
        self.enter_for_host_work(stream)?;
        self.inner.launch_host(&stream.inner, f)
    }

    /// As [`launch_host`](Self::launch_host).
    fn launch_host_always(
        &self,
        stream: &Self::Stream,
        f: Box<dyn FnOnce(Option<Arc<str>>) + Send + 'static>,
    ) -> Result<()> {
        self.enter_for_host_work(stream)?;
        self.inner.launch_host_always(&stream.inner, f)
    }

    /// As [`launch_host`](Self::launch_host).
    fn launch_host_wait(
        &self,
        stream: &Self::Stream,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<()> {
        self.enter_for_host_work(stream)?;
        self.inner.launch_host_wait(&stream.inner, f)
    }

    fn host_work_may_block(&self) -> bool {
        self.inner.host_work_may_block()
    }

    /// A stream of another tracker (or of another kind, for the inner backend) is refused.
    fn check_stream(&self, stream: &Self::Stream) -> Result<()> {
        self.check_own(stream)?;
        self.inner.check_stream(&stream.inner)
    }

    fn create_event(&self, options: EventOptions) -> Result<Self::Event> {
        let inner = self.inner.create_event(options)?;
        Ok(TrackedEvent {
            inner,
            id: self.lock().add_event(),
            registry: self.shared.registry.clone(),
        })
    }

    /// Records, and closes the stream's epoch: the event covers it if the calling thread is
    /// the only live task submitting to the stream, else nothing.
    ///
    /// What must be atomic with what (the backend call is made under the tracker's lock, see
    /// `lock/`): the backend record and the snapshot it publishes, against a stream wait on
    /// the same event (which must join the snapshot of the very recording its own backend call
    /// waited for) and against a submission's stamps on the stream (a stamp read before the
    /// close must be of work enqueued before the backend record). Taking the call out of the
    /// lock is possible: close and publish under the lock *before* the call (a stamp read
    /// before the close is then of work enqueued before the backend record), mark the event in
    /// flight until the call is made (a wait that starts meanwhile counts for nothing), and let
    /// a record that finds another record of the event in flight cover nothing. Built and
    /// measured, that was no faster on the host (a lock section is needed either way, and the
    /// mark adds stores), so the call stays under the lock.
    fn record(&self, event: &Self::Event, stream: &Self::Stream) -> Result<()> {
        self.check_own(stream)?;
        self.check_event(event)?;
        with_current(|task| {
            let mut state = self.lock();
            self.inner.record(&event.inner, &stream.inner)?;
            state.record(event.id, stream.id, task);
            Ok(())
        })
    }

    /// Forwarded as is: a host thread's work makes no stream use, so the tracker has nothing
    /// to close; a wrapped [`ValidatingBackend`](crate::hazard::ValidatingBackend) still sees
    /// the host thread's order.
    fn record_host(&self, event: &Self::Event) {
        self.inner.record_host(&event.inner);
    }

    /// Waits, and orders the stream's later work after what the event covers (the
    /// *ordered* fact). Made under the tracker's lock, so no record slips in between: the
    /// backend wait and the joined snapshot are of the same recording. Host waits
    /// ([`synchronize`](Self::synchronize), [`query`](Self::query)) need no such atomicity
    /// (they check the event's generation after their call instead), nor does
    /// [`launch_host`](Self::launch_host) (its work stamps nothing).
    fn wait(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()> {
        self.check_own(stream)?;
        self.check_event(event)?;
        with_current(|task| {
            let mut state = self.lock();
            self.inner.wait(&stream.inner, &event.inner)?;
            state.stream_wait(stream.id, event.id, task);
            Ok(())
        })
    }

    /// Synchronizes without holding the tracker's lock; what the event covered is then
    /// *completed*, unless it was recorded again meanwhile.
    fn synchronize(&self, event: &Self::Event) -> Result<()> {
        self.check_event(event)?;
        let view = self.lock().event_view(event.id);
        self.inner.synchronize(&event.inner)?;
        self.lock().event_completed(event.id, view);
        Ok(())
    }

    fn synchronize_interruptible(
        &self,
        event: &Self::Event,
        interrupt: &dyn Interrupt,
    ) -> Result<SyncOutcome> {
        self.check_event(event)?;
        let view = self.lock().event_view(event.id);
        let outcome = self
            .inner
            .synchronize_interruptible(&event.inner, interrupt)?;
        if outcome == SyncOutcome::Complete {
            self.lock().event_completed(event.id, view);
        }
        Ok(outcome)
    }

    /// A `true` answer makes what the event covered *completed*, as a synchronize does.
    fn query(&self, event: &Self::Event) -> Result<bool> {
        self.check_event(event)?;
        let view = self.lock().event_view(event.id);
        let done = self.inner.query(&event.inner)?;
        if done {
            self.lock().event_completed(event.id, view);
        }
        Ok(done)
    }

    /// Closes the stream's epoch, synchronizes without the lock, then marks the closed part
    /// *completed* (if the calling thread is the only live task submitting to the stream).
    fn synchronize_stream(&self, stream: &Self::Stream) -> Result<()> {
        self.check_own(stream)?;
        let snapshot = with_current(|task| self.lock().start_stream_sync(stream.id, task));
        self.inner.synchronize_stream(&stream.inner)?;
        if let Some(s) = snapshot {
            self.lock().completed(&s);
        }
        Ok(())
    }

    type Semaphore = B::Semaphore;

    fn stream_id(&self, stream: &Self::Stream) -> u64 {
        self.inner.stream_id(&stream.inner)
    }

    /// Forwards. Timeline signals and waits add no *ordered* or *completed* fact to the
    /// tracker (it then asks for a wait it could have skipped, never the other way round).
    fn create_semaphore(&self, initial: u64, waker: SemaphoreWaker) -> Result<Self::Semaphore> {
        self.inner.create_semaphore(initial, waker)
    }

    fn signal_on(&self, stream: &Self::Stream, sem: &Self::Semaphore, value: u64) -> Result<()> {
        self.check_own(stream)?;
        self.inner.signal_on(&stream.inner, sem, value)
    }

    fn wait_on(&self, stream: &Self::Stream, sem: &Self::Semaphore, value: u64) -> Result<()> {
        self.check_own(stream)?;
        self.inner.wait_on(&stream.inner, sem, value)
    }
}
