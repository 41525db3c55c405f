//! A pipeline run's threads keep one Python thread state across their stage calls.
//!
//! `Python::attach` on a thread that Python did not create makes a thread state, and deletes
//! it again when it detaches: every stage call would make one and tear it down (and lose any
//! `threading.local` a stage keeps between calls). A run's thread calls [`keep`] before its
//! first stage call instead: the thread state is made once, the thread detaches from it at
//! once, and every later attach reuses it; it is deleted when the thread ends.
//!
//! Only for threads that end before the interpreter can finalize: a pipeline run's threads
//! (scoped in `pipeline::run`, joined while the calling Python thread waits for `run`), never
//! a thread that may outlive the interpreter (a host backend's stream threads).

use std::cell::RefCell;

use pyo3::ffi;

/// The thread state this thread made, detached.
struct Kept {
    gstate: ffi::PyGILState_STATE,
    tstate: *mut ffi::PyThreadState,
}

impl Drop for Kept {
    fn drop(&mut self) {
        // SAFETY: `tstate` is this thread's own thread state, detached by `keep` and not
        // attached since (every attach in between was paired with its detach); the interpreter
        // is alive (this thread is joined before `Pipeline.run` returns). Restoring it then
        // releasing the `PyGILState_Ensure` of `keep` deletes it.
        unsafe {
            ffi::PyEval_RestoreThread(self.tstate);
            ffi::PyGILState_Release(self.gstate);
        }
    }
}

thread_local! {
    static KEPT: RefCell<Option<Kept>> = const { RefCell::new(None) };
}

/// Makes this thread's Python thread state now, if it has none, and keeps it, detached, until
/// the thread ends. Call it only while not attached.
pub(crate) fn keep() {
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        if k.is_some() {
            return;
        }
        // SAFETY: only reads which thread state belongs to this thread (none on a thread that
        // Python did not create and that never attached); needs no attached thread.
        if !unsafe { ffi::PyGILState_GetThisThreadState() }.is_null() {
            return; // a Python thread, or attached: its state lives on without us
        }
        // SAFETY: this thread is not attached (it has no thread state at all, checked above)
        // and the interpreter is initialized (the module is loaded); `Ensure` makes the thread
        // state and attaches it, `SaveThread` detaches it again at once, keeping it.
        let (gstate, tstate) = unsafe {
            let gstate = ffi::PyGILState_Ensure();
            (gstate, ffi::PyEval_SaveThread())
        };
        *k = Some(Kept { gstate, tstate });
    });
}
