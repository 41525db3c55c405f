//! The `seqsync` command: argument parsing and output only; the work is in the library.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use seqsync::BackendKind;
use seqsync_demo::demo::{
    self, CopyBy, DemoConfig, DemoReport, DeviceBoundBy, DroppedWait, Engine, GraphEdge, Release,
    SlotWait, Variant,
};

mod bench;
mod check;
mod graph;
mod output;
mod processes;
mod throughput;

/// seqsync: order GPU work across CUDA streams and host threads by sequence id.
///
/// Without a subcommand, runs the seed's pipeline (`seqsync demo`).
#[derive(Parser)]
#[command(name = "seqsync", version, about, long_about = None, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The demo's options, when no subcommand is given.
    #[command(flatten)]
    demo: DemoArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the seed's pipeline end to end, verify every batch, and measure it (the default).
    Demo(DemoArgs),
    /// Measure the ring against the raw backend calls (`bench ring`, the default), or the
    /// stream-ordered pool against the backend's allocators (`bench pool`).
    Bench(bench::BenchArgs),
    /// Derive a declared pipeline's rings and prove it deadlock-free.
    Check(check::CheckArgs),
    /// Run a declared pipeline (seed-shaped specs) with the demo's kernels and verify it.
    Run(check::RunArgs),
    /// Lower a command graph to streams + events (or fork-join levels) and report it.
    Graph(graph::GraphArgs),
}

