//! The pipeline runtime: runs a derived [`Plan`] with one user closure per stage.
//!
//! [`run`] builds one [`EventRingbuf`] per plan ring (the derived `nconsumers` and
//! `max_size`), spawns one OS thread per plan thread, and has each thread execute its loop body
//! for seq `0..batches`:
//!
//! | op | call |
//! |---|---|
//! | `Wait` | `ring.wait(stage's stream, s - lag, blocking)` |
//! | `Synchronize` | `ring.synchronize(s - lag, blocking)`, then the stage's [`Stages::after_sync`] closure if this is the stage's own `sync` |
//! | `Launch` | the stage's closure ([`Stages::stage`]) with a [`StageCtx`] |
//! | `Record` | `ring.record(stage's stream, s, blocking)` |
//!
//! **Host stages** (`host = true`, no stream) run their closure on the thread itself, so their
//! work is complete when the closure returns, and their ring is published with
//! [`EventRingbuf::record_host`]: no stream, no event. A stream stage waiting on it is ordered
//! by the host thread's program order alone (its blocking `wait` returns only once the host
//! stage has recorded). [`required_streams`] lists every stream name a plan needs;
//! [`new_streams`] creates them on any backend.
//!
//! **Errors.** A stage without a closure, a stream the plan names but the map lacks, and a
//! closure given for a stage the plan does not have are [`Error::Stage`] errors, reported
//! before any thread starts. When a thread fails (an error from a ring, a closure, or a panic
//! in a closure), every ring is stopped, so every other thread wakes with
//! [`Error::Stopped`]; all threads are joined and the *first* real error (in time) is
//! returned, a `Stopped` only when nothing else failed. After the threads end, every stream is
//! drained ([`Backend::synchronize_stream`]) before the wall time is taken.
//!
//! # Example
//!
//! The seed's shape, reduced: a copy stage and a kernel on one thread, a sync'd copy-out on
//! another, on the host backend.
//!
//! ```
//! use std::sync::atomic::{AtomicI64, Ordering};
//! use seqsync::pipeline::{derive, runtime, PipelineSpec, StageSpec};
//! use seqsync::HostBackend;
//!
//! # fn main() -> seqsync::Result<()> { // derive's PlanError and run's Error: one family
//! let spec = PipelineSpec::builder()
//!     .buffer("in", 2).buffer("out", 2)
//!     .thread("t0")
//!     .stage("copy_in", StageSpec::on_stream("s0").writes("in"))
//!     .stage("kernel", StageSpec::on_stream("s1").reads("in").writes("out"))
//!     .thread("t1")
//!     .stage("copy_out", StageSpec::on_stream("s2").reads("out").sync())
//!     .build()?;
//! let plan = derive(&spec)?;
//!
//! let host = HostBackend::new();
//! let streams = runtime::new_streams(&host, &plan)?;
//! let processed = AtomicI64::new(0);
//! let stages = runtime::Stages::<HostBackend>::new()
//!     .stage("copy_in", |cx| {
//!         cx.stream.unwrap().launch(|| { /* copy batch in */ });
//!         Ok(())
//!     })
//!     .stage("kernel", |_| Ok(()))
//!     .stage("copy_out", |_| Ok(()))
//!     .after_sync("copy_out", |_seq| {
//!         processed.fetch_add(1, Ordering::Relaxed); // process_data
//!         Ok(())
//!     });
//! let stats = runtime::run(runtime::RunConfig {
//!     plan: &plan,
//!     backend: &host,
//!     streams: &streams,
//!     stages: &stages,
//!     batches: 10,
//! })?;
//! assert_eq!(processed.load(Ordering::Relaxed), 10);
//! assert_eq!(stats.thread("t0").unwrap().launches, 20);
//! # Ok(())
//! # }
//! ```

