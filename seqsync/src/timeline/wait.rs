//! Host waits on timelines: the crate's wait strategy (`wait_strategy.rs`), with a
//! [`Parker`] registered with every timeline the wait is on as its way to sleep.
//!
//! A host signal, a failure, or (on the host backend) a stream signal unparks the waiter, so on
//! a backend that wakes waiters a parked wait costs no CPU. When a backend cannot wake them
//! (CUDA: the GPU writes the word), the parked wait polls the word as the strategy says. Each
//! timeline learns how long its host waits take ([`Expectation`]); a wait on several timelines
//! goes by the soonest expected end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::primitive::{Condvar, Mutex};
use crate::wait_strategy::{self, Expectation};

/// A one-shot-per-round wake-up flag for one waiting thread.
pub(crate) struct Parker {
    woken: Mutex<bool>,
    cv: Condvar,
}

impl Parker {
    pub(crate) fn new() -> Self {
        Parker {
            woken: Mutex::new(false),
            cv: Condvar::new(),
        }
    }

    /// Sleep until unparked or `timeout` passed; consumes the wake-up.
    pub(crate) fn park_timeout(&self, timeout: Duration) {
        let mut woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        if !*woken {
            woken = self
                .cv
                .wait_timeout(woken, timeout)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *woken = false;
    }

    pub(crate) fn unpark(&self) {
        *self.woken.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_one();
    }
}

/// The parked host waiters of one timeline.
pub(crate) struct Waiters {
    list: Mutex<Vec<Arc<Parker>>>,
    /// How long host waits on this timeline took lately.
    expected: Expectation,
}

impl Waiters {
    pub(crate) fn new() -> Self {
        Waiters {
            list: Mutex::new(Vec::new()),
            expected: Expectation::new(),
        }
    }

    fn add(&self, p: &Arc<Parker>) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        list.push(p.clone());
    }

    fn remove(&self, p: &Arc<Parker>) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = list.iter().position(|q| Arc::ptr_eq(q, p)) {
            list.swap_remove(i);
        }
    }

    /// Wake every parked waiter. Call after changing what they look at. It takes the list's
    /// lock even when nobody waits: a waiter registers under that lock before it looks, so
    /// either it sees the change or this sees it (an atomic count checked without the lock
    /// would need sequentially consistent ordering on both sides; loom found the lost wake-up
    /// once that was weakened).
    pub(crate) fn wake_all(&self) {
        for p in self.list.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            p.unpark();
        }
    }
}

/// What a wait is about: the timelines' waiter lists, and whether their backends wake them.
pub(crate) struct WaitOn<'a> {
    pub(crate) waiters: Vec<&'a Waiters>,
    pub(crate) all_notify: bool,
}

/// Block until `check` returns `Some`, or `timeout` passes (`None` then).
pub(crate) fn block_until<R>(
    on: &WaitOn<'_>,
    timeout: Duration,
    mut check: impl FnMut() -> Option<R>,
) -> Option<R> {
    if let Some(r) = check() {
        return Some(r);
    }
    let deadline = Instant::now().checked_add(timeout);
    let expected = on.waiters.iter().filter_map(|w| w.expected.get()).min();
    let parker = Arc::new(Parker::new());
    on.waiters.iter().for_each(|w| w.add(&parker));
    let waited = wait_strategy::wait_until(expected, on.all_notify, deadline, check, |d| {
        parker.park_timeout(d)
    });
    on.waiters.iter().for_each(|w| w.remove(&parker));
    on.waiters.iter().for_each(|w| waited.teach(&w.expected));
    waited.result
}
