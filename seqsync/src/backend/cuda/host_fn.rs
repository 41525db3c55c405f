//! Host work on a CUDA stream ([`Backend::launch_host`](crate::backend::Backend::launch_host)):
//! `cuLaunchHostFunc` with a boxed closure, whose panic is caught and kept for the stream's
//! next synchronize.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use super::driver;
use cudarc::driver::{sys, CudaStream};

use super::context::make_current;
use crate::error::{panic_message, BackendError, Error, Result};

/// A host function's closure, as `cuLaunchHostFunc` carries it: a thin pointer to a boxed
/// fat `Box<dyn FnOnce>`.
pub(super) type HostFn = Box<dyn FnOnce() + Send + 'static>;

/// Panics caught in host functions, by the raw stream they ran on, until that stream's next
/// synchronize reports them.
#[derive(Debug, Default)]
pub(super) struct HostPanics(Mutex<Vec<(usize, String)>>);

impl HostPanics {
    /// Enqueue `f` on `stream`; a panic of `f` is kept here under the stream.
    pub(super) fn launch(self: &Arc<Self>, stream: &CudaStream, f: HostFn) -> Result<()> {
        // Not a hot call: make the stream's own context current, whatever other code did.
        make_current(stream.context())?;
        let key = stream.cu_stream() as usize;
        let panics = self.clone();
        let guarded: HostFn = Box::new(move || {
            if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
                let message = format!("host function panicked: {}", panic_message(&*p));
                panics
                    .0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((key, message));
            }
        });
        let user_data = Box::into_raw(Box::new(guarded));
        // SAFETY: `stream` is a live stream of this context (the caller's borrow keeps it alive
        // for the call); the trampoline has the `CUhostFn` signature and makes no CUDA call; on
        // success the driver passes `user_data` to it exactly once, and it frees the box.
        let r = unsafe {
            driver::launch_host_func(
                stream.cu_stream(),
                Some(host_fn_trampoline),
                user_data.cast(),
            )
        };
        if r.code() != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: the launch failed, so the driver will never call the trampoline: the box
            // is still ours, taken back exactly once here.
            drop(unsafe { Box::from_raw(user_data) });
        }
        r.check()
    }

    /// The first panic kept for `stream` as an error (the others of that stream forgotten), or
    /// `Ok` if none. Call once the stream has been synchronized.
    pub(super) fn take(&self, stream: &CudaStream) -> Result<()> {
        let key = stream.cu_stream() as usize;
        let mut panics = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match panics.iter().position(|(k, _)| *k == key) {
            Some(i) => {
                let (_, message) = panics.remove(i);
                panics.retain(|(k, _)| *k != key);
                Err(Error::Backend(BackendError::new(
                    "cuda",
                    "cuLaunchHostFunc",
                    message,
                )))
            }
            None => Ok(()),
        }
    }
}

/// The `CUhostFn` of [`HostPanics::launch`]: takes back the box leaked at launch, runs the
/// closure once, catches its panic (unwinding into the driver is undefined behaviour) and
/// frees the box.
unsafe extern "C" fn host_fn_trampoline(user_data: *mut std::ffi::c_void) {
    // SAFETY: `user_data` is the pointer `launch` made with `Box::into_raw` of a
    // `Box<HostFn>`, and the driver calls this exactly once per successful launch, so the box
    // is taken back exactly once.
    let f: Box<HostFn> = unsafe { Box::from_raw(user_data.cast::<HostFn>()) };
    // The closure catches its own panic (see `launch`); this is a last guard so that
    // nothing unwinds out of an `extern "C"` function.
    let _ = catch_unwind(AssertUnwindSafe(move || (*f)()));
}