use std::collections::{BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::panic_message;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::derive::{Op, Plan};
use super::PlanError;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::{Blocking, EventRingbuf};

/// A stage's closure: launches the stage's work for one seq.
type StageFn<'a, B> = Box<dyn Fn(&StageCtx<'_, B>) -> Result<()> + Sync + 'a>;
/// Host work after a stage's own synchronize.
type AfterFn<'a> = Box<dyn Fn(i64) -> Result<()> + Sync + 'a>;

/// What a stage's closure is told.
pub struct StageCtx<'a, B: Backend> {
    /// The batch.
    pub seq: i64,
    /// The stage's name.
    pub stage: &'a str,
    /// The host thread running it.
    pub thread: &'a str,
    /// The stage's stream; `None` for a host stage, whose work is done when the closure
    /// returns.
    pub stream: Option<&'a B::Stream>,
}

/// A ring call made with `Blocking::Yes` (one that may have waited), for tracing.
#[derive(Debug, Clone, Copy)]
pub struct BlockingCall<'a> {
    /// The host thread that made it.
    pub thread: &'a str,
    /// `"wait"`, `"synchronize"` or `"record"`.
    pub call: &'static str,
    /// The ring.
    pub ring: &'a str,
    /// The seq passed to the call.
    pub seq: i64,
    /// When the call started and returned.
    pub start: Instant,
    /// See `start`.
    pub end: Instant,
}

type ObserverFn<'a> = Box<dyn Fn(&BlockingCall<'_>) + Sync + 'a>;

/// The user's work: one closure per stage, and optional host work after a stage's `sync`.
pub struct Stages<'a, B: Backend> {
    launch: HashMap<String, StageFn<'a, B>>,
    after_sync: HashMap<String, AfterFn<'a>>,
    observer: Option<ObserverFn<'a>>,
}

impl<B: Backend> Default for Stages<'_, B> {
    fn default() -> Self {
        Stages {
            launch: HashMap::new(),
            after_sync: HashMap::new(),
            observer: None,
        }
    }
}

