//! Throughput prediction: given how long each stage takes ([`StageTimes`]), the steady-state
//! period of a plan — the time between batches once the pipeline is full — and the cycle of
//! dependencies that sets it.
//!
//! The plan's ops and its stages' work form a *timed event graph* (`graph`): every op and
//! every stream stage's work is a node with a duration, and every reason one waits for another
//! is an edge reaching back some number of batches (the same dependencies the deadlock proof
//! uses, plus the device's: a stream runs its work in order, a stream wait holds the next work
//! on its stream until the ring's event, a synchronize returns once the device got there). Such
//! a graph runs, in the long run, at one batch per **maximum cycle ratio**: the largest, over
//! its cycles, of the cycle's durations added up divided by its lags added up (Baccelli, Cohen,
//! Olsder and Quadrat, *Synchronization and Linearity*, 1992, ch. 3). The cycle that attains it
//! is the *critical cycle*: the stages on it are what to speed up, and a ring or buffer whose
//! size appears in one of its lags is what to enlarge (a larger size raises that lag and so
//! lowers the ratio). `cycle_ratio` finds it by Howard's policy iteration.
//!
//! What the model leaves out: stages that slow each other down by sharing a resource (two
//! copies on one link, kernels on one set of SMs). Give the times each stage takes *when they
//! run together* (what `seqsync run --measure` measures) and the prediction includes that.
//! Streams shared by several threads run their work in an order no plan fixes: they add the
//! bound of their works one after another.
//!
//! # Example
//!
//! The seed's pipeline with a slow copy out: each batch's copy out, its synchronize and the
//! host work after it run one after another on thread `g2h`, so the period is their sum.
//!
//! ```
//! use std::time::Duration;
//! use seqsync::pipeline::{derive, predict, PipelineSpec, StageTimes};
//!
//! let spec = PipelineSpec::from_toml(include_str!("../../../../specs/seed.toml")).unwrap();
//! let plan = derive(&spec).unwrap();
//! let times = StageTimes::parse("h2g=100us,f=50us,g=50us,h=80us,g2h=120us,g2h.after=30us").unwrap();
//! let p = predict(&plan, &times).unwrap();
//! assert_eq!(p.period, Duration::from_micros(150));
//! assert!(p.critical.steps.iter().any(|s| s.node.contains("g2h")));
//!
//! // Every stage needs a time.
//! let e = predict(&plan, &StageTimes::parse("f=1us").unwrap()).unwrap_err();
//! assert!(e.to_string().contains("no time given"));
//! ```

mod cycle_ratio;
mod graph;
mod times;

use std::time::Duration;

use serde::Serialize;

pub use times::{parse_duration, StageTimes, MAX_STAGE_TIME};

use crate::error::PlanError;
use crate::pipeline::plan::Plan;
use cycle_ratio::{Arc, Outcome};
use graph::{Graph, Node, Why};

/// What [`predict`] finds: the period, and the cycle that sets it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// The time between batches in the steady state.
    pub period: Duration,
    /// `1 / period` (infinite for a period of 0).
    pub batches_per_second: f64,
    /// The cycle of dependencies that sets the period.
    pub critical: CriticalCycle,
}

/// A critical cycle: its dependencies in order, and what they add up to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CriticalCycle {
    /// Each node of the cycle, with the dependency that leads to the next.
    pub steps: Vec<CycleStep>,
    /// The durations on the cycle, added up.
    pub work: Duration,
    /// The lags on the cycle, added up (batches): the period is `work / lag`.
    pub lag: i64,
    /// The rings whose `max_size` sets one of the cycle's lags.
    pub ring_sizes: Vec<String>,
    /// The buffers whose slot count sets one of the cycle's lags.
    pub buffers: Vec<String>,
}

/// One node of a critical cycle and the dependency from it to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CycleStep {
    /// The node: a thread's op (`thread g2h: g2h.synchronize(s, non-blocking)`) or a stage's
    /// work (`work of f on s_f`), with its duration.
    pub node: String,
    /// Why the next node waits for this one, and across how many batches.
    pub then: String,
    /// Those batches.
    pub lag: i64,
}

