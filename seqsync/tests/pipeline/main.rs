//! The pipeline layer: derive, the deadlock check, the runtime and how a run ends.
//!
//! One test binary per layer (each integration-test binary links the whole crate); a module
//! per suite, named as its file.

#[path = "../seed_spec/mod.rs"]
mod seed_spec;

mod pipeline_deadlock;
mod pipeline_derive;
mod pipeline_failed_runs;
mod pipeline_latency;
mod pipeline_proptest;
mod pipeline_run_end;
mod pipeline_runtime;
mod pipeline_scale;
