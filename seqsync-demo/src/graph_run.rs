//! Running a [`GraphSpec`] (a `seqsync graph` file) for its makespan (`seqsync graph --run`,
//! `seqsync bench graph`): kernels spin for their `us`, host functions sleep for theirs, copies
//! and fills move `MOVE_WORDS` (16 Ki) words. A workload, so it lives here, not in the library.

use std::time::{Duration, Instant};

use serde::Serialize;

use seqsync::backend::{CommandBackend, CopyOp, FillOp};
use seqsync::graph::{Affinity, Graph, Lowering, Queues};
use seqsync::internal::backend::GraphBackend;
use seqsync::internal::graph::spec_toml::GraphSpec;
use seqsync::internal::graph::{Command, CommandKind};
use seqsync::Result;

/// Words each copy or fill of a graph file moves.
pub(crate) const MOVE_WORDS: usize = 1 << 14;

/// The makespan of a run, against the two bounds a schedule lies between.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Submissions timed.
    pub runs: usize,
    /// Median wall time from the first enqueue to the end of the work, in microseconds.
    pub makespan_us: f64,
    /// The longest dependency path's total `us`: no schedule is faster.
    pub critical_path_us: u64,
    /// Every command's `us`, summed: one stream running everything in order.
    pub serial_us: u64,
}

/// Build the graph a spec describes, for `backend`.
pub fn build<B: CommandBackend>(backend: &B, spec: &GraphSpec) -> Result<Graph<B>> {
    let dag = &spec.dag;
    let mut ops = Vec::with_capacity(dag.len());
    for c in 0..dag.len() {
        let us = spec.us[c];
        ops.push(match dag.kind(c) {
            CommandKind::Kernel => Command::Kernel(backend.spin_kernel(us)?),
            CommandKind::Host => Command::Host(std::sync::Arc::new(move || {
                std::thread::sleep(Duration::from_micros(us))
            })),
            CommandKind::Copy => Command::Copy(CopyOp {
                src: backend.alloc_words(MOVE_WORDS)?,
                src_offset: 0,
                dst: backend.alloc_words(MOVE_WORDS)?,
                dst_offset: 0,
                words: MOVE_WORDS,
            }),
            CommandKind::Fill => Command::Fill(FillOp {
                dst: backend.alloc_words(MOVE_WORDS)?,
                offset: 0,
                words: MOVE_WORDS,
                value: c as u32,
            }),
        });
    }
    Ok(Graph::new(dag.clone(), ops))
}

/// Run `spec` lowered with `lowering` on `backend` (a CUDA graph is instantiated once and
/// replayed): one warm-up submission, then `runs` timed ones, each synchronized before the
/// next.
pub fn run<B: GraphBackend>(
    backend: &B,
    spec: &GraphSpec,
    lowering: Lowering,
    runs: usize,
) -> Result<RunReport> {
    let graph = build(backend, spec)?;
    let mut pool = Queues::new(backend.clone());
    let mut times = Vec::with_capacity(runs);
    let mut time = |submit: &mut dyn FnMut(&mut Queues<B>) -> Result<()>| -> Result<()> {
        submit(&mut pool)?; // warm-up
        pool.synchronize()?;
        for _ in 0..runs.max(1) {
            let t = Instant::now();
            submit(&mut pool)?;
            pool.synchronize()?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(())
    };
    if lowering == Lowering::CudaGraph {
        let exe = graph.instantiate(backend)?;
        time(&mut |pool| pool.submit_graph(&exe, Affinity::queue(0)).map(drop))?;
    } else {
        let mut exe = graph.lower(lowering);
        time(&mut |pool| pool.submit(&mut exe, Affinity::queue(0)).map(drop))?;
    }
    times.sort_by(f64::total_cmp);
    let dag = &spec.dag;
    let mut finish = vec![0u64; dag.len()];
    for &c in dag.topo() {
        finish[c] = spec.us[c] + dag.preds(c).iter().map(|&p| finish[p]).max().unwrap_or(0);
    }
    Ok(RunReport {
        runs: times.len(),
        makespan_us: times[times.len() / 2],
        critical_path_us: finish.iter().copied().max().unwrap_or(0),
        serial_us: spec.us.iter().sum(),
    })
}

/// One command of a traced run: its stream (in the lowering's report) and when it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Span {
    /// The command.
    pub name: String,
    /// Its stream in the lowering.
    pub stream: usize,
    /// Start, microseconds after the submission.
    pub start_us: f64,
    /// How long it ran, microseconds.
    pub dur_us: f64,
}

/// Run `spec` once with every command replaced by a host function that sleeps its `us` and
/// records when it ran. Host functions run on the stream's own thread on the host backend, so
/// the spans show the streams' overlap there; CUDA runs host functions on one driver thread, so
/// use this on the host backend only.
pub fn trace<B: GraphBackend>(
    backend: &B,
    spec: &GraphSpec,
    lowering: Lowering,
) -> Result<Vec<Span>> {
    use std::sync::{Arc, Mutex};
    let dag = &spec.dag;
    let t0 = Arc::new(Mutex::new(Instant::now()));
    let times = Arc::new(Mutex::new(vec![(0.0, 0.0); dag.len()]));
    let ops: Vec<Command<B>> = (0..dag.len())
        .map(|c| {
            let (t0, times, us) = (t0.clone(), times.clone(), spec.us[c]);
            Command::Host(std::sync::Arc::new(move || {
                let start = t0.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
                std::thread::sleep(Duration::from_micros(us));
                let end = t0.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
                times.lock().unwrap_or_else(|e| e.into_inner())[c] =
                    (start.as_secs_f64() * 1e6, (end - start).as_secs_f64() * 1e6);
            }))
        })
        .collect();
    let graph = Graph::new(dag.clone(), ops);
    let mut pool = Queues::new(backend.clone());
    let report = if lowering == Lowering::CudaGraph {
        let exe = graph.instantiate(backend)?;
        *t0.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        pool.submit_graph(&exe, Affinity::queue(0))?;
        pool.synchronize()?;
        exe.report().clone()
    } else {
        let mut exe = graph.lower(lowering);
        *t0.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        pool.submit(&mut exe, Affinity::queue(0))?;
        pool.synchronize()?;
        exe.report().clone()
    };
    let times = times.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(report
        .assignment
        .iter()
        .zip(times)
        .map(|(a, (start_us, dur_us))| Span {
            name: a.name.clone(),
            stream: a.stream,
            start_us,
            dur_us,
        })
        .collect())
}
