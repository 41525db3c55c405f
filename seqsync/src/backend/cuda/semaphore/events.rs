//! Mechanism (a): one CUDA event per signalled value, and host-side deferral of waits whose
//! signal is not enqueued yet.
//!
//! - `signal_on(s, v)`: record a new event on `s` as the point of value `v`.
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
//! stream memory operations (the default where the device supports them).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::slots::record_now;
use crate::backend::cuda::{driver_error, make_current, CudaEvent, Deferred};
use crate::backend::semaphore::failed_word;
use crate::error::{Error, Result};

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
}

fn key(stream: &Arc<CudaStream>) -> usize {
    Arc::as_ptr(stream) as usize
}

impl DeferredQueues {
    fn lock(&self) -> MutexGuard<'_, HashMap<usize, Queue>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replay the queues as far as they go.
    fn replay(queues: &mut HashMap<usize, Queue>) -> Result<()> {
        let mut first_err = None;
        loop {
            let mut progress = false;
            for q in queues.values_mut() {
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
        first_err.map_or(Ok(()), Err)
    }

    /// Deferred waits and signals held right now (for tests and diagnostics).
    pub(crate) fn held(&self) -> usize {
        self.lock().values().map(|q| q.ops.len()).sum()
    }
}

struct Points {
    /// The highest value known reached.
    reached: u64,
    failed: Option<u64>,
    /// Events of enqueued signals not yet known complete, by value.
    pending: BTreeMap<u64, CudaEvent>,
}

pub(crate) struct EventsWord {
    ctx: Arc<CudaContext>,
    errors: Arc<Deferred>,
    deferred: Arc<DeferredQueues>,
    points: Mutex<Points>,
    failure: Mutex<Option<Error>>,
}

impl EventsWord {
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        errors: &Arc<Deferred>,
        deferred: &Arc<DeferredQueues>,
        initial: u64,
    ) -> Self {
        EventsWord {
            ctx: ctx.clone(),
            errors: errors.clone(),
            deferred: deferred.clone(),
            points: Mutex::new(Points {
                reached: initial,
                failed: None,
                pending: BTreeMap::new(),
            }),
            failure: Mutex::new(None),
        }
    }

    fn points(&self) -> MutexGuard<'_, Points> {
        self.points.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The word: the highest value whose event completed, or the failed word.
    pub(crate) fn load(&self) -> Result<u64> {
        let mut p = self.points();
        if let Some(w) = p.failed {
            return Ok(w);
        }
        // Highest first: once one is complete, every lower value is reached.
        let mut done = None;
        for (v, ev) in p.pending.iter().rev() {
            // SAFETY: a live event handle owned by `pending`; cuEventQuery only reads it.
            match unsafe { sys::cuEventQuery(ev.raw) } {
                sys::CUresult::CUDA_SUCCESS => {
                    done = Some(*v);
                    break;
                }
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                other => {
                    let e = other
                        .result()
                        .map_err(|e| driver_error("cuEventQuery", e))
                        .expect_err("not a success code");
                    *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                    return Err(e);
                }
            }
        }
        if let Some(v) = done {
            p.reached = p.reached.max(v);
            p.pending = p.pending.split_off(&(v + 1));
        }
        Ok(p.reached)
    }

    fn record_point(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        let ev = record_now(&self.ctx, &self.errors, stream)?;
        self.points().pending.insert(value, ev);
        Ok(())
    }

    /// Make `stream` wait for `value` if its point exists; `Ok(false)` if not yet.
    fn try_wait(&self, stream: &Arc<CudaStream>, value: u64) -> Result<bool> {
        let p = self.points();
        if p.failed.is_some() || p.reached >= value {
            return Ok(true);
        }
        let Some((_, ev)) = p.pending.range(value..).next() else {
            return Ok(false);
        };
        make_current(&self.ctx)?;
        // SAFETY: both handles are live (the event is owned by `pending`, under its lock) and
        // belong to this context.
        let r = unsafe { sys::cuStreamWaitEvent(stream.cu_stream(), ev.raw, 0) };
        r.result()
            .map_err(|e| driver_error("cuStreamWaitEvent", e))?;
        Ok(true)
    }

    pub(crate) fn signal_on(self: &Arc<Self>, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        let mut queues = self.deferred.lock();
        match queues.get_mut(&key(stream)) {
            Some(q) => q.ops.push_back(HeldOp::Signal(self.clone(), value)),
            None => self.record_point(stream, value)?,
        }
        DeferredQueues::replay(&mut queues)
    }

    pub(crate) fn wait_on(self: &Arc<Self>, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        let mut queues = self.deferred.lock();
        if let Some(q) = queues.get_mut(&key(stream)) {
            q.ops.push_back(HeldOp::Wait(self.clone(), value));
            return Ok(());
        }
        if !self.try_wait(stream, value)? {
            let mut ops = VecDeque::new();
            ops.push_back(HeldOp::Wait(self.clone(), value));
            queues.insert(
                key(stream),
                Queue {
                    stream: stream.clone(),
                    ops,
                },
            );
        }
        Ok(())
    }

    pub(crate) fn store(&self, value: u64) -> Result<()> {
        {
            let mut p = self.points();
            p.reached = p.reached.max(value);
            p.pending = p.pending.split_off(&(value + 1));
        }
        DeferredQueues::replay(&mut self.deferred.lock())
    }

    pub(crate) fn fail(&self, last_value: u64) {
        self.points().failed = Some(failed_word(last_value));
        // Errors here belong to other operations of the queues; they were dropped.
        let _ = DeferredQueues::replay(&mut self.deferred.lock());
    }

    pub(crate) fn failure(&self) -> Option<Error> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
