//! What one demo run found and measured: [`DemoReport`].

use serde::Serialize;

use super::{Engine, StageTiming, Variant};

/// What one demo run found and measured. Throughputs are in GB/s of input batches.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// "host" or "cuda".
    pub backend: &'static str,
    /// The GPU's name, or "host".
    pub device: String,
    /// Which design ran.
    pub variant: Variant,
    /// Which engine drove it.
    pub engine: Engine,
    /// Batches pushed through.
    pub batches: i64,
    /// Bytes per batch.
    pub batch_bytes: usize,
    /// Ring buffer slot counts.
    pub nin: usize,
    /// See [`DemoConfig::nx`](super::DemoConfig::nx).
    pub nx: usize,
    /// See [`DemoConfig::ny`](super::DemoConfig::ny).
    pub ny: usize,
    /// See [`DemoConfig::nout`](super::DemoConfig::nout).
    pub nout: usize,
    /// Kernel work per element.
    pub intensity: u32,
    /// Chaos seed, if any.
    pub chaos: Option<u64>,
    /// Batches whose output matched the reference.
    pub verified: i64,
    /// Seqs whose output did not match (at most the first 20).
    pub wrong_seqs: Vec<i64>,
    /// Batches with a wrong output.
    pub wrong: i64,
    /// Batches never processed.
    pub missing: i64,
    /// Batches processed more than once.
    pub duplicated: i64,
    /// Pipeline wall time.
    pub wall_s: f64,
    /// The hypervisor's steal time during the engine's timed runs (baselines excluded), all
    /// CPUs together, in milliseconds: CPU time the machine was ready to use and not given.
    /// Above zero, the run's figures may say more about the machine than about the engine
    /// (BENCHMARKS.md §13, run O). `None` where the system does not say (not Linux).
    pub host_steal_ms: Option<f64>,
    /// Pipeline throughput.
    pub gbps: f64,
    /// Each stage alone.
    pub stages: Vec<StageTiming>,
    /// The slowest stage alone: the bound.
    pub bound_gbps: Option<f64>,
    /// Which stage is slowest.
    pub bound_stage: Option<&'static str>,
    /// f, g and h share the compute units: their times added give a second, lower bound.
    pub compute_bound_gbps: Option<f64>,
    /// The two copies at once share the link: their joint rate is a third bound.
    pub copies_bound_gbps: Option<f64>,
    /// The lowest of the three bounds: what the hardware allows this pipeline.
    pub resource_bound_gbps: Option<f64>,
    /// `gbps / resource_bound_gbps`.
    pub ratio_to_resource_bound: Option<f64>,
    /// The device bound: every batch's work (up to
    /// [`device_bound_batches`](Self::device_bound_batches), each in slots of its own) in one
    /// graph, no host in the loop (the fastest of three launches), every batch verified; the
    /// faster of nodes per batch and nodes per run of
    /// [`device_bound_span`](Self::device_bound_span) batches (as the adaptive engine merges
    /// a launch's batches), or the resident kernel with every batch arrived before it starts
    /// where that is faster ([`device_bound_by`](Self::device_bound_by)). On the host backend
    /// these run serially on one stream: not a bound there.
    pub device_bound_gbps: Option<f64>,
    /// Batches the device bound's graph carried.
    pub device_bound_batches: Option<usize>,
    /// Consecutive batches that shared a set of five nodes in the faster of the device bound's
    /// graphs (1: a set each).
    pub device_bound_span: Option<usize>,
    /// How the faster of the device bound's graphs copied: copy nodes or copy kernels.
    pub device_bound_copy: Option<super::CopyBy>,
    /// What set the device bound: the faster graph, or the resident kernel with every batch
    /// arrived before it starts where that was faster.
    pub device_bound_by: Option<DeviceBoundBy>,
    /// `gbps / device_bound_gbps`.
    pub ratio_to_device_bound: Option<f64>,
    /// One batch alone through the pipeline on an idle device, copy-in issued to check
    /// returned: the median of 100 rounds (the lower of five streams with events and a
    /// one-batch graph). The floor for the latencies below.
    pub isolated_latency_us: Option<f64>,
    /// `latency_p50_us / isolated_latency_us`.
    pub p50_over_isolated: Option<f64>,
    /// `latency_p99_us / isolated_latency_us`.
    pub p99_over_isolated: Option<f64>,
    /// How many times the pipeline and the hand-rolled baseline ran (medians reported).
    pub repeat: usize,
    /// `gbps / bound_gbps`.
    pub ratio_to_bound: Option<f64>,
    /// One stream, one thread, synchronize every batch.
    pub serialized_gbps: Option<f64>,
    /// The same pipeline on raw events, no ring.
    pub handrolled_gbps: Option<f64>,
    /// `gbps / serialized_gbps`.
    pub ratio_to_serialized: Option<f64>,
    /// `gbps / handrolled_gbps`.
    pub ratio_to_handrolled: Option<f64>,
    /// [`Engine::Pipeline`] with baselines: the hand-written pipeline, measured in the same run.
    pub handwritten_gbps: Option<f64>,
    /// `gbps / handwritten_gbps`.
    pub ratio_to_handwritten: Option<f64>,
    /// [`Variant::Pool`]: what the pool did during the (first) timed run.
    pub pool: Option<seqsync::memory::PoolStats>,
    /// [`Engine::Graph`]: batches per graph (K); [`Engine::Adaptive`]: most batches per launch.
    pub graph_batches: Option<usize>,
    /// [`Engine::Adaptive`]: batches a graph node covers (the device bound merges over the
    /// same span, or over the automatic one where that is larger).
    pub graph_span: Option<usize>,
    /// The graph engines: how their nodes copied batches between host and device.
    pub copy_by: Option<super::CopyBy>,
    /// [`Engine::Adaptive`]: batches per launch in the (first) timed run, on average (K when
    /// saturated, towards 1 when each batch is launched as it arrives).
    pub batches_per_launch: Option<f64>,
    /// [`Engine::Adaptive`]: where arrivals released the launches.
    pub release: Option<super::Release>,
    /// [`Engine::Adaptive`]: where launches waited for their slots.
    pub slot_wait: Option<super::SlotWait>,
    /// [`Engine::Adaptive`]: threads that ran process_data.
    pub process_threads: Option<usize>,
    /// Median batch latency, from its copy-in being issued (with a rate: from its arrival)
    /// to its `process_data` returning.
    pub latency_p50_us: Option<f64>,
    /// 99th percentile of the same.
    pub latency_p99_us: Option<f64>,
    /// The largest of the same.
    pub latency_max_us: Option<f64>,
    /// The same as a histogram: `(upper bound in us, batches)` per power-of-two bucket.
    pub latency_histogram_us: Vec<(f64, u64)>,
    /// Open-loop arrivals, batches per second (`None`: as fast as possible).
    pub rate: Option<f64>,
    /// [`Engine::Pipeline`]: the runtime's per-stage and batch end-to-end latencies (p50, p99,
    /// max) of the timed run whose verification is reported (the first, unless a later one
    /// failed); `None` for the other engines.
    pub stage_latency: Option<seqsync::pipeline::RunLatency>,
    /// [`Engine::Adaptive`]: where the batches' latency went, phase by phase, in the timed run
    /// whose verification is reported; `None` for the other engines. The first five phases
    /// add up to a batch's latency (issued to check done):
    ///
    /// - `before_launch`: issued (arrived, with a rate) to the call of the launch carrying it
    ///   (waiting for slots to come free, or for the h2g thread); 0 for a batch the device
    ///   release launched ahead of its arrival;
    /// - `launch`: that call (graph launch and event record; the record waits while as many
    ///   launches as slots are in flight);
    /// - `on_device`: the launch returned (or the batch arrived, if later) to the g2h thread
    ///   seeing it complete (the device's queue, the work, the host noticing);
    /// - `before_check`: seen complete to a process_data thread starting its check;
    /// - `check`: the check;
    /// - `in_order`: the check done to every batch before it being checked too, when its
    ///   slots are released (delays slot reuse, not the batch);
    /// - `slot_wait`: how long the h2g thread waited for the slots of the batch's launch to
    ///   come free (the batches one ring of slots earlier processed); without a rate a batch is
    ///   issued only once its slots are free, so this is not part of its latency, but long
    ///   waits in a saturated run say the slots are too few for the round trip.
    pub phases: Option<Vec<super::PhaseSummary>>,
    /// The Chrome trace, when asked for.
    #[serde(skip)]
    pub trace: Option<serde_json::Value>,
}

/// What set a report's device bound ([`DemoReport::device_bound_by`]; `graph` or `resident` in
/// JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceBoundBy {
    /// The faster of the bound's graphs (nodes per batch, nodes per span of batches).
    Graph,
    /// The resident kernel with every batch arrived before it starts.
    Resident,
}

impl DemoReport {
    /// Did every batch arrive exactly once with the right result?
    pub fn all_verified(&self) -> bool {
        self.verified == self.batches
            && self.wrong == 0
            && self.missing == 0
            && self.duplicated == 0
    }
}
