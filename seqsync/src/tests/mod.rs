//! Model-checked tests (`RUSTFLAGS="--cfg seqsync_loom" cargo test -p seqsync --lib --release`).

mod loom_ring;
mod loom_timeline;