impl<'a, B: Backend> Stages<'a, B> {
    /// No stages yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the closure that launches stage `name`'s work for one seq: enqueue it on
    /// `cx.stream`, or do it right there for a host stage. Replaces an earlier one.
    pub fn stage(
        mut self,
        name: impl Into<String>,
        f: impl Fn(&StageCtx<'_, B>) -> Result<()> + Sync + 'a,
    ) -> Self {
        self.launch.insert(name.into(), Box::new(f));
        self
    }

    /// Sets a closure told of every blocking ring call (`Blocking::Yes`) once it returns:
    /// which thread, ring and seq, and how long it took. For traces; `None` by default.
    pub fn observe(mut self, f: impl Fn(&BlockingCall<'_>) + Sync + 'a) -> Self {
        self.observer = Some(Box::new(f));
        self
    }

    /// Sets host work run right after the thread's synchronize on stage `name`'s own ring
    /// (a `sync = true` stage), e.g. the seed's `process_data`. Called with the seq.
    pub fn after_sync(
        mut self,
        name: impl Into<String>,
        f: impl Fn(i64) -> Result<()> + Sync + 'a,
    ) -> Self {
        self.after_sync.insert(name.into(), Box::new(f));
        self
    }
}

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

/// One op, resolved to ring indices, streams and closures.
enum Step<'r, 'a, B: Backend> {
    Wait {
        ring: usize,
        lag: i64,
        blocking: Blocking,
        stream: &'r B::Stream,
    },
    Sync {
        ring: usize,
        lag: i64,
        blocking: Blocking,
        after: Option<&'r AfterFn<'a>>,
    },
    Launch {
        stage: &'r str,
        stream: Option<&'r B::Stream>,
        f: &'r StageFn<'a, B>,
    },
    Record {
        ring: usize,
        blocking: Blocking,
        /// `None`: a host stage's ring, published with [`EventRingbuf::record_host`].
        stream: Option<&'r B::Stream>,
    },
}

fn stage_err(stage: &str, message: impl Into<String>) -> Error {
    Error::Stage {
        stage: stage.to_string(),
        message: message.into(),
    }
}

/// Resolves every op of every thread to rings, streams and closures; every missing piece is
/// an error here.
fn compile<'r, 'a, B: Backend>(
    plan: &'r Plan,
    streams: &'r HashMap<String, B::Stream>,
    stages: &'r Stages<'a, B>,
) -> Result<Vec<Vec<Step<'r, 'a, B>>>> {
    let inconsistent = |message: String| Error::Plan(PlanError::InvalidPlan { message });
    let stage_name = |g: usize| -> Result<&'r str> {
        plan.stages.get(g).map(|s| s.name.as_str()).ok_or_else(|| {
            inconsistent(format!(
                "an op names stage #{g}, but the plan has {} stages",
                plan.stages.len()
            ))
        })
    };
    let ring = |stage: &str, r: usize| {
        if r < plan.rings.len() {
            Ok(r)
        } else {
            Err(inconsistent(format!(
                "stage `{stage}` names ring #{r}, but the plan has {} rings",
                plan.rings.len()
            )))
        }
    };
    let stream = |stage: &str, i: usize| -> Result<&'r B::Stream> {
        let name = plan.streams.get(i).ok_or_else(|| {
            inconsistent(format!(
                "stage `{stage}` names stream #{i}, but the plan has {} streams",
                plan.streams.len()
            ))
        })?;
        streams.get(name).ok_or_else(|| {
            stage_err(
                stage,
                format!(
                    "no stream `{name}` was given (the plan needs {:?})",
                    required_streams(plan)
                ),
            )
        })
    };
    let lag_of = |stage: &str, lag: i64| {
        if lag >= 0 {
            Ok(lag)
        } else {
            Err(inconsistent(format!(
                "stage `{stage}` waits at negative lag {lag}"
            )))
        }
    };
    // Names given for stages the plan lacks are typos: say so.
    let launched: BTreeSet<&str> = plan
        .threads
        .iter()
        .flat_map(|t| &t.ops)
        .filter_map(|op| match op {
            Op::Launch { stage } => plan.stages.get(*stage).map(|s| s.name.as_str()),
            _ => None,
        })
        .collect();
    for name in stages.launch.keys().chain(stages.after_sync.keys()) {
        if !launched.contains(name.as_str()) {
            return Err(stage_err(
                name,
                format!(
                    "a closure was given but the plan has no such stage (stages: {launched:?})"
                ),
            ));
        }
    }
    let mut synced = BTreeSet::new();
    let mut out = Vec::with_capacity(plan.threads.len());
    for t in &plan.threads {
        let mut steps = Vec::with_capacity(t.ops.len());
        for op in &t.ops {
            steps.push(match *op {
                Op::Wait {
                    stage,
                    ring: r,
                    lag,
                    blocking,
                    stream: s,
                } => {
                    let name = stage_name(stage)?;
                    Step::Wait {
                        ring: ring(name, r)?,
                        lag: lag_of(name, lag)?,
                        blocking: blocking.into(),
                        stream: stream(name, s)?,
                    }
                }
                Op::Synchronize {
                    stage,
                    ring: r,
                    lag,
                    blocking,
                } => {
                    let name = stage_name(stage)?;
                    let own = stage == r;
                    if own {
                        synced.insert(name);
                    }
                    Step::Sync {
                        ring: ring(name, r)?,
                        lag: lag_of(name, lag)?,
                        blocking: blocking.into(),
                        after: if own {
                            stages.after_sync.get(name)
                        } else {
                            None
                        },
                    }
                }
                Op::Launch { stage } => {
                    let name = stage_name(stage)?;
                    Step::Launch {
                        stage: name,
                        stream: match plan.stages[stage].stream {
                            Some(s) => Some(stream(name, s)?),
                            None => None,
                        },
                        f: stages.launch.get(name).ok_or_else(|| {
                            stage_err(name, "no closure was given for this stage (Stages::stage)")
                        })?,
                    }
                }
                Op::Record {
                    stage,
                    ring: r,
                    blocking,
                    stream: s,
                } => {
                    let name = stage_name(stage)?;
                    Step::Record {
                        ring: ring(name, r)?,
                        blocking: blocking.into(),
                        stream: match s {
                            Some(s) => Some(stream(name, s)?),
                            None => None,
                        },
                    }
                }
            });
        }
        out.push(steps);
    }
    for name in stages.after_sync.keys() {
        if !synced.contains(name.as_str()) {
            return Err(stage_err(
                name,
                "an after_sync closure was given but the stage has no `sync` (its thread never \
                 synchronizes on its ring)",
            ));
        }
    }
    Ok(out)
}

