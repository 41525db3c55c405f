//! `seqsync bench`: the ring against the raw backend calls, in one run.

use clap::Args;
use seqsync::BackendKind;
use seqsync_demo::bench::{self, BenchConfig};

use crate::Failure;

#[derive(Args)]
pub(crate) struct BenchArgs {
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
