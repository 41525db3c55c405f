//! seqsync's own CUDA event: a raw `CUevent` that knows its context and where its `Drop`'s
//! error goes.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::context::make_current;
use super::deferred::Deferred;
use super::driver::{self, with_context};
use crate::error::{Error, Result};

/// A CUDA event owned by seqsync (a raw `CUevent`; destroyed on drop).
#[derive(Debug)]
pub struct CudaEvent {
    pub(super) raw: sys::CUevent,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) deferred: Arc<Deferred>,
}

// SAFETY: a CUevent is an opaque driver handle that the CUDA driver API allows to be used from
// any host thread (record, wait, query and synchronize are thread-safe driver calls); the
// wrapper holds no other state, and the context it belongs to is kept alive by `ctx`.
unsafe impl Send for CudaEvent {}
// SAFETY: as above: every operation on the handle goes through the thread-safe driver.
unsafe impl Sync for CudaEvent {}

/// CUDA events of this crate alive in the process ([`CudaBackend::live_events`]).
static LIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// CUDA events of this crate alive in the process now.
pub(super) fn live() -> usize {
    LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

impl CudaEvent {
    /// A new event of `ctx` with `flags` (`CUevent_flags`), made with `ctx` current (an event
    /// belongs to the context current at its creation, whatever other code made current);
    /// its drop's error goes to `deferred`.
    pub(super) fn create(
        ctx: &Arc<CudaContext>,
        deferred: &Arc<Deferred>,
        flags: u32,
    ) -> Result<Self> {
        make_current(ctx)?;
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: `ctx` is current on this thread (above) and `raw` is a valid out-pointer; on
        // success the driver hands us ownership of a new event.
        unsafe { driver::event_create(&mut raw, flags) }.check()?;
        LIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(CudaEvent {
            raw,
            ctx: ctx.clone(),
            deferred: deferred.clone(),
        })
    }

    /// A new event other processes can open (`INTERPROCESS | DISABLE_TIMING`, the flags the
    /// driver requires), with its handle.
    pub(super) fn create_ipc(
        ctx: &Arc<CudaContext>,
        deferred: &Arc<Deferred>,
    ) -> Result<(Self, [u8; 64])> {
        let flags = sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32
            | sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        let event = CudaEvent::create(ctx, deferred, flags)?;
        let mut handle = sys::CUipcEventHandle { reserved: [0; 64] };
        // SAFETY: `event.raw` is a live event made with the interprocess flag in `ctx`, which
        // `create` left current; `handle` is a valid out-pointer of the handle's type.
        unsafe { driver::ipc_get_event_handle(&mut handle, event.raw) }.check()?;
        Ok((event, handle.reserved.map(|b| b as u8)))
    }

    /// The event of another process's handle (`cuIpcOpenEventHandle`), in `ctx`; destroyed
    /// on drop like any other (the driver's rule for opened events).
    pub(super) fn open_ipc(
        ctx: &Arc<CudaContext>,
        deferred: &Arc<Deferred>,
        handle: &[u8; 64],
    ) -> Result<Self> {
        make_current(ctx)?;
        let handle = sys::CUipcEventHandle {
            reserved: handle.map(|b| b as std::ffi::c_char),
        };
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: `ctx` is current (above), `raw` a valid out-pointer; the handle is passed by
        // value and only read by the driver, which refuses one that names no event.
        unsafe { driver::ipc_open_event_handle(&mut raw, handle) }.check()?;
        LIVE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(CudaEvent {
            raw,
            ctx: ctx.clone(),
            deferred: deferred.clone(),
        })
    }

    /// The raw handle, for driver calls of your own. It stays owned by this `CudaEvent`.
    pub fn cu_event(&self) -> sys::CUevent {
        self.raw
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by cuEventCreate in `ctx`, which `self.ctx` keeps alive, and
        // is destroyed exactly once, here. Destroying an event with pending work is allowed:
        // the driver releases it once the work completes.
        let r = unsafe { driver::event_destroy(self.raw) };
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        // Drop never fails: keep the error apart (never another call's failure).
        self.deferred.note(r.op(), r.result());
    }
}

/// The error of recording `event` on a stream of another context.
#[cold]
pub(super) fn foreign_stream(event: &CudaEvent, stream: &CudaStream) -> Error {
    Error::InvalidArgument {
        ring: "cuda backend".into(),
        message: format!(
            "cannot record an event of context {:p} on a stream of context {:p}",
            event.ctx.cu_ctx(),
            stream.context().cu_ctx()
        ),
    }
}

/// `cuStreamWaitEvent`: work enqueued on `stream` from now on waits for `event`. A handle that
/// names no context must have its own context bound by the caller (`bind_for`).
#[inline]
pub(crate) fn stream_wait(stream: &CudaStream, event: &CudaEvent) -> Result<()> {
    // SAFETY: both handles are live for the duration of the call (the caller borrows them);
    // flags 0 is the only documented value.
    with_context(stream.context(), || unsafe {
        driver::stream_wait_event(stream.cu_stream(), event.raw, 0)
    })
}
