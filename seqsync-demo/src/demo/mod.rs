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
//! Two engines drive it: [`Engine::HandWritten`] (the rings and loops written out as in the
//! seed) and [`Engine::Pipeline`] (the seed spec, [`seed_spec`], derived and run by
//! [`seqsync::pipeline::runtime`]). With baselines on, the pipeline engine's report also carries
//! the hand-written pipeline measured in the same run (`handwritten_gbps`).
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

mod baseline;
#[cfg(feature = "cuda")]
mod cuda_device;
mod device;
mod engine;
mod graph_engine;
mod pipeline;
mod pool_pipeline;
mod sweep;
mod trace;
mod workload;

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

pub use baseline::StageTiming;
pub use engine::{seed_shape, seed_spec, Engine};
pub use graph_engine::{auto_graph_batches, GraphEdge, DEPTH as GRAPH_DEPTH};
pub use pipeline::{DroppedWait, Variant};
pub use sweep::{svg as sweep_svg, sweep, SweepReport, SweepRow, SWEEP_SIZES};

use device::{Device, HostDevice, Layout};
use pipeline::{RunOptions, Verification};
use seqsync::backend::host::{Chaos, HostBackend};
use seqsync::backend::BackendKind;
use seqsync::pipeline::PipelineSpec;
use seqsync::{Error, Result};
use trace::HostSpans;

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
    /// `nin`/`nx`/`ny`/`nout`. It must be shaped like the seed ([`seed_shape`]); its buffers'
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
    /// [`Engine::Graph`]: batches per graph (`None`: [`auto_graph_batches`]).
    pub graph_batches: Option<usize>,
    /// Test only, [`Engine::Graph`] on the host backend: leave one edge out of every batch's
    /// body (verification must then fail).
    pub drop_edge: Option<GraphEdge>,
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
            drop_edge: None,
            progress: None,
        }
    }
}

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
    /// See [`DemoConfig::nx`].
    pub nx: usize,
    /// See [`DemoConfig::ny`].
    pub ny: usize,
    /// See [`DemoConfig::nout`].
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
    /// [`Engine::Graph`]: batches per graph (K).
    pub graph_batches: Option<usize>,
    /// Median batch latency, from its copy-in being issued to its `process_data` returning.
    pub latency_p50_us: Option<f64>,
    /// 99th percentile of the same.
    pub latency_p99_us: Option<f64>,
    /// The Chrome trace, when asked for.
    #[serde(skip)]
    pub trace: Option<serde_json::Value>,
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

fn invalid(msg: String) -> Error {
    crate::invalid("demo", msg)
}

impl DemoConfig {
    fn validate(&self, batch_bytes: usize, kind: BackendKind) -> Result<()> {
        for (name, v) in [
            ("nin", self.nin),
            ("nx", self.nx),
            ("ny", self.ny),
            ("nout", self.nout),
        ] {
            if v == 0 {
                return Err(invalid(format!(
                    "--{name} must be at least 1 (a ring buffer needs a slot)"
                )));
            }
            if v > MAX_SLOTS {
                return Err(invalid(format!(
                    "--{name} {v} exceeds the {MAX_SLOTS} slots a demo ring buffer may have"
                )));
            }
        }
        if self.host_slots > MAX_SLOTS {
            return Err(invalid(format!(
                "--host-slots {} exceeds {MAX_SLOTS}",
                self.host_slots
            )));
        }
        if self.drop_wait.is_some() && kind != BackendKind::Host {
            return Err(invalid(
                "--drop-wait is a test switch for the host backend (on CUDA the host would read \
                 a batch while its copy still writes it)"
                    .into(),
            ));
        }
        if self.engine != Engine::HandWritten && self.variant != Variant::Seed {
            return Err(invalid(format!(
                "--engine {} runs --variant seed only, not {:?}",
                self.engine.name(),
                self.variant
            )));
        }
        if self.variant == Variant::Pool && self.drop_wait.is_some() {
            return Err(invalid(
                "--drop-wait names the ring pipeline's waits; --variant pool has none".into(),
            ));
        }
        if self.engine != Engine::HandWritten && self.drop_wait.is_some() {
            return Err(invalid("--drop-wait needs --engine handwritten".into()));
        }
        if self.drop_edge.is_some() && (self.engine != Engine::Graph || kind != BackendKind::Host) {
            return Err(invalid(
                "--drop-edge is a test switch for --engine graph on the host backend".into(),
            ));
        }
        if let Some(k) = self.graph_batches {
            if self.engine != Engine::Graph {
                return Err(invalid("--graph-batches needs --engine graph".into()));
            }
            if k == 0 || k > graph_engine::MAX_GRAPH_BATCHES {
                return Err(invalid(format!(
                    "--graph-batches {k} is outside 1..={}",
                    graph_engine::MAX_GRAPH_BATCHES
                )));
            }
        }
        if self.variant == Variant::HostRing && self.host_slots == 0 {
            return Err(invalid("--host-slots must be at least 1".into()));
        }
        if self.batches < 1 {
            return Err(invalid(format!(
                "--batches must be at least 1, got {}",
                self.batches
            )));
        }
        if batch_bytes == 0 || !batch_bytes.is_multiple_of(4) {
            return Err(invalid(format!(
                "--batch-bytes {batch_bytes} is not a whole number of 4-byte elements (u32)"
            )));
        }
        if batch_bytes < 4 * workload::HEADER {
            return Err(invalid(format!(
                "--batch-bytes {batch_bytes} is below the {}-byte batch header",
                4 * workload::HEADER
            )));
        }
        // Host memory: every buffer on the host backend; the pinned host batches on CUDA
        // (device memory failures come back as errors, host allocation failures would abort).
        let host_buffers = if kind == BackendKind::Host {
            self.nin + self.nx + self.ny + self.nout
        } else {
            0
        } + workload::prime_above(
            self.nin
                .max(self.nx)
                .max(self.ny)
                .max(self.nout)
                .max(self.host_slots),
        ) + self.host_slots;
        let need = (batch_bytes as u128) * host_buffers as u128;
        if let Some(avail) = available_memory() {
            if need > avail as u128 {
                return Err(invalid(format!(
                    "these sizes need {:.1} GiB of host memory ({host_buffers} buffers of \
                     {batch_bytes} bytes); {:.1} GiB is available",
                    need as f64 / (1u64 << 30) as f64,
                    avail as f64 / (1u64 << 30) as f64
                )));
            }
        }
        Ok(())
    }
}

