//! The crate's short-section lock, biased to the thread that uses it: while one thread takes
//! it, taking and giving it back are plain stores and a load; once a second thread comes, it
//! takes the lock away from the first (once, with a heavy memory barrier) and from then on
//! the lock costs one compare-and-swap to take and a plain release store to give back.
//!
//! Why: the hot calls take a lock or two each (a tracked `record` or `wait`, a timeline's
//! `signal_on` and `wait_on`: the timeline's admission state, the stream's ledger, the CUDA
//! word's point list), and on the H200's host a locked compare-and-swap there waits for the
//! stores of the driver call before it, which was most of what the timeline layer added to the
//! raw driver calls (BENCHMARKS.md §5, "One-CAS locks and leaner ledgers"). Most such locks are only ever taken by the one
//! thread that enqueues the work. `std::sync::Mutex` costs two atomic read-modify-writes
//! (its unlock must see whether a thread sleeps on it).
//!
//! # The two modes
//!
//! - **Biased** to one thread (the first to take the lock): the owner stores "in", passes the
//!   light barrier (a compiler fence) and loads the bias; if it still names the owner, the
//!   owner is in. Giving back is a release store of "out". Nobody else takes a biased lock.
//! - **Shared**: a compare-and-swap takes it, a release store gives it back.
//!
//! A thread that finds the lock biased to another marks it *revoking* (one compare-and-swap),
//! passes the heavy barrier (see [`barrier`]: every running thread of the process executes a
//! full barrier), then waits until the owner is out; the barrier pair makes sure that an owner
//! that did not see the mark is seen in. It then makes the lock shared for good (a lock that
//! two threads use stays shared: no biasing back and forth). Where the heavy barrier is not to
//! be had, or the `biased-locks` feature is off (the default: biasing registers the process for
//! `membarrier(2)`), locks are shared from the start ([`crate::internal::lock_biasing`] tells
//! which).
//!
//! Nobody sleeps on the lock: a thread that finds it taken (or being revoked) spins briefly,
//! then yields, then naps for a few microseconds between tries (10 µs, doubling up to 1 ms),
//! so giving it back needs no read. Use it only where every critical section is a few field
//! updates and at most a backend call that enqueues (a record, a stream wait, a word write): a
//! waiter then rarely gets past the spinning; one that does (the holder was descheduled, or a
//! backend call blocks on a full queue) costs little CPU and wakes within its nap. Never hold
//! it across a host wait, and never take it again while holding it (a shared lock would spin
//! forever; a biased one panics rather than let the thread in twice).
//!
//! Its users: the buffer tracker's registries (`memory/handoff`), a timeline's admission state
//! and its streams' ledgers (`timeline/`), and the event-based CUDA timeline words
//! (`backend/cuda/semaphore`).

mod barrier;

pub(crate) use barrier::available as biasing;

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use crate::primitive::{AtomicBool, AtomicUsize, Ordering, UnsafeCell};

/// `bias`: no thread has taken the lock yet.
const UNCLAIMED: usize = 0;
/// `bias`: shared mode, for good.
const SHARED: usize = 1;
/// `bias`: a thread is taking the lock away from its owner.
const REVOKING: usize = 2;

/// This thread's token: the address of a thread-local byte (never 0, 1 or 2), unique among the
/// threads alive. A thread that reuses a gone owner's address inherits its bias, which is
/// harmless: the gone thread holds nothing, and what it wrote is visible to the new one (a
/// thread's end is ordered before the reuse of its thread-local storage by whatever hands the
/// memory on: the C library's stack cache lock, or the allocator).
#[inline(always)]
fn token() -> usize {
    #[cfg(not(seqsync_loom))]
    thread_local! {
        static TOKEN: u8 = const { 0 };
    }
    #[cfg(seqsync_loom)]
    loom::thread_local! {
        static TOKEN: u8 = 0;
    }
    TOKEN.with(|t| t as *const u8 as usize)
}

/// A value behind the lock. Its atomics and cell come from `crate::primitive`, so the loom
/// models in `src/tests/loom_lock.rs` check that it excludes and publishes, biased, shared and
/// across a revocation (and the models of the timelines run through it).
/// `repr(C)`: the lock's words, then the value, so that a user can lay its hot fields out
/// right after them.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Lock<T> {
    /// [`UNCLAIMED`], the owner's [`token`], [`REVOKING`] or [`SHARED`].
    bias: AtomicUsize,
    /// Biased mode: the owner is in.
    busy: AtomicBool,
    /// Shared mode: taken.
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

impl<T: Default> Default for Lock<T> {
    fn default() -> Self {
        Lock::new(T::default())
    }
}

// SAFETY: the value is reached only through a `Guard`, and at most one guard exists at a time:
// a biased lock hands one out only to its owner thread, with `busy` set (which a revoking
// thread waits to see cleared), and never while `busy` is set already (`enter_biased` panics
// instead: the owner taking it again while holding it); the guard is not `Send`, so `busy` is
// cleared by the owner thread itself. A shared lock hands one out only after swapping `locked`
// from false to true. So the value moves between threads like one behind a `Mutex`: `T: Send`
// suffices for both.
unsafe impl<T: Send> Sync for Lock<T> {}
// (`Send` is automatic: `UnsafeCell<T>` is `Send` when `T` is.)

