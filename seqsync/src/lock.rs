//! The crate's short-section lock: one compare-and-swap to take it, a plain release store to
//! give it back.
//!
//! `std::sync::Mutex` gives itself back with an atomic swap (it must see whether a thread
//! sleeps on it), so an uncontended lock and unlock is two atomic read-modify-writes: on the
//! hot calls that take a lock or two (a tracked `record` or `wait`, a timeline's `signal_on`
//! and `wait_on`) that was most of their cost. Here nobody sleeps on the lock: a thread
//! that finds it taken spins briefly, then yields, then naps for a few microseconds between
//! tries (10 µs, doubling up to 1 ms), so giving it back needs no read.
//!
//! Use it only where every critical section is a few field updates and at most a backend
//! call that enqueues (a record, a stream wait, a word write): a waiter then rarely gets past
//! the spinning; one that does (the holder was descheduled, or a backend call blocks on a full
//! queue) costs little CPU and wakes within its nap. Never hold it across a host wait.
//!
//! Its users: the buffer tracker's registries (`memory/handoff`), a timeline's admission state
//! and its streams' ledgers (`timeline/`), and the event-based CUDA timeline words
//! (`backend/cuda/semaphore`).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use crate::primitive::{AtomicBool, Ordering, UnsafeCell};

/// A value behind the lock. Its atomic and cell come from `crate::primitive`, so the loom model
/// in `src/tests/loom_lock.rs` checks that it excludes and publishes (and the models of the
/// timelines run through it).
#[derive(Debug)]
pub(crate) struct Lock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

impl<T: Default> Default for Lock<T> {
    fn default() -> Self {
        Lock::new(T::default())
    }
}

// SAFETY: the value is reached only through a `Guard`, and at most one guard exists at a time
// (`lock` hands one out only after swapping `locked` from false to true; the guard's drop
// sets it back). So the value moves between threads like one behind a `Mutex`: `T: Send`
// suffices for both.
unsafe impl<T: Send> Sync for Lock<T> {}
// (`Send` is automatic: `UnsafeCell<T>` is `Send` when `T` is.)

impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Self {
        Lock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Take the lock. It is never poisoned: a panic under it gives it back, so each user
    /// says why a half-done update is safe to see (or makes none).
    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        // Acquire: everything the previous holder wrote before its release store is visible.
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        Guard {
            lock: self,
            _not_sync_unless_t_is: PhantomData,
        }
    }

    #[cold]
    fn lock_contended(&self) {
        let mut tries = 0u32;
        let mut nap = Duration::from_micros(10);
        loop {
            // Read before trying: spinning on a load keeps the cache line shared.
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            back_off(&mut tries, &mut nap);
        }
    }
}

/// Between two tries at a taken lock: spin, then yield, then nap (`tries` and `nap` carry the
/// progression).
#[cfg(not(seqsync_loom))]
fn back_off(tries: &mut u32, nap: &mut Duration) {
    *tries += 1;
    if *tries < 64 {
        std::hint::spin_loop();
    } else if *tries < 128 {
        std::thread::yield_now();
    } else {
        // The holder was descheduled (or blocks in a backend call): stop burning a core.
        std::thread::sleep(*nap);
        *nap = (*nap * 2).min(Duration::from_millis(1));
    }
}

/// Under loom, which explores every interleaving, a try must let the holder run.
#[cfg(seqsync_loom)]
fn back_off(_: &mut u32, _: &mut Duration) {
    loom::thread::yield_now();
}

/// The lock, held. Like std's `MutexGuard`, `Sync` only where `T` is (it hands out `&T`):
/// the marker makes it so, where `&Lock<T>` alone would be `Sync` for any `T: Send`.
pub(crate) struct Guard<'a, T> {
    lock: &'a Lock<T>,
    _not_sync_unless_t_is: PhantomData<&'a mut T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (see `Sync` above), so no `&mut T` exists.
        self.lock.value.with(|p| unsafe { &*p })
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one, and `&mut self` makes this the only reference
        // through it.
        self.lock.value.with_mut(|p| unsafe { &mut *p })
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: the holder's writes are visible to the next thread whose Acquire CAS
        // takes the lock.
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    use super::Lock;
    use std::sync::Arc;

    /// Threads that increment a plain counter under the lock lose no increment: the lock
    /// excludes, and the release store publishes each holder's write to the next.
    #[test]
    fn the_lock_excludes_and_publishes() {
        let (threads, per) = (4, 20_000u64);
        let lock = Arc::new(Lock::<(u64, u64)>::default());
        std::thread::scope(|s| {
            for _ in 0..threads {
                let lock = lock.clone();
                s.spawn(move || {
                    for _ in 0..per {
                        let mut g = lock.lock();
                        // Two dependent writes: a torn critical section shows as a mismatch.
                        let v = g.0;
                        std::hint::black_box(&mut *g);
                        g.0 = v + 1;
                        g.1 += 1;
                    }
                });
            }
        });
        let g = lock.lock();
        assert_eq!((g.0, g.1), (threads * per, threads * per));
    }
}
