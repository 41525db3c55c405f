//! Events reused across signals: a backend-wide free list, and per timeline the points with a
//! small spare list in front of it, so that a signal neither creates an event nor takes a
//! shared lock once the lists are warm.
//!
//! An event goes back to a list once nobody can wait on it any more: its value is reached
//! (its completion was seen, the host stored a value at or above it, or the word showed one).
//! Re-recording it is then safe even if its last record has not completed: a stream wait
//! already enqueued on it took the event's state when it was enqueued.

use std::sync::{Arc, Mutex};

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::points::{Points, WaitPlan};
use crate::backend::cuda::context::with_context;
use crate::backend::cuda::{driver_error, CudaEvent, Deferred};
use crate::error::{Error, Result};

/// Events a timeline keeps for its next signals before giving them to the backend's list.
const SPARE: usize = 64;
/// Events the backend's list keeps (more are destroyed).
const FREE: usize = 4096;
/// Events a timeline takes from the backend's list at once.
const BATCH: usize = 32;

/// The backend's free events.
pub(crate) struct EventPool {
    errors: Arc<Deferred>,
    free: Mutex<Vec<CudaEvent>>,
}

impl EventPool {
    pub(crate) fn new(errors: &Arc<Deferred>) -> Self {
        EventPool {
            errors: errors.clone(),
            free: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<CudaEvent>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Move up to [`BATCH`] free events into `spare`; create one if there is none.
    fn refill(&self, ctx: &Arc<CudaContext>, spare: &mut Vec<CudaEvent>) -> Result<()> {
        {
            let mut free = self.lock();
            let from = free.len().saturating_sub(BATCH);
            spare.extend(free.drain(from..));
        }
        if !spare.is_empty() {
            return Ok(());
        }
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        spare.push(CudaEvent::create(ctx, &self.errors, flags)?);
        Ok(())
    }

    fn put(&self, evs: impl IntoIterator<Item = CudaEvent>) {
        let mut free = self.lock();
        for ev in evs {
            if free.len() < FREE {
                free.push(ev);
            }
            // else: dropped, which destroys it.
        }
    }
}

/// A timeline's points (see [`Points`]) with their events, and its spare events.
pub(crate) struct EventPoints {
    pub(crate) points: Points<CudaEvent>,
    spare: Vec<CudaEvent>,
    pool: Arc<EventPool>,
}

impl EventPoints {
    pub(crate) fn new(pool: &Arc<EventPool>, initial: u64) -> Self {
        EventPoints {
            points: Points::new(initial),
            spare: Vec::new(),
            pool: pool.clone(),
        }
    }

    /// Record the point of `value` at the current end of `stream`. The caller bound a stream
    /// handle that names no context (`bind_for`); a refill makes `ctx` current itself.
    pub(crate) fn record(
        &mut self,
        ctx: &Arc<CudaContext>,
        stream: &CudaStream,
        value: u64,
    ) -> Result<()> {
        if self.spare.is_empty() {
            self.pool.refill(ctx, &mut self.spare)?;
        }
        let ev = self.spare.pop().expect("refilled");
        // SAFETY: both handles are live and belong to `ctx`; re-recording a reused event is
        // allowed (see the module docs for why no one needs its previous state).
        // Both handles name their context, so none need be current (a driver that still finds
        // none usable gets it made current and a second try).
        let r = with_context(ctx, "cuEventRecord", || unsafe {
            sys::cuEventRecord(ev.raw, stream.cu_stream())
        });
        if let Err(e) = r {
            self.spare.push(ev);
            return Err(e);
        }
        self.points.push(value, stream.cu_stream() as usize, ev);
        Ok(())
    }

    /// Make `stream` wait for `value` on its point. `Ok(true)`: done (a wait enqueued, or none
    /// needed); `Ok(false)`: no point covers `value` yet. No context need be current (the
    /// caller bound a stream whose handle names none).
    pub(crate) fn try_wait(&self, stream: &CudaStream, value: u64) -> Result<bool> {
        match self.points.plan_wait(value) {
            WaitPlan::Nothing => Ok(true),
            WaitPlan::NoPoint => Ok(false),
            WaitPlan::Event(ev) => {
                // SAFETY: both handles are live (the event is owned by the points, borrowed
                // under the caller's lock) and belong to this context.
                with_context(stream.context(), "cuStreamWaitEvent", || unsafe {
                    sys::cuStreamWaitEvent(stream.cu_stream(), ev.raw, 0)
                })?;
                Ok(true)
            }
        }
    }

    /// `value` is reached: free the points at or below it.
    pub(crate) fn reach(&mut self, value: u64) {
        let spare = &mut self.spare;
        self.points.reach(value, |ev| spare.push(ev));
        self.trim();
    }

    /// Give the spare events beyond [`SPARE`] to the backend's list (one lock).
    fn trim(&mut self) {
        if self.spare.len() > SPARE {
            self.pool.put(self.spare.drain(SPARE..));
        }
    }

    /// The highest value whose event completed (`cuEventQuery`, a few per stream in flight: see
    /// [`Points::poll`]), or the highest known reached.
    pub(crate) fn poll(&mut self) -> Result<u64> {
        let spare = &mut self.spare;
        let r = self.points.poll(
            // SAFETY: a live event handle owned by the points; cuEventQuery only reads it.
            |ev| match unsafe { sys::cuEventQuery(ev.raw) } {
                sys::CUresult::CUDA_SUCCESS => Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
                other => Err(other
                    .result()
                    .map_err(|e| driver_error("cuEventQuery", e))
                    .expect_err("not a success code")),
            },
            |ev| spare.push(ev),
        );
        self.trim();
        r
    }
}

impl Drop for EventPoints {
    fn drop(&mut self) {
        let pending: Vec<_> = self.points.drain().collect();
        self.pool.put(self.spare.drain(..).chain(pending));
    }
}

/// Keep the first error a query found (its word reads it back as the failure).
pub(crate) fn remember(slot: &Mutex<Option<Error>>, e: &Error) {
    let mut g = slot.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        *g = Some(e.clone());
    }
}
