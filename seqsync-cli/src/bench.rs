//! `seqsync bench`: the ring against the raw backend calls, in one run.

use clap::Args;
use seqsync::BackendKind;
use seqsync_demo::bench::pool::{self, PoolBenchConfig};
use seqsync_demo::bench::timeline::{self, TimelineBenchConfig};
use seqsync_demo::bench::{self, BenchConfig};

use crate::Failure;

/// What `seqsync bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Suite {
    /// The ring's record, wait and synchronize against the raw backend calls.
    Ring,
    /// The stream-ordered pool against the backend's stream-ordered allocator and against
    /// synchronous allocation; host synchronizations over a long run.
    Pool,
    /// Command graphs: submit cost per command (raw launches on one stream, streams + events,
    /// graph replay) and makespan under fork-join levels vs the exact lowerings.
    Graph,
    /// Timelines against raw events: signal_on + wait_on, host query, cross-stream ping-pong
    /// per mechanism, host wait wake-up and CPU.
    Timeline,
    /// Buffer handoff by epochs: tracked record and stream wait against the raw calls, a move
    /// that needs no wait against the same without shortcuts, the seed's motivating example.
    Handoff,
    /// Shared rings (across processes): record + wait against the in-process ring's, per
    /// mechanism.
    Ipc,
}

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// ring (default), pool, graph, timeline, handoff or ipc.
    #[arg(value_enum, default_value = "ring")]
    suite: Suite,
    /// pool: bytes per allocation.
    #[arg(long, default_value_t = 1 << 20)]
    bytes: usize,
    /// pool: alloc+free pairs in the long run.
    #[arg(long, default_value_t = 200_000)]
    pairs: u64,
    /// auto (CUDA if a GPU is present), host or cuda.
    #[arg(long, default_value = "auto", value_parser = crate::parse::<BackendKind>)]
    backend: BackendKind,
    /// Timed rounds of 256 calls each (the median round counts).
    #[arg(long, default_value_t = 400)]
    rounds: usize,
    /// Seqs in the four-consumer-thread run.
    #[arg(long, default_value_t = 100_000)]
    seqs: i64,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// graph: timed submissions per case (the median counts).
    #[arg(long, default_value_t = 30)]
    graph_reps: usize,
    /// handoff: only the record and stream-wait rows (real and no-op inner calls), a quick
    /// and stable measure of the tracking overhead.
    #[arg(long)]
    overhead_only: bool,
    /// ring, timeline: on the host backend, host waits are never woken and poll, as on CUDA
    /// (`HostBackend::polling`): measures the wait strategy without a GPU.
    #[arg(long)]
    polling: bool,
}

/// `--polling`: the polling host backend, or why not.
fn polling_host(a: &BenchArgs) -> Result<Option<seqsync::HostBackend>, Failure> {
    if !a.polling {
        return Ok(None);
    }
    if a.backend == BackendKind::Cuda {
        return Err(Failure {
            message: "--polling is for the host backend (CUDA host waits poll anyway)".into(),
            code: 2,
        });
    }
    Ok(Some(seqsync::HostBackend::polling()))
}

pub(crate) fn run(a: BenchArgs) -> Result<(), Failure> {
    if a.suite == Suite::Pool {
        return run_pool(a);
    }
    if a.suite == Suite::Graph {
        return run_graph(&a);
    }
    if a.suite == Suite::Timeline {
        return run_timeline(a);
    }
    if a.suite == Suite::Ipc {
        return run_ipc(&a);
    }
    let cfg = BenchConfig {
        rounds: a.rounds.max(1),
        threaded_seqs: a.seqs.max(1),
        ..BenchConfig::default()
    };
    if a.suite == Suite::Handoff {
        return run_handoff(a.backend, &cfg, a.json, a.overhead_only);
    }
    let r = match polling_host(&a)? {
        Some(h) => bench::run_on_host(&h, &cfg)?,
        None => bench::run(a.backend, &cfg)?,
    };
    if a.json {
        println!("{}", serde_json::to_string(&r).expect("report serializes"));
        return Ok(());
    }
    println!("seqsync bench on {} ({})", r.backend, r.device);
    println!(
        "  {:<46}{:>10}{:>10}{:>8}",
        "operation", "ring ns", "raw ns", "ratio"
    );
    for o in &r.ops {
        println!(
            "  {:<46}{:>10.1}{:>10.1}{:>8.3}",
            o.name, o.ring_ns, o.raw_ns, o.ratio
        );
    }
    println!(
        "  host synchronize: wake-up (time past the work's end, launch included) and CPU per wait"
    );
    for s in &r.sync {
        println!(
            "  {:<16}{:<22} excess {:>9.1} us   cpu {:>8.3} ms ({:.1}% of the wait)",
            s.wait,
            s.method,
            s.excess_us,
            s.cpu_ms,
            100.0 * s.cpu_ms / s.wait_ms
        );
    }
    Ok(())
}

