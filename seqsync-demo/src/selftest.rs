//! Built-in stages for any declared pipeline: run it and check every read.
//!
//! Each buffer slot holds `elems` words. The stage that writes buffer `b` for seq `s` fills its
//! slot with a pattern of the value `v(b, s)`, a hash of the stage, the seq and the values of
//! the buffers the stage reads for that seq. Every stage, when it runs, checks that each slot
//! it reads holds exactly the pattern of `v(read, s)`, computed beforehand on the CPU in the
//! lag-0 dataflow order. A wait missing from the schedule lets a stage read a slot too early
//! (the previous seq's data) or too late (the next seq's), which the check counts. With
//! [`Chaos`](seqsync::backend::host::Chaos) on, such a race shows up quickly.
//!
//! `seqsync run SPEC.toml` uses this for specs that are not shaped like the seed's (those run
//! the demo's kernels, on the GPU if there is one).
//!
//! ```
//! use seqsync::pipeline::{derive, PipelineSpec};
//! use seqsync_demo::selftest;
//! use seqsync::HostBackend;
//!
//! let spec = PipelineSpec::from_toml(r#"
//!     [buffers]
//!     a = 2
//!     [[thread]]
//!     name = "t"
//!     [[thread.stage]]
//!     name = "make"
//!     stream = "s1"
//!     writes = ["a"]
//!     [[thread.stage]]
//!     name = "use"
//!     stream = "s2"
//!     reads = ["a"]
//! "#)?;
//! let plan = derive(&spec)?;
//! let report = selftest::run(&spec, &plan, &HostBackend::new(), 50, 64).unwrap();
//! assert_eq!(report.wrong_reads, 0);
//! assert_eq!(report.reads_checked, 50);
//! # Ok::<(), seqsync::pipeline::PlanError>(())
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seqsync::backend::Backend;
use seqsync::internal::pipeline::buffer_slots;
use seqsync::pipeline::{self, RunConfig, Stages};
use seqsync::pipeline::{PipelineSpec, Plan, PlanError, StageTimes};
use seqsync::Result;

use crate::samples::{Samples, MAX_MEASURED_BATCHES};

/// What a self-test run found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SelfTestReport {
    /// Batches run.
    pub batches: i64,
    /// Buffer slots read and checked.
    pub reads_checked: u64,
    /// Reads that found the wrong data.
    pub wrong_reads: u64,
    /// The first few wrong reads, in words.
    pub first_wrong: Vec<String>,
    /// Wall time of the run, in seconds.
    pub wall_s: f64,
    /// The runtime's per-stage and batch end-to-end latencies (p50, p99, max).
    pub stage_latency: seqsync::pipeline::RunLatency,
    /// With [`Options::measure`]: every stage's durations as it ran.
    #[serde(skip)]
    pub samples: Option<Samples>,
}

/// How [`run_with`] runs the built-in stages.
#[derive(Debug, Clone, Default)]
pub struct Options<'a> {
    /// Each stage's work takes at least its time here (the rest of it slept), so that a run
    /// can be compared with a prediction from the same times.
    pub pad: Option<&'a StageTimes>,
    /// Collect every stage's durations ([`SelfTestReport::samples`]); at most
    /// [`MAX_MEASURED_BATCHES`] batches.
    pub measure: bool,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01B3)
    })
}

fn pattern(v: u64, i: usize) -> u32 {
    mix(v ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)) as u32
}

/// One stage's part in the dataflow.
struct StageFlow {
    name: String,
    reads: Vec<String>,
    writes: Vec<String>,
}

/// The value every buffer holds for a seq, computed per seq in the lag-0 dataflow order (so
/// that memory does not grow with the number of batches), the last [`CACHED`] seqs kept.
struct Expected {
    /// Indices into `flows`, in an order where every stage comes after the writers of what it
    /// reads (stages reading a buffer that nothing writes are left out).
    order: Vec<usize>,
    flows: Vec<Arc<StageFlow>>,
    cache: Mutex<Vec<Option<(i64, Values)>>>,
}

/// Every buffer's value for one seq.
type Values = Arc<HashMap<String, u64>>;

/// Seqs whose values are kept (more than a pipeline has in flight at once).
const CACHED: usize = 256;

