//! Per-stage and per-batch latency of a run, from instants the threads read as they pass
//! through their ops: what [`RunStats::latency`](super::RunStats::latency) reports
//! ([`RunLatency`]), and the collector [`run`](super::run) feeds.
//!
//! Nothing here touches a stream or a ring: a thread reads [`Instant::now`] around a closure
//! or after a synchronize it makes anyway, and stores it into memory allocated before the run
//! (a ring of seq-tagged slots and a fixed-size histogram per stage), so the memory of a run
//! does not grow with its number of batches.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Serialize, Serializer};

use crate::pipeline::plan::{Op, Plan};

/// The p50, p99 and max of some latency samples.
///
/// The quantiles come from a histogram of 2 significant digits: each is at least the true
/// quantile and at most 1 % above it (and never above `max`); `max` is exact. In JSON the
/// durations are microseconds (`p50_us`, `p99_us`, `max_us`), as floating-point numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LatencySummary {
    /// Samples taken: one per batch measured.
    pub count: u64,
    /// The median: half of the samples took at most this long.
    #[serde(rename = "p50_us", serialize_with = "micros")]
    pub p50: Duration,
    /// 99 % of the samples took at most this long.
    #[serde(rename = "p99_us", serialize_with = "micros")]
    pub p99: Duration,
    /// The longest sample.
    #[serde(rename = "max_us", serialize_with = "micros")]
    pub max: Duration,
}

/// One stage's latency over a run.
///
/// - A **host stage** (`host: true`): from its closure being called for a seq to the closure
///   returning (a host stage's work is done when its closure returns). Always observed.
/// - A **stream stage**: from its launch closure being called for a seq to the first moment a
///   host thread observed the stage's work for that seq complete, i.e. a synchronize at lag 0
///   on the stage's own ring returning (the stage's own `sync`, or a host stage's synchronize
///   on it before reading its buffer; any thread). A synchronize at a lag `N > 0` (a writer
///   waiting for a slot to come free) is no observation: it happens `N` batches later, by the
///   plan's design. A stream stage that no host thread synchronizes on at lag 0 is reported
///   with `observed: false` and no latency: the runtime never learns when its work ends, and
///   it asks no stream or event to find out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageLatency {
    /// The stage's name.
    pub stage: String,
    /// The host thread that runs (launches) it.
    pub thread: String,
    /// Whether it is a host stage (its closure is its work).
    pub host: bool,
    /// Whether its completion is observed by the host, so that it has a latency at all.
    pub observed: bool,
    /// Its latency; `None` when it is not observed or no batch ran.
    pub latency: Option<LatencySummary>,
    /// Batches run but not measured: a seq whose start was overwritten in the run's bounded
    /// memory (a ring of slots) before its completion was observed. 0 for a host stage.
    pub dropped: u64,
}

