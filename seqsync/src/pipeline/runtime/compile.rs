//! Compiling a plan for a run: every op resolved to its ring, stream and closure, every
//! missing piece an error before any thread starts.

use std::collections::{BTreeSet, HashMap};

use super::latency::{self, Timed};
use super::required_streams;
use super::stages::{AfterFn, StageFn, Stages};
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::pipeline::plan::{Op, Plan};
use crate::Blocking;

/// One op, resolved to ring indices, streams and closures.
pub(super) enum Action<'r, 'a, B: Backend> {
    Wait {
        ring: usize,
        lag: i64,
        blocking: Blocking,
        stream: &'r B::Stream,
    },
    Sync {
        ring: usize,
        lag: i64,
        blocking: Blocking,
        after: Option<&'r AfterFn<'a>>,
        /// At lag 0 on a stream stage's ring: the moment it returns is that stage's
        /// observed completion.
        observes: bool,
        /// The stage's own `sync` (lag 0): its return, after `after`, is one of the batch's
        /// host-observed ends.
        ends_batch: bool,
    },
    Launch {
        stage: &'r str,
        /// The stage's index in the plan.
        index: usize,
        stream: Option<&'r B::Stream>,
        f: &'r StageFn<'a, B>,
        /// What the launch's latency reads.
        timed: Timed,
    },
    Record {
        ring: usize,
        blocking: Blocking,
        /// `None`: a host stage's ring, published with [`EventRingbuf::record_host`].
        stream: Option<&'r B::Stream>,
    },
}

pub(super) fn stage_err(stage: &str, message: impl Into<String>) -> Error {
    Error::Stage {
        stage: stage.to_string(),
        message: message.into(),
    }
}

/// Resolves every op of every thread to rings, streams and closures; every missing piece is
/// an error here.
pub(super) fn compile<'r, 'a, B: Backend>(
    plan: &'r Plan,
    streams: &'r HashMap<String, B::Stream>,
    stages: &'r Stages<'a, B>,
) -> Result<Vec<Vec<Action<'r, 'a, B>>>> {
    // `derive` made the plan: every index is in range and every lag non-negative.
    let stage_name = |g: usize| -> &'r str { plan.stages[g].name.as_str() };
    let stream = |stage: &str, i: usize| -> Result<&'r B::Stream> {
        let name = &plan.streams[i];
        streams.get(name).ok_or_else(|| {
            stage_err(
                stage,
                format!(
                    "no stream `{name}` was given (the plan needs {:?})",
                    required_streams(plan)
                ),
            )
        })
    };
    // Names given for stages the plan lacks are typos: say so.
    let launched: BTreeSet<&str> = plan
        .threads
        .iter()
        .flat_map(|t| &t.ops)
        .filter_map(|op| match op {
            Op::Launch { stage } => Some(stage_name(*stage)),
            _ => None,
        })
        .collect();
    for name in stages.launch.keys().chain(stages.after_sync.keys()) {
        if !launched.contains(name.as_str()) {
            return Err(stage_err(
                name,
                format!(
                    "a closure was given but the plan has no such stage (stages: {launched:?})"
                ),
            ));
        }
    }
    let observers = latency::observers(plan);
    let mut synced = BTreeSet::new();
    let mut out = Vec::with_capacity(plan.threads.len());
    for t in &plan.threads {
        let mut steps = Vec::with_capacity(t.ops.len());
        for op in &t.ops {
            steps.push(match *op {
                Op::Wait {
                    stage,
                    ring: r,
                    lag,
                    blocking,
                    stream: s,
                } => {
                    let name = stage_name(stage);
                    Action::Wait {
                        ring: r,
                        lag,
                        blocking: blocking.into(),
                        stream: stream(name, s)?,
                    }
                }
                Op::Synchronize {
                    stage,
                    ring: r,
                    lag,
                    blocking,
                } => {
                    let name = stage_name(stage);
                    let own = stage == r;
                    if own {
                        synced.insert(name);
                    }
                    Action::Sync {
                        ring: r,
                        lag,
                        blocking: blocking.into(),
                        after: if own {
                            stages.after_sync.get(name)
                        } else {
                            None
                        },
                        observes: lag == 0 && plan.stages[r].stream.is_some(),
                        ends_batch: own && lag == 0,
                    }
                }
                Op::Launch { stage } => {
                    let name = stage_name(stage);
                    Action::Launch {
                        stage: name,
                        index: stage,
                        stream: match plan.stages[stage].stream {
                            Some(s) => Some(stream(name, s)?),
                            None => None,
                        },
                        f: stages.launch.get(name).ok_or_else(|| {
                            stage_err(name, "no closure was given for this stage (Stages::stage)")
                        })?,
                        timed: latency::timed(plan, &observers, stage),
                    }
                }
                Op::Record {
                    stage,
                    ring: r,
                    blocking,
                    stream: s,
                } => {
                    let name = stage_name(stage);
                    Action::Record {
                        ring: r,
                        blocking: blocking.into(),
                        stream: match s {
                            Some(s) => Some(stream(name, s)?),
                            None => None,
                        },
                    }
                }
            });
        }
        out.push(steps);
    }
    for name in stages.after_sync.keys() {
        if !synced.contains(name.as_str()) {
            return Err(stage_err(
                name,
                "an after_sync closure was given but the stage has no `sync` (its thread never \
                 synchronizes on its ring)",
            ));
        }
    }
    Ok(out)
}
