//! What `seqsync demo` can be told: [`DemoConfig`] and its defaults.

use std::sync::Arc;

use seqsync::backend::BackendKind;
use seqsync::pipeline::PipelineSpec;

use super::{CopyBy, DroppedWait, Engine, GraphEdge, Release, SlotWait, Variant};

/// Everything `seqsync demo` can be told.
#[derive(Clone)]
pub struct DemoConfig {
    /// auto, host or cuda.
    pub backend: BackendKind,
    /// Batches to push through the pipeline.
    pub batches: i64,
    /// Bytes per batch (a multiple of 4: elements are `u32`). `None`: 64 MiB on CUDA, 256 KiB
    /// on the host backend.
    pub batch_bytes: Option<usize>,
    /// Slots of the device ring buffers `in`, `x`, `y`, `out`.
    pub nin: usize,
    /// Slots of `x`.
    pub nx: usize,
    /// Slots of `y`.
    pub ny: usize,
    /// Slots of `out`.
    pub nout: usize,
    /// Kernel work per element (rounds of each kernel's inner loop).
    pub intensity: u32,
    /// Host backend only: random delays in every stream operation and thread step.
    pub chaos: Option<u64>,
    /// Which of the seed's designs.
    pub variant: Variant,
    /// Hand-written rings and loops, or the seed spec run by the pipeline runtime.
    pub engine: Engine,
    /// [`Engine::Pipeline`] only: run this spec instead of the seed spec built from
    /// `nin`/`nx`/`ny`/`nout`. It must be shaped like the seed ([`seed_shape`](super::seed_shape)); its buffers'
    /// slot counts replace `nin`/`nx`/`ny`/`nout`, and its `max_size` overrides apply.
    pub spec: Option<PipelineSpec>,
    /// Host output batches for [`Variant::HostRing`].
    pub host_slots: usize,
    /// Body elements checked per batch besides the header (0: every element).
    pub verify_samples: usize,
    /// Also measure each stage alone, the serialized and the hand-rolled baselines.
    pub baselines: bool,
    /// Run the pipeline (and the hand-rolled baseline) this many times, alternating, and report
    /// the median of each: these machines are noisy.
    pub repeat: usize,
    /// Collect a Chrome trace of the pipeline run.
    pub trace: bool,
    /// Test only: leave one wait out (verification must then fail under chaos).
    pub drop_wait: Option<DroppedWait>,
    /// [`Engine::Graph`]: batches per graph (`None`: [`auto_graph_batches`](super::auto_graph_batches)).
    pub graph_batches: Option<usize>,
    /// [`Engine::Adaptive`]: launch groups of K in flight (slots `graph_depth * K` in every
    /// buffer; `None`: [`auto_adaptive_depth`](super::auto_adaptive_depth), 6, fewer for
    /// batches too large for 512 MiB of slots). Fewer: less latency when saturated, less
    /// overlap.
    pub graph_depth: Option<usize>,
    /// [`Engine::Adaptive`]: batches a graph node covers (a launch of `m` batches is
    /// `m / span` runs of five nodes, each node over `span` consecutive batches; a power of
    /// two, at most K; `None`: the automatic K,
    /// [`auto_adaptive_batches`](super::auto_adaptive_batches)). The device bound
    /// merges its batches over the same span, so K above the span adds batches a launch at
    /// the device cost the bound counts.
    pub graph_span: Option<usize>,
    /// [`Engine::Graph`] and [`Engine::Adaptive`]: how graph nodes copy batches between host
    /// and device; [`Engine::Resident`]: whether its kernel reads and writes the host slots in
    /// place ([`CopyBy::Kernel`]) or device slots that copy streams fill and empty
    /// ([`CopyBy::Memcpy`]). `None`: [`CopyBy::auto_for`], kernels below 1 MiB batches (the
    /// resident engine: below 4 MiB). The device bound and the isolated latency take the
    /// faster of both, whatever the engine's.
    pub copy_by: Option<CopyBy>,
    /// [`Engine::Adaptive`]: where a batch's arrival releases its launch (`None`: on the
    /// device, [`Release::Device`], for batches below 1 MiB where the timelines' mechanism
    /// holds launches behind a wait, else on the host: [`Release::for_mechanism`]).
    pub release: Option<Release>,
    /// [`Engine::Adaptive`]: where a launch waits for the slots it rewrites (`None`: on the
    /// device with the device release, else on the host: [`SlotWait::for_release`]).
    pub slot_wait: Option<SlotWait>,
    /// [`Engine::Adaptive`] and [`Engine::Resident`]: threads running process_data (the check
    /// of each batch), which report batches processed in seq order (`None`: the cores left
    /// beside the engine's three threads, 1 to 6 where the check reads every line of a batch,
    /// else 1 to 4).
    pub process_threads: Option<usize>,
    /// [`Engine::Resident`]: slots of every buffer, host input and output batches included
    /// (`None`: [`auto_resident_slots`](super::auto_resident_slots): 12 at 256 KiB, as the
    /// inverse square root of the batch size, 6 to 24).
    pub slots: Option<usize>,
    /// Test only, [`Engine::Graph`] on the host backend: leave one edge out of every batch's
    /// body (verification must then fail).
    pub drop_edge: Option<GraphEdge>,
    /// Open loop: batches arrive at this many per second (`get_data` releases batch `s` at
    /// `s / rate` seconds) and latency counts from arrival. `None`: as fast as possible.
    pub rate: Option<f64>,
    /// `--processes 2`: the shared rings' mechanism (`None`: the backend's default).
    pub ipc_mechanism: Option<seqsync::ipc::Mechanism>,
    /// Called with the number of batches processed so far.
    pub progress: Option<Arc<dyn Fn(i64, i64) + Send + Sync>>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            backend: BackendKind::Auto,
            batches: 400,
            batch_bytes: None,
            nin: 2,
            nx: 2,
            ny: 2,
            nout: 2,
            intensity: 8,
            chaos: None,
            variant: Variant::Seed,
            engine: Engine::HandWritten,
            spec: None,
            host_slots: 4,
            verify_samples: 4096,
            baselines: true,
            repeat: 1,
            trace: false,
            drop_wait: None,
            graph_batches: None,
            graph_depth: None,
            graph_span: None,
            copy_by: None,
            release: None,
            slot_wait: None,
            process_threads: None,
            slots: None,
            drop_edge: None,
            ipc_mechanism: None,
            rate: None,
            progress: None,
        }
    }
}
