//! Events reused across signals: a backend-wide free list, and per timeline a ring of points
//! whose slots past the points hold spare events (see [`Points`]), so that a signal neither
//! creates nor moves an event, nor takes a shared lock, once the ring is warm.
//!
//! An event goes back to a list once nobody can wait on it any more: its value is reached
//! (its completion was seen, the host stored a value at or above it, or the word showed one).
//! Re-recording it is then safe even if its last record has not completed: a stream wait
//! already enqueued on it took the event's state when it was enqueued.

use std::sync::{Arc, Mutex};

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::points::{Points, WaitPlan};
use crate::backend::cuda::driver::{self, with_context};
use crate::backend::cuda::{CudaEvent, Deferred};
use crate::error::{Error, Result};

/// Slots a timeline's ring keeps at least (more while more points are in flight) when it gives
/// spare events back to the backend's list.
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

/// A timeline's points (see [`Points`]), whose ring also holds its spare events. `repr(C)`:
/// the points' hot fields first.
#[repr(C)]
pub(crate) struct EventPoints {
    pub(crate) points: Points<CudaEvent>,
    pool: Arc<EventPool>,
    /// Reaches until the ring is next asked for spare events beyond its need.
    until_trim: u32,
}

/// Reaches between two looks for spare events to give back.
const TRIM_EVERY: u32 = 64;

impl EventPoints {
    pub(crate) fn new(pool: &Arc<EventPool>, initial: u64) -> Self {
        EventPoints {
            points: Points::new(initial),
            pool: pool.clone(),
            until_trim: TRIM_EVERY,
        }
    }

    /// Record the point of `value` at the current end of `stream`. The caller bound a stream
    /// handle that names no context (`bind_for`); a refill makes `ctx` current itself.
    #[inline(always)]
    pub(crate) fn record(
        &mut self,
        ctx: &Arc<CudaContext>,
        stream: &CudaStream,
        value: u64,
    ) -> Result<()> {
        if self.points.next_event().is_none() {
            self.make_room(ctx)?;
        }
        let ev = self.points.next_event().expect("room made");
        // SAFETY: both handles are live and belong to `ctx`; re-recording a reused event is
        // allowed (see the module docs for why no one needs its previous state).
        // Both handles name their context, so none need be current (a driver that still finds
        // none usable gets it made current and a second try). On an error nothing changed.
        with_context(ctx, || unsafe {
            driver::event_record(ev.raw, stream.cu_stream())
        })?;
        self.points.push(value, stream.cu_stream() as usize);
        Ok(())
    }

    /// Every slot holds a point: first ask which of them completed (their events are free
    /// again; without it a timeline that the host never reads would take a new event for
    /// every signal), then, if none did, add spare events from the backend's list.
    #[cold]
    fn make_room(&mut self, ctx: &Arc<CudaContext>) -> Result<()> {
        // An error of a query is the word's to report, at its next load; here it only means
        // no room was made.
        let _ = self.poll();
        if self.points.next_event().is_some() {
            return Ok(());
        }
        let mut spare = Vec::new();
        self.pool.refill(ctx, &mut spare)?;
        self.points.add_spare(spare);
        Ok(())
    }

    /// Make `stream` wait for `value` on its point. `Ok(true)`: done (a wait enqueued, or none
    /// needed); `Ok(false)`: no point covers `value` yet. No context need be current (the
    /// caller bound a stream whose handle names none).
    #[inline(always)]
    pub(crate) fn try_wait(&self, stream: &CudaStream, value: u64) -> Result<bool> {
        match self.points.plan_wait(value) {
            WaitPlan::Nothing => Ok(true),
            WaitPlan::NoPoint => Ok(false),
            WaitPlan::Event(ev) => {
                // The event is owned by the points, borrowed under the caller's lock.
                crate::backend::cuda::event::stream_wait(stream, ev)?;
                Ok(true)
            }
        }
    }

    /// `value` is reached: the points at or below it are done.
    pub(crate) fn reach(&mut self, value: u64) {
        self.points.reach(value);
        self.trim();
    }

    /// Now and then, give the spare events beyond what the timeline needs to the backend's
    /// list (see [`Points::spare_beyond`]).
    fn trim(&mut self) {
        self.until_trim -= 1;
        if self.until_trim == 0 {
            self.until_trim = TRIM_EVERY;
            let extra = self.points.spare_beyond(SPARE);
            if !extra.is_empty() {
                self.pool.put(extra);
            }
        }
    }

    /// The highest value whose event completed (`cuEventQuery`, a few per stream in flight: see
    /// [`Points::poll`]), or the highest known reached.
    pub(crate) fn poll(&mut self) -> Result<u64> {
        let r = self.points.poll(|ev| {
            // SAFETY: a live event handle owned by the points; cuEventQuery only reads it.
            let r = unsafe { driver::event_query(ev.raw) };
            match r.code() {
                sys::CUresult::CUDA_SUCCESS => Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
                _ => r.check().map(|()| false),
            }
        });
        self.trim();
        r
    }
}

impl Drop for EventPoints {
    fn drop(&mut self) {
        let all: Vec<_> = self.points.drain().collect();
        self.pool.put(all);
    }
}

/// Keep the first error a query found (its word reads it back as the failure).
pub(crate) fn remember(slot: &Mutex<Option<Error>>, e: &Error) {
    let mut g = slot.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        *g = Some(e.clone());
    }
}
