//! Memory: the stream-ordered pool and buffer handoff by epochs.
//!
//! One test binary per layer (each integration-test binary links the whole crate); a module
//! per suite, named as its file.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod handoff;
mod handoff_edges;
mod handoff_graph;
mod pool;
mod pool_frees;
mod pool_limits;
mod pool_sizes;
mod pool_stress;
