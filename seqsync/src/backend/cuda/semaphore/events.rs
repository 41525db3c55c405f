//! Mechanism (a): one CUDA event per signalled value.
//!
//! - `signal_on(s, v)`: record an event on `s` as the point of value `v` (events are reused:
//!   see `event_pool`).
//! - `wait_on(s, v)`: `cuStreamWaitEvent(s, point)` for the lowest point `>= v` already
//!   enqueued, which holds everything enqueued on `s` after it.
//! - host `query`: `cuEventQuery` on the highest pending points.
//!
//! Limit: a wait before its signal is enqueued cannot be made: CUDA cannot insert a wait
//! before work enqueued already, and an event that was never recorded does not wait. The
//! timeline refuses such a wait ([`crate::Error::WaitBeforeSignalUnsupported`], nothing
//! enqueued), as the graph layer and the pools refuse a call that would need one; enqueue the
//! signal first, or use `memops` (the default where the device runs stream memory
//! operations), which waits on the device.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaStream};

use super::event_pool::{remember, EventPoints, EventPool};
use crate::backend::semaphore::failed_word;
use crate::error::{Error, Result};
use crate::lock::{Guard, Lock};

pub(crate) struct EventsWord {
    ctx: Arc<CudaContext>,
    /// The crate's short-section lock (`lock/`): held for an event record or stream wait, and
    /// the list.
    points: Lock<EventPoints>,
    /// What `points` knows, published under its lock after every change (the highest value
    /// known reached, or the failed word), so that [`peek`](Self::peek) takes no lock.
    known: AtomicU64,
    failure: Mutex<Option<Error>>,
}

impl EventsWord {
    pub(crate) fn new(ctx: &Arc<CudaContext>, pool: &Arc<EventPool>, initial: u64) -> Self {
        EventsWord {
            ctx: ctx.clone(),
            points: Lock::new(EventPoints::new(pool, initial)),
            known: AtomicU64::new(initial),
            failure: Mutex::new(None),
        }
    }

    /// A panic under the lock (none is expected: driver errors are values) leaves at worst a
    /// point not listed: a later wait before it is refused, a later load asks again.
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
    /// no point at or above it is recorded (its signal is not enqueued).
    pub(crate) fn holds_commands_for(&self, value: u64) -> bool {
        let p = self.points();
        !matches!(p.points.plan_wait(value), super::points::WaitPlan::NoPoint)
    }

    /// The highest value known reached (or the failed word), without a driver call or a lock.
    pub(crate) fn peek(&self) -> u64 {
        self.known.load(Ordering::Acquire)
    }

    /// The caller bound a stream handle that names no context (`bind_for`).
    pub(crate) fn signal_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        self.points().record(&self.ctx, stream, value)
    }

    /// Make `stream` wait for `value` on the point of its signal. The timeline enqueues no
    /// wait before its signal with this mechanism (it refuses it), so a missing point is an
    /// error here too, with nothing enqueued. The caller bound a stream handle that names no
    /// context (`bind_for`).
    pub(crate) fn wait_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        if self.points().try_wait(stream, value)? {
            return Ok(());
        }
        Err(Error::invalid(
            "timeline (events)",
            format!(
                "a stream wait for value {value} before its signal is enqueued: the events \
                 mechanism cannot hold the work after it"
            ),
        ))
    }

    pub(crate) fn store(&self, value: u64) -> Result<()> {
        let mut p = self.points();
        p.reach(value);
        self.publish(&p);
        Ok(())
    }

    pub(crate) fn fail(&self, last_value: u64) {
        let mut p = self.points();
        p.points.fail(failed_word(last_value));
        self.publish(&p);
    }

    pub(crate) fn failure(&self) -> Option<Error> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
