//! The pipeline runtime: runs a derived [`Plan`] with one user closure per stage.
//!
//! It may use: the derived [`Plan`] (nothing re-resolves names here), the ring
//! ([`EventRingbuf`]), and `backend` through the [`Backend`] trait only.
//!
//! | file | what it is |
//! |---|---|
//! | `mod.rs` | [`run`] and [`RunConfig`]: rings made, threads spawned and joined, streams drained |
//! | `stages.rs` | the user's side: [`Stages`], [`StageCtx`], [`BlockingCall`] |
//! | `compile.rs` | every op resolved to its ring, stream and closure before anything runs |
//! | `thread.rs` | one plan thread's loop |
//! | `latency.rs` | per-stage and end-to-end latency from the instants the threads pass ([`RunLatency`]), in bounded memory |
//! | `watchdog.rs` | the stall watchdog: per-thread progress, and the report when none moves |
//!
//! What [`run`] does, its stalls and errors, with an example: see its docs.

mod compile;
mod latency;
mod stages;
mod thread;
mod watchdog;

pub use latency::{LatencySummary, RunLatency, StageLatency};
pub use stages::{BlockingCall, StageCtx, Stages};

use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::plan::Plan;
use crate::backend::interrupt::Deadline;
use crate::backend::Backend;
use crate::error::{panic_message, Error, Result};
use crate::EventRingbuf;
use compile::{compile, stage_err};
use thread::{run_thread, Failed, Told};

/// What one thread did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadStats {
    /// The plan thread.
    pub name: String,
    /// Loop iterations completed.
    pub iterations: i64,
    /// Stage closures run.
    pub launches: u64,
    /// Stream waits enqueued.
    pub waits: u64,
    /// Host synchronizes done.
    pub synchronizes: u64,
    /// Records made.
    pub records: u64,
}

/// What [`run`] measured.
#[derive(Debug, Clone, Default)]
pub struct RunStats {
    /// From the threads' start until every stream drained.
    pub wall: Duration,
    /// Per plan thread, in plan order.
    pub threads: Vec<ThreadStats>,
    /// Per stage and per batch end to end: p50, p99 and max ([`RunLatency`] says what is
    /// measured from where to where).
    pub latency: RunLatency,
}

impl RunStats {
    /// The stats of thread `name`.
    pub fn thread(&self, name: &str) -> Option<&ThreadStats> {
        self.threads.iter().find(|t| t.name == name)
    }
}

/// Every stream name the plan uses ([`Plan::streams`]), sorted.
pub fn required_streams(plan: &Plan) -> Vec<String> {
    let names: BTreeSet<&String> = plan.streams.iter().collect();
    names.into_iter().cloned().collect()
}

/// One new stream of `backend` per [`required_streams`] name.
///
/// # Errors
/// The backend's, when it cannot create a stream.
pub fn new_streams<B: Backend>(backend: &B, plan: &Plan) -> Result<HashMap<String, B::Stream>> {
    required_streams(plan)
        .into_iter()
        .map(|n| backend.new_stream(&n).map(|s| (n, s)))
        .collect()
}

/// What [`run`] runs, by name: `pipeline::run(RunConfig { plan: &plan, backend: &host,
/// streams: &streams, stages: &stages, batches: 10 })`.
pub struct RunConfig<'r, 'a, B: Backend> {
    /// The derived plan.
    pub plan: &'r Plan,
    /// The backend the rings are made on.
    pub backend: &'r B,
    /// A stream of `backend` for every name of [`required_streams`] ([`new_streams`] makes
    /// them).
    pub streams: &'r HashMap<String, B::Stream>,
    /// The work: one closure per stage.
    pub stages: &'r Stages<'a, B>,
    /// Seqs `0..batches` run.
    pub batches: i64,
    /// The stall watchdog: `Some(timeout)` stops every ring when no thread has made progress
    /// (finished a ring call or a stage closure) for `timeout`, and [`run`] returns
    /// [`Error::Stalled`] naming what each thread was blocked on and who had to act. The
    /// timeout must exceed the longest a stage closure or a ring call may legitimately take.
    /// Once every thread is done, the streams' work still queued must end within it once per
    /// batch and stage (else [`Error::Stalled`] names the stream). `None`: no watchdog (a run that cannot progress
    /// blocks forever).
    pub stall_timeout: Option<Duration>,
}

