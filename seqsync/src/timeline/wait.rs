//! Host waits on timelines: spin briefly, then park until a signal wakes the thread.
//!
//! A wait first spins for [`SPIN`] (a wait that ends within it is noticed with a spinning wait's
//! latency), then parks on a [`Parker`] registered with every timeline it waits on; a host signal,
//! a failure, or (on the host backend) a stream signal unparks it. A parked wait costs no CPU.
//! When a backend cannot wake waiters (CUDA: the GPU writes the word), the parked wait polls the
//! word instead, sleeping [`POLL_MIN`] at first and doubling up to [`POLL_MAX`].
//!
//! A timeline also remembers how long its recent waits took: a wait that is expected to end
//! later than the spin phase sleeps until [`SPIN_AHEAD`] before that time and spins until as
//! long after it (then parks again), so a periodic wait (a 100 ms frame) wakes with a spinning
//! wait's latency too, for well under 1 % of a core.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::primitive::{AtomicU64, Condvar, Mutex, Ordering};

/// How long a host wait spins before it parks.
pub const SPIN: Duration = Duration::from_micros(100);
/// How long before the expected end of a wait it starts spinning again.
pub const SPIN_AHEAD: Duration = Duration::from_micros(300);
/// First sleep of a parked wait on a backend that cannot wake it.
pub const POLL_MIN: Duration = Duration::from_micros(20);
/// Longest sleep of a parked wait on a backend that cannot wake it.
pub const POLL_MAX: Duration = Duration::from_micros(500);
/// Longest sleep of a parked wait on a backend that wakes it (a safety net only).
const PARK_MAX: Duration = Duration::from_millis(50);

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
    /// Recent wait duration in ns (a moving average), 0 = unknown.
    expected_ns: AtomicU64,
}

impl Waiters {
    pub(crate) fn new() -> Self {
        Waiters {
            list: Mutex::new(Vec::new()),
            expected_ns: AtomicU64::new(0),
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

    fn expected(&self) -> Option<Duration> {
        match self.expected_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    fn learn(&self, took: Duration) {
        let ns = (took.as_nanos() as u64).max(1);
        let old = self.expected_ns.load(Ordering::Relaxed);
        let new = if old == 0 { ns } else { (old * 3 + ns) / 4 };
        self.expected_ns.store(new.max(1), Ordering::Relaxed);
    }
}

/// What a wait is about: the timelines' waiter lists, and whether their backends wake them.
pub(crate) struct WaitOn<'a> {
    pub(crate) waiters: Vec<&'a Waiters>,
    pub(crate) all_notify: bool,
}

/// Block until `check` returns `Some`, or `timeout` passes (`Ok(None)` then).
pub(crate) fn block_until<R>(
    on: &WaitOn<'_>,
    timeout: Duration,
    mut check: impl FnMut() -> Option<R>,
) -> Option<R> {
    if let Some(r) = check() {
        return Some(r);
    }
    let start = Instant::now();
    let deadline = start.checked_add(timeout);
    let expected = on.waiters.iter().filter_map(|w| w.expected()).min();
    let learn = |took: Duration| on.waiters.iter().for_each(|w| w.learn(took));
    // Spin phase (not under loom: it models interleavings, not time).
    #[cfg(not(seqsync_loom))]
    {
        let spin_until = start + SPIN.min(timeout);
        while Instant::now() < spin_until {
            for _ in 0..32 {
                std::hint::spin_loop();
            }
            if let Some(r) = check() {
                learn(start.elapsed());
                return Some(r);
            }
        }
    }
    let parker = Arc::new(Parker::new());
    on.waiters.iter().for_each(|w| w.add(&parker));
    let mut poll = POLL_MIN;
    let result = loop {
        if let Some(r) = check() {
            break Some(r);
        }
        let now = Instant::now();
        let left = match deadline {
            Some(d) if now >= d => break None,
            Some(d) => d - now,
            None => Duration::MAX,
        };
        let elapsed = now - start;
        // Around the expected end: spin instead of parking.
        if let Some(e) = expected {
            let from = e.saturating_sub(SPIN_AHEAD);
            if elapsed >= from && elapsed < e + SPIN_AHEAD {
                #[cfg(not(seqsync_loom))]
                {
                    std::hint::spin_loop();
                    continue;
                }
            }
        }
        let mut nap = if on.all_notify { PARK_MAX } else { poll };
        if let Some(e) = expected {
            let from = e.saturating_sub(SPIN_AHEAD);
            if elapsed < from {
                nap = nap.min(from - elapsed);
            }
        }
        parker.park_timeout(nap.min(left));
        poll = (poll * 2).min(POLL_MAX);
    };
    on.waiters.iter().for_each(|w| w.remove(&parker));
    if result.is_some() {
        learn(start.elapsed());
    }
    result
}