/// Where a failure happened, for the stop reason.
struct Failed {
    seq: i64,
    error: Error,
}

/// Run `f`, a ring call; tell `observer` about it if it was a blocking one.
fn observed<T>(
    observer: Option<&ObserverFn<'_>>,
    blocking: Blocking,
    call: BlockingCall<'_>,
    f: impl FnOnce() -> T,
) -> T {
    match observer {
        Some(o) if blocking == Blocking::Yes => {
            let start = Instant::now();
            let r = f();
            o(&BlockingCall {
                start,
                end: Instant::now(),
                ..call
            });
            r
        }
        _ => f(),
    }
}

fn run_thread<B: Backend>(
    name: &str,
    steps: &[Step<'_, '_, B>],
    rings: &[EventRingbuf<B>],
    batches: i64,
    stats: &mut ThreadStats,
    observer: Option<&ObserverFn<'_>>,
) -> std::result::Result<(), Failed> {
    let now = Instant::now();
    let call = |call, ring: usize, seq| BlockingCall {
        thread: name,
        call,
        ring: rings[ring].name(),
        seq,
        start: now,
        end: now,
    };
    for seq in 0..batches {
        let fail = |error| Failed { seq, error };
        for step in steps {
            match step {
                Step::Wait {
                    ring,
                    lag,
                    blocking,
                    stream,
                } => {
                    let s = seq - lag;
                    observed(observer, *blocking, call("wait", *ring, s), || {
                        rings[*ring].wait(stream, s, *blocking)
                    })
                    .map_err(fail)?;
                    stats.waits += 1;
                }
                Step::Sync {
                    ring,
                    lag,
                    blocking,
                    after,
                } => {
                    let s = seq - lag;
                    observed(observer, *blocking, call("synchronize", *ring, s), || {
                        rings[*ring].synchronize(s, *blocking)
                    })
                    .map_err(fail)?;
                    stats.synchronizes += 1;
                    if let Some(after) = after {
                        after(seq).map_err(fail)?;
                    }
                }
                Step::Launch { stage, stream, f } => {
                    f(&StageCtx {
                        seq,
                        stage,
                        thread: name,
                        stream: *stream,
                    })
                    .map_err(fail)?;
                    stats.launches += 1;
                }
                Step::Record {
                    ring,
                    blocking,
                    stream,
                } => {
                    observed(
                        observer,
                        *blocking,
                        call("record", *ring, seq),
                        || match stream {
                            Some(stream) => rings[*ring].record(stream, seq, *blocking),
                            None => rings[*ring].record_host(seq, *blocking),
                        },
                    )
                    .map_err(fail)?;
                    stats.records += 1;
                }
            }
        }
        stats.iterations = seq + 1;
    }
    Ok(())
}

/// What [`run`] runs, by name: `runtime::run(RunConfig { plan: &plan, backend: &host,
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
}

