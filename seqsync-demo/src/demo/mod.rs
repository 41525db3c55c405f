//! The seed's pipeline, end to end: seqsync's main job (`cargo run --release`, `seqsync demo`).
//!
//! It may use: seqsync's public API only (the `Backend` trait, rings, the pipeline runtime);
//! `device.rs` and `cuda_device.rs` are the only files that name a concrete backend.
//!
//! Two host threads move batches through a host→device copy, kernels f and g, kernel h and a
//! device→host copy on five streams, ordered by five [`EventRingbuf`](seqsync::EventRingbuf)s
//! whose parameters are exactly the seed's. Every batch's input is generated from its seq and
//! `process_data` checks the output against a CPU reference. The same run measures the
//! pipeline against each stage alone, a serialized baseline and a hand-rolled baseline.
//!
//! Five engines drive it: [`Engine::HandWritten`] (the rings and loops written out as in the
//! seed), [`Engine::Pipeline`] (the seed spec, [`seed_spec`], derived and run by
//! [`seqsync::pipeline::run`]), [`Engine::Graph`] (K batches' bodies per replayed graph),
//! [`Engine::Adaptive`] (a graph per ring slot and launch size, K a launch only while batches
//! wait) and [`Engine::Resident`] (one kernel for the whole run, taking each batch as it
//! arrives). With baselines on, the engines' reports also carry the hand-written pipeline measured
//! in the same run (`handwritten_gbps`), the device bound and the isolated latency.
//!
//! Files: `config.rs` ([`DemoConfig`]), `validate.rs` (its checks), `dispatch.rs` ([`run`]:
//! resolve the config and pick the backend), `measure.rs` (timed runs, baselines, bounds),
//! `report.rs` ([`DemoReport`]); the pipeline itself in `pipeline/` (hand-written),
//! `engine.rs` (pipeline runtime), `graph_engine.rs` (command graphs), `adaptive_engine.rs`
//! (per-slot graphs, adaptive launches), `resident_engine.rs` and `resident_words.rs` (the
//! resident kernel and the words it shares with the host), `threads.rs` and `watchdog.rs` (the host threads of
//! these two and the hand-written engine, and their stall watchdog),
//! `bounds.rs` (device bound, isolated latency),
//! `pool_pipeline.rs`
//! ([`Variant::Pool`]), `processes.rs` (the pipeline across two processes: [`run_producer`],
//! [`run_consumer`]); `baseline.rs`, `sweep.rs`, `trace.rs`, `workload.rs` (inputs and the CPU
//! reference), `device.rs` / `cuda_device.rs` (the backends' buffers and kernels).
//!
//! ```
//! use seqsync_demo::demo::{DemoConfig, run};
//! use seqsync::BackendKind;
//!
//! let report = run(&DemoConfig {
//!     backend: BackendKind::Host,
//!     batches: 20,
//!     batch_bytes: Some(16 << 10),
//!     baselines: false,
//!     ..DemoConfig::default()
//! })?;
//! assert_eq!(report.verified, 20);
//! # Ok::<(), seqsync::Error>(())
//! ```

mod adaptive_engine;
mod baseline;
mod bounds;
mod config;
mod copy_by;
#[cfg(feature = "cuda")]
mod cuda_device;
mod device;
mod dispatch;
mod engine;
mod graph_engine;
mod host_steal;
mod measure;
mod names;
mod pipeline;
mod poll;
mod pool_pipeline;
mod processes;
mod released;
mod report;
mod resident_engine;
mod resident_words;
mod sweep;
mod threads;
mod trace;
mod validate;
mod watchdog;
pub(crate) use validate::available_memory;
mod workload;

pub use adaptive_engine::{
    auto_depth as auto_adaptive_depth, auto_launch_batches as auto_adaptive_batches, Release,
    SlotWait, DEVICE_RELEASE_BELOW,
};
pub use baseline::StageTiming;
pub use config::DemoConfig;
pub use copy_by::{CopyBy, KERNEL_COPY_BELOW, RESIDENT_COPY_ENGINES_FROM};
pub use dispatch::run;
pub use engine::{seed_shape, seed_spec, Engine};
pub use graph_engine::{auto_graph_batches, GraphEdge, DEPTH as GRAPH_DEPTH};
pub use pipeline::{DroppedWait, PhaseSummary, Variant};
pub use processes::{
    run_consumer, run_producer, ConsumerReport, TwoProcessReport, READY as CONSUMER_READY,
};
pub use report::{DemoReport, DeviceBoundBy};
pub use resident_engine::auto_slots as auto_resident_slots;
pub use sweep::{svg as sweep_svg, sweep, SweepReport, SweepRow, SWEEP_SIZES};
