//! `--times` and `--measure`: the throughput a plan's stage times predict, its critical cycle,
//! and what one more slot of a ring or buffer on that cycle would give.

use seqsync::pipeline::{
    derive, predict, PipelineSpec, Plan, PlanError, Prediction, Slots, StageTimes,
};
use serde::Serialize;

/// One size one larger, and the prediction it gives.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Gain {
    /// The `--set` that makes it (`nin=3`, `h.max_size=5`).
    pub set: String,
    pub batches_per_second: f64,
    /// `batches_per_second` over the prediction as the spec is.
    pub ratio: f64,
}

/// The prediction for `plan`, and for each size on its critical cycle one slot larger.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub prediction: Prediction,
    pub gains: Vec<Gain>,
    /// Buffers on the cycle whose slot count is a number, not a parameter (`--set` cannot
    /// change them).
    pub fixed_buffers: Vec<String>,
}

pub(crate) fn report(
    spec: &PipelineSpec,
    plan: &Plan,
    times: &StageTimes,
) -> Result<Report, PlanError> {
    let prediction = predict(plan, times)?;
    let mut sets = Vec::new();
    let mut fixed_buffers = Vec::new();
    for b in &prediction.critical.buffers {
        match spec
            .buffers
            .iter()
            .find(|s| s.name.name == *b)
            .map(|s| &s.slots)
        {
            Some(Slots::Param(p)) => {
                if let Some(v) = spec.param(p) {
                    sets.push(format!("{p}={}", v.saturating_add(1)));
                }
            }
            _ => fixed_buffers.push(b.clone()),
        }
    }
    for r in &prediction.critical.ring_sizes {
        if let Some(ring) = plan.ring(r) {
            sets.push(format!("{r}.max_size={}", ring.max_size.saturating_add(1)));
        }
    }
    sets.sort();
    sets.dedup();
    let mut gains = Vec::new();
    for set in sets {
        let mut larger = spec.clone();
        // A size the spec refuses (past a limit) or a plan that does not derive gains nothing.
        if larger.apply_assignment(&set).is_err() {
            continue;
        }
        let Ok(p) = derive(&larger) else { continue };
        let Ok(pred) = predict(&p, times) else {
            continue;
        };
        gains.push(Gain {
            set,
            batches_per_second: pred.batches_per_second,
            ratio: pred.batches_per_second / prediction.batches_per_second,
        });
    }
    Ok(Report {
        prediction,
        gains,
        fixed_buffers,
    })
}

/// Batches per second, readable.
pub(crate) fn rate(bps: f64) -> String {
    if bps.is_infinite() {
        "unbounded (every time is 0)".into()
    } else if bps >= 100.0 {
        format!("{bps:.0} batches/s")
    } else {
        format!("{bps:.2} batches/s")
    }
}

pub(crate) fn print(r: &Report, source: &str) {
    let p = &r.prediction;
    println!("throughput with {source}:");
    println!(
        "  period {:.1} µs per batch: {}",
        p.period.as_secs_f64() * 1e6,
        rate(p.batches_per_second)
    );
    let c = &p.critical;
    println!(
        "  critical cycle ({:.1} µs of work over {} batch{}):",
        c.work.as_secs_f64() * 1e6,
        c.lag,
        if c.lag == 1 { "" } else { "es" }
    );
    for s in &c.steps {
        let lag = if s.lag > 0 {
            format!(
                " [{} batch{} back]",
                s.lag,
                if s.lag == 1 { "" } else { "es" }
            )
        } else {
            String::new()
        };
        println!("    {}\n      -> {}{lag}", s.node, s.then);
    }
    if r.gains.is_empty() && r.fixed_buffers.is_empty() {
        println!(
            "  no ring or buffer size sets a lag on this cycle: only faster stages on it raise \
             the throughput"
        );
    }
    for g in &r.gains {
        println!(
            "  with --set {}: {} ({:+.1} %)",
            g.set,
            rate(g.batches_per_second),
            (g.ratio - 1.0) * 100.0
        );
    }
    for b in &r.fixed_buffers {
        println!(
            "  buffer {b} sets a lag on this cycle; its slot count is a number in the spec (make \
             it a parameter to try sizes with --set)"
        );
    }
}
