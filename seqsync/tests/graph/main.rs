//! Command graphs: building and lowering, the backends' replays, and submissions ordered by timelines.
//!
//! One test binary per layer (each integration-test binary links the whole crate); a module
//! per suite, named as its file.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;
#[path = "../graph_support/mod.rs"]
mod graph_support;

mod graph;
mod graph_backends;
mod graph_timeline;
