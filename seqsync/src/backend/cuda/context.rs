//! Which context a raw driver call runs in, whatever other code on the thread made current
//! (see "Beside other CUDA code" in the folder's docs).

use super::driver;
use cudarc::driver::{sys, CudaContext, CudaStream};

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
    unsafe { driver::ctx_get_current(&mut current) }.check()?;
    if current != ctx.cu_ctx() {
        // SAFETY: `ctx.cu_ctx()` is a live context, kept alive by the `CudaContext` we borrow.
        unsafe { driver::ctx_set_current(ctx.cu_ctx()) }.check()?;
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