/// Most slots a demo ring buffer may have.
const MAX_SLOTS: usize = 1 << 16;

/// `MemAvailable` of /proc/meminfo in bytes, where there is one.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Run the demo: the pipeline, then (if asked) the baselines, on the backend the config picks.
///
/// # Errors
/// [`Error::InvalidArgument`] for a bad config, [`Error::NoDevice`] for `--backend cuda`
/// without a GPU, and any error of the pipeline's rings or backend.
pub fn run(config: &DemoConfig) -> Result<DemoReport> {
    let shaped;
    let config = match (&config.spec, config.engine) {
        (Some(spec), Engine::Pipeline | Engine::Graph) => {
            let (nin, nx, ny, nout) = seed_shape(spec)?;
            shaped = DemoConfig {
                nin,
                nx,
                ny,
                nout,
                ..config.clone()
            };
            &shaped
        }
        (Some(_), Engine::HandWritten) => {
            return Err(invalid("a spec runs on --engine pipeline only".into()))
        }
        _ => config,
    };
    let kind = match config.backend {
        BackendKind::Auto if config.chaos.is_some() => BackendKind::Host,
        BackendKind::Auto => seqsync::AnyBackend::auto()?.kind(),
        k => k,
    };
    if config.chaos.is_some() && kind != BackendKind::Host {
        return Err(invalid("--chaos needs the host backend".into()));
    }
    let batch_bytes = config.batch_bytes.unwrap_or(if kind == BackendKind::Cuda {
        64 << 20
    } else {
        256 << 10
    });
    let graphed;
    let config = if config.engine == Engine::Graph {
        // The graph engine's own slot counts: DEPTH groups of K batches in every buffer.
        let k = config
            .graph_batches
            .unwrap_or_else(|| auto_graph_batches(batch_bytes));
        let slots = graph_engine::DEPTH * k.clamp(1, graph_engine::MAX_GRAPH_BATCHES);
        graphed = DemoConfig {
            nin: slots,
            nx: slots,
            ny: slots,
            nout: slots,
            ..config.clone()
        };
        &graphed
    } else {
        config
    };
    config.validate(batch_bytes, kind)?;
    let lags = [
        config.nin,
        config.nx,
        config.ny,
        config.nout,
        config.host_slots,
    ];
    let layout = Layout {
        n: batch_bytes / 4,
        nin: config.nin,
        nx: config.nx,
        ny: config.ny,
        nout: config.nout,
        npatterns: if config.engine == Engine::Graph {
            config.nin
        } else {
            workload::prime_above(lags.into_iter().max().unwrap_or(1))
        },
        nhout: if config.engine == Engine::Graph {
            config.nin
        } else if config.variant == Variant::HostRing {
            config.host_slots
        } else {
            1
        },
        intensity: config.intensity,
        verify_samples: config.verify_samples,
    };
    match kind {
        BackendKind::Cuda => run_cuda(config, layout, batch_bytes),
        _ => {
            let host = match config.chaos {
                Some(seed) => HostBackend::with_chaos(Chaos::new(seed)),
                None => HostBackend::new(),
            };
            run_on(
                &HostDevice::new(host, layout),
                "host".into(),
                config,
                batch_bytes,
            )
        }
    }
}