impl<T> Lock<T> {
    /// A lock biased to the first thread that takes it (shared from the start where the heavy
    /// barrier is not to be had; under loom, see [`Lock::new_biasable`]).
    pub(crate) fn new(value: T) -> Self {
        // Under loom every lock but the lock's own models' is shared: the timelines' models
        // check the timelines, not the revocation, on a state space they can afford.
        Self::with_bias(
            value,
            if cfg!(seqsync_loom) {
                SHARED
            } else {
                UNCLAIMED
            },
        )
    }

    /// A lock that a loom model may bias.
    #[cfg(seqsync_loom)]
    pub(crate) fn new_biasable(value: T) -> Self {
        Self::with_bias(value, UNCLAIMED)
    }

    fn with_bias(value: T, bias: usize) -> Self {
        Lock {
            bias: AtomicUsize::new(bias),
            busy: AtomicBool::new(false),
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Take the lock. It is never poisoned: a panic under it gives it back, so each user
    /// says why a half-done update is safe to see (or makes none).
    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        let me = token();
        // Acquire (free on x86): a thread that sees `SHARED` sees what the revoker handed on.
        let bias = self.bias.load(Ordering::Acquire);
        if bias == me {
            if let Some(g) = self.enter_biased(me) {
                return g;
            }
        } else if bias == SHARED {
            if let Some(g) = self.try_shared() {
                return g;
            }
        }
        self.lock_slow(me)
    }

    /// The owner's way in: `None` if the lock was taken away meanwhile.
    #[inline(always)]
    fn enter_biased(&self, me: usize) -> Option<Guard<'_, T>> {
        // A second guard would alias the first (a shared lock would spin forever instead): a
        // load of a line this thread wrote last, and a branch that is never taken.
        assert!(
            !self.busy.load(Ordering::Relaxed),
            "the crate's lock taken twice by one thread"
        );
        // Relaxed store, light barrier, load: ordered against a revoker's store, heavy
        // barrier, load (see `barrier`). What the owner writes inside is published by the
        // release store that lets it out (the revoker's acquire load of `busy` reads it).
        self.busy.store(true, Ordering::Relaxed);
        barrier::light();
        if self.bias.load(Ordering::Relaxed) == me {
            return Some(self.guard(true));
        }
        self.busy.store(false, Ordering::Release);
        None
    }

