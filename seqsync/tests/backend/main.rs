//! The backends: streams, CUDA contexts and ordering, the host backend, `Send`/`Sync` and errors.
//!
//! One test binary per layer (each integration-test binary links the whole crate); a module
//! per suite, named as its file.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod backend_streams;
mod cuda_context;
mod cuda_open_wait;
mod cuda_ordering;
mod errors;
mod host_backend;
mod send_sync;
