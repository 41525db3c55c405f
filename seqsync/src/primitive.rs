//! The synchronization primitives the ring is built from: `loom`'s model-checked versions under
//! `cfg(seqsync_loom)` (see `src/tests/loom_ring.rs`), std's otherwise.
//!
//! Only the ring's, the timelines' and the buffer tracker's lock's own state goes through this
//! shim; backends are real executors and use std.

#[cfg(not(seqsync_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};

#[cfg(seqsync_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};

/// A flag the ring reads on its fast path but that loom need not model: it changes once in a
/// ring's life, after 2^40 seqs (see `EventRingbuf::tags_wrap`), which no loom model reaches.
/// A plain std atomic in every build, so loom explores the ring's interleavings without an
/// extra scheduling point on every consumer call.
pub(crate) use std::sync::atomic::AtomicBool as UnmodeledAtomicBool;

/// A cell whose accesses loom checks (`loom::cell::UnsafeCell`); in other builds a thin
/// wrapper of std's with the same `with` / `with_mut` API (tokio's shim does the same).
#[cfg(seqsync_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// See the loom build's `UnsafeCell`.
#[cfg(not(seqsync_loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(seqsync_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Read access: `f` gets a pointer to the value.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Write access: `f` gets a pointer to the value.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
