//! Calls that may block, made without the GIL and interruptible by Ctrl-C.
//!
//! A blocking call runs on a helper thread while the calling thread, without the GIL, checks for
//! a pending signal every [`POLL`]; on one (`KeyboardInterrupt`) it runs the call's `cancel`
//! (stop the ring, cancel the run), which makes the helper return soon, joins it and raises.
//! Without the GIL another Python thread can make the progress the call waits for, so two
//! Python threads on one ring never deadlock.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// How often a blocked call looks for Ctrl-C: well inside the 100 ms a user waits.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// Where the helper thread leaves its result: `None` until it is done, `Some(None)` if it
/// panicked.
struct Slot<T> {
    result: Mutex<Option<Option<T>>>,
    done: Condvar,
}

/// Runs `f` without the GIL; on Ctrl-C, `cancel()` and re-raise `KeyboardInterrupt`.
pub(crate) fn interruptible<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> T + Send,
    cancel: impl Fn() + Sync,
) -> PyResult<T> {
    let slot = Slot {
        result: Mutex::new(None),
        done: Condvar::new(),
    };
    std::thread::scope(|s| {
        let worker = s.spawn(|| {
            // Set even if `f` panics, so that the caller never waits forever.
            struct Finish<'a, T>(&'a Slot<T>, Option<T>);
            impl<T> Drop for Finish<'_, T> {
                fn drop(&mut self) {
                    *self.0.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(self.1.take());
                    self.0.done.notify_all();
                }
            }
            let mut finish = Finish(&slot, None);
            finish.1 = Some(f());
        });
        loop {
            let got = py.detach(|| {
                let guard = slot.result.lock().unwrap_or_else(|e| e.into_inner());
                let (mut guard, _) = slot
                    .done
                    .wait_timeout_while(guard, POLL, |r| r.is_none())
                    .unwrap_or_else(|e| e.into_inner());
                guard.take()
            });
            match got {
                Some(Some(v)) => {
                    let _ = py.detach(|| worker.join());
                    return Ok(v);
                }
                Some(None) => {
                    let _ = py.detach(|| worker.join());
                    return Err(PyRuntimeError::new_err("seqsync: a blocking call panicked"));
                }
                None => {}
            }
            if let Err(e) = py.check_signals() {
                cancel();
                let _ = py.detach(|| worker.join());
                return Err(e);
            }
        }
    })
}

/// A ring call `f` without the GIL: on this thread when it cannot block, else interruptibly,
/// `stop` (the ring's) on Ctrl-C.
pub(crate) fn ring_call(
    py: Python<'_>,
    may_block: bool,
    f: impl FnOnce() -> seqsync::Result<()> + Send,
    stop: impl Fn() + Sync,
) -> PyResult<()> {
    use crate::errors::IntoPyResult;
    if may_block {
        interruptible(py, f, stop)?.py_err()
    } else {
        py.detach(f).py_err()
    }
}