#[cfg(feature = "cuda")]
fn run_cuda(config: &DemoConfig, layout: Layout, batch_bytes: usize) -> Result<DemoReport> {
    let gpu = seqsync::backend::cuda::CudaBackend::new(0)?;
    let name = gpu.device_name()?;
    run_on(
        &cuda_device::CudaDevice::new(gpu, layout)?,
        name,
        config,
        batch_bytes,
    )
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(_: &DemoConfig, _: Layout, _: usize) -> Result<DemoReport> {
    Err(Error::NoDevice(
        "seqsync was built without the `cuda` feature".into(),
    ))
}

fn run_on<D: Device>(
    dev: &D,
    device: String,
    config: &DemoConfig,
    batch_bytes: usize,
) -> Result<DemoReport> {
    let gb = |secs: f64, batches: i64| batches as f64 * batch_bytes as f64 / secs / 1e9;
    let t0 = Instant::now();
    let spans = config.trace.then(|| HostSpans::new(t0));
    let progress = config.progress.clone();
    let batches = config.batches;
    let report_progress = move |done: i64| {
        if let Some(p) = &progress {
            p(done, batches);
        }
    };
    let plan = match config.engine {
        Engine::Pipeline => Some(engine::plan_for(
            config.spec.as_ref(),
            [config.nin, config.nx, config.ny, config.nout],
        )?),
        Engine::HandWritten | Engine::Graph => None,
    };
    let graph_batches = (config.engine == Engine::Graph).then(|| {
        config
            .graph_batches
            .unwrap_or_else(|| auto_graph_batches(batch_bytes))
    });
    let pool = match config.variant {
        Variant::Pool => Some((pool_pipeline::pool_for(dev)?, pipeline::Streams::new(dev)?)),
        _ => None,
    };
    let pool_stats = std::sync::Mutex::new(None);
    let run_once = |o: &RunOptions<'_>| match (&plan, &pool, graph_batches) {
        (Some(p), _, _) => engine::run(dev, p, o),
        (None, Some((pool, streams)), _) => {
            let (wall, v, stats) = pool_pipeline::run(dev, pool, streams, o)?;
            let mut kept = pool_stats.lock().unwrap_or_else(|e| e.into_inner());
            if o.spans.is_some() || o.progress.is_some() {
                kept.get_or_insert(stats);
            }
            Ok((wall, v))
        }
        (None, None, Some(k)) => graph_engine::run(dev, o, k, config.drop_edge),
        (None, None, None) => pipeline::run(dev, o),
    };
    // Warm up (module load, first launches, allocations touched) outside the timed run.
    let warm = RunOptions {
        batches: batches.min(4),
        variant: config.variant,
        host_slots: config.host_slots,
        drop: None,
        spans: None,
        progress: None,
    };
    run_once(&warm)?;
    let opt = RunOptions {
        batches,
        variant: config.variant,
        host_slots: config.host_slots,
        drop: config.drop_wait,
        spans: spans.as_ref(),
        progress: Some(&report_progress),
    };
    let repeat = config.repeat.max(1);
    let (mut walls, mut hand_walls, mut written_walls) = (Vec::new(), Vec::new(), Vec::new());
    let mut verification: Option<Verification> = None;
    for r in 0..repeat {
        let opt = RunOptions {
            spans: if r == 0 { opt.spans } else { None },
            ..opt
        };
        let (wall, v) = run_once(&opt)?;
        walls.push(wall.as_secs_f64());
        // Keep the first run's verification, or the first that failed.
        if verification
            .as_ref()
            .is_none_or(|kept| kept.matched == batches && v.matched != batches)
        {
            verification = Some(v);
        }
        if config.baselines {
            let (hand, hv) = baseline::handrolled(dev, batches)?;
            check_baseline("hand-rolled", &hv, batches)?;
            hand_walls.push(hand.as_secs_f64());
            if config.engine != Engine::HandWritten || config.variant == Variant::Pool {
                // The hand-written pipeline on fixed rings, in the same run, alternating with
                // the engine's (or the pool variant's).
                let plain = RunOptions {
                    spans: None,
                    progress: None,
                    drop: None,
                    variant: if config.variant == Variant::Pool {
                        Variant::Seed
                    } else {
                        opt.variant
                    },
                    ..opt
                };
                let (w, hv) = pipeline::run(dev, &plain)?;
                check_baseline("hand-written pipeline", &hv, batches)?;
                written_walls.push(w.as_secs_f64());
            }
        }
    }
    let v = verification.expect("at least one run");
    let wall = median(walls);
    let trace = match &spans {
        Some(s) => {
            let device_spans = trace::spans_from_marks(dev.take_marks(t0)?);
            Some(trace::to_chrome_json(&device_spans, &s.take()))
        }
        None => None,
    };
    let gbps = gb(wall, batches);
    let mut report = DemoReport {
        backend: if device == "host" { "host" } else { "cuda" },
        device,
        variant: config.variant,
        engine: config.engine,
        batches,
        batch_bytes,
        nin: config.nin,
        nx: config.nx,
        ny: config.ny,
        nout: config.nout,
        intensity: config.intensity,
        chaos: config.chaos,
        verified: v.matched,
        wrong: v.wrong.len() as i64,
        wrong_seqs: v.wrong.iter().copied().take(20).collect(),
        missing: v.missing,
        duplicated: v.duplicated,
        wall_s: wall,
        gbps,
        stages: Vec::new(),
        bound_gbps: None,
        bound_stage: None,
        compute_bound_gbps: None,
        copies_bound_gbps: None,
        resource_bound_gbps: None,
        ratio_to_resource_bound: None,
        repeat: config.repeat.max(1),
        ratio_to_bound: None,
        serialized_gbps: None,
        handrolled_gbps: None,
        ratio_to_serialized: None,
        ratio_to_handrolled: None,
        handwritten_gbps: None,
        ratio_to_handwritten: None,
        pool: pool_stats.into_inner().unwrap_or_else(|e| e.into_inner()),
        graph_batches,
        latency_p50_us: v.latency_us(0.5),
        latency_p99_us: v.latency_us(0.99),
        trace,
    };
    if config.baselines {
        add_baselines(dev, config, &mut report, median(hand_walls), gb)?;
        if !written_walls.is_empty() {
            let written = gb(median(written_walls), batches);
            report.handwritten_gbps = Some(written);
            report.ratio_to_handwritten = Some(report.gbps / written);
        }
    }
    Ok(report)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn add_baselines<D: Device>(
    dev: &D,
    config: &DemoConfig,
    report: &mut DemoReport,
    hand_wall: f64,
    gb: impl Fn(f64, i64) -> f64,
) -> Result<()> {
    let stages = baseline::stages(dev, config.batches.min(200))?;
    let together = stages
        .iter()
        .find(|s| s.stage.contains("together"))
        .map(|s| s.seconds_per_batch);
    let slowest = stages
        .iter()
        .filter(|s| !s.stage.contains("together"))
        .max_by(|a, b| a.seconds_per_batch.total_cmp(&b.seconds_per_batch))
        .expect("five stages");
    let compute: f64 = stages
        .iter()
        .filter(|s| matches!(s.stage, "f" | "g" | "h"))
        .map(|s| s.seconds_per_batch)
        .sum();
    let bound = gb(slowest.seconds_per_batch, 1);
    report.bound_gbps = Some(bound);
    report.bound_stage = Some(slowest.stage);
    let compute_bound = gb(compute, 1);
    let copies_bound = together.map(|t| gb(t, 1)).unwrap_or(bound);
    let resource = compute_bound.min(copies_bound).min(bound);
    report.compute_bound_gbps = Some(compute_bound);
    report.copies_bound_gbps = Some(copies_bound);
    report.resource_bound_gbps = Some(resource);
    report.ratio_to_resource_bound = Some(report.gbps / resource);
    report.ratio_to_bound = Some(report.gbps / bound);
    report.stages = stages;
    let (serial, sv) = baseline::serialized(dev, config.batches)?;
    check_baseline("serialized", &sv, config.batches)?;
    let serial = gb(serial.as_secs_f64(), config.batches);
    let hand = gb(hand_wall, config.batches);
    report.serialized_gbps = Some(serial);
    report.handrolled_gbps = Some(hand);
    report.ratio_to_serialized = Some(report.gbps / serial);
    report.ratio_to_handrolled = Some(report.gbps / hand);
    Ok(())
}

fn check_baseline(name: &str, v: &Verification, batches: i64) -> Result<()> {
    if v.matched != batches {
        return Err(crate::invalid(
            "demo",
            format!(
                "the {name} baseline verified only {} of {batches} batches",
                v.matched
            ),
        ));
    }
    Ok(())
}
