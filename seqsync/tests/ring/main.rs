//! The ring layer (`EventRingbuf`): its contract, limits, a model-based test and a stress test.
//!
//! One test binary per layer (each integration-test binary links the whole crate); a module
//! per suite, named as its file.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod ring_contract;
mod ring_limits;
mod ring_model;
mod ring_stress;
