//! Errors that cleanup in a `Drop` could not return, kept apart until
//! [`CudaBackend::take_deferred_errors`](super::CudaBackend::take_deferred_errors) hands them out.

use std::sync::Mutex;

use cudarc::driver::{CudaContext, DriverError};

use super::driver::driver_error;
use crate::error::{BackendError, Error};

/// Errors that cleanup in a `Drop` could not return, kept until
/// [`CudaBackend::take_deferred_errors`](super::CudaBackend::take_deferred_errors) hands them
/// out (at most [`Deferred::KEEP`]; the count of the others is kept).
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    errors: Mutex<(Vec<Error>, usize)>,
}

impl Deferred {
    const KEEP: usize = 32;

    /// Keep the error of `op`, if it failed.
    pub(crate) fn note(&self, op: &'static str, r: std::result::Result<(), DriverError>) {
        if let Err(e) = r {
            self.push_error(driver_error(op, e));
        }
    }

    pub(crate) fn push_error(&self, e: Error) {
        let mut g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if g.0.len() < Self::KEEP {
            g.0.push(e);
        } else {
            g.1 += 1;
        }
    }

    /// Move an error that cudarc (or other code) left in `ctx`'s error slot here, so that the
    /// next cudarc call does not report it as its own failure.
    pub(crate) fn drain(&self, ctx: &CudaContext) {
        self.note("a deferred cudarc cleanup", ctx.check_err());
    }

    /// The errors kept, oldest first, and forget them; when more were dropped, the last entry
    /// says how many.
    pub(super) fn take(&self) -> Vec<Error> {
        let mut g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        let (mut errors, lost) = std::mem::take(&mut *g);
        if lost > 0 {
            errors.push(Error::Backend(BackendError::new(
                "cuda",
                "a deferred cleanup",
                format!("{lost} more deferred cleanup errors were not kept"),
            )));
        }
        errors
    }
}
