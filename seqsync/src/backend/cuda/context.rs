//! Which context a raw driver call runs in, whatever other code on the thread made current
//! (see "Beside other CUDA code" in the folder's docs).

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::driver::check;
use crate::error::Result;

/// Is `stream` one of the handles that name no context (`NULL`/`CU_STREAM_LEGACY`: the legacy
/// default stream, `CU_STREAM_PER_THREAD`)? The driver resolves those through the calling
/// thread's current context.
fn names_no_context(stream: sys::CUstream) -> bool {
    let h = stream as usize;
    h == 0 || h == 0x1 || h == 0x2
}

/// Make `ctx` current on the calling thread unless it already is. Raw driver calls, so that
/// an error some `Drop` left in cudarc's error slot is not reported as this call's failure.
pub(crate) fn make_current(ctx: &CudaContext) -> Result<()> {
    let mut current: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: `current` is a valid out-pointer; the call only reads this thread's binding.
    check("cuCtxGetCurrent", unsafe {
        sys::cuCtxGetCurrent(&mut current)
    })?;
    if current != ctx.cu_ctx() {
        // SAFETY: `ctx.cu_ctx()` is a live context, kept alive by the `CudaContext` we borrow.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(ctx.cu_ctx())
        })?;
    }
    Ok(())
}

/// Before enqueueing work on `stream` with a raw driver call: if its handle names no context,
/// make the stream's own context current, so the work lands on that context's default stream
/// whatever other code made current meanwhile. A no-op for every other stream.
#[inline]
pub(crate) fn bind_for(stream: &CudaStream) -> Result<()> {
    if names_no_context(stream.cu_stream()) {
        make_current(stream.context())
    } else {
        Ok(())
    }
}

/// Run the raw driver call `call`; a call on handles that name their context needs no current
/// context, but should the driver still find none usable (`CUDA_ERROR_INVALID_CONTEXT`, e.g.
/// other code left none current on this thread), make `ctx` current and call once more.
#[inline]
pub(super) fn with_context(
    ctx: &CudaContext,
    op: &'static str,
    call: impl Fn() -> sys::CUresult,
) -> Result<()> {
    match call() {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        r => retry_or_fail(ctx, op, r, &call),
    }
}

/// [`with_context`] off its fast path (kept out of line, so that the callers' hot code stays
/// short): bind and call again after `CUDA_ERROR_INVALID_CONTEXT`, else the error.
#[cold]
#[inline(never)]
fn retry_or_fail(
    ctx: &CudaContext,
    op: &'static str,
    r: sys::CUresult,
    call: &dyn Fn() -> sys::CUresult,
) -> Result<()> {
    if r == sys::CUresult::CUDA_ERROR_INVALID_CONTEXT {
        make_current(ctx)?;
        return check(op, call());
    }
    check(op, r)
}
