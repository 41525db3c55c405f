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
mod graph_queue_failed_streams;
mod graph_queue_failures;
mod graph_queue_refusals;
mod graph_replay_order;
mod graph_timeline;
