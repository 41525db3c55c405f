//! The seed's pipeline on command graphs ([`Engine::Graph`](super::Engine::Graph)): the host
//! launches one graph per group of K batches instead of a copy, three kernels, eight waits and
//! five records per batch.
//!
//! Each batch's body (h2g copy -> f, g -> h -> g2h copy) is recorded with
//! [`seqsync::graph::CommandBuffer`], K bodies to a graph, and lowered by the graph layer: a
//! CUDA graph on CUDA, the host lowering (one topological order on the launch stream) on the
//! host backend. [`DEPTH`] groups are in flight; group `s` uses slot group `s % DEPTH` of every
//! buffer (`DEPTH * K` slots each, host input and output batches included), so there is one
//! graph per slot group, instantiated once and replayed with nothing to update, on stream
//! `s % DEPTH`.
//!
//! Across groups the rings order everything, as in the hand-written engine:
//!
//! - `graph` (nconsumers 2, max_size [`DEPTH`], recorded blocking after each launch): the h2g
//!   thread synchronizes on it at lag [`DEPTH`] before refilling a slot group (host inputs,
//!   `in`, `x`, `y`, `out` of group `s - DEPTH` are free once its graph has run), and the g2h
//!   thread synchronizes on it at lag 0 before `process_data`.
//! - `processed` (a counter): the h2g thread waits for group `s - DEPTH` to be processed before
//!   its graph rewrites those host output batches.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::device::{Device, Stream};
use super::names::parse_name;
use super::pipeline::{first_error, Checker, RunOptions, Variant, Verification};
use super::threads::run_threads;
use super::watchdog::Watch;
use seqsync::backend::Backend;
use seqsync::graph::{CommandBuffer, GraphExecutable};
use seqsync::{Blocking, Error, EventRingbuf, Result};

/// Groups in flight (slot groups of every buffer, streams).
pub const DEPTH: usize = 3;

/// Bytes a group of batches should carry when `--graph-batches` is not given: below it, K
/// batches share a launch.
const GROUP_BYTES: usize = 4 << 20;

/// Most batches per graph.
pub const MAX_GRAPH_BATCHES: usize = 64;

/// K for `batch_bytes` when not given: enough batches for `GROUP_BYTES` (4 MiB), at most
/// `MAX_GRAPH_BATCHES` (64).
pub fn auto_graph_batches(batch_bytes: usize) -> usize {
    (GROUP_BYTES / batch_bytes.max(1)).clamp(1, MAX_GRAPH_BATCHES)
}

/// An ordering edge inside each batch's body, or the host waits between groups: a test switch
/// drops one (verification must then fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GraphEdge {
    /// f after the h2g copy; [`Engine::Resident`](super::Engine::Resident) copying on streams:
    /// the arrival written after the copy in (dropped: get_data stores it at once).
    CopyInF,
    /// g after the h2g copy.
    CopyInG,
    /// h after f.
    FH,
    /// h after g.
    GH,
    /// The g2h copy after h; [`Engine::Resident`](super::Engine::Resident) copying on streams:
    /// the copy out's wait for the kernel's `done`.
    HCopyOut,
    /// Between graphs: the h2g thread's waits before reusing a slot group (the graph ring at
    /// lag [`DEPTH`], which then has one consumer, and the `processed` counter);
    /// [`Engine::Resident`](super::Engine::Resident): get_data's wait for the batch a ring
    /// before to be processed.
    GroupWaits,
    /// [`Engine::Adaptive`](super::Engine::Adaptive) with the device release: each launch's
    /// wait on the device for its batches' arrival; [`Engine::Resident`](super::Engine::Resident):
    /// the kernel's wait for each batch's arrival.
    ArrivalWait,
    /// [`Engine::Adaptive`](super::Engine::Adaptive) and
    /// [`Engine::Resident`](super::Engine::Resident): their process_data threads report a batch
    /// processed (which frees its slots) only once every batch before it was processed too.
    ProcessedInOrder,
}

