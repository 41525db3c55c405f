//! The timed event graph of a plan: one node per host op and one per stream stage's work, and
//! one edge per reason a node waits, each with the batches it reaches back (`lag`).
//!
//! A node's time at batch `s` is when it is done. Edge `u → v` with lag `d` says: `v` at batch
//! `s` is done no earlier than `u` at batch `s - d`, plus `v`'s own duration. Who produces the
//! edges:
//!
//! | edge | from → to | lag |
//! |---|---|---|
//! | program order | host op `k - 1` → op `k` of a thread | 0 |
//! | next batch | a thread's last op → its first | 1 |
//! | recorded (a host call waits for the record to be enqueued) | the ring's record op → a wait or synchronize at lag `L` | `L` |
//! | room (a record re-uses the event of seq `s - max_size`) | each consumer's op at lag `L` → the record | `max_size - L` |
//! | issued (the work starts only once launched) | the launch op → the stage's work | 0 |
//! | stream order | the previous work on the stream (same thread) → the next | 0, or 1 across the batch |
//! | stream wait | the device event of the ring → the next work on the waiting stream | `L` (+ the event's own) |
//! | device done (a synchronize returns once the device got there) | the device event → the synchronize | `L` (+ the event's own) |
//!
//! A ring's *device event* is the work on its record's stream that the record follows (the
//! last launch on that stream before it in the thread's loop); a host stage's ring, or a
//! record on a stream with no work of its thread, is done when the record op is.
//!
//! Work of several threads on one stream runs in an order no plan fixes: those streams get a
//! resource bound instead (their works one after another, [`Graph::shared_streams`]).

use std::collections::{BTreeMap, HashSet};

use crate::error::PlanError;
use crate::pipeline::plan::{Op, Plan};

use super::times::StageTimes;

