//! Lowering: a [`Plan`] becomes the search's [`Model`], every index and count checked.

use super::model::{MConsumer, MOp, MRing, Model};
use crate::error::PlanError;
use crate::pipeline::plan::{Op, Plan};
use crate::pipeline::spec::MAX_VALUE;

fn invalid(message: String) -> PlanError {
    PlanError::InvalidPlan { message }
}

fn to_i64(what: &str, v: u64) -> Result<i64, PlanError> {
    if v > MAX_VALUE {
        return Err(invalid(format!("{what} = {v} is larger than {MAX_VALUE}")));
    }
    i64::try_from(v).map_err(|_| invalid(format!("{what} = {v} is too large")))
}

impl Model {
    pub(super) fn new(plan: &Plan) -> Result<Self, PlanError> {
        let mut rings = Vec::with_capacity(plan.rings.len());
        for r in &plan.rings {
            if r.max_size == 0 {
                return Err(invalid(format!("ring `{}` has max_size 0", r.name)));
            }
            rings.push(MRing {
                name: r.name.clone(),
                max_size: to_i64("max_size", r.max_size)?,
                producer: None,
                consumers: Vec::new(),
            });
        }
        let mut threads = Vec::new();
        let mut max_lag = 0;
        for (t, tp) in plan.threads.iter().enumerate() {
            let mut ops = Vec::with_capacity(tp.ops.len());
            for (k, op) in tp.ops.iter().enumerate() {
                let m = lower_op(plan, op)?;
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
                        if rings[*ring].producer.is_some() {
                            return Err(invalid(format!(
                                "ring `{}` is recorded twice",
                                rings[*ring].name
                            )));
                        }
                        rings[*ring].producer = Some((t, k, stage.clone()));
                    }
                    MOp::Launch { .. } => {}
                }
                ops.push(m);
            }
            threads.push((tp.name.clone(), ops));
        }
        check_counts(plan, &rings)?;
        Ok(Model {
            threads,
            rings,
            max_lag,
            end: None,
        })
    }
}

/// `op` for the model: its ring checked against the plan, its stage as a name, its lag in range.
fn lower_op(plan: &Plan, op: &Op) -> Result<MOp, PlanError> {
    let ring = |r: usize| {
        if r < plan.rings.len() {
            Ok(r)
        } else {
            Err(invalid(format!(
                "op names ring #{r}, but the plan has {} rings",
                plan.rings.len()
            )))
        }
    };
    let stage = |g: usize| {
        plan.stages.get(g).map(|s| s.name.clone()).ok_or_else(|| {
            invalid(format!(
                "op names stage #{g}, but the plan has {} stages",
                plan.stages.len()
            ))
        })
    };
    let lag = |lag: i64| {
        if (0..=MAX_VALUE as i64).contains(&lag) {
            Ok(lag)
        } else {
            Err(invalid(format!("lag = {lag} is not in 0..={MAX_VALUE}")))
        }
    };
    Ok(match *op {
        Op::Wait {
            stage: g,
            ring: r,
            lag: l,
            blocking,
            ..
        } => MOp::Consume {
            ring: ring(r)?,
            lag: lag(l)?,
            blocking,
            stage: stage(g)?,
            sync: false,
        },
        Op::Synchronize {
            stage: g,
            ring: r,
            lag: l,
            blocking,
        } => MOp::Consume {
            ring: ring(r)?,
            lag: lag(l)?,
            blocking,
            stage: stage(g)?,
            sync: true,
        },
        Op::Launch { stage: g } => MOp::Launch { stage: stage(g)? },
        Op::Record {
            stage: g,
            ring: r,
            blocking,
            ..
        } => MOp::Record {
            ring: ring(r)?,
            blocking,
            stage: stage(g)?,
        },
    })
}

fn check_counts(plan: &Plan, rings: &[MRing]) -> Result<(), PlanError> {
    for (r, m) in plan.rings.iter().zip(rings) {
        if r.nconsumers as usize != m.consumers.len() {
            return Err(invalid(format!(
                "ring `{}` has nconsumers {} but {} ops consume it",
                r.name,
                r.nconsumers,
                m.consumers.len()
            )));
        }
        if m.producer.is_none() && !m.consumers.is_empty() {
            return Err(invalid(format!(
                "ring `{}` is consumed but never recorded",
                r.name
            )));
        }
    }
    Ok(())
}