fn run_pool(a: BenchArgs) -> Result<(), Failure> {
    let cfg = PoolBenchConfig {
        bytes: a.bytes.max(1),
        rounds: a.rounds.clamp(1, 400) / 2 + 1,
        long_pairs: a.pairs,
        ..PoolBenchConfig::default()
    };
    let r = pool::run(a.backend, &cfg)?;
    if a.json {
        println!("{}", serde_json::to_string(&r).expect("report serializes"));
        return Ok(());
    }
    println!(
        "seqsync bench pool on {} ({}), {} bytes per allocation",
        r.backend, r.device, r.bytes
    );
    println!(
        "  {:<48}{:>10}  {:<58}{:>10}{:>8}",
        "alloc+free pair", "pool ns", "baseline", "base ns", "ratio"
    );
    for p in &r.pairs {
        println!(
            "  {:<48}{:>10.1}  {:<58}{:>10.1}{:>8.3}",
            p.name, p.pool_ns, p.baseline, p.baseline_ns, p.ratio
        );
    }
    let l = &r.long_run;
    println!(
        "  long run: {} pairs (one stream and across two): host synchronizations {}, \
         slab allocations {}, slab releases {}, zero-sync reuse {}, inserted waits {}, \
         exhausted {}, reserved {} bytes",
        l.pairs,
        l.host_syncs,
        l.slab_allocs,
        l.slab_releases,
        l.reuse,
        l.waits,
        l.exhausted,
        l.reserved
    );
    Ok(())
}

fn run_graph(a: &BenchArgs) -> Result<(), Failure> {
    let cfg = bench::graph::GraphBenchConfig {
        reps: a.graph_reps.max(1),
        ..Default::default()
    };
    let r = bench::graph::run(a.backend, &cfg)?;
    if a.json {
        println!("{}", serde_json::to_string(&r).expect("report serializes"));
        return Ok(());
    }
    println!("seqsync bench graph on {}", r.backend);
    println!(
        "  submit cost per command (ns; median of {} submissions; random DAGs)",
        cfg.reps
    );
    println!(
        "  {:>8} {:>7} {:>7} {:>10} {:>10} {:>10} {:>9} {:>9}   {:>10} {:>10} {:>10}",
        "commands",
        "streams",
        "events",
        "raw",
        "streams",
        "graph",
        "str/raw",
        "graph/raw",
        "raw tot",
        "str tot",
        "graph tot"
    );
    for s in &r.submit {
        println!(
            "  {:>8} {:>7} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>9.3} {:>9.3}   {:>10.1} {:>10.1} {:>10.1}",
            s.commands,
            s.streams,
            s.events,
            s.raw_submit_ns,
            s.streams_submit_ns,
            s.graph_submit_ns,
            s.streams_submit_ns / s.raw_submit_ns,
            s.graph_submit_ns / s.raw_submit_ns,
            s.raw_total_ns,
            s.streams_total_ns,
            s.graph_total_ns
        );
    }
    println!(
        "  makespan of a {}-kernel DAG with unequal durations (critical path {} us)",
        r.makespan_commands, r.critical_path_us
    );
    let exact = r
        .makespan
        .iter()
        .find(|m| m.lowering == "streams")
        .map(|m| m.makespan_us);
    for m in &r.makespan {
        println!(
            "  {:<11} {:>10.0} us   /critical path {:>6.3}   /streams {:>6.3}   false dependencies {}",
            m.lowering,
            m.makespan_us,
            m.makespan_us / r.critical_path_us.max(1) as f64,
            m.makespan_us / exact.unwrap_or(f64::NAN),
            m.false_dependencies
        );
    }
    Ok(())
}

