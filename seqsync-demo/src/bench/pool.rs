//! `seqsync bench pool`: seqsync's stream-ordered [`Pool`] against the backend's own
//! stream-ordered allocator (CUDA: `cuMemAllocFromPoolAsync` + `cuMemFreeAsync`, called raw)
//! and against plain synchronous allocation (`cuMemAlloc` + `cuMemFree`), in one run; then a
//! long run that counts the pool's host synchronizations.
//!
//! Every figure is a median over rounds, and the contenders' rounds alternate so that all see
//! the same noise.

use std::time::Instant;

use serde::Serialize;

use seqsync::backend::{EventOptions, MemoryBackend};
use seqsync::memory::{Pool, PoolConfig, PoolStats};
use seqsync::Result;

/// One alloc+free pattern, timed for the pool and for a baseline.
#[derive(Debug, Clone, Serialize)]
pub struct PairRow {
    /// The pattern.
    pub name: String,
    /// What the pool is compared with.
    pub baseline: String,
    /// The pool's median nanoseconds per alloc+free pair.
    pub pool_ns: f64,
    /// The baseline's median nanoseconds per pair.
    pub baseline_ns: f64,
    /// `pool_ns / baseline_ns` (target: <= 1.0 against the stream-ordered baseline).
    pub ratio: f64,
}

/// The long run: what the pool did over many pairs after warm-up.
#[derive(Debug, Clone, Serialize)]
pub struct LongRun {
    /// Alloc+free pairs after warm-up (half on one stream, half across two).
    pub pairs: u64,
    /// Host synchronizations the pool made (target: 0).
    pub host_syncs: u64,
    /// Slabs taken from the backend after warm-up (each a synchronous device allocation).
    pub slab_allocs: u64,
    /// Slabs given back after warm-up.
    pub slab_releases: u64,
    /// Allocations served by zero-synchronization reuse.
    pub reuse: u64,
    /// Allocations that inserted a stream wait.
    pub waits: u64,
    /// Allocations refused.
    pub exhausted: u64,
    /// Bytes the pool held at the end.
    pub reserved: usize,
}

/// Everything `seqsync bench pool` measures.
#[derive(Debug, Clone, Serialize)]
pub struct PoolBenchReport {
    /// "host" or "cuda".
    pub backend: String,
    /// The device's name.
    pub device: String,
    /// Bytes per allocation.
    pub bytes: usize,
    /// Per-pair costs.
    pub pairs: Vec<PairRow>,
    /// The long run.
    pub long_run: LongRun,
}

/// How much to measure.
#[derive(Debug, Clone, Copy)]
pub struct PoolBenchConfig {
    /// Bytes per allocation.
    pub bytes: usize,
    /// Pairs per timed round.
    pub per_round: usize,
    /// Rounds (the median is taken over rounds).
    pub rounds: usize,
    /// Rounds of the synchronous `cuMemAlloc` + `cuMemFree` baseline (slow: fewer).
    pub sync_rounds: usize,
    /// Pairs in the long run.
    pub long_pairs: u64,
}

