//! The calling thread's timer slack, lowered while a guard lives (Linux), so that short sleeps
//! of an interruptible synchronize are as short as asked for.

/// Lowers the calling thread's timer slack while it lives (Linux), restoring it on drop.
pub(super) struct TightTimerSlack(Option<libc::c_ulong>);

impl TightTimerSlack {
    pub(super) fn new() -> Self {
        // SAFETY: PR_GET_TIMERSLACK takes no pointer arguments and only reads this thread's
        // setting; it returns the slack in nanoseconds, or -1 on error.
        let old = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        if old <= 0 {
            return TightTimerSlack(None);
        }
        // SAFETY: PR_SET_TIMERSLACK with a plain integer changes only this thread's slack.
        let ok =
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) } == 0;
        TightTimerSlack(ok.then_some(old as libc::c_ulong))
    }
}

impl Drop for TightTimerSlack {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            // SAFETY: as in `new`: restores this thread's own previous setting.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, old, 0, 0, 0) };
        }
    }
}