impl Expected {
    fn new(flows: &[Arc<StageFlow>]) -> Self {
        let mut written: std::collections::HashSet<&str> = Default::default();
        let mut done = vec![false; flows.len()];
        let mut order = Vec::new();
        // The lag-0 read graph is acyclic (derive checked it): repeat until nothing is added.
        loop {
            let before = order.len();
            for (k, f) in flows.iter().enumerate() {
                if done[k] || !f.reads.iter().all(|r| written.contains(r.as_str())) {
                    continue;
                }
                written.extend(f.writes.iter().map(String::as_str));
                done[k] = true;
                order.push(k);
            }
            if order.len() == before {
                break;
            }
        }
        Expected {
            order,
            flows: flows.to_vec(),
            cache: Mutex::new(vec![None; CACHED]),
        }
    }

    /// Every buffer's value for `seq`.
    fn at(&self, seq: i64) -> Values {
        let slot = seq.rem_euclid(CACHED as i64) as usize;
        if let Some((s, v)) = &self.cache.lock().unwrap_or_else(|e| e.into_inner())[slot] {
            if *s == seq {
                return v.clone();
            }
        }
        let mut values: HashMap<String, u64> = HashMap::new();
        for &k in &self.order {
            let f = &self.flows[k];
            let inputs = f
                .reads
                .iter()
                .fold(0u64, |h, r| mix(h ^ values.get(r).copied().unwrap_or(0)));
            for w in &f.writes {
                let v = mix(name_hash(&f.name) ^ name_hash(w) ^ mix(seq as u64) ^ inputs);
                values.insert(w.clone(), v);
            }
        }
        let values = Arc::new(values);
        self.cache.lock().unwrap_or_else(|e| e.into_inner())[slot] = Some((seq, values.clone()));
        values
    }
}

type Slots = Arc<Vec<Mutex<Vec<u32>>>>;

/// Shared state of one run: buffers, expected values, counters.
struct World {
    buffers: HashMap<String, Slots>,
    expected: Expected,
    elems: usize,
    checked: AtomicU64,
    wrong: AtomicU64,
    first_wrong: Mutex<Vec<String>>,
}

impl World {
    fn slot(&self, buffer: &str, seq: i64) -> (usize, &Mutex<Vec<u32>>) {
        let b = &self.buffers[buffer];
        let i = seq as usize % b.len();
        (i, &b[i])
    }

    /// The stage's work for one seq: check what it reads, write what it writes.
    fn work(&self, flow: &StageFlow, seq: i64) {
        let values = self.expected.at(seq);
        for r in &flow.reads {
            let (i, slot) = self.slot(r, seq);
            let Some(&want) = values.get(r) else { continue };
            let data = slot.lock().unwrap_or_else(|e| e.into_inner());
            self.checked.fetch_add(1, Ordering::Relaxed);
            if (0..self.elems).any(|k| data[k] != pattern(want, k)) {
                self.wrong.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_wrong.lock().unwrap_or_else(|e| e.into_inner());
                if first.len() < 10 {
                    first.push(format!(
                        "stage {} read {r}[{i}] for seq {seq}: wrong data",
                        flow.name
                    ));
                }
            }
        }
        for w in &flow.writes {
            let (_, slot) = self.slot(w, seq);
            let Some(&v) = values.get(w) else { continue };
            let mut data = slot.lock().unwrap_or_else(|e| e.into_inner());
            for (k, d) in data.iter_mut().enumerate() {
                *d = pattern(v, k);
            }
        }
    }
}

/// Run `plan` (derived from `spec`) for `batches` batches on `backend` with built-in stages
/// whose buffer slots hold `elems` words each (in host memory: a stream stage's work is host
/// work on its stream, [`Backend::launch_host`]), checking every read.
///
/// # Errors
/// The runtime's errors (a ring error, a failed stream), or [`seqsync::Error::InvalidArgument`] for a
/// spec whose buffers cannot be resolved.
pub fn run<B: Backend>(
    spec: &PipelineSpec,
    plan: &Plan,
    backend: &B,
    batches: i64,
    elems: usize,
) -> Result<SelfTestReport> {
    run_with(spec, plan, backend, batches, elems, &Options::default())
}

