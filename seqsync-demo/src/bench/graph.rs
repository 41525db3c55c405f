//! Command-graph benchmarks (`seqsync bench graph`), every figure against a baseline measured
//! in the same run:
//!
//! - **submit cost per command** on random DAGs of 100 and 1000 commands: raw launches of the
//!   same kernels on one stream (no ordering work at all) against the streams + events lowering
//!   (waits and records included) and against replaying one instantiated graph; also the time
//!   until the work has finished, per command;
//! - **makespan** of a DAG with unequal durations under the fork-join-levels lowering against
//!   the exact lowerings, and the critical path (no schedule is faster).

use std::time::Instant;

use serde::Serialize;

use crate::graph_run::RunReport;
use seqsync::graph::{Affinity, Graph, Lowering, Queues};
use seqsync::internal::backend::{Command, GraphBackend};
use seqsync::internal::graph::spec_toml::GraphSpec;
use seqsync::internal::graph::{CommandKind, Dag, DagBuilder};
use seqsync::Result;

/// Submit cost for one DAG size.
#[derive(Debug, Clone, Serialize)]
pub struct SubmitRow {
    /// Commands in the DAG.
    pub commands: usize,
    /// Cross-stream waits of the streams + events lowering.
    pub events: usize,
    /// Streams of the streams + events lowering.
    pub streams: usize,
    /// Raw launches on one stream: median ns per command to enqueue.
    pub raw_submit_ns: f64,
    /// Streams + events: median ns per command to enqueue.
    pub streams_submit_ns: f64,
    /// Graph replay: median ns per command to enqueue (one launch / commands).
    pub graph_submit_ns: f64,
    /// Raw: median ns per command from the first enqueue until the work has finished.
    pub raw_total_ns: f64,
    /// Streams + events: the same.
    pub streams_total_ns: f64,
    /// Graph replay: the same.
    pub graph_total_ns: f64,
}

/// Makespan of one lowering of the unequal-duration DAG.
#[derive(Debug, Clone, Serialize)]
pub struct MakespanRow {
    /// `streams`, `cuda-graph` or `levels`.
    pub lowering: String,
    /// Median makespan, microseconds.
    pub makespan_us: f64,
    /// False dependencies of the lowering.
    pub false_dependencies: usize,
}

/// Everything `seqsync bench graph` measures.
#[derive(Debug, Clone, Serialize)]
pub struct GraphBenchReport {
    /// "host" or "cuda".
    pub backend: String,
    /// Submit cost per DAG size.
    pub submit: Vec<SubmitRow>,
    /// Commands of the unequal-duration DAG.
    pub makespan_commands: usize,
    /// Its critical path, microseconds.
    pub critical_path_us: u64,
    /// Makespan per lowering.
    pub makespan: Vec<MakespanRow>,
}

/// How much to measure.
#[derive(Debug, Clone)]
pub struct GraphBenchConfig {
    /// DAG sizes for the submit cost.
    pub sizes: Vec<usize>,
    /// Timed repetitions (the median counts).
    pub reps: usize,
}

impl Default for GraphBenchConfig {
    fn default() -> Self {
        GraphBenchConfig {
            sizes: vec![100, 1000],
            reps: 30,
        }
    }
}

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// A random DAG of `n` commands: each depends on 1–3 of the 16 commands before it.
pub fn random_dag(n: usize, seed: u64) -> Dag {
    let mut rng = Rng(seed);
    let preds: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            if i == 0 {
                return vec![];
            }
            let k = rng.below(3) + 1;
            (0..k)
                .map(|_| i - 1 - rng.below(i.min(16) as u64) as usize)
                .collect()
        })
        .collect();
    Dag::from_preds(&preds).expect("a DAG: every edge points back")
}

