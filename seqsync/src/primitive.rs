//! The synchronization primitives the ring is built from: `loom`'s model-checked versions under
//! `cfg(seqsync_loom)` (see `src/tests/loom_ring.rs`), std's otherwise.
//!
//! Only the ring's and the timelines' own state goes through this shim; backends are real executors and use std.

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
