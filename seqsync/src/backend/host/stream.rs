//! A host stream: a worker thread that runs enqueued operations in order.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::chaos::{Chaos, SplitMix64};
use crate::backend::{Interrupt, SyncOutcome};
use crate::error::{panic_message, BackendError, Error, Result};

/// A unit of work on a stream.
pub(crate) enum Job {
    /// Run a user closure.
    Run(Box<dyn FnOnce() + Send + 'static>),
    /// Block the stream until `on` has completed `pos` operations (and fail it if `on` failed
    /// by then: an event wait).
    Gate { on: Arc<StreamShared>, pos: u64 },
    /// Block the stream until `on` has completed `pos` operations, whether or not they failed
    /// (one replay of a graph after the one before: the order holds, a failure is its own
    /// stream's).
    Follow { on: Arc<StreamShared>, pos: u64 },
    /// Run a closure even when the stream has failed; it gets the failure's message then (a
    /// timeline signal: it fails the timeline instead of signalling it).
    Always(Box<dyn FnOnce(Option<Arc<str>>) + Send + 'static>),
    /// Block the stream until a closure returns that waits for something outside it (a
    /// timeline value): a stream dropped meanwhile does not wait for it (see the drop).
    Wait(Box<dyn FnOnce() + Send + 'static>),
}

/// Where a stream failed: the index of the failing operation and why.
#[derive(Clone)]
pub(crate) struct Failure {
    pub(crate) op_index: u64,
    pub(crate) message: Arc<str>,
}

pub(crate) struct State {
    queue: VecDeque<Job>,
    /// Operations ever enqueued; a record captures this as its position.
    pub(crate) enqueued: u64,
    failure: Option<Failure>,
    shutdown: bool,
    /// The worker is blocked on something outside the stream (a timeline value, another
    /// stream's event): a drop does not join it then.
    parked: bool,
    /// The worker has run everything after the shutdown and is returning.
    exited: bool,
    /// The worker's count of operations taken when an enqueue last stopped waiting for room
    /// because it took none for [`STALL_GRACE`]: later enqueues do not wait again until it
    /// takes one.
    stalled_at: Option<u64>,
}

/// The part of a stream that events and other streams' gates hold on to.
pub(crate) struct StreamShared {
    pub(crate) name: String,
    /// Unique among all streams ever made ([`crate::backend::Backend::stream_id`]).
    pub(crate) id: u64,
    pub(crate) state: Mutex<State>,
    /// Operations completed (run, skipped after a failure, or passed gates). Written under
    /// `state`'s lock, readable without it.
    completed: AtomicU64,
    /// The worker waits here for new operations.
    work_cv: Condvar,
    /// Waiters (host synchronizes, other streams' gates) wait here for progress.
    done_cv: Condvar,
    /// The worker thread, once it runs: a wait made on it for work behind the running
    /// operation would wait for itself.
    worker: std::sync::OnceLock<std::thread::ThreadId>,
}

/// How long an interruptible host wait sleeps between checks of its interrupt. A stopped ring
/// also wakes it through its own condition variable only where it can; this bounds the rest.
const INTERRUPT_POLL: Duration = Duration::from_micros(200);

/// Operations a stream holds before its worker takes them. Produced by any thread that
/// enqueues, consumed by the stream's one worker; the size is about a CUDA launch queue's, so
/// that a host that enqueues faster than the stream runs is held back as it would be on a GPU
/// (a pipeline of stream stages only would otherwise grow the queue with every batch), and a
/// full queue's closures stay a few hundred KiB.
pub(crate) const QUEUE_BOUND: usize = 4096;

/// How long a full queue's worker may take no operation while an enqueue waits for room before
/// the enqueue stops waiting and enqueues anyway: the worker may be waiting for something
/// the enqueuing thread itself would do next (a timeline signal, a lock it holds), and a wait
/// for room must not turn that into a hang.
pub(crate) const STALL_GRACE: Duration = Duration::from_millis(250);

impl StreamShared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere while holding it; the state stays
        // consistent because every critical section is a few field updates.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// The outcome of the first `pos` operations, once they have completed.
    fn outcome(&self, state: &State, pos: u64) -> Result<()> {
        match &state.failure {
            Some(f) if f.op_index < pos => Err(Error::Backend(BackendError::new(
                "host",
                "stream operation",
                format!("stream '{}' failed: {}", self.name, f.message),
            ))),
            _ => Ok(()),
        }
    }

    /// Block until the first `pos` operations have completed, or `interrupt` fires.
    pub(crate) fn wait_for(&self, pos: u64, interrupt: &dyn Interrupt) -> Result<SyncOutcome> {
        self.check_not_waiting_for_itself(pos)?;
        let mut state = self.lock();
        while self.completed() < pos {
            if interrupt.interrupted() {
                return Ok(SyncOutcome::Interrupted);
            }
            state = self
                .done_cv
                .wait_timeout(state, INTERRUPT_POLL)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        self.outcome(&state, pos).map(|()| SyncOutcome::Complete)
    }

    /// [`Error::WaitsForItself`] if the calling thread is this stream's worker and the first
    /// `pos` operations include the one it runs or one behind it.
    pub(crate) fn check_not_waiting_for_itself(&self, pos: u64) -> Result<()> {
        if self.completed() < pos && self.worker.get() == Some(&std::thread::current().id()) {
            return Err(Error::WaitsForItself {
                stream: self.name.clone(),
            });
        }
        Ok(())
    }

    /// Non-blocking: `Some(outcome)` once the first `pos` operations have completed.
    pub(crate) fn poll(&self, pos: u64) -> Option<Result<()>> {
        if self.completed() < pos {
            return None;
        }
        Some(self.outcome(&self.lock(), pos))
    }

    pub(crate) fn enqueue(&self, job: Job) {
        self.enqueue_at(job);
    }

    /// [`enqueue`](Self::enqueue), returning the job's place in the stream's order (what an
    /// event recorded right after it would hold).
    ///
    /// A full queue ([`QUEUE_BOUND`]) makes the caller wait for room first (see
    /// [`make_room`](Self::make_room)).
    pub(crate) fn enqueue_at(&self, job: Job) -> u64 {
        let mut state = self.lock();
        if state.queue.len() >= QUEUE_BOUND {
            state = self.make_room(state);
        }
        state.queue.push_back(job);
        state.enqueued += 1;
        let pos = state.enqueued;
        drop(state);
        self.work_cv.notify_one();
        pos
    }

    /// Wait while the queue is full and its worker moves: it takes an operation at least every
    /// [`STALL_GRACE`]. Never on the worker itself (a closure that enqueues on its own stream
    /// would wait for itself), nor for a worker that has stopped taking operations (it may
    /// wait for this very thread): the operation is then enqueued past the bound, and so are
    /// later ones until the worker takes one again. Time is read here only, never by the
    /// worker.
    #[cold]
    fn make_room<'a>(&'a self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        if self.worker.get() == Some(&std::thread::current().id()) {
            return state;
        }
        let taken = |st: &State| st.enqueued - st.queue.len() as u64;
        let (mut seen, mut since) = (taken(&state), Instant::now());
        while state.queue.len() >= QUEUE_BOUND && !state.exited {
            if state.stalled_at == Some(seen) {
                break;
            }
            if since.elapsed() >= STALL_GRACE {
                state.stalled_at = Some(seen);
                break;
            }
            // Woken as the worker takes the operation that makes room; the timeout only
            // bounds a missed wake-up and lets the grace expire.
            state = self
                .done_cv
                .wait_timeout(state, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            if taken(&state) != seen {
                (seen, since) = (taken(&state), Instant::now());
            }
        }
        state
    }

    fn fail(&self, op_index: u64, message: Arc<str>) {
        let mut state = self.lock();
        if state.failure.is_none() {
            state.failure = Some(Failure { op_index, message });
        }
    }

    fn failed(&self) -> bool {
        self.lock().failure.is_some()
    }

    fn failure_message(&self) -> Option<Arc<str>> {
        self.lock().failure.as_ref().map(|f| f.message.clone())
    }
}

/// A host stream: closures enqueued with [`HostStream::launch`] run one after another, in
/// order, on the stream's own worker thread.
///
/// Dropping a stream finishes the work already enqueued and joins its thread, unless that
/// thread is blocked on something outside the stream (a timeline wait, another stream's
/// event): then, as a CUDA stream's destroy, the drop returns at once and the work runs once
/// the wait is released (by a signal, a failure or the timeline's drop). A closure that
/// panics fails the stream: later closures are skipped, and every synchronize on an event
/// recorded after the panic, and every stream that waits on such an event, gets an
/// [`Error::Backend`] naming the stream and the panic message. Nobody hangs.
///
/// A stream holds at most 4096 operations its worker has not taken yet: as on a CUDA stream
/// whose launch queue is full, an enqueue beyond that waits until the worker takes one, so a
/// host that enqueues faster than the stream runs is held back instead of growing the queue
/// with every batch. The wait lasts only while the worker moves: one that took nothing for
/// 250 ms may be waiting for the enqueuing thread itself (a timeline value it would signal
/// next), and the operation is then enqueued past the bound instead of hanging (later ones too,
/// until the worker takes one).
/// A closure that enqueues on its own stream never waits.
///
/// ```
/// use std::sync::{Arc, atomic::{AtomicU32, Ordering}};
/// let host = seqsync::HostBackend::new();
/// let stream = host.new_stream("copy")?;
/// let n = Arc::new(AtomicU32::new(0));
/// for _ in 0..3 {
///     let n = n.clone();
///     stream.launch(move || { n.fetch_add(1, Ordering::SeqCst); });
/// }
/// stream.synchronize()?;
/// assert_eq!(n.load(Ordering::SeqCst), 3);
/// # Ok::<(), seqsync::Error>(())
/// ```
pub struct HostStream {
    pub(crate) shared: Arc<StreamShared>,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for HostStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostStream")
            .field("name", &self.shared.name)
            .finish()
    }
}

impl HostStream {
    /// Operations a stream holds that its worker has not taken yet before an enqueue waits
    /// for room (see the type's docs).
    pub const QUEUE_BOUND: usize = QUEUE_BOUND;

    pub(crate) fn spawn(name: &str, chaos: Option<(Chaos, SplitMix64)>) -> Result<HostStream> {
        let shared = Arc::new(StreamShared {
            name: name.to_owned(),
            id: crate::backend::next_stream_id(),
            state: Mutex::new(State {
                queue: VecDeque::new(),
                enqueued: 0,
                failure: None,
                shutdown: false,
                parked: false,
                exited: false,
                stalled_at: None,
            }),
            completed: AtomicU64::new(0),
            work_cv: Condvar::new(),
            done_cv: Condvar::new(),
            worker: std::sync::OnceLock::new(),
        });
        let worker_shared = shared.clone();
        // A name the OS cannot take (a NUL) names the thread by the stream's number instead.
        let thread_name = if name.contains('\0') {
            "seqsync-stream".to_string()
        } else {
            format!("seqsync-stream-{name}")
        };
        let worker = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || run_worker(&worker_shared, chaos))
            .map_err(|e| {
                Error::Backend(BackendError::new(
                    "host",
                    "spawn a stream's worker thread",
                    format!("stream '{}': {e}", name.escape_debug()),
                ))
            })?;
        Ok(HostStream {
            shared,
            worker: Some(worker),
        })
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Enqueue `f`; it runs after everything enqueued before it.
    pub fn launch<F>(&self, f: F)
    where
        F: FnOnce() + Send + 'static,
    {
        self.shared.enqueue(Job::Run(Box::new(f)));
    }

    /// Block until everything enqueued so far has run.
    ///
    /// # Errors
    /// [`Error::Backend`] if a closure enqueued so far panicked (or waited on a failed stream).
    pub fn synchronize(&self) -> Result<()> {
        let pos = self.shared.lock().enqueued;
        self.shared
            .wait_for(pos, &crate::backend::NeverInterrupt)
            .map(|_| ())
    }

    /// Has a closure on this stream panicked?
    pub fn is_failed(&self) -> bool {
        self.shared.failed()
    }
}

impl Drop for HostStream {
    /// The work already enqueued still runs, in order, on the stream's thread. The drop joins
    /// that thread unless it is blocked on something outside the stream (a timeline wait, an
    /// event of another stream): as a CUDA stream's destroy, it then returns at once and the
    /// thread ends once the rest has run. A stream dropped before the timeline it waits on
    /// (whose drop releases that wait) does not hang.
    fn drop(&mut self) {
        // Its failure bookkeeping goes once settled (see `stream_gone`); the work left still
        // runs.
        crate::backend::stream_gone(self.shared.id);
        let mut state = self.shared.lock();
        state.shutdown = true;
        self.shared.work_cv.notify_all();
        // Dropped by one of its own closures (the last handle of something that owns it): the
        // worker goes on with what is left after this closure, then ends by itself.
        if self
            .worker
            .as_ref()
            .is_some_and(|w| w.thread().id() == std::thread::current().id())
        {
            return;
        }
        loop {
            if state.parked {
                // Detached: it ends by itself once what it waits for comes.
                return;
            }
            if state.exited || self.worker.is_none() {
                break;
            }
            // Woken when an operation ends, when the worker parks and when it returns; the
            // timeout only bounds a missed wake-up.
            state = self
                .shared
                .done_cv
                .wait_timeout(state, Duration::from_millis(10))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        drop(state);
        if let Some(worker) = self.worker.take() {
            // The worker catches closure panics itself, so join only fails if the runtime
            // aborted it; nothing is left to clean up then.
            let _ = worker.join();
        }
    }
}

impl StreamShared {
    /// Run `wait`, which blocks on something outside the stream, with the worker marked
    /// parked (a drop does not join it meanwhile).
    fn parked<R>(&self, wait: impl FnOnce() -> R) -> R {
        self.lock().parked = true;
        self.done_cv.notify_all();
        let r = wait();
        self.lock().parked = false;
        r
    }
}

/// A closure's panic, as the stream's failure message; its payload dropped where a panic of its
/// own drop cannot kill the worker (its waiters would hang).
fn panicked(payload: Box<dyn std::any::Any + Send>) -> Arc<str> {
    let message = format!("closure panicked: {}", panic_message(&*payload));
    crate::error::drop_panic_payload(payload);
    message.into()
}

fn run_worker(shared: &Arc<StreamShared>, mut chaos: Option<(Chaos, SplitMix64)>) {
    let _ = shared.worker.set(std::thread::current().id());
    let mut index: u64 = 0;
    loop {
        let op = {
            let mut state = shared.lock();
            loop {
                if let Some(op) = state.queue.pop_front() {
                    if state.queue.len() + 1 == QUEUE_BOUND {
                        // Room for one: an enqueuer waiting for it goes on now, not only
                        // once this operation ends.
                        shared.done_cv.notify_all();
                    }
                    break op;
                }
                if state.shutdown {
                    state.exited = true;
                    shared.done_cv.notify_all();
                    return;
                }
                state = shared
                    .work_cv
                    .wait(state)
                    .unwrap_or_else(|e| e.into_inner());
            }
        };
        if let Some((c, rng)) = chaos.as_mut() {
            c.delay(rng);
        }
        match op {
            Job::Run(f) => {
                if shared.failed() {
                    // Skipped; dropping its captures may panic too, which must not kill the
                    // worker (waiters would hang).
                    let _ = catch_unwind(AssertUnwindSafe(move || drop(f)));
                } else {
                    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
                        shared.fail(index, panicked(payload));
                    }
                }
            }
            Job::Always(f) => {
                let failure = shared.failure_message();
                if let Err(payload) = catch_unwind(AssertUnwindSafe(move || f(failure))) {
                    shared.fail(index, panicked(payload));
                }
            }
            Job::Wait(f) => {
                if shared.failed() {
                    let _ = catch_unwind(AssertUnwindSafe(move || drop(f)));
                } else if let Err(payload) = catch_unwind(AssertUnwindSafe(|| shared.parked(f))) {
                    shared.lock().parked = false;
                    shared.fail(index, panicked(payload));
                }
            }
            Job::Follow { on, pos } => {
                let _ = shared.parked(|| on.wait_for(pos, &crate::backend::NeverInterrupt));
            }
            Job::Gate { on, pos } => {
                let waited = shared.parked(|| on.wait_for(pos, &crate::backend::NeverInterrupt));
                if let Err(e) = waited {
                    shared.fail(
                        index,
                        format!("waited on an event of a failed stream: {e}").into(),
                    );
                }
            }
        }
        index += 1;
        let state = shared.lock();
        shared.completed.store(index, Ordering::Release);
        drop(state);
        shared.done_cv.notify_all();
    }
}