/// A stall timeout for runs whose stages take at most seconds: what the `seqsync` command uses.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the plan for seqs `0..batches`: one [`EventRingbuf`] per ring, one OS thread per plan
/// thread, each executing its ops in order.
///
/// It builds one [`EventRingbuf`] per plan ring (the derived `nconsumers` and
/// `max_size`), spawns one OS thread per plan thread, and has each thread execute its loop body
/// for seq `0..batches`:
///
/// | op | call |
/// |---|---|
/// | `Wait` | `ring.wait(stage's stream, s - lag, blocking)` |
/// | `Synchronize` | `ring.synchronize(s - lag, blocking)`, then the stage's [`Stages::after_sync`] closure if this is the stage's own `sync` |
/// | `Launch` | the stage's closure ([`Stages::stage`]) with a [`StageCtx`] |
/// | `Record` | `ring.record(stage's stream, s, blocking)`; a host stage: `ring.record_host(s, blocking)` |
///
/// **Host stages** (`host = true`, no stream) run their closure on the thread itself, so their
/// work is complete when the closure returns, and their ring is published with
/// [`EventRingbuf::record_host`]: no stream, no event. A stream stage waiting on it is ordered
/// by the host thread's program order alone (its blocking `wait` returns only once the host
/// stage has recorded). [`required_streams`] lists every stream name a plan needs;
/// [`new_streams`] creates them on any backend.
///
/// **Stalls.** With [`RunConfig::stall_timeout`] set (opt-in here; the `seqsync` command
/// uses [`DEFAULT_STALL_TIMEOUT`]), a watchdog thread stops every ring once no thread has
/// finished a ring call or a stage closure for the timeout, and [`run`] returns
/// [`Error::Stalled`]: per thread, the call it is blocked in (ring, call, seq) and who must
/// act (the producer that must record, or the consumers that must release). A plan that
/// [`check_deadlock`](crate::pipeline::check_deadlock) proves deadlock-free does not stall
/// unless a stage's own work hangs.
///
/// **Latency.** [`RunStats::latency`] has each stage's and each batch's end-to-end p50, p99
/// and max ([`RunLatency`] defines them): the threads read the clock around the closures and
/// after the synchronizes they make anyway, and store into memory sized before the run from
/// the plan alone; no event is queried and no stream synchronized for it.
///
/// **Errors.** A stage without a closure, a stream the plan names but the map lacks, and a
/// closure given for a stage the plan does not have are [`Error::Stage`] errors, reported
/// before any thread starts. When a thread fails (an error from a ring, a closure, or a panic
/// in a closure), every ring is stopped, so every other thread wakes with
/// [`Error::Stopped`]; all threads are joined and the *first* real error (in time) is
/// returned, a `Stopped` only when nothing else failed. After the threads end, every stream is
/// drained ([`Backend::synchronize_stream`]) before the wall time is taken.
///
/// # Example
///
/// The seed's shape, reduced: a copy stage and a kernel on one thread, a sync'd copy-out on
/// another, on the host backend.
///
/// ```
/// use std::sync::atomic::{AtomicI64, Ordering};
/// use seqsync::pipeline::{self, derive, PipelineSpec, StageSpec};
/// use seqsync::HostBackend;
///
/// # fn main() -> seqsync::Result<()> { // derive's PlanError and run's Error: one family
/// let spec = PipelineSpec::builder()
///     .buffer("in", 2).buffer("out", 2)
///     .thread("t0")
///     .stage("copy_in", StageSpec::on_stream("s0").writes("in"))
///     .stage("kernel", StageSpec::on_stream("s1").reads("in").writes("out"))
///     .thread("t1")
///     .stage("copy_out", StageSpec::on_stream("s2").reads("out").sync())
///     .build()?;
/// let plan = derive(&spec)?;
///
/// let host = HostBackend::new();
/// let streams = pipeline::new_streams(&host, &plan)?;
/// let processed = AtomicI64::new(0);
/// let stages = pipeline::Stages::<HostBackend>::new()
///     .stage("copy_in", |cx| {
///         cx.stream.unwrap().launch(|| { /* copy batch in */ });
///         Ok(())
///     })
///     .stage("kernel", |_| Ok(()))
///     .stage("copy_out", |_| Ok(()))
///     .after_sync("copy_out", |_seq| {
///         processed.fetch_add(1, Ordering::Relaxed); // process_data
///         Ok(())
///     });
/// let stats = pipeline::run(pipeline::RunConfig {
///     plan: &plan,
///     backend: &host,
///     streams: &streams,
///     stages: &stages,
///     batches: 10,
///     stall_timeout: None,
/// })?;
/// assert_eq!(processed.load(Ordering::Relaxed), 10);
/// assert_eq!(stats.thread("t0").unwrap().launches, 20);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// [`Error::Stage`] before anything runs, for a stage without a closure, a missing stream, or
/// a closure naming no stage; [`Error::InvalidArgument`] for `batches < 0`; otherwise the first
/// error any thread hit (a ring's, a closure's, or [`Error::Stage`] for a panicking closure).
pub fn run<B: Backend>(config: RunConfig<'_, '_, B>) -> Result<RunStats> {
    let RunConfig {
        plan,
        backend,
        streams,
        stages,
        batches,
        stall_timeout,
    } = config;
    if batches < 0 {
        return Err(Error::InvalidArgument {
            ring: "pipeline runtime".into(),
            message: format!("batches must be at least 0, got {batches}"),
        });
    }
    let programs = compile(plan, streams, stages)?;
    let latency = latency::Collector::new(plan);
    let rings = plan
        .rings
        .iter()
        .map(|r| {
            let size = usize::try_from(r.max_size).unwrap_or(usize::MAX);
            EventRingbuf::new(backend, r.name.clone(), r.nconsumers, size)
        })
        .collect::<Result<Vec<_>>>()?;
    let first: Mutex<Option<Error>> = Mutex::new(None);
    let progress: Vec<watchdog::Progress> = plan
        .threads
        .iter()
        .map(|_| watchdog::Progress::default())
        .collect();
    let (run_over, over_rx) = std::sync::mpsc::channel::<()>();
    let start = Instant::now();
    let (results, stalled): (Vec<(ThreadStats, Option<Error>)>, Option<Error>) =
        std::thread::scope(|scope| {
            let (rings, first, latency) = (&rings, &first, &latency);
            let watcher = match stall_timeout.map(|timeout| {
                let progress = &progress;
                std::thread::Builder::new()
                    .name("seqsync-watchdog".into())
                    .spawn_scoped(scope, move || {
                        watchdog::watch(plan, rings, progress, timeout, batches, &over_rx)
                    })
            }) {
                Some(Err(e)) => {
                    // No watchdog, no run: nothing was started yet.
                    let e = Error::Backend(crate::error::BackendError::new(
                        "pipeline runtime",
                        "spawn the stall watchdog's thread",
                        e.to_string(),
                    ));
                    return (Vec::new(), Some(e));
                }
                w => w.and_then(Result::ok),
            };
            let progress_of = |i: usize| stall_timeout.map(|_| &progress[i]);
            let observer = stages.observer.as_ref();
            let handles: Vec<_> = plan
                .threads
                .iter()
                .zip(&programs)
                .enumerate()
                .map(|(i, (t, steps))| {
                    let name = t.name.as_str();
                    let progress = progress_of(i);
                    std::thread::Builder::new()
                        .name(format!("seqsync-{name}"))
                        .spawn_scoped(scope, move || {
                            let mut stats = ThreadStats {
                                name: name.to_string(),
                                ..ThreadStats::default()
                            };
                            let outcome = catch_unwind(AssertUnwindSafe(|| {
                                let told = Told {
                                    observer,
                                    progress,
                                    latency,
                                };
                                run_thread(name, steps, rings, batches, &mut stats, told)
                            }))
                            .unwrap_or_else(|p| {
                                let message = panic_message(&*p);
                                // A payload whose drop panics too must not unwind past the
                                // stop of the rings below.
                                crate::error::drop_panic_payload(p);
                                Err(Failed {
                                    seq: stats.iterations,
                                    error: stage_err(name, format!("thread panicked: {message}")),
                                })
                            });
                            let err = match outcome {
                                Ok(()) => None,
                                Err(Failed { seq, error }) => {
                                    if !error.is_stopped() {
                                        let mut f = first.lock().unwrap_or_else(|e| e.into_inner());
                                        f.get_or_insert_with(|| error.clone());
                                    }
                                    // The cascade: wake every thread blocked on any ring.
                                    let reason =
                                        format!("thread {name} failed at seq {seq}: {error}");
                                    for r in rings {
                                        r.stop(reason.clone());
                                    }
                                    Some(error)
                                }
                            };
                            (stats, err)
                        })
                })
                .collect::<Vec<_>>();
            // A thread that could not be spawned (the OS refused: too many threads, no
            // memory for a stack) stops every ring now, before any join: the threads that did
            // start may be blocked on rings only it would have fed.
            let unspawned = handles
                .iter()
                .zip(&plan.threads)
                .find_map(|(h, t)| h.as_ref().err().map(|e| (t, e)));
            if let Some((t, e)) = unspawned {
                let e = stage_err(&t.name, format!("cannot spawn its thread: {e}"));
                for r in rings {
                    r.stop(e.to_string());
                }
                first
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert_with(|| e.clone());
            }
            let results = handles
                .into_iter()
                .zip(&plan.threads)
                .map(|(h, t)| match h {
                    Ok(h) => h.join().unwrap_or_else(|_| {
                        let e = stage_err(&t.name, "thread panicked outside its guard".to_string());
                        (ThreadStats::default(), Some(e))
                    }),
                    Err(e) => {
                        // Its rings were stopped above.
                        let e = stage_err(&t.name, format!("cannot spawn its thread: {e}"));
                        (ThreadStats::default(), Some(e))
                    }
                })
                .collect();
            // Every thread is joined: the watchdog may stop watching.
            drop(run_over);
            let stalled = watcher.and_then(|w| w.join().ok().flatten());
            (results, stalled)
        });
    let first = first.into_inner().unwrap_or_else(|e| e.into_inner());
    // After a failure, the streams may hold work that never ends (the stall's hung work): they
    // are waited for a bounded time, and the failure is what the run returns either way.
    let failed = stalled.is_some() || first.is_some() || results.iter().any(|(_, e)| e.is_some());
    let drained = if failed {
        drain(backend, streams, Some(DRAIN_AFTER_FAILURE)).map(drop)
    } else {
        // Every thread is done, but the streams may hold every batch's work still (a ring
        // slot frees once a wait is enqueued): with a stall timeout, that work may take it
        // once per batch and stage at most, so hung work that no thread waited for does not
        // hang the run here.
        let work =
            u32::try_from((batches.max(1) as u64).saturating_mul(plan.stages.len().max(1) as u64))
                .unwrap_or(u32::MAX);
        match drain(
            backend,
            streams,
            stall_timeout.map(|t| t.saturating_mul(work)),
        ) {
            Ok(Some(stream)) => Err(Error::Stalled {
                timeout_ms: stall_timeout.map_or(0, |t| t.as_millis().min(u64::MAX as u128) as u64),
                threads: vec![format!(
                    "stream {stream}: its work did not end after every thread was done"
                )],
            }),
            r => r.map(drop),
        }
    };
    let wall = start.elapsed();
    let mut stopped = None;
    let mut threads = Vec::with_capacity(results.len());
    for (stats, err) in results {
        if let Some(e) = err {
            stopped.get_or_insert(e);
        }
        threads.push(stats);
    }
    // A stall explains the `Stopped` errors the threads woke with. A thread's own error (not
    // a stop) came first: the stall it may have caused only watched the others wind down.
    let error = match (stalled, first) {
        (Some(_), Some(first)) if !first.is_stopped() => Some(first),
        (stalled, first) => stalled.or(first),
    };
    if let Some(e) = error.or(stopped) {
        return Err(e);
    }
    drained?;
    Ok(RunStats {
        wall,
        threads,
        latency: latency.finish(plan, batches),
    })
}

/// How long a failed run waits for its streams' work before it returns its error anyway.
const DRAIN_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// Waits until everything enqueued on every stream has run; with `limit`, at most that long
/// in all: `Ok(Some(name))` names the first stream whose work had not ended by then.
fn drain<B: Backend>(
    backend: &B,
    streams: &HashMap<String, B::Stream>,
    limit: Option<Duration>,
) -> Result<Option<String>> {
    let mut first = Ok(None);
    let Some(limit) = limit else {
        for s in streams.values() {
            let r = backend.synchronize_stream(s);
            if matches!(first, Ok(None)) {
                first = r.map(|()| None);
            }
        }
        return first;
    };
    // A limit past what an instant can hold: no limit.
    let Some(until) = Instant::now().checked_add(limit) else {
        return drain(backend, streams, None);
    };
    for (name, s) in streams {
        let event = backend.create_event(crate::backend::EventOptions::default())?;
        backend.record(&event, s)?;
        let r = backend.synchronize_interruptible(&event, &Deadline(until));
        if matches!(first, Ok(None)) {
            first = r.map(|o| {
                (o == crate::backend::SyncOutcome::Interrupted).then(|| format!("'{name}'"))
            });
        }
    }
    first
}
