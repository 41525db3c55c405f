//! Mechanism (a): one CUDA event per signalled value, and host-side deferral of waits whose
//! signal is not enqueued yet.
//!
//! - `signal_on(s, v)`: record an event on `s` as the point of value `v` (events are reused:
//!   see `event_pool`).
//! - `wait_on(s, v)`: `cuStreamWaitEvent(s, point)` for the lowest point `>= v` already
//!   enqueued. When there is none yet (wait-before-signal), the wait is *deferred*: it goes into
//!   a host-side queue of the stream, and every later timeline operation on that stream
//!   (signals and waits, of any timeline) queues behind it, in order. Whenever a signal is
//!   enqueued (or the host signals, or a timeline fails) the queues are replayed as far as they
//!   can go: a deferred wait becomes a `cuStreamWaitEvent` once its point exists, and the
//!   operations behind it follow. A failed timeline's deferred waits are dropped (released).
//! - host `query`: `cuEventQuery` on the highest pending points.
//!
//! Limit: only timeline operations are held. A kernel or copy you launch on the stream
//! directly, after a deferred wait, is not held (CUDA cannot insert the wait before it later);
//! with this mechanism, enqueue the signal before launching work that depends on it, or use
//! `memops` (the default where the device runs stream memory operations), which waits
//! on the device instead. The graph layer and the pools refuse a call in that case, and a call
//! on a stream that holds deferred operations
//! ([`crate::Error::WaitBeforeSignalUnsupported`], nothing enqueued).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{CudaContext, CudaStream};

use super::event_pool::{remember, EventPoints, EventPool};
use crate::backend::cuda::make_current;
use crate::backend::semaphore::failed_word;
use crate::error::{Error, Result};
use crate::lock::{Guard, Lock};

enum HeldOp {
    Wait(Arc<EventsWord>, u64),
    Signal(Arc<EventsWord>, u64),
}

struct Queue {
    stream: Arc<CudaStream>,
    ops: VecDeque<HeldOp>,
}

/// The deferred operations of every stream of a backend.
#[derive(Default)]
pub(crate) struct DeferredQueues {
    queues: Mutex<HashMap<usize, Queue>>,
    /// Is any operation held? Read without the lock, so that signals and waits skip the
    /// queues when none is. A wait that defers sets it and then looks for its point once
    /// more, so a signal that read `false` recorded its point before that second look.
    any: AtomicBool,
}

fn key(stream: &Arc<CudaStream>) -> usize {
    Arc::as_ptr(stream) as usize
}

impl DeferredQueues {
    /// The queues every CUDA backend of the process shares: a stream may be used with
    /// timelines of several backends (of one device), and a deferred wait must hold the later
    /// timeline operations of every one of them on that stream.
    pub(crate) fn process_wide() -> Arc<Self> {
        static QUEUES: std::sync::OnceLock<Arc<DeferredQueues>> = std::sync::OnceLock::new();
        QUEUES.get_or_init(Arc::default).clone()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<usize, Queue>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replay the queues if any operation is held.
    fn replay_if_held(&self) -> Result<()> {
        if !self.any.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.replay(&mut self.lock())
    }

    /// Replay the queues as far as they go.
    fn replay(&self, queues: &mut HashMap<usize, Queue>) -> Result<()> {
        let mut first_err = None;
        loop {
            let mut progress = false;
            for q in queues.values_mut() {
                if q.ops.is_empty() {
                    continue;
                }
                // Replays also run from host signals, on threads with no context current.
                if let Err(e) = make_current(q.stream.context()) {
                    first_err.get_or_insert(e);
                    continue;
                }
                while let Some(op) = q.ops.front() {
                    let done = match op {
                        HeldOp::Wait(w, v) => w.try_wait(&q.stream, *v),
                        HeldOp::Signal(w, v) => w.record_point(&q.stream, *v).map(|()| true),
                    };
                    match done {
                        Ok(true) => {
                            q.ops.pop_front();
                            progress = true;
                        }
                        Ok(false) => break,
                        Err(e) => {
                            // Drop the operation rather than retry it forever.
                            q.ops.pop_front();
                            first_err.get_or_insert(e);
                        }
                    }
                }
            }
            queues.retain(|_, q| !q.ops.is_empty());
            if !progress {
                break;
            }
        }
        self.any.store(!queues.is_empty(), Ordering::SeqCst);
        first_err.map_or(Ok(()), Err)
    }

    /// Does `stream` have timeline operations held now?
    pub(crate) fn holds(&self, stream: &Arc<CudaStream>) -> bool {
        self.any.load(Ordering::SeqCst) && self.lock().contains_key(&key(stream))
    }

    /// Deferred waits and signals held right now (for tests and diagnostics).
    /// Only the operations of words made with `pool` (one backend's event pool: the queues
    /// are shared by every backend of the process).
    pub(crate) fn held(&self, pool: &Arc<EventPool>) -> usize {
        let word = |op: &HeldOp| match op {
            HeldOp::Wait(w, _) | HeldOp::Signal(w, _) => w.pool_id,
        };
        let id = Arc::as_ptr(pool) as usize;
        self.lock()
            .values()
            .map(|q| q.ops.iter().filter(|op| word(op) == id).count())
            .sum()
    }
}

pub(crate) struct EventsWord {
    /// The event pool it was made with (its backend's), by address: see
    /// [`DeferredQueues::held`].
    pool_id: usize,
    ctx: Arc<CudaContext>,
    deferred: Arc<DeferredQueues>,
    /// The crate's short-section lock (`lock/`): held for an event record or stream wait, and
    /// the list.
    points: Lock<EventPoints>,
    /// What `points` knows, published under its lock after every change (the highest value
    /// known reached, or the failed word), so that [`peek`](Self::peek) takes no lock.
    known: AtomicU64,
    failure: Mutex<Option<Error>>,
}

impl EventsWord {
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        pool: &Arc<EventPool>,
        deferred: &Arc<DeferredQueues>,
        initial: u64,
    ) -> Self {
        EventsWord {
            pool_id: Arc::as_ptr(pool) as usize,
            ctx: ctx.clone(),
            deferred: deferred.clone(),
            points: Lock::new(EventPoints::new(pool, initial)),
            known: AtomicU64::new(initial),
            failure: Mutex::new(None),
        }
    }