/// [`run`], with stage times padded and durations measured as `options` says.
///
/// # Errors
/// Those of [`run`]; with `options.measure`, [`seqsync::Error::InvalidArgument`] for more than
/// [`MAX_MEASURED_BATCHES`] batches.
pub fn run_with<B: Backend>(
    spec: &PipelineSpec,
    plan: &Plan,
    backend: &B,
    batches: i64,
    elems: usize,
    options: &Options<'_>,
) -> Result<SelfTestReport> {
    if options.measure && batches > MAX_MEASURED_BATCHES {
        return Err(crate::invalid(
            "selftest",
            format!(
                "a measured run keeps a few samples per batch: at most {MAX_MEASURED_BATCHES} \
                 batches, not {batches}"
            ),
        ));
    }
    let slots =
        buffer_slots(spec).map_err(|e: PlanError| crate::invalid("selftest", e.to_string()))?;
    let elems = elems.max(1);
    // Every slot is host memory: refuse sizes the machine does not have before allocating.
    let slot_count: u128 = slots.values().map(|&n| u128::from(n.max(1))).sum();
    let need = slot_count * elems as u128 * 4;
    if let Some(avail) = crate::demo::available_memory() {
        if need > u128::from(avail) {
            return Err(crate::invalid(
                "selftest",
                format!(
                    "these sizes need {:.1} GiB of host memory ({slot_count} buffer slots of {} \
                     bytes); {:.1} GiB is available",
                    need as f64 / (1u64 << 30) as f64,
                    elems as u128 * 4,
                    avail as f64 / (1u64 << 30) as f64
                ),
            ));
        }
    }
    let flows: Vec<Arc<StageFlow>> = spec
        .threads
        .iter()
        .flat_map(|t| &t.stages)
        .map(|s| StageFlow {
            name: s.name.name.clone(),
            reads: s.reads.iter().map(|r| r.name.clone()).collect(),
            writes: s.writes.iter().map(|w| w.name.clone()).collect(),
        })
        .map(Arc::new)
        .collect();
    let world = Arc::new(World {
        buffers: slots
            .iter()
            .map(|(name, &n)| {
                let b = (0..n.max(1))
                    .map(|_| Mutex::new(vec![u32::MAX; elems]))
                    .collect();
                (name.clone(), Arc::new(b))
            })
            .collect(),
        expected: Expected::new(&flows),
        elems,
        checked: AtomicU64::new(0),
        wrong: AtomicU64::new(0),
        first_wrong: Mutex::default(),
    });
    let t0 = Instant::now();
    let samples = options
        .measure
        .then(|| Arc::new(Mutex::new(Samples::default())));
    let mut stages = Stages::<B>::new();
    for flow in &flows {
        let (flow, world) = (flow.clone(), world.clone());
        let pad = options.pad.and_then(|p| p.work(&flow.name));
        let samples = samples.clone();
        let us = move |t: Instant| t.saturating_duration_since(t0).as_secs_f64() * 1e6;
        // The stage's work: checked reads and writes, padded to its time, measured.
        let work = move |flow: &StageFlow, world: &World, samples: Option<&Mutex<Samples>>, seq| {
            let start = Instant::now();
            world.work(flow, seq);
            if let Some(rest) = pad.and_then(|p| p.checked_sub(start.elapsed())) {
                std::thread::sleep(rest);
            }
            if let Some(s) = samples {
                let end = Instant::now();
                lock(s).work(&flow.name, seq, us(end) - us(start), us(end));
            }
        };
        stages = stages.stage(flow.name.clone(), move |cx| {
            let start = Instant::now();
            match cx.stream {
                Some(stream) => {
                    let (flow, world, seq) = (flow.clone(), world.clone(), cx.seq);
                    let on_stream = samples.clone();
                    backend.launch_host(
                        stream,
                        Box::new(move || work(&flow, &world, on_stream.as_deref(), seq)),
                    )?;
                    if let Some(s) = &samples {
                        lock(s).launch(cx.stage, us(Instant::now()) - us(start));
                    }
                }
                None => work(&flow, &world, samples.as_deref(), cx.seq),
            }
            Ok(())
        });
    }
    let streams = seqsync::pipeline::new_streams(backend, plan)?;
    let stats = pipeline::run(RunConfig {
        plan,
        backend,
        streams: &streams,
        stages: &stages,
        batches,
        stall_timeout: Some(seqsync::internal::pipeline::DEFAULT_STALL_TIMEOUT),
    })?;
    drop(streams);
    let first_wrong = world
        .first_wrong
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Ok(SelfTestReport {
        batches,
        reads_checked: world.checked.load(Ordering::Relaxed),
        wrong_reads: world.wrong.load(Ordering::Relaxed),
        first_wrong,
        wall_s: Duration::as_secs_f64(&stats.wall),
        stage_latency: stats.latency,
        samples: samples.map(|s| lock(&s).clone()),
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