/// The steady-state period of `plan` when its stages take `times`, and the critical cycle
/// (see the module docs).
///
/// # Errors
/// - [`PlanError::StageTime`]: a stage has no time, a time names no stage, or after-sync work
///   names a stage that does not synchronize;
/// - [`PlanError::LagZeroCycle`]: a cycle of dependencies within one batch (the plan
///   deadlocks: [`check_deadlock`](crate::pipeline::check_deadlock) shows how);
/// - [`PlanError::PredictionLimit`]: no convergence within the bounded number of rounds.
pub fn predict(plan: &Plan, times: &StageTimes) -> Result<Prediction, PlanError> {
    let g = Graph::new(plan, times)?;
    let arcs: Vec<Arc> = g
        .edges
        .iter()
        .map(|e| Arc {
            from: e.from,
            to: e.to,
            weight: g.weight[e.to] as f64,
            lag: e.lag as f64,
        })
        .collect();
    let mut best = match cycle_ratio::critical_cycle(g.nodes.len(), &arcs) {
        Outcome::Critical(c) => Some(cycle_of(plan, &g, &c)),
        Outcome::Acyclic => None,
        Outcome::ZeroLag(c) => {
            let cycle = cycle_of(plan, &g, &c);
            return Err(PlanError::LagZeroCycle {
                line: None,
                cycle: cycle.steps.iter().map(|s| s.node.clone()).collect(),
                description: cycle
                    .steps
                    .iter()
                    .map(|s| format!("{} ({})", s.node, s.then))
                    .collect::<Vec<_>>()
                    .join(" -> "),
            });
        }
        Outcome::RoundLimit => {
            return Err(PlanError::PredictionLimit {
                nodes: g.nodes.len(),
                arcs: arcs.len(),
                max_rounds: cycle_ratio::MAX_ROUNDS,
                max_work: cycle_ratio::MAX_WORK,
            })
        }
    };
    // Streams several threads share, and resources the times name: their works one after
    // another, each batch.
    let mut serial: Vec<(String, Vec<usize>)> = g
        .shared_streams
        .iter()
        .map(|(st, stages)| (format!("stream {}", plan.streams[*st]), stages.clone()))
        .collect();
    let index = graph::stage_indices(plan);
    for (resource, names) in times.shared_resources() {
        let mut stages = Vec::new();
        for n in names {
            stages.push(
                index
                    .get(n.as_str())
                    .copied()
                    .ok_or_else(|| PlanError::StageTime {
                        entry: crate::name::quoted(n),
                        problem: format!("{resource} names a stage the plan does not have"),
                    })?,
            );
        }
        serial.push((resource.clone(), stages));
    }
    for (resource, stages) in &serial {
        let work: u64 = stages
            .iter()
            .map(|&s| duration_ns(times.work(&plan.stages[s].name)))
            .sum();
        let beats = best
            .as_ref()
            .is_none_or(|b| u128::from(work) * (b.lag as u128) > b.work.as_nanos());
        if beats {
            let steps = stages
                .iter()
                .map(|&s| CycleStep {
                    node: format!(
                        "work of {} ({})",
                        plan.stages[s].name,
                        shown(Duration::from_nanos(duration_ns(
                            times.work(&plan.stages[s].name)
                        )))
                    ),
                    then: format!("{resource} runs one work at a time: then the next"),
                    lag: 0,
                })
                .collect();
            best = Some(CriticalCycle {
                steps,
                work: Duration::from_nanos(work),
                lag: 1,
                ring_sizes: Vec::new(),
                buffers: Vec::new(),
            });
        }
    }
    let critical = best.unwrap_or(CriticalCycle {
        steps: Vec::new(),
        work: Duration::ZERO,
        lag: 1,
        ring_sizes: Vec::new(),
        buffers: Vec::new(),
    });
    let period_ns = critical.work.as_nanos() as f64 / critical.lag.max(1) as f64;
    let period = Duration::from_secs_f64(period_ns / 1e9);
    Ok(Prediction {
        period,
        batches_per_second: if period_ns > 0.0 {
            1e9 / period_ns
        } else {
            f64::INFINITY
        },
        critical,
    })
}

