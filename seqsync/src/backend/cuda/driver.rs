//! The driver library itself: is it present, and its errors as seqsync's.

use cudarc::driver::{sys, DriverError};

use crate::error::{BackendError, Error, Result};

/// Is a CUDA driver library loadable here? Never panics.
pub fn driver_present() -> bool {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by its usual names
    // and reports whether that worked; it has no preconditions.
    unsafe { sys::is_culib_present() }
}

/// A cudarc driver error as an [`Error::Backend`] naming the driver call `op` (for cudarc calls
/// of your own, e.g. kernel launches).
pub fn driver_error(op: &'static str, e: DriverError) -> Error {
    Error::Backend(BackendError {
        backend: "cuda",
        op,
        code: Some(e.0 as i64),
        message: e.to_string(),
    })
}

/// The raw driver call `op`'s result as seqsync's.
#[inline]
pub(super) fn check(op: &'static str, r: sys::CUresult) -> Result<()> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        r => Err(call_failed(op, r)),
    }
}

#[cold]
#[inline(never)]
fn call_failed(op: &'static str, r: sys::CUresult) -> Error {
    driver_error(op, r.result().expect_err("not a success code"))
}
