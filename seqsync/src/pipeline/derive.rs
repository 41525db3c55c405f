//! Derivation of a [`Plan`] from a [`PipelineSpec`]: every ring's
//! `nconsumers`, `max_size` and blocking flags, and the exact sequence of
//! waits, launches, records and synchronizes each thread executes.
//!
//! Rules (DESIGN.md, "Pipeline derivation rules"): one ring per stage. Before
//! a stage launches batch `s` it waits, for each buffer it reads, on the ring
//! of that buffer's writer at `s` (lag 0), and for each buffer it writes (N
//! slots) on the ring of every reader of that buffer at `s - N` (lag N) unless
//! the reader runs on the same place (stream, or host) of the same thread.
//! After the launch it records its own ring at `s`, and with `sync` its thread
//! synchronizes on that ring at `s`. Stages placed on the host synchronize
//! instead of stream-waiting. When one stage would wait twice on the same ring,
//! only the wait with the smallest lag is kept (it implies the other).

use super::plan::{Consumer, ConsumerKind, Op, Plan, Ring, StagePlan, ThreadPlan};
use super::spec::{PipelineSpec, Place, ResolvedSlots, Topology};
use crate::error::PlanError;

/// Derives the plan, rejecting a requested max_size below its ring's bound.
///
/// # Errors
/// Any spec validation error, or [`PlanError::MaxSizeBelowBound`].
pub fn derive(spec: &PipelineSpec) -> Result<Plan, PlanError> {
    derive_with(spec, true)
}

/// Derives the plan, accepting any requested max_size (for tests and for
/// demonstrating deadlocks with [`check_deadlock`](super::check_deadlock)).
///
/// # Errors
/// Any spec validation error.
pub fn derive_unchecked(spec: &PipelineSpec) -> Result<Plan, PlanError> {
    derive_with(spec, false)
}

/// A wait one stage makes before launching, before it becomes an [`Op`].
#[derive(Debug, Clone)]
struct PendingWait {
    /// Global index of the producing stage (whose ring is waited on).
    producer: usize,
    lag: u64,
    via: String,
}

/// A consumer together with where it sits, for sizing.
#[derive(Debug, Clone)]
struct Located {
    consumer: Consumer,
    /// Consumer's thread index and program index (for a sync: the producer's).
    thread: usize,
    index: usize,
    is_sync: bool,
}

fn derive_with(spec: &PipelineSpec, check_bounds: bool) -> Result<Plan, PlanError> {
    let topo = Topology::new(spec)?;
    let waits: Vec<Vec<PendingWait>> = (0..topo.stages.len())
        .map(|g| stage_waits(&topo, g))
        .collect();
    let consumers = collect_consumers(&topo, &waits);
    let mut rings = Vec::with_capacity(topo.stages.len());
    for (g, located) in consumers.iter().enumerate() {
        rings.push(size_ring(&topo, g, located, check_bounds)?);
    }
    let (stages, streams) = stages_and_streams(&topo);
    let threads = emit_threads(&topo, &waits, &rings, &stages);
    Ok(Plan {
        stages,
        streams,
        rings,
        threads,
    })
}