/// The latencies of one run: per stage, and per batch end to end.
///
/// **Batch end to end**: from the first op of a seq on any thread (the earliest moment a plan
/// thread began that seq's loop body) to the last host-observed completion of that seq: the
/// latest of every host stage's closure returning for it and every `sync` stage's own
/// synchronize for it returning (after its [`Stages::after_sync`](super::Stages::after_sync)
/// closure, when it has one). The work of stream stages that no host thread synchronizes on is
/// not part of it. `None` when the plan has no such completion (no host stage and no `sync`),
/// or no batch ran. Each batch's end to end is at least each observed stage's latency for it.
///
/// # Example
///
/// A host stage that sleeps 2 ms, then a kernel on a stream that the host copies out with a
/// `sync`, on the host backend:
///
/// ```
/// use std::time::Duration;
/// use seqsync::pipeline::{self, derive, PipelineSpec, StageSpec};
/// use seqsync::HostBackend;
///
/// # fn main() -> seqsync::Result<()> {
/// let spec = PipelineSpec::builder()
///     .buffer("a", 2)
///     .thread("t0")
///     .stage("prepare", StageSpec::on_host().writes("a"))
///     .stage("kernel", StageSpec::on_stream("s1").reads("a").sync())
///     .build()?;
/// let plan = derive(&spec)?;
/// let host = HostBackend::new();
/// let streams = pipeline::new_streams(&host, &plan)?;
/// let stages = pipeline::Stages::<HostBackend>::new()
///     .stage("prepare", |_| {
///         std::thread::sleep(Duration::from_millis(2));
///         Ok(())
///     })
///     .stage("kernel", |cx| {
///         cx.stream.unwrap().launch(|| std::thread::sleep(Duration::from_micros(300)));
///         Ok(())
///     });
/// let stats = pipeline::run(pipeline::RunConfig {
///     plan: &plan,
///     backend: &host,
///     streams: &streams,
///     stages: &stages,
///     batches: 20,
///     stall_timeout: None,
/// })?;
/// let prepare = stats.latency.stage("prepare").unwrap().latency.unwrap();
/// let kernel = stats.latency.stage("kernel").unwrap().latency.unwrap();
/// let batch = stats.latency.end_to_end.unwrap();
/// assert_eq!((prepare.count, kernel.count, batch.count), (20, 20, 20));
/// assert!(prepare.p50 >= Duration::from_millis(2));
/// assert!(kernel.p50 >= Duration::from_micros(300));
/// assert!(batch.p50 >= prepare.p50 && batch.max >= kernel.max);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunLatency {
    /// Every stage, in plan order.
    pub stages: Vec<StageLatency>,
    /// Batches end to end (see above).
    pub end_to_end: Option<LatencySummary>,
    /// Batches run but not measured end to end: a seq whose slot in the run's bounded memory
    /// was taken by a later seq before every thread had reported on it (threads that drift
    /// far apart, e.g. ones no ring connects).
    pub end_to_end_dropped: u64,
}

impl RunLatency {
    /// The latency of stage `name`.
    pub fn stage(&self, name: &str) -> Option<&StageLatency> {
        self.stages.iter().find(|s| s.stage == name)
    }
}

fn micros<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e6)
}

/// Most slots a ring of pending seqs has: 4096 × 48 bytes, whatever the rings' sizes.
const MAX_SLOTS: usize = 1 << 12;

/// How a launch is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timed {
    /// A host stage: its closure's call and return.
    Host,
    /// A stream stage some host thread synchronizes on at lag 0: the closure's call.
    Stream,
    /// A stream stage nobody observes: nothing.
    Not,
}

/// Per ring: how many synchronizes at lag 0 name it, in all threads' loop bodies.
pub(super) fn observers(plan: &Plan) -> Vec<u32> {
    let mut n = vec![0u32; plan.rings.len()];
    for op in plan.threads.iter().flat_map(|t| &t.ops) {
        if let Op::Synchronize { ring, lag: 0, .. } = *op {
            n[ring] += 1;
        }
    }
    n
}

/// How stage `stage`'s launches are timed.
pub(super) fn timed(plan: &Plan, observers: &[u32], stage: usize) -> Timed {
    match (plan.stages[stage].stream, observers[stage]) {
        (None, _) => Timed::Host,
        (Some(_), 0) => Timed::Not,
        (Some(_), _) => Timed::Stream,
    }
}

/// Samples in a fixed-size histogram, and their exact max.
struct Samples {
    ns: Histogram<u64>,
    max: Duration,
}

impl Samples {
    fn new() -> Samples {
        Samples {
            // 1 ns to an hour, 2 significant digits: about 36 KiB, whatever the count.
            ns: Histogram::new_with_bounds(1, 3_600_000_000_000, 2)
                .expect("valid histogram bounds"),
            max: Duration::ZERO,
        }
    }