#[derive(Args, Clone)]
pub(crate) struct DemoArgs {
    /// Batches to push through the pipeline.
    #[arg(long, default_value_t = 400)]
    batches: i64,
    /// Bytes per batch, a multiple of 4 (default: 64 MiB on CUDA, 256 KiB on host).
    #[arg(long)]
    batch_bytes: Option<usize>,
    /// Slots of the device ring buffer `in`.
    #[arg(long, default_value_t = 2)]
    nin: usize,
    /// Slots of `x`.
    #[arg(long, default_value_t = 2)]
    nx: usize,
    /// Slots of `y`.
    #[arg(long, default_value_t = 2)]
    ny: usize,
    /// Slots of `out`.
    #[arg(long, default_value_t = 2)]
    nout: usize,
    /// Kernel work per element (rounds of each kernel's loop).
    #[arg(long, default_value_t = 8)]
    intensity: u32,
    /// auto (CUDA if a GPU is present), host or cuda.
    #[arg(long, default_value = "auto", value_parser = crate::parse::<BackendKind>)]
    backend: BackendKind,
    /// Host backend: random delays in every stream operation and thread step, from this seed.
    #[arg(long, value_name = "SEED")]
    chaos: Option<u64>,
    /// seed (the main example), keep-input (variant 1), host-ring (variant 2), or pool (per-batch
    /// device buffers from a stream-ordered pool).
    #[arg(long, default_value = "seed", value_parser = crate::parse::<Variant>)]
    variant: Variant,
    /// handwritten (the seed's rings and loops written out), pipeline (the seed spec run by
    /// the pipeline runtime), graph (K batches' bodies per CUDA graph, replayed) or adaptive
    /// (a graph per ring slot and launch size: each batch launched as it arrives, up to K a
    /// launch while batches wait) or resident (one kernel for the whole run that takes each
    /// batch as it arrives: no launch per batch); all but handwritten run variant seed only.
    #[arg(long, default_value = "handwritten", value_parser = crate::parse::<Engine>)]
    engine: Engine,
    /// --engine graph: batches per graph (default: enough for 4 MiB, at most 64); --engine
    /// adaptive: most batches per launch, rounded down to a power of two (default: 2 MiB of
    /// batches, at most 4).
    #[arg(long, value_name = "K")]
    graph_batches: Option<usize>,
    /// --engine adaptive: launch groups of K in flight (2..=16; slots = depth x K; default 6, fewer
    /// where 6 x K batches exceed 512 MiB).
    #[arg(long, value_name = "D")]
    graph_depth: Option<usize>,
    /// --engine adaptive: batches a graph node covers (a power of two at most K; a launch of m
    /// batches is m / span runs of five nodes; default: the automatic K). The device bound
    /// merges over the same span.
    #[arg(long, value_name = "SPAN")]
    graph_span: Option<usize>,
    /// --engine graph, adaptive or resident: how batches are copied between host and device:
    /// memcpy (the copy engines: copy nodes, or for resident copy streams around its kernel;
    /// the default from 1 MiB batches, for resident from 4 MiB) or kernel (kernels reading and
    /// writing the pinned host buffers in place: cheaper to launch; the default below). The device bound and the
    /// isolated latency take the faster of both, whatever the engine's.
    #[arg(long = "copy", value_parser = crate::parse::<CopyBy>)]
    copy_by: Option<CopyBy>,
    /// --engine adaptive: where a batch's arrival releases its launch: device (the launch is
    /// enqueued ahead, behind a stream wait that get_data's signal ends; the default below
    /// 1 MiB batches, and refused under SEQSYNC_TIMELINE_MECHANISM=events, whose waits do not
    /// hold launches) or host (the launch waits on the host for the arrival; the default from
    /// 1 MiB and under events).
    #[arg(long, value_parser = crate::parse::<Release>)]
    release: Option<Release>,
    /// --engine adaptive: where a launch waits for the slots it rewrites (the batches S before
    /// it processed): device (its stream wait for the arrival covers them, and the h2g
    /// thread enqueues launches up to S batches early; the default with --release device,
    /// which it needs) or host (the h2g thread waits, then launches).
    #[arg(long, value_parser = crate::parse::<SlotWait>)]
    slot_wait: Option<SlotWait>,
    /// --engine adaptive or resident: threads running process_data (each batch's check), reporting
    /// batches processed in seq order (1..=64; default: the cores left beside the engine's
    /// three threads, 1 to 6 where the check reads every line of a batch, as with
    /// --verify-samples 0, else 1 to 4).
    #[arg(long, value_name = "N")]
    process_threads: Option<usize>,
    /// --engine resident: slots of every buffer, host input and output batches included
    /// (1..=65536; default: 12 at 256 KiB, as the inverse square root of the batch size, 6 to
    /// 24).
    #[arg(long, value_name = "S")]
    slots: Option<usize>,
    /// Host output batches for --variant host-ring.
    #[arg(long, default_value_t = 4)]
    host_slots: usize,
    /// Body elements checked per batch besides the seq header (0: every element), in runs of
    /// 16 consecutive elements (a 64-byte line) spread evenly over the body.
    #[arg(long, default_value_t = 4096)]
    verify_samples: usize,
    /// Skip the baselines (stage alone, serialized, hand-rolled).
    #[arg(long)]
    no_baselines: bool,
    /// Run the pipeline and the hand-rolled baseline this many times, alternating; report medians.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Print one JSON object and nothing else on stdout.
    #[arg(long)]
    json: bool,
    /// Write a Chrome/Perfetto trace of the pipeline run to FILE.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Test only: leave out one wait (e.g. f-waits-copy); verification must then fail.
    #[arg(long, hide = true, value_parser = crate::parse::<DroppedWait>)]
    drop_wait: Option<DroppedWait>,
    /// Run every engine over batch sizes 64 KiB..64 MiB (x4 steps; --batches caps each run)
    /// and write PREFIX.json and PREFIX.svg (see --sweep-out).
    #[arg(long)]
    sweep: bool,
    /// Where --sweep writes: PREFIX.json (the table) and PREFIX.svg (the plot).
    #[arg(long, value_name = "PREFIX", default_value = "seqsync-sweep")]
    sweep_out: PathBuf,
    /// --sweep: only these batch sizes in bytes (comma-separated).
    #[arg(long, value_delimiter = ',', hide = true)]
    sweep_sizes: Vec<usize>,
    /// Run the pipeline across this many processes: 1, or 2 (copy in and kernels here; copy
    /// out and process_data in a second process started from this binary, the `out` ring
    /// buffer in memory both map), then the one-process pipeline for comparison.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=2))]
    processes: u32,
    /// Open loop: batches arrive at this many per second (get_data releases batch s at
    /// s / RATE seconds), and batch latency counts from arrival (default: as fast as possible).
    #[arg(long, value_name = "RATE")]
    rate: Option<f64>,
    /// --processes 2: how the shared rings order the streams (host-word, memops, ipc-event;
    /// default: the backend's).
    #[arg(long, value_parser = crate::parse::<seqsync::ipc::Mechanism>)]
    ipc_mechanism: Option<seqsync::ipc::Mechanism>,
    /// Internal: run as the consumer process of a --processes 2 run named NAME.
    #[arg(long, hide = true, value_name = "NAME")]
    ipc_consumer: Option<String>,
    /// Test only, --engine graph or adaptive on host: leave one edge out of every batch's graph
    /// body (or group-waits: the host waits before slots are reused).
    #[arg(long, hide = true, value_parser = crate::parse::<GraphEdge>)]
    drop_edge: Option<GraphEdge>,
}

