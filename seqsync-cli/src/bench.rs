//! `seqsync bench`: the ring against the raw backend calls, in one run.

use clap::Args;
use seqsync::BackendKind;
use seqsync_demo::bench::pool::{self, PoolBenchConfig};
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
}

#[derive(Args)]
pub(crate) struct BenchArgs {
    /// ring (default) or pool.
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
}

pub(crate) fn run(a: BenchArgs) -> Result<(), Failure> {
    if a.suite == Suite::Pool {
        return run_pool(a);
    }
    let cfg = BenchConfig {
        rounds: a.rounds.max(1),
        threaded_seqs: a.seqs.max(1),
        ..BenchConfig::default()
    };
    let r = bench::run(a.backend, &cfg)?;
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
