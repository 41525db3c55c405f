//! # seqsync-demo
//!
//! seqsync's application code, kept out of the library: what `seqsync` (the CLI) runs.
//!
//! | module | what it is |
//! |---|---|
//! | [`demo`] | the seed's pipeline end to end: seqsync's main job (`cargo run --release`) |
//! | [`bench`](mod@bench) | the ring against the raw backend calls (`seqsync bench`) |
//! | [`selftest`] | built-in checking stages for any declared pipeline (`seqsync run`) |
//! | [`graph_run`] | a graph file's workload run for its makespan (`seqsync graph --run`) |
//! | [`samples`] | the stage durations a run measured, for a throughput prediction (`seqsync run --measure`) |
//!
//! It uses the library only through its public API: [`seqsync::backend::Backend`], rings and the
//! pipeline layer.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod bench;
pub mod demo;
pub mod graph_run;
pub mod samples;
pub mod selftest;

use seqsync::Error;

/// An [`Error::InvalidArgument`] about `what` (the demo's config, a baseline, …).
pub(crate) fn invalid(what: &str, message: impl Into<String>) -> Error {
    Error::InvalidArgument {
        ring: what.to_owned(),
        message: message.into(),
    }
}

/// The message of a caught panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".into())
}