    fn add(&mut self, d: Duration) {
        self.ns
            .saturating_record(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.max = self.max.max(d);
    }

    fn summary(&self) -> Option<LatencySummary> {
        if self.ns.is_empty() {
            return None;
        }
        let q = |q: f64| Duration::from_nanos(self.ns.value_at_quantile(q)).min(self.max);
        Some(LatencySummary {
            count: self.ns.len(),
            p50: q(0.5),
            p99: q(0.99),
            max: self.max,
        })
    }
}

/// Which of several completions of one seq ends its latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The first (a stage: the first synchronize that saw it done).
    First,
    /// The last (a batch: its last host-observed completion).
    Last,
}

/// One seq's reports so far.
#[derive(Clone, Copy)]
struct Slot {
    /// -1: never used.
    seq: i64,
    reports: u32,
    start: Option<Instant>,
    end: Option<Instant>,
}

/// Seqs whose latency is not known yet (a ring of slots tagged with their seq), and the
/// samples of those that completed. A seq completes when `needed` reports have arrived; a
/// report for a seq newer than its slot's takes the slot over (the older seq is dropped), and
/// one for an older seq than its slot's is ignored (it was dropped).
struct Pending {
    slots: Vec<Slot>,
    needed: u32,
    end: End,
    samples: Samples,
}

impl Pending {
    /// Twice `span` seqs in flight told apart (rounded up to a power of two; at most
    /// [`MAX_SLOTS`], past which seqs may be dropped).
    fn new(span: usize, needed: u32, end: End) -> Pending {
        let n = span
            .max(1)
            .saturating_mul(2)
            .min(MAX_SLOTS)
            .next_power_of_two();
        let empty = Slot {
            seq: -1,
            reports: 0,
            start: None,
            end: None,
        };
        Pending {
            slots: vec![empty; n],
            needed,
            end,
            samples: Samples::new(),
        }
    }

    fn report(&mut self, seq: i64, start: Option<Instant>, end: Option<Instant>) {
        let i = (seq as u64 as usize) & (self.slots.len() - 1);
        let slot = &mut self.slots[i];
        if slot.seq > seq {
            return;
        }
        if slot.seq < seq {
            *slot = Slot {
                seq,
                reports: 0,
                start: None,
                end: None,
            };
        }
        slot.reports += 1;
        slot.start = match (slot.start, start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        slot.end = match (slot.end, end, self.end) {
            (Some(a), Some(b), End::First) => Some(a.min(b)),
            (Some(a), Some(b), End::Last) => Some(a.max(b)),
            (a, b, _) => a.or(b),
        };
        if slot.reports == self.needed {
            if let (Some(s), Some(e)) = (slot.start, slot.end) {
                self.samples.add(e.saturating_duration_since(s));
            }
        }
    }
}

/// One stage's collector.
enum StageTrack {
    Host(Mutex<Samples>),
    Stream(Mutex<Pending>),
    Unobserved,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a run's threads report their instants to. Every method takes a lock of its own stage
/// (or of the batches) for a few stores; none blocks on anything else.
pub(super) struct Collector {
    stages: Vec<StageTrack>,
    /// `None`: the plan has no host-observed completion.
    batches: Option<Mutex<Pending>>,
}

impl Collector {
    pub(super) fn new(plan: &Plan) -> Collector {
        let observers = observers(plan);
        let stages = (0..plan.stages.len())
            .map(|g| match timed(plan, &observers, g) {
                Timed::Host => StageTrack::Host(Mutex::new(Samples::new())),
                Timed::Not => StageTrack::Unobserved,
                // A launch can run ahead of the stage's first observer by the ring's size
                // and two (the record that waits for room, and the next launch).
                Timed::Stream => {
                    let span = usize::try_from(plan.rings[g].max_size)
                        .unwrap_or(usize::MAX)
                        .saturating_add(2);
                    StageTrack::Stream(Mutex::new(Pending::new(span, 1 + observers[g], End::First)))
                }
            })
            .collect();
        // The batch's ends: every host stage's return, every own sync at lag 0.
        let ends = plan.stages.iter().filter(|g| g.stream.is_none()).count()
            + plan
                .threads
                .iter()
                .flat_map(|t| &t.ops)
                .filter(
                    |op| matches!(op, Op::Synchronize { stage, ring, lag: 0, .. } if stage == ring),
                )
                .count();
        let batches = (ends > 0).then(|| {
            // Threads drift apart by at most the rings between them.
            let span = plan
                .rings
                .iter()
                .map(|r| usize::try_from(r.max_size).unwrap_or(usize::MAX))
                .fold(plan.threads.len() + 2, |a, n| {
                    a.saturating_add(n).saturating_add(1)
                });
            // A thread with nothing to do returns at once and starts no batch.
            let starting = plan.threads.iter().filter(|t| !t.ops.is_empty()).count();
            let needed = u32::try_from(starting + ends).unwrap_or(u32::MAX);
            Mutex::new(Pending::new(span, needed, End::Last))
        });
        Collector { stages, batches }
    }

