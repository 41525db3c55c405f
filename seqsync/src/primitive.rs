//! The synchronization primitives the ring is built from: `loom`'s model-checked versions under
//! `cfg(seqsync_loom)` (see `src/tests/loom_ring.rs`), std's otherwise.
//!
//! Only the ring's and the timelines' own state goes through this shim; backends are real executors and use std.

#[cfg(not(seqsync_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
    Condvar, Mutex, MutexGuard,
};

#[cfg(seqsync_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering},
    Condvar, Mutex, MutexGuard,
};

/// A flag the ring reads on its fast path but that loom need not model: it changes once in a
/// ring's life, after 2^40 seqs (see `EventRingbuf::tags_wrap`), which no loom model reaches.
/// A plain std atomic in every build, so loom explores the ring's interleavings without an
/// extra scheduling point on every consumer call.
pub(crate) use std::sync::atomic::AtomicBool as UnmodeledAtomicBool;