/// A lag or slot count as the `i64` of a seq. Spec values are at most
/// [`MAX_VALUE`](super::spec::MAX_VALUE), so this never saturates for a validated spec.
fn as_lag(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Every stage (global order) with its thread and stream index, and the stream names in order
/// of first use.
fn stages_and_streams(topo: &Topology<'_>) -> (Vec<StagePlan>, Vec<String>) {
    let mut streams: Vec<String> = Vec::new();
    let stages = (0..topo.stages.len())
        .map(|g| {
            let stage = topo.stage(g);
            let stream = stage.place.stream().map(|name| {
                streams.iter().position(|s| s == name).unwrap_or_else(|| {
                    streams.push(name.to_string());
                    streams.len() - 1
                })
            });
            StagePlan {
                name: stage.name.name.clone(),
                thread: topo.stages[g].thread,
                stream,
            }
        })
        .collect();
    (stages, streams)
}

/// The waits stage `g` makes, deduplicated per ring (smallest lag wins).
fn stage_waits(topo: &Topology<'_>, g: usize) -> Vec<PendingWait> {
    let stage = topo.stage(g);
    let mut out: Vec<PendingWait> = Vec::new();
    for r in &stage.reads {
        let producer = topo.writer[r.name.as_str()];
        push_wait(&mut out, producer, 0, &r.name);
    }
    for w in &stage.writes {
        let n = topo.slots[w.name.as_str()].count;
        let readers = topo.readers.get(w.name.as_str()).map_or(&[][..], |v| v);
        for &reader in readers {
            if !same_place_and_thread(topo, g, reader) {
                push_wait(&mut out, reader, n, &w.name);
            }
        }
    }
    out
}

fn same_place_and_thread(topo: &Topology<'_>, a: usize, b: usize) -> bool {
    topo.stages[a].thread == topo.stages[b].thread && topo.stage(a).place == topo.stage(b).place
}

fn push_wait(out: &mut Vec<PendingWait>, producer: usize, lag: u64, via: &str) {
    match out.iter_mut().find(|w| w.producer == producer) {
        Some(w) if lag < w.lag => {
            w.lag = lag;
            w.via = via.to_string();
        }
        Some(_) => {}
        None => out.push(PendingWait {
            producer,
            lag,
            via: via.to_string(),
        }),
    }
}

/// Per ring (indexed by producer stage), its consumers in global order.
fn collect_consumers(topo: &Topology<'_>, waits: &[Vec<PendingWait>]) -> Vec<Vec<Located>> {
    let mut out: Vec<Vec<Located>> = vec![Vec::new(); topo.stages.len()];
    for (g, stage_waits) in waits.iter().enumerate() {
        let at = topo.stages[g];
        let stage = topo.stage(g);
        let kind = match stage.place {
            Place::Host => ConsumerKind::Synchronize,
            Place::Stream(_) => ConsumerKind::Wait,
        };
        for w in stage_waits {
            let blocking = topo.stages[w.producer].thread != at.thread;
            out[w.producer].push(Located {
                consumer: Consumer {
                    stage: stage.name.name.clone(),
                    thread: topo.thread_name(g).to_string(),
                    lag: as_lag(w.lag),
                    blocking,
                    kind,
                    via: Some(w.via.clone()),
                },
                thread: at.thread,
                index: at.index,
                is_sync: false,
            });
        }
        if stage.sync {
            out[g].push(Located {
                consumer: Consumer {
                    stage: stage.name.name.clone(),
                    thread: topo.thread_name(g).to_string(),
                    lag: 0,
                    blocking: false,
                    kind: ConsumerKind::Synchronize,
                    via: None,
                },
                thread: at.thread,
                index: at.index,
                is_sync: true,
            });
        }
    }
    out
}

/// What one consumer asks of its ring's max_size.
#[derive(Debug)]
struct Need {
    size: u64,
    same_thread: bool,
    reason: String,
}

/// `nx=4` when the lag is a buffer's slot count taken from a parameter.
fn lag_words(lag: u64, via: Option<&ResolvedSlots>) -> String {
    match via {
        Some(ResolvedSlots {
            count,
            param: Some(p),
        }) if *count == lag => format!("{p}={lag}"),
        _ => lag.to_string(),
    }
}

fn need_of(topo: &Topology<'_>, producer: usize, c: &Located) -> Need {
    let p = topo.stages[producer];
    let slots = c.consumer.via.as_deref().and_then(|b| topo.slots.get(b));
    let name = &c.consumer.stage;
    let lag = c.consumer.lag.unsigned_abs();
    if c.thread != p.thread {
        let count = slots.map_or(1, |s| s.count);
        let via = c.consumer.via.as_deref().unwrap_or("?");
        return Need {
            size: count,
            same_thread: false,
            reason: format!(
                "{name} on thread {}: slack = slots of `{via}` ({})",
                c.consumer.thread,
                lag_words(count, slots)
            ),
        };
    }
    let words = lag_words(lag, slots);
    let (size, reason) = if c.is_sync {
        (
            lag + 1,
            format!(
                "thread {} synchronizes right after the record (lag 0 + 1)",
                c.consumer.thread
            ),
        )
    } else if c.index <= p.index {
        (
            lag,
            format!("{name} waits at lag {words} on the same thread, earlier in the loop"),
        )
    } else {
        (
            lag + 1,
            format!("{name} waits at lag {words} on the same thread, later in the loop (lag + 1)"),
        )
    };
    Need {
        size,
        same_thread: true,
        reason,
    }
}

/// Joins the reasons of the needs that reach `size`.
fn reasons_at(needs: &[&Need], size: u64) -> String {
    let v: Vec<&str> = needs
        .iter()
        .filter(|n| n.size == size)
        .map(|n| n.reason.as_str())
        .collect();
    v.join("; ")
}

fn size_ring(
    topo: &Topology<'_>,
    g: usize,
    located: &[Located],
    check_bounds: bool,
) -> Result<Ring, PlanError> {
    let stage = topo.stage(g);
    let name = stage.name.name.clone();
    let needs: Vec<Need> = located.iter().map(|c| need_of(topo, g, c)).collect();
    let same: Vec<&Need> = needs.iter().filter(|n| n.same_thread).collect();
    let all: Vec<&Need> = needs.iter().collect();
    let bound = same.iter().map(|n| n.size).max().unwrap_or(0).max(1);
    let derived = all.iter().map(|n| n.size).max().unwrap_or(0).max(1);
    let bound_reason = non_empty(reasons_at(&same, bound), "no consumer on the same thread");
    let derived_reason = if located.is_empty() {
        "no consumers: a pure producer counter (minimum size 1)".to_string()
    } else {
        non_empty(reasons_at(&all, derived), "no consumer needs more than 1")
    };
    let (max_size, reason) = match topo.spec.max_size_override(&name) {
        None => (derived, derived_reason),
        Some(v) if v < bound && check_bounds => {
            return Err(PlanError::MaxSizeBelowBound {
                ring: name,
                requested: v,
                bound,
                reason: bound_reason,
            })
        }
        Some(v) => (v, override_reason(v, derived, bound, &derived_reason)),
    };
    if max_size > crate::ring::MAX_SIZE as u64 {
        return Err(PlanError::InvalidValue {
            line: None,
            name: format!("{name}.max_size"),
            value: i128::from(max_size),
            problem: format!("derived as {reason}; {}", super::spec::max_size_limit()),
        });
    }
    let consumers: Vec<Consumer> = located.iter().map(|c| c.consumer.clone()).collect();
    // The ring's own limit, enforced where the readers are declared: a plan `check` accepts
    // is one the runtime can build.
    if consumers.len() > crate::ring::MAX_CONSUMERS as usize {
        return Err(PlanError::InvalidValue {
            line: stage.name.line,
            name: format!("{name}.nconsumers"),
            value: consumers.len() as i128,
            problem: format!(
                "a ring has at most {} consumers (waits and host synchronizes that name it)",
                crate::ring::MAX_CONSUMERS
            ),
        });
    }
    Ok(Ring {
        name: name.clone(),
        producer: name,
        thread: topo.thread_name(g).to_string(),
        place: stage.place.clone(),
        nconsumers: u32::try_from(consumers.len()).unwrap_or(u32::MAX),
        max_size,
        bound,
        record_blocking: consumers.iter().any(|c| c.blocking),
        reason,
        consumers,
    })
}

fn non_empty(s: String, default: &str) -> String {
    if s.is_empty() {
        default.to_string()
    } else {
        s
    }
}

fn override_reason(v: u64, derived: u64, bound: u64, derived_reason: &str) -> String {
    let warning = if v < bound {
        format!(", BELOW the same-thread bound {bound}: the thread blocks on itself")
    } else {
        String::new()
    };
    format!("set to {v} by the user{warning} (derived {derived}: {derived_reason})")
}

/// The loop bodies: waits, launch, record, optional sync, per stage.
fn emit_threads(
    topo: &Topology<'_>,
    waits: &[Vec<PendingWait>],
    rings: &[Ring],
    stages: &[StagePlan],
) -> Vec<ThreadPlan> {
    let mut threads: Vec<ThreadPlan> = topo
        .spec
        .threads
        .iter()
        .map(|t| ThreadPlan {
            name: t.name.name.clone(),
            ops: Vec::new(),
        })
        .collect();
    for (g, stage_waits) in waits.iter().enumerate() {
        let ops = &mut threads[stages[g].thread].ops;
        emit_stage(topo, g, stage_waits, &rings[g], &stages[g], ops);
    }
    threads
}

fn emit_stage(
    topo: &Topology<'_>,
    g: usize,
    stage_waits: &[PendingWait],
    ring: &Ring,
    plan: &StagePlan,
    ops: &mut Vec<Op>,
) {
    for w in stage_waits {
        let blocking = topo.stages[w.producer].thread != plan.thread;
        let lag = as_lag(w.lag);
        ops.push(match plan.stream {
            Some(stream) => Op::Wait {
                stage: g,
                ring: w.producer,
                lag,
                blocking,
                stream,
            },
            None => Op::Synchronize {
                stage: g,
                ring: w.producer,
                lag,
                blocking,
            },
        });
    }
    ops.push(Op::Launch { stage: g });
    ops.push(Op::Record {
        stage: g,
        ring: g,
        blocking: ring.record_blocking,
        stream: plan.stream,
    });
    if topo.stage(g).sync {
        ops.push(Op::Synchronize {
            stage: g,
            ring: g,
            lag: 0,
            blocking: false,
        });
    }
}