impl Default for PoolBenchConfig {
    fn default() -> Self {
        PoolBenchConfig {
            bytes: 1 << 20,
            per_round: 64,
            rounds: 200,
            sync_rounds: 20,
            long_pairs: 200_000,
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn row(name: &str, baseline: &str, pool: Vec<f64>, base: Vec<f64>) -> PairRow {
    let (pool_ns, baseline_ns) = (median(pool), median(base));
    PairRow {
        name: name.to_owned(),
        baseline: baseline.to_owned(),
        pool_ns,
        baseline_ns,
        ratio: pool_ns / baseline_ns,
    }
}

/// Time `f` (which does `n` pairs) in nanoseconds per pair.
fn per_pair(n: usize, f: impl FnOnce() -> Result<()>) -> Result<f64> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed().as_nanos() as f64 / n as f64)
}

/// Run every measurement on `b`, with its device's name.
pub fn run_on<B: MemoryBackend>(
    b: &B,
    device: &str,
    cfg: &PoolBenchConfig,
) -> Result<PoolBenchReport> {
    let n = cfg.per_round;
    let size = cfg.bytes;
    let (a, c) = (b.new_stream("alloc")?, b.new_stream("free")?);
    let pool = Pool::new(b, "bench", PoolConfig::default())?;
    let native = b.create_async_pool(u64::MAX)?;
    let event = b.create_event(EventOptions::default())?;

    // Same stream: alloc + free on `a`.
    let same_pool = || -> Result<f64> {
        per_pair(n, || {
            for _ in 0..n {
                let x = pool.alloc(&a, size, &[])?;
                pool.free(&a, x.block, &[])?;
            }
            Ok(())
        })
    };
    let same_native = || -> Result<f64> {
        per_pair(n, || {
            for _ in 0..n {
                let p = b.alloc_async(&native, &a, size)?;
                b.free_async(&native, &a, p)?;
            }
            Ok(())
        })
    };
    // Across streams: alloc on `a`, free on `c`, and `a` waits for the free (so that the next
    // allocation on `a` may reuse the block without any synchronization): the pool's free point
    // and `Pool::wait` against a raw event record and stream wait.
    let cross_pool = || -> Result<f64> {
        per_pair(n, || {
            for _ in 0..n {
                let x = pool.alloc(&a, size, &[])?;
                let freed = pool.free(&c, x.block, &[])?;
                pool.wait(&a, &freed)?;
            }
            Ok(())
        })
    };
    let cross_native = || -> Result<f64> {
        per_pair(n, || {
            for _ in 0..n {
                let p = b.alloc_async(&native, &a, size)?;
                b.free_async(&native, &c, p)?;
                b.record(&event, &c)?;
                b.wait(&a, &event)?;
            }
            Ok(())
        })
    };
    let (mut sp, mut sn, mut cp, mut cn) = (vec![], vec![], vec![], vec![]);
    for round in 0..cfg.rounds + 5 {
        let r = (same_pool()?, same_native()?, cross_pool()?, cross_native()?);
        if round >= 5 {
            sp.push(r.0);
            sn.push(r.1);
            cp.push(r.2);
            cn.push(r.3);
        }
        // Keep the queues short: both contenders' frees must reach the device.
        b.synchronize_stream(&a)?;
        b.synchronize_stream(&c)?;
    }
    let (native_name, sync_name) = match b.name() {
        "cuda" => (
            "cuMemAllocFromPoolAsync + cuMemFreeAsync",
            "cuMemAlloc + cuMemFree",
        ),
        _ => (
            "host async pool (malloc, free in stream order)",
            "malloc + free",
        ),
    };
    let mut pairs = vec![
        row("alloc+free, one stream", native_name, sp.clone(), sn),
        row(
            "alloc+free across two streams (+ record/wait)",
            &format!("{native_name} + event record/wait"),
            cp,
            cn,
        ),
    ];

    // The synchronous baseline: a plain device allocation and free per pair.
    let (mut sp2, mut sync) = (vec![], vec![]);
    let m = n.min(16);
    for _ in 0..cfg.sync_rounds {
        sp2.push(per_pair(m, || {
            for _ in 0..m {
                let x = pool.alloc(&a, size, &[])?;
                pool.free(&a, x.block, &[])?;
            }
            Ok(())
        })?);
        sync.push(per_pair(m, || {
            for _ in 0..m {
                drop(b.alloc_memory(size)?);
            }
            Ok(())
        })?);
    }
    pairs.push(row("alloc+free, one stream", sync_name, sp2, sync));

    // The long run: same-stream and cross-stream pairs, counting what the pool does after a
    // warm-up.
    let before: PoolStats = pool.stats();
    let mut done = 0u64;
    while done < cfg.long_pairs {
        for _ in 0..n {
            let x = pool.alloc(&a, size, &[])?;
            pool.free(&a, x.block, &[])?;
            let y = pool.alloc(&a, size, &[])?;
            let freed = pool.free(&c, y.block, &[])?;
            pool.wait(&a, &freed)?;
            done += 2;
        }
        // The bench keeps the queues short; the pool itself never waits.
        b.synchronize_stream(&a)?;
        b.synchronize_stream(&c)?;
    }
    b.synchronize_stream(&a)?;
    let after = pool.stats();
    b.trim_async_pool(&native, 0)?;
    Ok(PoolBenchReport {
        backend: b.name().to_owned(),
        device: device.to_owned(),
        bytes: size,
        pairs,
        long_run: LongRun {
            pairs: done,
            host_syncs: after.host_syncs - before.host_syncs,
            slab_allocs: after.slab_allocs - before.slab_allocs,
            slab_releases: after.slab_releases - before.slab_releases,
            reuse: after.reuse - before.reuse,
            waits: after.waits - before.waits,
            exhausted: after.exhausted - before.exhausted,
            reserved: after.reserved_current,
        },
    })
}

/// Run every measurement on the backend `kind` picks.
pub fn run(kind: seqsync::BackendKind, cfg: &PoolBenchConfig) -> Result<PoolBenchReport> {
    match seqsync::AnyBackend::new(kind)? {
        seqsync::AnyBackend::Host(h) => run_on(&h, "host", cfg),
        #[cfg(feature = "cuda")]
        seqsync::AnyBackend::Cuda(c) => {
            let name = c.device_name()?;
            run_on(&c, &name, cfg)
        }
        other => Err(super::unsupported("pool", &other)),
    }
}