/// Parse any of seqsync's `FromStr` types (backend, variant, engine, wait), for clap.
pub(crate) fn parse<T: std::str::FromStr<Err = seqsync::Error>>(s: &str) -> Result<T, String> {
    s.parse().map_err(|e: seqsync::Error| e.to_string())
}

/// An error the user caused or a failed run: one line, and an exit code.
pub(crate) struct Failure {
    pub message: String,
    pub code: u8,
}

impl From<seqsync::Error> for Failure {
    fn from(e: seqsync::Error) -> Self {
        Failure {
            message: e.to_string(),
            code: 2,
        }
    }
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`seqsync check … | head`) instead of panicking in println!.
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any other thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    output::handle_interrupts();
    let cli = Cli::parse();
    let result = match cli.command {
        None => run_demo(cli.demo),
        Some(Command::Demo(a)) => run_demo(a),
        Some(Command::Bench(a)) => bench::run(a),
        Some(Command::Check(a)) => check::run(a),
        Some(Command::Run(a)) => check::run_spec(a),
        Some(Command::Graph(a)) => graph::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("seqsync: error: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

fn run_demo(a: DemoArgs) -> Result<(), Failure> {
    if a.sweep {
        return run_sweep(a);
    }
    if a.ipc_consumer.is_some() || a.processes == 2 {
        return processes::run(a);
    }
    // Fail on an unwritable trace path before running anything.
    let trace_file = match &a.trace {
        Some(p) => Some(output::PendingFile::create(p).map_err(|e| Failure {
            message: format!("cannot write trace file {}: {e}", p.display()),
            code: 2,
        })?),
        None => None,
    };
    let show_progress = !a.json && std::io::stderr().is_terminal();
    let progress: Option<Arc<dyn Fn(i64, i64) + Send + Sync>> = show_progress.then(|| {
        let style = ProgressStyle::with_template("  [{bar:30}] {pos}/{len} batches")
            .expect("the template is valid")
            .progress_chars("#-");
        let bar = ProgressBar::new(a.batches.max(0) as u64).with_style(style);
        Arc::new(move |done: i64, total: i64| {
            // The demo runs the pipeline more than once (--repeat, baselines): start over.
            if (done as u64) < bar.position() || bar.is_finished() {
                bar.reset();
            }
            bar.set_length(total.max(0) as u64);
            bar.set_position(done.max(0) as u64);
            if done == total {
                bar.finish_and_clear();
            }
        }) as Arc<dyn Fn(i64, i64) + Send + Sync>
    });
    let config = config_of(&a, progress, trace_file.is_some());
    // A run that fails leaves no trace file (the pending one goes when dropped).
    let report = demo::run(&config)?;
    if let (Some(f), Some(t)) = (trace_file, &report.trace) {
        let text = serde_json::to_vec(t).expect("a trace serializes");
        f.commit(&text).map_err(|e| Failure {
            message: format!("cannot write trace: {e}"),
            code: 2,
        })?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&report).expect("report serializes")
        );
    } else {
        print_summary(&report, a.trace.as_deref());
        if let Some(l) = &report.stage_latency {
            check::print_latency(l);
        }
        if let Some(p) = &report.phases {
            print_phases(p);
        }
    }
    verified(&report)
}

