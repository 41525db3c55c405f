//! `seqsync check SPEC.toml` and `seqsync run SPEC.toml`: derive a declared pipeline, prove
//! it deadlock-free, and run it.

use std::path::PathBuf;

use clap::Args;
use seqsync::backend::host::Chaos;
use seqsync::internal::pipeline::{derive_unchecked, minimum_sizes, SizeBound, DEFAULT_MAX_STATES};
use seqsync::pipeline::{
    check_deadlock_with, derive, CheckOptions, LatencySummary, PipelineSpec, Plan, PlanError,
    RunLatency, StageTimes, Verdict,
};
use seqsync::{AnyBackend, BackendKind, HostBackend};
use seqsync_demo::demo::{self, DemoConfig, Engine};
use seqsync_demo::samples::{Measured, Samples, MAX_MEASURED_BATCHES};
use seqsync_demo::selftest;

use crate::Failure;

/// Steps of a deadlock trace printed in full; longer traces are folded.
const FULL_TRACE_STEPS: usize = 40;

#[derive(Args)]
pub(crate) struct CheckArgs {
    /// The pipeline spec (TOML), e.g. specs/seed.toml.
    spec: PathBuf,
    /// Override a parameter (`nin=5`) or a ring's size (`h.max_size=6`); repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Print one JSON object and nothing else on stdout.
    #[arg(long)]
    json: bool,
    /// States the deadlock check's search explores before it gives up (inconclusive); only
    /// plans the proof from dependency cycles does not decide are searched.
    #[arg(long, default_value_t = DEFAULT_MAX_STATES)]
    max_states: usize,
    /// Stage times, to predict the throughput: `f=12us,g=30us,...` for every stage, plus
    /// `STAGE.after=…` for host work after a stage's synchronize and `host=…` for each host
    /// call (units ns, us, ms, s); `@FILE` reads them from a file, one or more per line.
    #[arg(long, value_name = "STAGE=TIME,...|@FILE")]
    times: Option<String>,
}

#[derive(Args)]
pub(crate) struct RunArgs {
    /// The pipeline spec (TOML). Seed-shaped specs run the demo's kernels on the pipeline
    /// engine (on the GPU if there is one); any other shape runs built-in stages that check
    /// every buffer read, on the host backend (or, with `--backend cuda`, as host functions
    /// on CUDA streams).
    spec: PathBuf,
    /// Override a parameter (`nin=5`) or a ring's size (`h.max_size=6`); repeatable.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Batches to push through.
    #[arg(long, default_value_t = 100)]
    batches: i64,
    /// auto (CUDA if a GPU is present), host or cuda.
    #[arg(long, default_value = "auto", value_parser = crate::parse::<BackendKind>)]
    backend: BackendKind,
    /// Bytes per batch, a multiple of 4 (default: 64 MiB on CUDA, 256 KiB on host).
    #[arg(long)]
    batch_bytes: Option<usize>,
    /// Host backend: random delays in every stream operation, from this seed.
    #[arg(long, value_name = "SEED")]
    chaos: Option<u64>,
    /// Print one JSON object (the demo report) and nothing else on stdout.
    #[arg(long)]
    json: bool,
    /// Seed-shaped specs: pipeline (the runtime) or graph (K batches per CUDA graph).
    #[arg(long, default_value = "pipeline", value_parser = crate::parse::<Engine>)]
    engine: Engine,
    /// --engine graph: batches per graph.
    #[arg(long, value_name = "K")]
    graph_batches: Option<usize>,
    /// States the deadlock check explores before it gives up; a spec it does not prove is
    /// not run.
    #[arg(long, default_value_t = DEFAULT_MAX_STATES)]
    max_states: usize,
    /// Measure every stage's durations as it runs, predict the throughput from them and
    /// compare it with the run's (at most 100 000 batches).
    #[arg(long)]
    measure: bool,
    /// Specs not shaped like the seed's: each built-in stage's work takes at least this long
    /// (`left=200us,right=300us,...`, the rest slept), to compare a run with `check --times`;
    /// `@FILE` reads them from a file.
    #[arg(long, value_name = "STAGE=TIME,...|@FILE")]
    times: Option<String>,
}