    /// A panic under the lock (none is expected: driver errors are values) leaves at worst a
    /// point not listed: a later wait is deferred, a later load asks again.
    fn points(&self) -> Guard<'_, EventPoints> {
        self.points.lock()
    }

    /// Publish what `p` knows to [`peek`](Self::peek) (under `p`'s lock, so in order).
    fn publish(&self, p: &EventPoints) -> u64 {
        let known = p.points.failed().unwrap_or(p.points.reached());
        self.known.store(known, Ordering::Release);
        known
    }

    /// The word: the highest value whose event completed, or the failed word.
    pub(crate) fn load(&self) -> Result<u64> {
        let mut p = self.points();
        if let Some(w) = p.points.failed() {
            return Ok(w);
        }
        let r = p.poll().inspect_err(|e| remember(&self.failure, e));
        self.publish(&p);
        r
    }

    /// Would a stream wait for `value` enqueued now be a device wait (or need none)? Not while
    /// no point at or above it is recorded: its signal is not enqueued, or is itself held in
    /// a deferred queue.
    pub(crate) fn holds_commands_for(&self, value: u64) -> bool {
        let p = self.points();
        !matches!(p.points.plan_wait(value), super::points::WaitPlan::NoPoint)
    }

    /// The highest value known reached (or the failed word), without a driver call or a lock.
    pub(crate) fn peek(&self) -> u64 {
        self.known.load(Ordering::Acquire)
    }

    /// The caller bound a stream handle that names no context (`bind_for`).
    fn record_point(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        self.points().record(&self.ctx, stream, value)
    }

    /// Make `stream` wait for `value` if its point exists; `Ok(false)` if not yet. The caller
    /// made the context current.
    fn try_wait(&self, stream: &Arc<CudaStream>, value: u64) -> Result<bool> {
        self.points().try_wait(stream, value)
    }

    /// The caller bound a stream handle that names no context (`bind_for`).
    pub(crate) fn signal_on(self: &Arc<Self>, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        if !self.deferred.any.load(Ordering::SeqCst) {
            // No queue, so none of this stream: record now. A wait deferred meanwhile on
            // another thread sets `any` and looks again (see `DeferredQueues::any`).
            self.record_point(stream, value)?;
            return self.deferred.replay_if_held();
        }
        let mut queues = self.deferred.lock();
        match queues.get_mut(&key(stream)) {
            Some(q) => q.ops.push_back(HeldOp::Signal(self.clone(), value)),
            None => self.record_point(stream, value)?,
        }
        self.deferred.replay(&mut queues)
    }

    /// The caller bound a stream handle that names no context (`bind_for`).
    pub(crate) fn wait_on(self: &Arc<Self>, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        if !self.deferred.any.load(Ordering::SeqCst) && self.try_wait(stream, value)? {
            return Ok(());
        }
        let mut queues = self.deferred.lock();
        if let Some(q) = queues.get_mut(&key(stream)) {
            q.ops.push_back(HeldOp::Wait(self.clone(), value));
            return Ok(());
        }
        if self.try_wait(stream, value)? {
            return Ok(());
        }
        let mut ops = VecDeque::new();
        ops.push_back(HeldOp::Wait(self.clone(), value));
        queues.insert(
            key(stream),
            Queue {
                stream: stream.clone(),
                ops,
            },
        );
        self.deferred.any.store(true, Ordering::SeqCst);
        // Look again: a signal that read `any` before it was set recorded its point by now.
        self.deferred.replay(&mut queues)
    }

    pub(crate) fn store(&self, value: u64) -> Result<()> {
        {
            let mut p = self.points();
            p.reach(value);
            self.publish(&p);
        }
        self.deferred.replay_if_held()
    }

    pub(crate) fn fail(&self, last_value: u64) {
        {
            let mut p = self.points();
            p.points.fail(failed_word(last_value));
            self.publish(&p);
        }
        // Errors here belong to other operations of the queues; they were dropped.
        let _ = self.deferred.replay_if_held();
    }

    pub(crate) fn failure(&self) -> Option<Error> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