/// 6 chains of 10 kernels, durations 20–400 µs, each step also after the previous step of the
/// neighbouring chain with probability 1/5.
pub fn unequal_dag(seed: u64) -> GraphSpec {
    let mut rng = Rng(seed);
    let (chains, steps) = (6, 10);
    let mut b = DagBuilder::new();
    let mut us = Vec::new();
    for c in 0..chains {
        for s in 0..steps {
            let mut after = Vec::new();
            if s > 0 {
                after.push(format!("k{c}_{}", s - 1));
                if rng.below(5) == 0 {
                    after.push(format!("k{}_{}", (c + 1) % chains, s - 1));
                }
            }
            b.command(&format!("k{c}_{s}"), CommandKind::Kernel, &after);
            us.push(20 + rng.below(381));
        }
    }
    GraphSpec {
        dag: b.build().expect("a DAG"),
        us,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Time `enqueue` (returns when enqueued) and until `sync` returns, `reps` times after one
/// warm-up; medians of (enqueue ns, total ns).
fn time(
    reps: usize,
    enqueue: &mut dyn FnMut() -> Result<()>,
    sync: &mut dyn FnMut() -> Result<()>,
) -> Result<(f64, f64)> {
    enqueue()?;
    sync()?;
    let (mut sub, mut tot) = (Vec::new(), Vec::new());
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        enqueue()?;
        sub.push(t.elapsed().as_nanos() as f64);
        sync()?;
        tot.push(t.elapsed().as_nanos() as f64);
    }
    Ok((median(sub), median(tot)))
}

fn submit_row<B: GraphBackend>(b: &B, n: usize, reps: usize) -> Result<SubmitRow> {
    let dag = random_dag(n, 0x5EED + n as u64);
    let kernel = b.spin_kernel(0)?;
    let ops: Vec<Command<B>> = (0..n).map(|_| Command::Kernel(kernel.clone())).collect();
    // Raw: the same kernels in topological order on one stream.
    let stream = b.new_stream("raw")?;
    let (raw_s, raw_t) = time(
        reps,
        &mut || {
            for _ in 0..n {
                b.launch_kernel(&stream, &kernel)?;
            }
            Ok(())
        },
        &mut || b.synchronize_stream(&stream),
    )?;
    let mut exe = Graph::new(dag.clone(), ops.clone()).lower(Lowering::Streams);
    let (events, streams) = (exe.report().events, exe.report().streams);
    let pool = std::cell::RefCell::new(Queues::new(b.clone()));
    let (st_s, st_t) = time(
        reps,
        &mut || {
            pool.borrow_mut()
                .submit(&mut exe, Affinity::queue(0))
                .map(drop)
        },
        &mut || pool.borrow().synchronize(),
    )?;
    let gexe = Graph::new(dag, ops).instantiate(b)?;
    let (g_s, g_t) = time(
        reps,
        &mut || {
            pool.borrow_mut()
                .submit_graph(&gexe, Affinity::queue(0))
                .map(drop)
        },
        &mut || pool.borrow().synchronize(),
    )?;
    let per = |x: f64| x / n as f64;
    Ok(SubmitRow {
        commands: n,
        events,
        streams,
        raw_submit_ns: per(raw_s),
        streams_submit_ns: per(st_s),
        graph_submit_ns: per(g_s),
        raw_total_ns: per(raw_t),
        streams_total_ns: per(st_t),
        graph_total_ns: per(g_t),
    })
}

fn run_on<B: GraphBackend>(b: &B, cfg: &GraphBenchConfig) -> Result<GraphBenchReport> {
    let submit = cfg
        .sizes
        .iter()
        .map(|&n| submit_row(b, n, cfg.reps))
        .collect::<Result<Vec<_>>>()?;
    let spec = unequal_dag(42);
    let analysis = seqsync::internal::graph::Analysis::of(&spec.dag);
    let mut makespan = Vec::new();
    let mut critical = 0;
    for lowering in [Lowering::Streams, Lowering::CudaGraph, Lowering::Levels] {
        let r: RunReport = crate::graph_run::run(b, &spec, lowering, cfg.reps.min(10))?;
        critical = r.critical_path_us;
        makespan.push(MakespanRow {
            lowering: match lowering {
                Lowering::Streams => "streams",
                Lowering::CudaGraph => "cuda-graph",
                Lowering::Levels => "levels",
            }
            .into(),
            makespan_us: r.makespan_us,
            false_dependencies: seqsync::internal::graph::report(&spec.dag, &analysis, lowering)
                .false_dependencies,
        });
    }
    Ok(GraphBenchReport {
        backend: b.name().into(),
        submit,
        makespan_commands: spec.dag.len(),
        critical_path_us: critical,
        makespan,
    })
}

/// Run the graph benchmarks on the backend `kind` picks.
pub fn run(kind: seqsync::BackendKind, cfg: &GraphBenchConfig) -> Result<GraphBenchReport> {
    match seqsync::AnyBackend::new(kind)? {
        seqsync::AnyBackend::Host(h) => run_on(&h, cfg),
        #[cfg(feature = "cuda")]
        seqsync::AnyBackend::Cuda(c) => run_on(&c, cfg),
        other => Err(super::unsupported("graph", &other)),
    }
}