/// The deadlock check, exploring at most `max_states` states (at least 1).
fn check(plan: &Plan, max_states: usize) -> Result<Verdict, Failure> {
    let options = CheckOptions {
        max_states: max_states.max(1),
    };
    Ok(check_deadlock_with(plan, options))
}

fn malformed(e: PlanError) -> Failure {
    Failure {
        message: e.to_string(),
        code: 2,
    }
}

/// `--times`: the text, or `@FILE`'s (at most the size a spec may be); a problem is one line
/// and exit code 2.
fn stage_times(arg: &str) -> Result<StageTimes, Failure> {
    let Some(path) = arg.strip_prefix('@') else {
        return StageTimes::parse(arg).map_err(malformed);
    };
    let unreadable = |e: String| Failure {
        message: format!("--times @{}: {e}", path.escape_debug()),
        code: 2,
    };
    let len = std::fs::metadata(path)
        .map_err(|e| unreadable(e.to_string()))?
        .len();
    if len > seqsync::internal::pipeline::MAX_SPEC_BYTES as u64 {
        return Err(unreadable(format!(
            "the file is {len} bytes, more than the {} a times file may be",
            seqsync::internal::pipeline::MAX_SPEC_BYTES
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
    StageTimes::parse(&text).map_err(malformed)
}

/// Parses the spec and applies the overrides; every problem is one line and exit code 2.
fn load(path: &PathBuf, set: &[String]) -> Result<PipelineSpec, Failure> {
    let mut spec = PipelineSpec::from_path(path).map_err(malformed)?;
    for a in set {
        spec.apply_assignment(a).map_err(malformed)?;
    }
    Ok(spec)
}

fn json_of(
    plan: &Plan,
    verdict: &Verdict,
    bound_error: Option<&PlanError>,
    sizes: &[SizeBound],
    throughput: Option<&crate::throughput::Report>,
) -> serde_json::Value {
    let rings: Vec<serde_json::Value> = plan
        .rings()
        .iter()
        .map(|r| {
            serde_json::json!({
                "name": r.name,
                "producer": r.producer,
                "thread": r.thread,
                "place": r.place.to_string(),
                "nconsumers": r.nconsumers,
                "max_size": r.max_size,
                "bound": r.bound,
                "record_blocking": r.record_blocking,
                "reason": r.reason,
                "consumers": r.consumers.iter().map(|c| serde_json::json!({
                    "stage": c.stage,
                    "thread": c.thread,
                    "lag": c.lag,
                    "blocking": c.blocking,
                    "kind": c.kind,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({
        "rings": rings,
        // The plan's own JSON names every stage, ring and stream.
        "threads": serde_json::to_value(plan).expect("a plan serializes")["threads"],
        "deadlock_free": verdict.is_deadlock_free() && bound_error.is_none(),
        "verdict": verdict,
        "minimum_sizes": sizes,
        "throughput": throughput,
        "error": bound_error.map(|e| e.to_string()),
    })
}

/// Each ring's smallest size from the proof, with the cycle (or run end) that forces it.
fn print_sizes(plan: &Plan, sizes: &[SizeBound]) {
    println!("smallest sizes that cannot deadlock (every other size as it is):");
    for (ring, b) in plan.rings().iter().zip(sizes) {
        let m = b
            .max_size
            .map_or_else(|| "-".to_string(), |m| m.to_string());
        println!(
            "  {:<6} {:>4} (has {}): {}",
            b.ring, m, ring.max_size, b.because
        );
    }
    println!();
}

fn print_verdict(verdict: &Verdict) {
    match verdict.trace() {
        Some(trace) if trace.steps.len() > FULL_TRACE_STEPS => {
            let head = match verdict {
                Verdict::WouldFail { .. } => "WOULD FAIL",
                _ => "DEADLOCK",
            };
            println!(
                "verdict: {head} ({} steps, runs of one thread folded):",
                trace.steps.len()
            );
            for line in trace.compact(6) {
                println!("  {line}");
            }
        }
        Some(_) => {
            let text = verdict.to_string();
            let mut lines = text.lines();
            println!("verdict: {}", lines.next().unwrap_or_default());
            for l in lines {
                println!("  {l}");
            }
        }
        None => println!("verdict: {verdict}"),
    }
}

pub(crate) fn run(a: CheckArgs) -> Result<(), Failure> {
    let spec = load(&a.spec, &a.set)?;
    let (plan, bound_error) = match derive(&spec) {
        Ok(p) => (p, None),
        Err(e @ PlanError::MaxSizeBelowBound { .. }) => {
            // Still derive and check, so the user sees the interleaving that deadlocks.
            (derive_unchecked(&spec).map_err(malformed)?, Some(e))
        }
        Err(e) => return Err(malformed(e)),
    };
    let times = match &a.times {
        Some(t) => Some(stage_times(t)?),
        None => None,
    };
    let verdict = check(&plan, a.max_states)?;
    let sizes = minimum_sizes(&plan);
    // A prediction only for a plan that runs: a deadlock has no period.
    let throughput = match &times {
        Some(t) if verdict.is_deadlock_free() && bound_error.is_none() => {
            Some(crate::throughput::report(&spec, &plan, t).map_err(malformed)?)
        }
        _ => None,
    };
    if a.json {
        println!(
            "{}",
            json_of(
                &plan,
                &verdict,
                bound_error.as_ref(),
                &sizes,
                throughput.as_ref()
            )
        );
    } else {
        let params: Vec<String> = spec
            .params
            .iter()
            .map(|p| format!("{}={}", p.name.name, p.value))
            .collect();
        println!("spec {} ({})", a.spec.display(), params.join(" "));
        if let Some(e) = &bound_error {
            println!("error: {e}");
            println!("(derived anyway, to show what happens)");
        }
        println!();
        print!("{plan}");
        println!();
        print_sizes(&plan, &sizes);
        print_verdict(&verdict);
        match (&throughput, &times) {
            (Some(r), _) => {
                println!();
                crate::throughput::print(r, "these stage times (--times)");
            }
            (None, Some(_)) => println!("no throughput prediction: the plan does not run"),
            (None, None) => {}
        }
    }
    let message = match (&bound_error, &verdict) {
        (Some(e), _) => e.to_string(),
        (None, Verdict::DeadlockFree { .. }) => return Ok(()),
        (None, Verdict::Inconclusive { .. }) => "the deadlock check was inconclusive".into(),
        (None, Verdict::WouldFail { .. }) => "a non-blocking call can fail".into(),
        (None, _) => "the pipeline can deadlock".into(),
    };
    Err(Failure { message, code: 1 })
}

/// `seqsync run`: seed-shaped specs run the demo on the pipeline engine.
pub(crate) fn run_spec(a: RunArgs) -> Result<(), Failure> {
    let spec = load(&a.spec, &a.set)?;
    let plan = derive(&spec).map_err(malformed)?;
    // Before any thread starts: a schedule the check proves can deadlock (or fail) is refused,
    // with the same interleaving `seqsync check` prints.
    match check(&plan, a.max_states)? {
        Verdict::DeadlockFree { .. } => {}
        Verdict::Inconclusive { states } => {
            return Err(Failure {
                message: format!(
                    "refusing to run {}: the deadlock check was inconclusive after {states} \
                     states (--max-states), so nothing proves it cannot deadlock",
                    a.spec.display()
                ),
                code: 1,
            })
        }
        verdict => {
            if a.json {
                let sizes = minimum_sizes(&plan);
                println!("{}", json_of(&plan, &verdict, None, &sizes, None));
            } else {
                print_verdict(&verdict);
            }
            return Err(Failure {
                message: format!(
                    "refusing to run {}: {} (`seqsync check` shows the same interleaving)",
                    a.spec.display(),
                    match verdict {
                        Verdict::WouldFail { .. } => "a non-blocking call can fail",
                        _ => "the pipeline can deadlock",
                    }
                ),
                code: 1,
            });
        }
    }
    if a.measure && a.batches > MAX_MEASURED_BATCHES {
        return Err(Failure {
            message: format!(
                "--measure keeps a few samples per batch: at most {MAX_MEASURED_BATCHES} \
                 batches, not {}",
                a.batches
            ),
            code: 2,
        });
    }
    if demo::seed_shape(&spec).is_err() {
        return run_selftest(&a, &spec, &plan);
    }
    if a.times.is_some() {
        return Err(Failure {
            message: format!(
                "--times pads the built-in stages of specs not shaped like the seed's; {} runs \
                 the demo's kernels, which take what they take (measure them with --measure)",
                a.spec.display()
            ),
            code: 2,
        });
    }
    let config = DemoConfig {
        backend: a.backend,
        batches: a.batches,
        batch_bytes: a.batch_bytes,
        chaos: a.chaos,
        engine: a.engine,
        graph_batches: a.graph_batches,
        spec: Some(spec.clone()),
        baselines: false,
        trace: a.measure,
        ..DemoConfig::default()
    };
    let report = demo::run(&config)?;
    let measured = match (&report.trace, a.measure) {
        (Some(trace), true) => {
            let samples = Samples::from_trace(trace, |label| {
                Some(
                    match label {
                        "copy in" => "h2g",
                        "copy out" | "process" => "g2h",
                        other => other,
                    }
                    .to_string(),
                )
            });
            Some(compare(&spec, &plan, &samples, None)?)
        }
        _ => None,
    };
    if a.json {
        let mut v = serde_json::to_value(&report).expect("report serializes");
        v["measure"] = serde_json::to_value(&measured).expect("a comparison serializes");
        println!("{v}");
    } else {
        crate::print_summary(&report, None);
        if let Some(l) = &report.stage_latency {
            print_latency(l);
        }
        if let Some(m) = &measured {
            print_comparison(m);
        }
    }
    crate::verified(&report)
}

/// The runtime's latencies: a line per stage and one for the batches end to end.
pub(crate) fn print_latency(l: &RunLatency) {
    let summary = |s: &LatencySummary, dropped: u64| {
        let us = |d: std::time::Duration| d.as_secs_f64() * 1e6;
        let dropped = match dropped {
            0 => String::new(),
            n => format!(", {n} dropped"),
        };
        format!(
            "p50 {:.1} us, p99 {:.1} us, max {:.1} us ({} batches{dropped})",
            us(s.p50),
            us(s.p99),
            us(s.max),
            s.count
        )
    };
    println!(
        "stage latency (host stage: its closure; stream stage: launch -> seen done by a host \
         synchronize):"
    );
    for s in &l.stages {
        let what = match (&s.latency, s.observed) {
            (Some(x), _) => summary(x, s.dropped),
            (None, false) => "not observed (no host thread synchronizes on it at lag 0)".into(),
            (None, true) => "no batches".into(),
        };
        let place = if s.host { "host" } else { "stream" };
        println!("  stage {} (thread {}, {place}): {what}", s.stage, s.thread);
    }
    let what = match &l.end_to_end {
        Some(b) => summary(b, l.end_to_end_dropped),
        None => "none (no host-observed completion)".into(),
    };
    println!("  batch end to end (first op -> last host-observed completion): {what}");
}

/// A measured run against the prediction from its own stage times.
#[derive(serde::Serialize)]
struct Comparison {
    measured: Measured,
    predicted: crate::throughput::Report,
    /// Measured (steady) over predicted batches per second.
    ratio: Option<f64>,
}

/// `host_functions`: stages whose work is a host function on a CUDA stream.
fn compare(
    spec: &PipelineSpec,
    plan: &Plan,
    samples: &Samples,
    host_functions: Option<Vec<String>>,
) -> Result<Comparison, Failure> {
    let measured = samples.measured();
    let mut times = samples.stage_times();
    if let Some(stages) = host_functions {
        times = times.one_at_a_time("the CUDA driver's host-function thread", stages);
    }
    let predicted = crate::throughput::report(spec, plan, &times).map_err(|e| Failure {
        message: format!("cannot predict from the measured times: {e}"),
        code: 1,
    })?;
    let ratio = measured
        .steady_batches_per_second
        .map(|m| m / predicted.prediction.batches_per_second);
    Ok(Comparison {
        measured,
        predicted,
        ratio,
    })
}

fn print_comparison(c: &Comparison) {
    println!();
    println!("measured stage times (means): {}", c.measured.times);
    crate::throughput::print(&c.predicted, "the measured stage times");
    match (c.measured.steady_batches_per_second, c.ratio) {
        (Some(m), Some(r)) => println!(
            "measured: {} once full ({} batches); measured / predicted = {r:.3}",
            crate::throughput::rate(m),
            c.measured.steady_batches
        ),
        _ => println!("measured: too few batches for a steady rate"),
    }
}

/// Any other shape: built-in stages on the host backend, every read checked.
fn run_selftest(a: &RunArgs, spec: &PipelineSpec, plan: &Plan) -> Result<(), Failure> {
    if a.backend == BackendKind::Cuda && a.chaos.is_some() {
        return Err(Failure {
            message: "--chaos delays the host backend's streams; it cannot be used with \
                      --backend cuda"
                .into(),
            code: 2,
        });
    }
    // `auto` keeps other shapes on the host backend; `--backend cuda` runs the same built-in
    // stages as host functions on CUDA streams (the rings' events and waits on the GPU).
    let host = match (a.backend, a.chaos) {
        (BackendKind::Cuda, _) => AnyBackend::new(BackendKind::Cuda)?,
        (_, Some(seed)) => AnyBackend::Host(HostBackend::with_chaos(Chaos::new(seed))),
        (_, None) => AnyBackend::Host(HostBackend::new()),
    };
    let times = match &a.times {
        Some(t) => Some(stage_times(t)?),
        None => None,
    };
    if a.batches < 1 {
        return Err(Failure {
            message: format!("--batches must be at least 1, got {}", a.batches),
            code: 2,
        });
    }
    let elems = match a.batch_bytes {
        None => 256,
        Some(b) if b >= 4 && b.is_multiple_of(4) => b / 4,
        Some(b) => {
            return Err(Failure {
                message: format!(
                    "--batch-bytes {b} is not a whole number of 4-byte elements (u32)"
                ),
                code: 2,
            })
        }
    };
    let options = selftest::Options {
        pad: times.as_ref(),
        measure: a.measure,
    };
    let report = selftest::run_with(spec, plan, &host, a.batches, elems, &options)?;
    let measured = match &report.samples {
        Some(s) => {
            // On CUDA streams the built-in stages are host functions, which the driver runs
            // one at a time on one thread of its own.
            let shared = (!matches!(host, AnyBackend::Host(_))).then(|| {
                plan.stages()
                    .iter()
                    .filter(|g| g.stream.is_some())
                    .map(|g| g.name.clone())
                    .collect::<Vec<_>>()
            });
            Some(compare(spec, plan, s, shared)?)
        }
        None => None,
    };
    if a.json {
        let mut v = serde_json::to_value(&report).expect("report serializes");
        v["measure"] = serde_json::to_value(&measured).expect("a comparison serializes");
        println!("{v}");
    } else {
        println!(
            "ran {} batches of {} on the {} backend with built-in stages{}: {} reads checked, {} wrong ({:.3} s)",
            report.batches,
            a.spec.display(),
            if matches!(host, AnyBackend::Host(_)) { "host" } else { "CUDA" },
            a.chaos.map(|s| format!(" (chaos seed {s})")).unwrap_or_default(),
            report.reads_checked,
            report.wrong_reads,
            report.wall_s
        );
        for w in &report.first_wrong {
            println!("  {w}");
        }
        print_latency(&report.stage_latency);
        if let Some(m) = &measured {
            print_comparison(m);
        }
    }
    if report.wrong_reads == 0 {
        Ok(())
    } else {
        Err(Failure {
            message: format!(
                "{} of {} reads found the wrong data",
                report.wrong_reads, report.reads_checked
            ),
            code: 1,
        })
    }
}