fn duration_ns(d: Option<Duration>) -> u64 {
    d.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A duration in the unit that suits it.
pub(crate) fn shown(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns >= 10_000_000_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else if ns >= 10_000_000 {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else if ns >= 10_000 {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{ns} ns")
    }
}

/// The cycle of arcs `c` in words.
fn cycle_of(plan: &Plan, g: &Graph, c: &[usize]) -> CriticalCycle {
    let node = |n: usize| {
        let w = shown(Duration::from_nanos(g.weight[n]));
        match g.nodes[n] {
            Node::Host(t, k) => format!(
                "thread {}: {} ({w})",
                plan.threads[t].name,
                plan.named(&plan.threads[t].ops[k])
            ),
            Node::Device(s) => {
                let stream = plan.stages[s]
                    .stream
                    .and_then(|st| plan.streams.get(st))
                    .map_or("?", String::as_str);
                format!("work of {} on {stream} ({w})", plan.stages[s].name)
            }
        }
    };
    let ring = |r: usize| plan.rings[r].name.as_str();
    let (mut ring_sizes, mut buffers) = (Vec::new(), Vec::new());
    let mut steps = Vec::new();
    let mut work: u128 = 0;
    let mut lag: i64 = 0;
    for &i in c {
        let e = &g.edges[i];
        work += u128::from(g.weight[e.to]);
        lag = lag.saturating_add(e.lag);
        let then = match e.why {
            Why::Program => "then, in program order".to_string(),
            Why::NextBatch => "then, for the next batch".to_string(),
            Why::Recorded(r) => format!("its record of ring {} lets the call go on", ring(r)),
            Why::Room(r) => {
                ring_sizes.push(ring(r).to_string());
                format!(
                    "its call frees room in ring {} (max_size {})",
                    ring(r),
                    plan.rings[r].max_size
                )
            }
            Why::Issued => "launches the work".to_string(),
            Why::StreamOrder(st) => format!("then stream {} runs the next work", plan.streams[st]),
            Why::StreamWait(r) | Why::DeviceDone(r) => {
                let via = consumer_via(plan, g, e.to, r);
                if let Some(b) = &via {
                    if e.lag > 0 {
                        buffers.push(b.clone());
                    }
                }
                let what = if matches!(e.why, Why::StreamWait(_)) {
                    "a stream wait"
                } else {
                    "a synchronize"
                };
                match via {
                    Some(b) => {
                        format!("its event on ring {} releases {what} (buffer {b})", ring(r))
                    }
                    None => format!("its event on ring {} releases {what}", ring(r)),
                }
            }
        };
        steps.push(CycleStep {
            node: node(e.from),
            then,
            lag: e.lag,
        });
    }
    ring_sizes.sort();
    ring_sizes.dedup();
    buffers.sort();
    buffers.dedup();
    CriticalCycle {
        steps,
        work: Duration::from_nanos(u64::try_from(work).unwrap_or(u64::MAX)),
        lag,
        ring_sizes,
        buffers,
    }
}

/// The buffer a wait on ring `r` protects, for the consumer whose node (or the work after it)
/// is `to`.
fn consumer_via(plan: &Plan, g: &Graph, to: usize, r: usize) -> Option<String> {
    let stage = match g.nodes[to] {
        Node::Device(s) => s,
        Node::Host(t, k) => match plan.threads[t].ops[k] {
            crate::pipeline::Op::Synchronize { stage, .. } => stage,
            _ => return None,
        },
    };
    let name = &plan.stages[stage].name;
    plan.rings[r]
        .consumers
        .iter()
        .filter(|c| &c.stage == name)
        .find_map(|c| c.via.clone())
}

#[cfg(test)]
mod tests;