    /// One try at a shared lock.
    #[inline(always)]
    fn try_shared(&self) -> Option<Guard<'_, T>> {
        // Acquire: everything the previous holder wrote before its release store is visible.
        self.locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| self.guard(false))
    }

    #[inline(always)]
    fn guard(&self, biased: bool) -> Guard<'_, T> {
        Guard {
            lock: self,
            biased,
            _not_send: PhantomData,
        }
    }

    /// Claim an unclaimed lock, take a lock away from its owner, wait out a revocation, or
    /// wait for a taken shared lock.
    #[cold]
    fn lock_slow(&self, me: usize) -> Guard<'_, T> {
        let mut tries = 0u32;
        let mut nap = Duration::from_micros(10);
        loop {
            match self.bias.load(Ordering::Acquire) {
                UNCLAIMED => {
                    let to = if biasing().is_ok() { me } else { SHARED };
                    // Lost to another claimant: look again.
                    let _ = self.bias.compare_exchange(
                        UNCLAIMED,
                        to,
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    );
                }
                SHARED => {
                    // Read before trying: spinning on a load keeps the cache line shared.
                    if !self.locked.load(Ordering::Relaxed) {
                        if let Some(g) = self.try_shared() {
                            return g;
                        }
                    }
                    back_off(&mut tries, &mut nap);
                }
                REVOKING => back_off(&mut tries, &mut nap),
                owner if owner == me => {
                    if let Some(g) = self.enter_biased(me) {
                        return g;
                    }
                }
                owner => {
                    if self
                        .bias
                        .compare_exchange(owner, REVOKING, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        self.revoke(owner);
                    }
                }
            }
        }
    }

    /// This thread marked the lock revoking: wait until its owner is out, then make it shared.
    #[cold]
    fn revoke(&self, owner: usize) {
        // After the barrier an owner that did not see the mark shows `busy` (see `barrier`).
        if let Err(e) = barrier::heavy() {
            // Nothing changed but the mark: give the lock back to its owner, so that it (and
            // whoever unwinds through a lock) goes on, then report.
            self.bias.store(owner, Ordering::Release);
            panic!("membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after it worked: {e}");
        }
        let mut tries = 0u32;
        let mut nap = Duration::from_micros(10);
        // Acquire: what the owner wrote inside is visible once it is out.
        while self.busy.load(Ordering::Acquire) {
            back_off(&mut tries, &mut nap);
        }
        // Release: hands what the owner wrote on to every thread that sees `SHARED`.
        self.bias.store(SHARED, Ordering::Release);
    }

    /// Is the lock biased to a thread now (for tests)?
    #[cfg(test)]
    pub(crate) fn is_biased(&self) -> bool {
        !matches!(
            self.bias.load(Ordering::Relaxed),
            UNCLAIMED | SHARED | REVOKING
        )
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

/// The lock, held. Not `Send`: a biased guard must be given back on its owner's thread (the
/// owner could otherwise take the lock again before it is), and neither `Send` nor `Sync` is
/// needed of a guard.
pub(crate) struct Guard<'a, T> {
    lock: &'a Lock<T>,
    biased: bool,
    _not_send: PhantomData<(&'a mut T, *const ())>,
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
        // Release: the holder's writes are visible to the next thread that takes the lock
        // (its Acquire CAS, or a revoker's Acquire load of `busy`).
        if self.biased {
            self.lock.busy.store(false, Ordering::Release);
        } else {
            self.lock.locked.store(false, Ordering::Release);
        }
    }
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    use super::Lock;
    use std::sync::Arc;

    /// Two dependent writes under the lock: a torn critical section shows as a mismatch.
    fn bump(g: &mut (u64, u64)) {
        let v = g.0;
        std::hint::black_box(&mut *g);
        g.0 = v + 1;
        g.1 += 1;
    }

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
                        bump(&mut lock.lock());
                    }
                });
            }
        });
        let g = lock.lock();
        assert_eq!((g.0, g.1), (threads * per, threads * per));
    }

    /// The first thread to take a lock owns it (where `membarrier` is to be had); threads that
    /// come while the owner keeps taking it take it away, and no update is lost across the
    /// revocation; from then on it is shared.
    #[test]
    fn threads_that_take_a_biased_lock_away_lose_no_update() {
        let (others, per) = (3, 20_000u64);
        let lock = Arc::new(Lock::<(u64, u64)>::default());
        let started = Arc::new(std::sync::Barrier::new(others + 1));
        std::thread::scope(|s| {
            let owner = {
                let (lock, started) = (lock.clone(), started.clone());
                s.spawn(move || {
                    for i in 0..per {
                        let mut g = lock.lock();
                        if i == 0 && super::biasing().is_ok() {
                            drop(g);
                            assert!(lock.is_biased(), "biased to its first thread");
                            g = lock.lock();
                        }
                        bump(&mut g);
                        drop(g);
                        if i == per / 4 {
                            started.wait();
                        }
                    }
                })
            };
            for _ in 0..others {
                let (lock, started) = (lock.clone(), started.clone());
                s.spawn(move || {
                    started.wait();
                    for _ in 0..per {
                        bump(&mut lock.lock());
                    }
                });
            }
            owner.join().unwrap();
        });
        assert!(!lock.is_biased(), "shared once a second thread took it");
        let g = lock.lock();
        let n = (others as u64 + 1) * per;
        assert_eq!((g.0, g.1), (n, n));
    }

    /// A lock that one thread has taken and given back, taken by another: the owner's writes
    /// are there (the revocation publishes them).
    #[test]
    fn a_revocation_publishes_the_owners_writes() {
        for _ in 0..200 {
            let lock = Arc::new(Lock::<Vec<u64>>::default());
            let l = lock.clone();
            std::thread::spawn(move || {
                for i in 0..10 {
                    l.lock().push(i);
                }
            })
            .join()
            .unwrap();
            assert_eq!(*lock.lock(), (0..10).collect::<Vec<_>>());
        }
    }

    /// A heavy barrier refused after it worked (a sandbox that starts refusing `membarrier`):
    /// the thread that tried to take the lock away panics, and the lock is its owner's again,
    /// not stuck half taken; a later try takes it away.
    #[test]
    fn a_refused_barrier_gives_the_lock_back_to_its_owner() {
        if let Err(why) = super::biasing() {
            eprintln!("skipped: locks are not biased here ({why})");
            return;
        }
        let lock = Arc::new(Lock::new(0u32));
        *lock.lock() += 1;
        assert!(lock.is_biased());
        let l = lock.clone();
        let refused = std::thread::spawn(move || {
            super::barrier::FAIL_NEXT_HEAVY.with(|f| f.set(true));
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| *l.lock() += 1)).is_err()
        })
        .join()
        .unwrap();
        assert!(refused, "the taker panics");
        assert!(lock.is_biased(), "the owner's again");
        *lock.lock() += 1;
        let l = lock.clone();
        std::thread::spawn(move || *l.lock() += 1).join().unwrap();
        assert!(!lock.is_biased());
        assert_eq!(*lock.lock(), 3);
    }

    /// A biased lock taken again by its own thread (a bug: a shared lock would spin forever)
    /// panics instead of letting the thread in twice.
    #[test]
    fn a_biased_lock_taken_twice_by_its_thread_panics() {
        if let Err(why) = super::biasing() {
            eprintln!("skipped: locks are not biased here ({why})");
            return;
        }
        let lock = Lock::new(0u32);
        let first = lock.lock();
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(lock.lock())));
        let msg = again.expect_err("let in twice");
        let msg = msg.downcast_ref::<&str>().copied().unwrap_or_default();
        assert!(msg.contains("taken twice by one thread"), "{msg}");
        drop(first);
    }
}
