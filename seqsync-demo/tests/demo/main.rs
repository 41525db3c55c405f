//! The demo crate: the seed pipeline, its engines, the self-test and the pool variant.
//!
//! One test binary (each links the whole workspace); a module per suite, named as its file.

mod adaptive_engine;
mod demo;
mod graph_engine;
mod pipeline_engine;
mod pipeline_selftest;
mod pool_variant;
mod resident_engine;