/// Why a node waits on another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    Program,
    NextBatch,
    /// A host call on ring `.0` waits for its record.
    Recorded(usize),
    /// A record on ring `.0` waits for room.
    Room(usize),
    Issued,
    /// Stream `.0`'s order.
    StreamOrder(usize),
    /// A stream wait on ring `.0`.
    StreamWait(usize),
    /// A synchronize on ring `.0`.
    DeviceDone(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Node {
    /// Op `.1` of thread `.0`.
    Host(usize, usize),
    /// Stage `.0`'s work on its stream.
    Device(usize),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Edge {
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) lag: i64,
    pub(super) why: Why,
}

pub(super) struct Graph {
    pub(super) nodes: Vec<Node>,
    /// Each node's duration, in nanoseconds.
    pub(super) weight: Vec<u64>,
    pub(super) edges: Vec<Edge>,
    /// Streams with work of more than one thread: (stream, its stages).
    pub(super) shared_streams: Vec<(usize, Vec<usize>)>,
}

fn nanos(d: std::time::Duration) -> u64 {
    // At most MAX_STAGE_TIME (an hour): far below u64::MAX nanoseconds.
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Graph {
    /// The graph of `plan` with the durations of `times`.
    ///
    /// # Errors
    /// [`PlanError::StageTime`] for a stage without a time, a time for no stage, or after-sync
    /// work for a stage that does not synchronize. `derive` made the plan, so every index in it
    /// is in range.
    pub(super) fn new(plan: &Plan, times: &StageTimes) -> Result<Self, PlanError> {
        check_times(plan, times)?;
        let stage_stream = |g: usize| plan.stages[g].stream;
        let work = |g: usize| nanos(times.work(&plan.stages[g].name).unwrap_or_default());
        let host_call = nanos(times.host_call_time());

        let mut nodes = Vec::new();
        let mut weight = Vec::new();
        // host[t][k]: node of op k of thread t.
        let mut host: Vec<Vec<usize>> = Vec::new();
        for (t, tp) in plan.threads.iter().enumerate() {
            let mut ids = Vec::with_capacity(tp.ops.len());
            for (k, op) in tp.ops.iter().enumerate() {
                let w = match *op {
                    Op::Launch { stage } => match stage_stream(stage) {
                        None => work(stage),
                        Some(_) => {
                            host_call
                                + nanos(
                                    times
                                        .launch_work(&plan.stages[stage].name)
                                        .unwrap_or_default(),
                                )
                        }
                    },
                    Op::Synchronize { stage, .. } => {
                        let name = &plan.stages[stage].name;
                        host_call + nanos(times.after_sync_work(name).unwrap_or_default())
                    }
                    _ => host_call,
                };
                ids.push(nodes.len());
                nodes.push(Node::Host(t, k));
                weight.push(w);
            }
            host.push(ids);
        }
        // device[g]: node of stage g's work (stream stages only).
        let mut device = Vec::with_capacity(plan.stages.len());
        for g in 0..plan.stages.len() {
            device.push(match stage_stream(g) {
                Some(_) => {
                    nodes.push(Node::Device(g));
                    weight.push(work(g));
                    Some(nodes.len() - 1)
                }
                None => None,
            });
        }

        let mut edges = Vec::new();
        let mut edge = |from, to, lag, why| edges.push(Edge { from, to, lag, why });
        // Where each ring is recorded: (thread, op, stream); who consumes it: (node, lag).
        let mut record_at = vec![None; plan.rings.len()];
        let mut consumers: Vec<Vec<(usize, i64)>> = vec![Vec::new(); plan.rings.len()];
        for (t, tp) in plan.threads.iter().enumerate() {
            for (k, op) in tp.ops.iter().enumerate() {
                match *op {
                    Op::Record { ring, stream, .. } => {
                        record_at[ring] = Some((t, k, stream));
                    }
                    Op::Wait { ring, lag, .. } | Op::Synchronize { ring, lag, .. } => {
                        consumers[ring].push((host[t][k], lag));
                    }
                    Op::Launch { .. } => {}
                }
            }
        }
        // Each thread's launches on each stream, in op order: launches[t][st] = [(op, stage)].
        // Every lookup below is a binary search in one of these lists, so the graph takes
        // near-linear work in the ops however many stages a thread holds.
        let mut launches: Vec<BTreeMap<usize, Vec<(usize, usize)>>> = Vec::new();
        for tp in &plan.threads {
            let mut on: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
            for (k, op) in tp.ops.iter().enumerate() {
                if let Op::Launch { stage } = *op {
                    if let Some(st) = stage_stream(stage) {
                        on.entry(st).or_default().push((k, stage));
                    }
                }
            }
            launches.push(on);
        }
        // A ring's device event: (node, extra lag).
        let event = |r: usize| -> Option<(usize, i64)> {
            let (t, k, stream) = record_at[r]?;
            let Some(st) = stream else {
                return Some((host[t][k], 0));
            };
            let on = launches[t].get(&st).map_or(&[][..], Vec::as_slice);
            // The last launch on `st` before the record; else the thread's last one on `st`,
            // of the batch before.
            let before = on.partition_point(|&(op, _)| op < k);
            let found = match before {
                0 => on.last().map(|&(_, g)| (g, 1)),
                i => Some((on[i - 1].1, 0)),
            };
            match found {
                Some((g, lag)) => device[g].map(|n| (n, lag)),
                None => Some((host[t][k], 0)),
            }
        };
        let events: Vec<Option<(usize, i64)>> = (0..plan.rings.len()).map(event).collect();

        for (t, tp) in plan.threads.iter().enumerate() {
            let ops = &tp.ops;
            let ids = &host[t];
            for k in 1..ops.len() {
                edge(ids[k - 1], ids[k], 0, Why::Program);
            }
            if let (Some(&first), Some(&last)) = (ids.first(), ids.last()) {
                edge(last, first, 1, Why::NextBatch);
            }
            // The next launch on `st` after op `k` (wrapping into the next batch): (stage, lag).
            let next_on = |st: usize, k: usize| {
                let on = launches[t].get(&st)?;
                match on.get(on.partition_point(|&(op, _)| op <= k)) {
                    Some(&(_, g)) => Some((g, 0)),
                    None => on.first().map(|&(_, g)| (g, 1)),
                }
            };
            for (k, op) in ops.iter().enumerate() {
                match *op {
                    Op::Wait {
                        ring, lag, stream, ..
                    } => {
                        if let Some((rt, rk, _)) = record_at[ring] {
                            edge(host[rt][rk], ids[k], lag, Why::Recorded(ring));
                        }
                        if let (Some((ev, d)), Some((g, wrap))) = (events[ring], next_on(stream, k))
                        {
                            if let Some(n) = device[g] {
                                edge(ev, n, lag + d + wrap, Why::StreamWait(ring));
                            }
                        }
                    }
                    Op::Synchronize { ring, lag, .. } => {
                        if let Some((rt, rk, _)) = record_at[ring] {
                            edge(host[rt][rk], ids[k], lag, Why::Recorded(ring));
                        }
                        if let Some((ev, d)) = events[ring] {
                            edge(ev, ids[k], lag + d, Why::DeviceDone(ring));
                        }
                    }
                    Op::Launch { stage } => {
                        if let Some(n) = device[stage] {
                            edge(ids[k], n, 0, Why::Issued);
                        }
                    }
                    Op::Record { ring, .. } => {
                        // At most ring::MAX_SIZE (2^20).
                        let size = plan.rings[ring].max_size as i64;
                        for &(c, lag) in &consumers[ring] {
                            edge(c, ids[k], size - lag, Why::Room(ring));
                        }
                    }
                }
            }
            // Stream order among this thread's works on each stream: each after the one before
            // it, the first after the last of the batch before.
            for (&st, on) in &launches[t] {
                for (i, &(_, g)) in on.iter().enumerate() {
                    let (p, lag) = match i {
                        0 => (on[on.len() - 1].1, 1),
                        i => (on[i - 1].1, 0),
                    };
                    if let (Some(pn), Some(n)) = (device[p], device[g]) {
                        edge(pn, n, lag, Why::StreamOrder(st));
                    }
                }
            }
        }

        // Streams with work of more than one thread, found in one pass over the stages.
        let mut on_stream: Vec<Vec<usize>> = vec![Vec::new(); plan.streams.len()];
        for (g, s) in plan.stages.iter().enumerate() {
            if let Some(st) = s.stream {
                on_stream[st].push(g);
            }
        }
        let shared_streams = on_stream
            .into_iter()
            .enumerate()
            .filter(|(_, stages)| {
                stages
                    .iter()
                    .any(|&g| plan.stages[g].thread != plan.stages[stages[0]].thread)
            })
            .collect();
        Ok(Graph {
            nodes,
            weight,
            edges,
            shared_streams,
        })
    }
}

/// Every stage has a time; every time and after-sync work names a stage (that synchronizes).
fn check_times(plan: &Plan, times: &StageTimes) -> Result<(), PlanError> {
    let q = crate::name::quoted;
    let index = stage_indices(plan);
    for s in &plan.stages {
        if times.work(&s.name).is_none() {
            return Err(PlanError::StageTime {
                entry: q(&s.name),
                problem: format!("no time given for this stage: add {}=DURATION", s.name),
            });
        }
    }
    for (name, _) in times.stages() {
        if !index.contains_key(name) {
            return Err(PlanError::StageTime {
                entry: q(name),
                problem: "the plan has no stage of this name".into(),
            });
        }
    }
    for (name, _) in times.launches() {
        let on_stream = index
            .get(name)
            .is_some_and(|&g| plan.stages[g].stream.is_some());
        if !on_stream {
            return Err(PlanError::StageTime {
                entry: q(&format!("{name}.launch")),
                problem: "a launch time needs a stage on a stream (a host stage's time is its \
                          work)"
                    .into(),
            });
        }
    }
    let synced: HashSet<usize> = plan
        .threads
        .iter()
        .flat_map(|t| &t.ops)
        .filter_map(|op| match *op {
            Op::Synchronize { stage, .. } => Some(stage),
            _ => None,
        })
        .collect();
    for (name, _) in times.after_syncs() {
        if !index.get(name).is_some_and(|g| synced.contains(g)) {
            return Err(PlanError::StageTime {
                entry: q(&format!("{name}.after")),
                problem: "after-sync work needs a stage that synchronizes (`sync = true`)".into(),
            });
        }
    }
    Ok(())
}

/// Each stage's index by its name: lookups in one step for plans of many stages.
pub(super) fn stage_indices(plan: &Plan) -> std::collections::HashMap<&str, usize> {
    plan.stages
        .iter()
        .enumerate()
        .map(|(g, s)| (s.name.as_str(), g))
        .collect()
}
