//! Lowering: a [`Plan`] becomes the search's [`Model`]. `derive` is the plan's only
//! constructor, so every index is in range, every ring is recorded once and its consumer count
//! matches its waits: nothing is checked again here.

use super::model::{MConsumer, MOp, MRing, Model};
use crate::pipeline::plan::{Op, Plan};

/// A plan's value as the model's integer: derive keeps every size below
/// [`crate::ring::MAX_SIZE`] and every lag below the spec's `MAX_VALUE` (2^40).
fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Model {
    pub(super) fn new(plan: &Plan) -> Self {
        let mut rings: Vec<MRing> = plan
            .rings
            .iter()
            .map(|r| MRing {
                name: r.name.clone(),
                max_size: to_i64(r.max_size),
                producer: None,
                consumers: Vec::new(),
            })
            .collect();
        let mut threads = Vec::new();
        let mut max_lag = 0;
        for (t, tp) in plan.threads.iter().enumerate() {
            let mut ops = Vec::with_capacity(tp.ops.len());
            for (k, op) in tp.ops.iter().enumerate() {
                let m = lower_op(plan, op);
                match &m {
                    MOp::Consume {
                        ring, lag, stage, ..
                    } => {
                        max_lag = max_lag.max(*lag);
                        rings[*ring].consumers.push(MConsumer {
                            thread: t,
                            op: k,
                            lag: *lag,
                            stage: stage.clone(),
                        });
                    }
                    MOp::Record { ring, stage, .. } => {
                        rings[*ring].producer = Some((t, k, stage.clone()));
                    }
                    MOp::Launch { .. } => {}
                }
                ops.push(m);
            }
            threads.push((tp.name.clone(), ops));
        }
        Model {
            threads,
            rings,
            max_lag,
            end: None,
        }
    }
}

/// `op` for the model: its stage as a name.
fn lower_op(plan: &Plan, op: &Op) -> MOp {
    let stage = |g: usize| plan.stages[g].name.clone();
    match *op {
        Op::Wait {
            stage: g,
            ring,
            lag,
            blocking,
            ..
        } => MOp::Consume {
            ring,
            lag,
            blocking,
            stage: stage(g),
            sync: false,
        },
        Op::Synchronize {
            stage: g,
            ring,
            lag,
            blocking,
        } => MOp::Consume {
            ring,
            lag,
            blocking,
            stage: stage(g),
            sync: true,
        },
        Op::Launch { stage: g } => MOp::Launch { stage: stage(g) },
        Op::Record {
            stage: g,
            ring,
            blocking,
            ..
        } => MOp::Record {
            ring,
            blocking,
            stage: stage(g),
        },
    }
}