impl GraphEdge {
    /// Every edge and wait a test can drop.
    pub const ALL: [GraphEdge; 8] = [
        GraphEdge::CopyInF,
        GraphEdge::CopyInG,
        GraphEdge::FH,
        GraphEdge::GH,
        GraphEdge::HCopyOut,
        GraphEdge::GroupWaits,
        GraphEdge::ArrivalWait,
        GraphEdge::ProcessedInOrder,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            GraphEdge::CopyInF => "copy-in-f",
            GraphEdge::CopyInG => "copy-in-g",
            GraphEdge::FH => "f-h",
            GraphEdge::GH => "g-h",
            GraphEdge::HCopyOut => "h-copy-out",
            GraphEdge::GroupWaits => "group-waits",
            GraphEdge::ArrivalWait => "arrival-wait",
            GraphEdge::ProcessedInOrder => "processed-in-order",
        }
    }
}

impl std::str::FromStr for GraphEdge {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        parse_name(s, "edge", &GraphEdge::ALL, GraphEdge::name)
    }
}

/// Record the bodies of `count` batches of slot group `group` (K slots each) into one graph,
/// `span` consecutive batches to each set of five nodes (copy in, f, g, h, copy out; the last
/// set takes what is left): 1 gives every batch nodes of its own, `count` one node of each for
/// all.
/// Commands are recorded consumers first, so that without an edge the host lowering's
/// topological order (smallest index first) runs a consumer before its producer.
pub(crate) fn record<D: Device>(
    dev: &D,
    k: usize,
    group: usize,
    count: usize,
    span: usize,
    drop: Option<GraphEdge>,
) -> Result<GraphExecutable<D::B>> {
    let span = span.max(1);
    let mut cb = CommandBuffer::<D::B>::new();
    let keep = |e: GraphEdge| drop != Some(e);
    for j in 0..count.div_ceil(span) {
        let slot = group * k + j * span;
        let span = span.min(count - j * span);
        let (cin, f, g, h, cout) = (
            format!("copy-in {j}"),
            format!("f {j}"),
            format!("g {j}"),
            format!("h {j}"),
            format!("copy-out {j}"),
        );
        let after = |deps: &[(GraphEdge, &str)]| -> Vec<String> {
            deps.iter()
                .filter(|(e, _)| keep(*e))
                .map(|(_, n)| n.to_string())
                .collect()
        };
        let a = after(&[(GraphEdge::HCopyOut, &h)]);
        cb.push(&cout, dev.op_copy_out(slot, slot, span), &names(&a));
        let a = after(&[(GraphEdge::FH, &f), (GraphEdge::GH, &g)]);
        cb.push(&h, dev.op_h(slot, slot, slot, span), &names(&a));
        let a = after(&[(GraphEdge::CopyInG, &cin)]);
        cb.push(&g, dev.op_g(slot, slot, span), &names(&a));
        let a = after(&[(GraphEdge::CopyInF, &cin)]);
        cb.push(&f, dev.op_f(slot, slot, span), &names(&a));
        cb.push(&cin, dev.op_copy_in(slot, slot, span), &[]);
    }
    let graph = cb
        .finish()
        .map_err(|e| crate::invalid("graph", e.to_string()))?;
    graph.instantiate(dev.backend())
}

/// Synchronize every stream (all of them, whatever fails); the first error.
pub(crate) fn sync_streams<B: Backend>(b: &B, streams: &[B::Stream]) -> Result<()> {
    let mut synced = Ok(());
    for s in streams {
        if let Err(e) = b.synchronize_stream(s) {
            synced = synced.and(Err(e));
        }
    }
    synced
}