fn run_ipc(a: &BenchArgs) -> Result<(), Failure> {
    let cfg = seqsync_demo::bench::ipc::IpcBenchConfig {
        rounds: a.rounds.max(1),
    };
    let r = seqsync_demo::bench::ipc::run(a.backend, &cfg)?;
    if a.json {
        println!("{}", serde_json::to_string(&r).expect("report serializes"));
        return Ok(());
    }
    println!("seqsync bench ipc on {} ({})", r.backend, r.device);
    println!(
        "  {:<14}{:<46}{:>11}{:>10}{:>8}",
        "mechanism", "operation", "shared ns", "ring ns", "ratio"
    );
    for o in &r.rows {
        let what = if o.mechanism == "host wake-up" {
            "record_host -> blocked synchronize (1/2 RTT)"
        } else {
            "record + wait (shared ring vs EventRingbuf)"
        };
        println!(
            "  {:<14}{:<46}{:>11.1}{:>10.1}{:>8.3}",
            o.mechanism, what, o.shared_ns, o.ring_ns, o.ratio
        );
    }
    Ok(())
}

fn run_timeline(a: BenchArgs) -> Result<(), Failure> {
    let cfg = TimelineBenchConfig {
        rounds: a.rounds.max(1),
        ..TimelineBenchConfig::default()
    };
    let r = match polling_host(&a)? {
        Some(h) => timeline::run_on_host(&h, &cfg)?,
        None => timeline::run(a.backend, &cfg)?,
    };
    if a.json {
        println!("{}", serde_json::to_string(&r).expect("report serializes"));
        return Ok(());
    }
    println!(
        "seqsync bench timeline on {} ({}), mechanism {}, locks {}",
        r.backend, r.device, r.mechanism, r.locks
    );
    println!(
        "  {:<16}{:<50}{:>12}{:>10}{:>8}",
        "mechanism", "operation", "timeline ns", "raw ns", "ratio"
    );
    for o in &r.ops {
        println!(
            "  {:<16}{:<50}{:>12.1}{:>10.1}{:>8.3}",
            o.mechanism, o.name, o.timeline_ns, o.raw_ns, o.ratio
        );
    }
    println!(
        "  cross-stream ping-pong, per round trip (enqueue included; raw events in causal order)"
    );
    for p in &r.ping_pong {
        println!(
            "  {:<16} timeline {:>9.2} us   raw events {:>9.2} us   ratio {:>6.3}",
            p.mechanism, p.timeline_us, p.raw_us, p.ratio
        );
    }
    println!("  host wait: wake-up (time past the work's end, enqueue included) and CPU per wait");
    for s in &r.wait {
        println!(
            "  {:<16}{:<22} excess {:>9.1} us   cpu {:>8.3} ms ({:.1}% of the wait)",
            s.wait,
            s.method,
            s.excess_us,
            s.cpu_ms,
            100.0 * s.cpu_ms / s.wait_ms
        );
    }
    Ok(())
}

fn run_handoff(
    kind: BackendKind,
    cfg: &BenchConfig,
    json: bool,
    overhead_only: bool,
) -> Result<(), Failure> {
    let r = if overhead_only {
        bench::handoff::run_overhead(kind, cfg)?
    } else {
        bench::handoff::run(kind, cfg)?
    };
    if json {
        println!("{}", serde_json::to_string(&r).expect("report serializes"));
        return Ok(());
    }
    println!("seqsync bench handoff on {} ({})", r.backend, r.device);
    println!(
        "  {:<42}{:>11}{:>11}{:>10}{:>8}  baseline",
        "operation", "tracked ns", "base ns", "extra ns", "ratio"
    );
    for o in &r.ops {
        println!(
            "  {:<42}{:>11.1}{:>11.1}{:>10.1}{:>8.3}  {}",
            o.name, o.tracked_ns, o.baseline_ns, o.extra_ns, o.ratio, o.baseline
        );
    }
    let Some(o) = &r.overlap else {
        return Ok(());
    };
    println!(
        "  motivating example: the child's update finishes at {:.3} ms with epochs vs {:.3} ms \
         without shortcuts (more_work: {:.0} ms)",
        o.child_ms_epochs, o.child_ms_no_shortcuts, o.more_work_ms
    );
    Ok(())
}