    /// Whether [`Collector::batch_started`] is wanted at all.
    pub(super) fn times_batches(&self) -> bool {
        self.batches.is_some()
    }

    /// A thread began its loop body for `seq` at `at`.
    pub(super) fn batch_started(&self, seq: i64, at: Instant) {
        if let Some(b) = &self.batches {
            lock(b).report(seq, Some(at), None);
        }
    }

    /// A host-observed completion of `seq` at `at`: a host stage returned, or a `sync`
    /// stage's own synchronize (and its after_sync) did.
    pub(super) fn batch_ended(&self, seq: i64, at: Instant) {
        if let Some(b) = &self.batches {
            lock(b).report(seq, None, Some(at));
        }
    }

    /// Host stage `stage`'s closure ran from `start` to `end`.
    pub(super) fn host_stage(&self, stage: usize, start: Instant, end: Instant) {
        if let StageTrack::Host(s) = &self.stages[stage] {
            lock(s).add(end.saturating_duration_since(start));
        }
    }

    /// Stream stage `stage`'s closure was called for `seq` at `at`.
    pub(super) fn launched(&self, stage: usize, seq: i64, at: Instant) {
        if let StageTrack::Stream(p) = &self.stages[stage] {
            lock(p).report(seq, Some(at), None);
        }
    }

    /// A synchronize at lag 0 on `ring` for `seq` returned at `at`.
    pub(super) fn observed(&self, ring: usize, seq: i64, at: Instant) {
        if let StageTrack::Stream(p) = &self.stages[ring] {
            lock(p).report(seq, None, Some(at));
        }
    }

    /// The latencies of a run of `batches` batches that ran to the end.
    pub(super) fn finish(self, plan: &Plan, batches: i64) -> RunLatency {
        let batches = u64::try_from(batches).unwrap_or(0);
        let stages = self
            .stages
            .into_iter()
            .zip(&plan.stages)
            .map(|(track, g)| {
                let (observed, latency) = match track {
                    StageTrack::Host(s) => (true, into_inner(s).summary()),
                    StageTrack::Stream(p) => (true, into_inner(p).samples.summary()),
                    StageTrack::Unobserved => (false, None),
                };
                let count = latency.map_or(0, |l| l.count);
                StageLatency {
                    stage: g.name.clone(),
                    thread: plan.threads[g.thread].name.clone(),
                    host: g.stream.is_none(),
                    observed,
                    latency,
                    dropped: if observed {
                        batches.saturating_sub(count)
                    } else {
                        0
                    },
                }
            })
            .collect();
        let timed = self.batches.is_some();
        let end_to_end = self.batches.and_then(|b| into_inner(b).samples.summary());
        let end_to_end_dropped = match timed {
            true => batches.saturating_sub(end_to_end.map_or(0, |l| l.count)),
            false => 0,
        };
        RunLatency {
            stages,
            end_to_end,
            end_to_end_dropped,
        }
    }
}

fn into_inner<T>(m: Mutex<T>) -> T {
    m.into_inner().unwrap_or_else(|e| e.into_inner())
}