/// The demo's config from its arguments.
pub(crate) fn config_of(
    a: &DemoArgs,
    progress: Option<Arc<dyn Fn(i64, i64) + Send + Sync>>,
    trace: bool,
) -> DemoConfig {
    DemoConfig {
        backend: a.backend,
        batches: a.batches,
        batch_bytes: a.batch_bytes,
        nin: a.nin,
        nx: a.nx,
        ny: a.ny,
        nout: a.nout,
        intensity: a.intensity,
        chaos: a.chaos,
        variant: a.variant,
        engine: a.engine,
        spec: None,
        host_slots: a.host_slots,
        verify_samples: a.verify_samples,
        baselines: !a.no_baselines,
        repeat: a.repeat,
        trace,
        drop_wait: a.drop_wait,
        graph_batches: a.graph_batches,
        graph_depth: a.graph_depth,
        graph_span: a.graph_span,
        copy_by: a.copy_by,
        release: a.release,
        slot_wait: a.slot_wait,
        process_threads: a.process_threads,
        slots: a.slots,
        drop_edge: a.drop_edge,
        ipc_mechanism: a.ipc_mechanism,
        rate: a.rate,
        progress,
    }
}

/// `seqsync demo --sweep`.
fn run_sweep(a: DemoArgs) -> Result<(), Failure> {
    let sizes = if a.sweep_sizes.is_empty() {
        demo::SWEEP_SIZES.to_vec()
    } else {
        a.sweep_sizes.clone()
    };
    let config = DemoConfig {
        backend: a.backend,
        batches: a.batches,
        intensity: a.intensity,
        chaos: a.chaos,
        verify_samples: a.verify_samples,
        repeat: a.repeat,
        ..DemoConfig::default()
    };
    if !a.json {
        println!(
            "{:<12} {:>10} {:>8} {:>9} {:>9} {:>7} {:>9} {:>7} {:>10} {:>10} {:>9} {:>8}  verified",
            "engine",
            "batch",
            "batches",
            "GB/s",
            "resource",
            "ratio",
            "device",
            "ratio",
            "p50 us",
            "p99 us",
            "isol. us",
            "p99/iso"
        );
    }
    let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
    let report = demo::sweep(&config, &sizes, |r| {
        if !a.json {
            let k = r
                .graph_batches
                .map(|k| format!(" (K={k})"))
                .unwrap_or_default();
            println!(
                "{:<12} {:>10} {:>8} {:>9.3} {:>9} {:>7} {:>9} {:>7} {:>10} {:>10} {:>9} {:>8}  {}{k}",
                r.engine.name(),
                r.batch_bytes,
                r.batches,
                r.gbps,
                opt(r.resource_bound_gbps, 3),
                opt(r.ratio_to_resource_bound, 3),
                opt(r.device_bound_gbps, 3),
                opt(r.ratio_to_device_bound, 3),
                opt(r.latency_p50_us, 1),
                opt(r.latency_p99_us, 1),
                opt(r.isolated_latency_us, 1),
                opt(r.p99_over_isolated, 2),
                r.verified
            );
        }
    })?;
    let write = |ext: &str, text: String| -> Result<PathBuf, Failure> {
        let mut p = a.sweep_out.clone().into_os_string();
        p.push(ext);
        let p = PathBuf::from(p);
        output::PendingFile::create(&p)
            .and_then(|f| f.commit(text.as_bytes()))
            .map_err(|e| Failure {
                message: format!("cannot write {}: {e}", p.display()),
                code: 2,
            })?;
        Ok(p)
    };
    let json = serde_json::to_string_pretty(&report).expect("report serializes");
    let jp = write(".json", json.clone())?;
    let sp = write(".svg", demo::sweep_svg(&report))?;
    if a.json {
        println!("{json}");
    } else {
        println!("  wrote {} and {}", jp.display(), sp.display());
    }
    match report.rows.iter().find(|r| !r.verified) {
        Some(r) => Err(Failure {
            message: format!(
                "verification failed: engine {} at {} bytes",
                r.engine.name(),
                r.batch_bytes
            ),
            code: 1,
        }),
        None => Ok(()),
    }
}

