//! Timelines: the contract on every backend, IREE's semaphore conformance cases, the CUDA mechanisms, a model, stress and host waits.
//!
//! One test binary per layer (each integration-test binary links the whole crate); a module
//! per suite, named as its file. (A CUDA fault poisons its process: `tests/cuda_fault/`.)

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod host_wait;
mod timeline_contract;
mod timeline_cts;
mod timeline_cuda;
mod timeline_drop;
mod timeline_model;
mod timeline_stream_failure;
mod timeline_stress;