fn names(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Run the seed's pipeline on graphs of `k` batches; returns the wall time and what
/// process_data saw. The layout must have `DEPTH * k` slots in every buffer and as many host
/// input and output batches.
pub(crate) fn run<D: Device>(
    dev: &D,
    opt: &RunOptions<'_>,
    k: usize,
    drop: Option<GraphEdge>,
) -> Result<(Duration, Verification)> {
    debug_assert!(opt.variant == Variant::Seed && opt.drop.is_none());
    let l = *dev.layout();
    let slots = DEPTH * k;
    assert!(
        [l.nin, l.nx, l.ny, l.nout, l.npatterns, l.nhout]
            .iter()
            .all(|&n| n == slots),
        "the graph engine's layout has DEPTH * k slots everywhere"
    );
    let b = dev.backend();
    let batches = opt.batches;
    let groups = (batches as usize).div_ceil(k);
    let tail = batches as usize - (groups - 1) * k;
    let mut full = Vec::with_capacity(DEPTH);
    for g in 0..DEPTH.min(groups) {
        full.push(record(dev, k, g, k, 1, drop)?);
    }
    // The last group, when shorter, has a graph of its own.
    let last = groups - 1;
    let short = (tail < k)
        .then(|| record(dev, k, last % DEPTH, tail, 1, drop))
        .transpose()?;
    let streams: Vec<Stream<D>> = (0..DEPTH)
        .map(|i| b.new_stream(&format!("s_graph{i}")))
        .collect::<Result<_>>()?;
    // Every graph on the device before the run (a first launch uploads it otherwise).
    for exe in full.iter().chain(&short) {
        exe.upload(&streams[0])?;
    }
    b.synchronize_stream(&streams[0])?;
    let waits = drop != Some(GraphEdge::GroupWaits);
    let ring = EventRingbuf::new(b, "graph", 1 + waits as u32, DEPTH)?;
    let processed = EventRingbuf::new(b, "processed", 0, 1)?;
    let checker = Checker::paced(batches, opt.rate);
    let depth = DEPTH as i64;
    let start = Instant::now();
    // The h2g thread owns the graphs (they are `Send`, not `Sync`) and hands them back.
    let checker_owned = checker;
    let (ring, processed, checker, streams) = (&ring, &processed, &checker_owned, &streams);
    let h2g = move || -> (Result<()>, _) {
        let r = (|| -> Result<()> {
            for s in 0..groups {
                dev.chaos_pause();
                let si = s as i64;
                // Slot group s % DEPTH (device slots, host inputs) is free once group s - DEPTH's
                // graph has run; its host outputs once that group has been processed.
                if waits {
                    ring.synchronize(si - depth, Blocking::No)?;
                    processed.synchronize_with_producer(si - depth)?;
                }
                let first = (s * k) as i64;
                let count = if s == last { tail } else { k } as i64;
                for seq in first..first + count {
                    dev.fill_input(seq);
                    checker.issued(seq);
                }
                let exe = match &short {
                    Some(e) if s == last => e,
                    _ => &full[s % DEPTH],
                };
                let stream = &streams[s % DEPTH];
                exe.launch(stream)?;
                // Consumed on the g2h thread: blocking.
                ring.record(stream, si, Blocking::Yes)?;
            }
            Ok(())
        })();
        (r, (full, short))
    };
    let g2h = || -> Result<()> {
        for s in 0..groups {
            dev.chaos_pause();
            let si = s as i64;
            // Produced on the h2g thread: blocking.
            ring.synchronize(si, Blocking::Yes)?;
            let first = s * k;
            let count = if s == last { tail } else { k };
            for seq in first..first + count {
                // process_data: the graph's copy into host output batch seq % slots is done.
                checker.process(dev, seq % slots, seq as i64);
                if let Some(p) = opt.progress {
                    p(seq as i64 + 1);
                }
            }
            processed.record(&streams[s % DEPTH], si, Blocking::No)?;
        }
        Ok(())
    };
    let stop = |why: String| {
        checker.stop();
        ring.stop(why.clone());
        processed.stop(why);
    };
    let (results, graphs) = run_threads(
        h2g,
        vec![("g2h", Box::new(g2h))],
        &stop,
        &Watch::run(checker, dev.layout()),
    );
    let synced = sync_streams(b, streams);
    let wall = start.elapsed();
    first_error(results)?;
    synced?;
    // The graphs are dropped only now, after the streams were synchronized.
    std::mem::drop(graphs);
    Ok((wall, checker_owned.finish()))
}