/// Exit code 1 with the verification summary unless every batch was verified.
pub(crate) fn verified(report: &DemoReport) -> Result<(), Failure> {
    if report.all_verified() {
        Ok(())
    } else {
        Err(Failure {
            message: format!(
                "verification failed: {} of {} batches matched ({} wrong, first wrong seqs {:?}; {} missing; {} duplicated)",
                report.verified, report.batches, report.wrong, report.wrong_seqs, report.missing, report.duplicated
            ),
            code: 1,
        })
    }
}

/// The adaptive engine's phases, one line each ([`DemoReport::phases`]).
fn print_phases(phases: &[demo::PhaseSummary]) {
    println!(
        "where the batches' latency went (the first five add up to it; slot_wait is the h2g \
         thread's wait for free slots per launch):"
    );
    for p in phases {
        println!(
            "  {:<13} p50 {:8.1} us, p99 {:8.1} us, max {:9.1} us ({} batches)",
            p.phase, p.p50_us, p.p99_us, p.max_us, p.count
        );
    }
}

pub(crate) fn print_summary(r: &DemoReport, trace: Option<&std::path::Path>) {
    let mib = r.batch_bytes as f64 / (1 << 20) as f64;
    println!(
        "seqsync demo: the seed's pipeline on {} ({}), variant {:?}, engine {:?}",
        r.backend, r.device, r.variant, r.engine
    );
    println!(
        "  {} batches x {mib:.3} MiB; ring buffers in={} x={} y={} out={}; intensity {}{}",
        r.batches,
        r.nin,
        r.nx,
        r.ny,
        r.nout,
        r.intensity,
        r.chaos
            .map(|s| format!("; chaos seed {s}"))
            .unwrap_or_default()
    );
    println!(
        "  verified {}/{} batches ({} wrong, {} missing, {} duplicated)",
        r.verified, r.batches, r.wrong, r.missing, r.duplicated
    );
    let runs = if r.repeat > 1 {
        format!(", median of {} runs", r.repeat)
    } else {
        String::new()
    };
    println!(
        "  pipeline      {:>9.3} GB/s   (wall {:.3} s{runs})",
        r.gbps, r.wall_s
    );
    if let Some(ms) = r.host_steal_ms.filter(|&ms| ms > 0.0) {
        println!(
            "  host steal    {ms:>9.0} ms     (CPU time the hypervisor took from this machine \
             during the run: its figures may be the machine's, not the engine's)"
        );
    }
    if let (Some(p50), Some(p99), Some(max)) =
        (r.latency_p50_us, r.latency_p99_us, r.latency_max_us)
    {
        let k = match (r.graph_batches, r.batches_per_launch) {
            (Some(k), Some(mean)) => {
                let released = r
                    .release
                    .map(|x| format!(", released on the {}", x.name()))
                    .unwrap_or_default();
                let released = match r.slot_wait {
                    Some(w) => format!("{released}, slots waited for on the {}", w.name()),
                    None => released,
                };
                let span = r
                    .graph_span
                    .filter(|&s| s < k)
                    .map(|s| format!(" in nodes of {s}"))
                    .unwrap_or_default();
                format!(" (at most {k} batches a launch{span}, {mean:.2} on average{released})")
            }
            (Some(k), None) => format!(" ({k} batches per graph)"),
            _ => String::new(),
        };
        let from = match r.rate {
            Some(rate) => format!("arrival at {rate} batches/s"),
            None => "copy-in issued".into(),
        };
        println!(
            "  batch latency p50 {p50:.1} us, p99 {p99:.1} us, max {max:.1} us ({from} -> process_data returned){k}"
        );
    }
    if !r.stages.is_empty() {
        let gbps =
            |s: &seqsync_demo::demo::StageTiming| r.batch_bytes as f64 / s.seconds_per_batch / 1e9;
        let stages: Vec<String> = r
            .stages
            .iter()
            .map(|s| format!("{} {:.3}", s.stage, gbps(s)))
            .collect();
        println!("  stage alone   {} GB/s", stages.join(" | "));
    }
    if let Some(iso) = r.isolated_latency_us {
        let over = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
        println!(
            "  isolated latency {iso:.1} us (one batch alone on an idle device, median); \
             p50 / isolated {}, p99 / isolated {}",
            over(r.p50_over_isolated),
            over(r.p99_over_isolated)
        );
    }
    let ratio = |v: Option<f64>| v.map(|v| r.gbps / v);
    let rows = [
        (
            match r.device_bound_by {
                Some(DeviceBoundBy::Resident) => format!(
                    "device bound ({} batches, resident kernel)",
                    r.device_bound_batches.unwrap_or(0)
                ),
                _ => format!(
                    "device bound ({} batches, {} a node{})",
                    r.device_bound_batches.unwrap_or(0),
                    r.device_bound_span.unwrap_or(1),
                    r.device_bound_copy
                        .filter(|&c| c != CopyBy::Memcpy)
                        .map(|c| format!(", copies by {}", c.name()))
                        .unwrap_or_default()
                ),
            },
            r.device_bound_gbps,
            "pipeline/device bound",
        ),
        (
            format!("bound (slowest: {})", r.bound_stage.unwrap_or("-")),
            r.bound_gbps,
            "pipeline/bound",
        ),
        (
            "compute bound (f+g+h)".into(),
            r.compute_bound_gbps,
            "pipeline/compute bound",
        ),
        (
            "copies together".into(),
            r.copies_bound_gbps,
            "pipeline/copies bound",
        ),
        (
            "resource bound (lowest)".into(),
            r.resource_bound_gbps,
            "pipeline/resource bound",
        ),
        (
            "serialized".into(),
            r.serialized_gbps,
            "pipeline/serialized",
        ),
        (
            "hand-rolled (raw events)".into(),
            r.handrolled_gbps,
            "pipeline/hand-rolled",
        ),
        (
            if r.variant == Variant::Pool {
                "fixed rings (seed variant)".into()
            } else {
                "hand-written pipeline".into()
            },
            r.handwritten_gbps,
            if r.variant == Variant::Pool {
                "pool/fixed rings"
            } else {
                "pipeline/hand-written"
            },
        ),
    ];
    for (label, v, ratio_label) in rows {
        if let (Some(v), Some(q)) = (v, ratio(v)) {
            println!("  {label:<28}{v:>9.3} GB/s   {ratio_label:<25}{q:.3}");
        }
    }
    if let Some(p) = &r.pool {
        println!(
            "  pool: {} allocs, {} zero-sync reuse, {} fresh, {} inserted waits, {} exhausted, \
             {} host synchronizations, {} slabs taken; {} bytes reserved (high {})",
            p.allocs,
            p.reuse,
            p.fresh,
            p.waits,
            p.exhausted,
            p.host_syncs,
            p.slab_allocs,
            p.reserved_current,
            p.reserved_high
        );
    }
    if let Some(t) = trace {
        println!(
            "  trace written to {} (open it in https://ui.perfetto.dev)",
            t.display()
        );
    }
}