/// Runs the plan for seqs `0..batches`: one [`EventRingbuf`] per ring, one OS thread per plan
/// thread, each executing its ops in order (see the [module docs](self)).
///
/// # Errors
/// [`Error::Stage`] before anything runs, for a stage without a closure, a missing stream, or
/// a closure naming no stage; [`Error::Plan`] for a plan whose ops name a stage, ring or
/// stream it does not have (a hand-edited plan); [`Error::InvalidArgument`] for
/// `batches < 0`; otherwise the first
/// error any thread hit (a ring's, a closure's, or [`Error::Stage`] for a panicking closure).
pub fn run<B: Backend>(config: RunConfig<'_, '_, B>) -> Result<RunStats> {
    let RunConfig {
        plan,
        backend,
        streams,
        stages,
        batches,
    } = config;
    if batches < 0 {
        return Err(Error::InvalidArgument {
            ring: "pipeline runtime".into(),
            message: format!("batches must be at least 0, got {batches}"),
        });
    }
    let programs = compile(plan, streams, stages)?;
    let rings = plan
        .rings
        .iter()
        .map(|r| {
            let size = usize::try_from(r.max_size).unwrap_or(usize::MAX);
            EventRingbuf::new(backend, r.name.clone(), r.nconsumers, size)
        })
        .collect::<Result<Vec<_>>>()?;
    let first: Mutex<Option<Error>> = Mutex::new(None);
    let start = Instant::now();
    let results: Vec<(ThreadStats, Option<Error>)> = std::thread::scope(|scope| {
        let (rings, first) = (&rings, &first);
        let observer = stages.observer.as_ref();
        let handles: Vec<_> = plan
            .threads
            .iter()
            .zip(&programs)
            .map(|(t, steps)| {
                let name = t.name.as_str();
                std::thread::Builder::new()
                    .name(format!("seqsync-{name}"))
                    .spawn_scoped(scope, move || {
                        let mut stats = ThreadStats {
                            name: name.to_string(),
                            ..ThreadStats::default()
                        };
                        let outcome = catch_unwind(AssertUnwindSafe(|| {
                            run_thread(name, steps, rings, batches, &mut stats, observer)
                        }))
                        .unwrap_or_else(|p| {
                            Err(Failed {
                                seq: stats.iterations,
                                error: stage_err(
                                    name,
                                    format!("thread panicked: {}", panic_message(&*p)),
                                ),
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
                                let reason = format!("thread {name} failed at seq {seq}: {error}");
                                for r in rings {
                                    r.stop(reason.clone());
                                }
                                Some(error)
                            }
                        };
                        (stats, err)
                    })
            })
            .collect();
        handles
            .into_iter()
            .zip(&plan.threads)
            .map(|(h, t)| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    let e = stage_err(&t.name, "thread panicked outside its guard".to_string());
                    (ThreadStats::default(), Some(e))
                }),
                Err(e) => {
                    // No thread: stop every ring so that the threads already started end.
                    let e = stage_err(&t.name, format!("cannot spawn its thread: {e}"));
                    for r in rings {
                        r.stop(e.to_string());
                    }
                    first
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert_with(|| e.clone());
                    (ThreadStats::default(), Some(e))
                }
            })
            .collect()
    });
    let drained = drain(backend, streams);
    let wall = start.elapsed();
    let first = first.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut stopped = None;
    let mut threads = Vec::with_capacity(results.len());
    for (stats, err) in results {
        if let Some(e) = err {
            stopped.get_or_insert(e);
        }
        threads.push(stats);
    }
    if let Some(e) = first.or(stopped) {
        return Err(e);
    }
    drained?;
    Ok(RunStats { wall, threads })
}

/// Waits until everything enqueued on every stream has run.
fn drain<B: Backend>(backend: &B, streams: &HashMap<String, B::Stream>) -> Result<()> {
    let mut first = Ok(());
    for s in streams.values() {
        let r = backend.synchronize_stream(s);
        if first.is_ok() {
            first = r;
        }
    }
    first
}
