//! The batches get_data released (the resident engine's arrivals), as a count the process_data
//! workers wait on before they poll for a batch's completion.
//!
//! A worker takes the next seq as soon as it is free, so at a low `--rate` it waits for its batch
//! to arrive for several arrival intervals. Polling the batch's `done` word the whole time, as
//! [`poll`](super::poll::poll) does, it would be napping by the time the batch arrives and see it
//! done up to a nap (plus the timer's slack) late: 30-40 µs more a batch at the median at 256 KiB
//! and 1 MiB once the intervals times the workers passed a millisecond (BENCHMARKS.md §13, run W).
//! A release is a host event, so it can wake the worker: the worker sleeps until the release rings,
//! then polls `done`, and its wake-up overlaps the batch's time on the device.
//!
//! Producer: get_data, one raise a batch, in seq order. Consumers: the workers, each waiting for
//! one batch's release at a time. A raise costs a store, a fence and a load while nobody sleeps
//! (every wait at a rate the workers keep up with ends while spinning or yielding).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use event_listener::{Event, Listener};

use super::poll::spin_then_yield;

/// How long a sleeping waiter sleeps at most before it looks at its `given_up` again: a
/// safety net only (a stop rings [`Released::wake_all`]).
const RECHECK: Duration = Duration::from_millis(20);

/// A count of released batches that wakes its sleeping waiters when raised.
#[derive(Debug)]
pub(crate) struct Released {
    /// Batches `..count` are released.
    count: AtomicU64,
    /// Rung at each raise and at a stop; waited on by the waiters past their yield phase.
    bell: Event,
    /// [`RECHECK`], or (the tests) longer.
    recheck: Duration,
}

impl Released {
    /// None released yet.
    pub(crate) fn new() -> Self {
        Self::with_recheck(RECHECK)
    }

    fn with_recheck(recheck: Duration) -> Self {
        Released {
            count: AtomicU64::new(0),
            bell: Event::new(),
            recheck,
        }
    }

    /// Batches `..v` are released (by the one thread that releases them, in order); wakes the
    /// waiters asleep.
    #[inline]
    pub(crate) fn raise(&self, v: u64) {
        // SeqCst, with the fence of `notify` and the waiter's own SeqCst load after it listens:
        // either the raise sees the listener or the waiter sees the count.
        self.count.store(v, Ordering::SeqCst);
        self.bell.notify(usize::MAX);
    }

    /// Wakes every waiter asleep, to look at its `given_up` (a stop).
    pub(crate) fn wake_all(&self) {
        self.bell.notify(usize::MAX);
    }

    /// Blocks until batches `..v` are released (true) or `given_up` holds (false): spins and
    /// yields first, as [`poll`](super::poll::poll), then sleeps until a raise or
    /// [`wake_all`](Self::wake_all) wakes it.
    pub(crate) fn wait(&self, v: u64, given_up: impl Fn() -> bool) -> bool {
        let ready = || self.count.load(Ordering::SeqCst) >= v;
        match spin_then_yield(&ready, &given_up) {
            Some(held) => held,
            None => self.sleep(&ready, &given_up),
        }
    }

    #[cold]
    fn sleep(&self, ready: &impl Fn() -> bool, given_up: &impl Fn() -> bool) -> bool {
        loop {
            let listener = self.bell.listen();
            if ready() {
                return true;
            }
            if given_up() {
                return false;
            }
            listener.wait_timeout(self.recheck);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::{mpsc, Arc};
    use std::time::Instant;

    /// A waiter on `released` for `v` on a thread of its own, once it sleeps (past its yield
    /// phase, listening); its result comes on the channel.
    fn asleep(
        released: &Arc<Released>,
        v: u64,
        given_up: &Arc<AtomicBool>,
    ) -> mpsc::Receiver<bool> {
        let (tx, rx) = mpsc::channel();
        let (r, g) = (released.clone(), given_up.clone());
        std::thread::spawn(move || {
            let _ = tx.send(r.wait(v, || g.load(Ordering::SeqCst)));
        });
        let t = Instant::now();
        while released.bell.total_listeners() == 0 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the waiter never slept"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        rx
    }

    /// Long enough that a wake-up missed fails the test rather than arriving late.
    const NEVER: Duration = Duration::from_secs(3600);
    const PROMPTLY: Duration = Duration::from_secs(20);

    #[test]
    fn a_release_already_made_ends_the_wait_at_once() {
        let r = Released::new();
        r.raise(3);
        assert!(r.wait(2, || false));
        assert!(r.wait(3, || false));
        assert!(!r.wait(4, || true));
    }

    #[test]
    fn a_raise_wakes_a_waiter_asleep() {
        let r = Arc::new(Released::with_recheck(NEVER));
        let rx = asleep(&r, 2, &Arc::new(AtomicBool::new(false)));
        r.raise(1);
        assert!(
            rx.recv_timeout(Duration::from_millis(50)).is_err(),
            "one batch short: still asleep"
        );
        r.raise(2);
        assert_eq!(rx.recv_timeout(PROMPTLY), Ok(true));
    }

    #[test]
    fn a_stop_wakes_a_waiter_asleep_and_it_gives_up() {
        let r = Arc::new(Released::with_recheck(NEVER));
        let stop = Arc::new(AtomicBool::new(false));
        let rx = asleep(&r, 1, &stop);
        stop.store(true, Ordering::SeqCst);
        r.wake_all();
        assert_eq!(rx.recv_timeout(PROMPTLY), Ok(false));
    }
}
