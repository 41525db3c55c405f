//! Model-checked tests (`RUSTFLAGS="--cfg seqsync_loom" cargo test -p seqsync --lib --release`).
//!
//! It may use: anything in the crate (these are its tests), through loom's atomics, locks and
//! threads; a model backend stands in for a real one.

mod loom_lock;
mod loom_ring;
mod loom_timeline;
