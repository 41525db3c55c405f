//! `--times` and `--measure`: the throughput a plan's stage times predict, its critical cycle,
//! and what one more slot of a ring or buffer on that cycle would give.

use seqsync::internal::pipeline::Slots;
use seqsync::pipeline::{derive, predict, PipelineSpec, Plan, PlanError, Prediction, StageTimes};
use std::collections::HashMap;

use serde::Serialize;

/// The most sizes on a critical cycle tried one slot larger (each is a derivation and a
/// prediction of its own); a cycle through more names the rest untried.
pub(crate) const MAX_GAINS_TRIED: usize = 16;

/// Stages and rings of the plan times the sizes tried: fewer tries on a large plan, so that
/// they take seconds at most.
const GAINS_WORK: usize = 1_000_000;

/// The most steps of a critical cycle printed (`--json` has them all).
pub(crate) const MAX_STEPS_SHOWN: usize = 40;

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
    /// Sizes on the cycle past the first [`MAX_GAINS_TRIED`], not tried.
    pub untried: usize,
}

pub(crate) fn report(
    spec: &PipelineSpec,
    plan: &Plan,
    times: &StageTimes,
) -> Result<Report, PlanError> {
    let prediction = predict(plan, times)?;
    let mut sets = Vec::new();
    let mut fixed_buffers = Vec::new();
    // Lookups by name: a cycle may pass every buffer and ring of a large spec.
    let slots: HashMap<&str, &Slots> = spec
        .buffers
        .iter()
        .map(|b| (b.name.name.as_str(), &b.slots))
        .collect();
    let rings: HashMap<&str, u64> = plan
        .rings()
        .iter()
        .map(|r| (r.name.as_str(), r.max_size))
        .collect();
    let params: HashMap<&str, u64> = spec
        .params
        .iter()
        .map(|p| (p.name.name.as_str(), p.value))
        .collect();
    for b in &prediction.critical.buffers {
        match slots.get(b.as_str()) {
            Some(Slots::Param(p)) => {
                if let Some(v) = params.get(p.as_str()) {
                    sets.push(format!("{p}={}", v.saturating_add(1)));
                }
            }
            _ => fixed_buffers.push(b.clone()),
        }
    }
    for r in &prediction.critical.ring_sizes {
        if let Some(max_size) = rings.get(r.as_str()) {
            sets.push(format!("{r}.max_size={}", max_size.saturating_add(1)));
        }
    }
    sets.sort();
    sets.dedup();
    let tries =
        (GAINS_WORK / (plan.stages().len() + plan.rings().len()).max(1)).clamp(1, MAX_GAINS_TRIED);
    let untried = sets.len().saturating_sub(tries);
    sets.truncate(tries);
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
        untried,
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
    for s in c.steps.iter().take(MAX_STEPS_SHOWN) {
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
    if c.steps.len() > MAX_STEPS_SHOWN {
        println!(
            "    ... and {} more steps (--json lists them all)",
            c.steps.len() - MAX_STEPS_SHOWN
        );
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
    if r.untried > 0 {
        println!(
            "  {} more sizes on this cycle not tried one larger (at most {MAX_GAINS_TRIED} are, \
             fewer in a large plan)",
            r.untried
        );
    }
    if r.fixed_buffers.len() > MAX_GAINS_TRIED {
        println!(
            "  {} buffers of fixed slot counts set lags on this cycle; the first {MAX_GAINS_TRIED}:",
            r.fixed_buffers.len()
        );
    }
    for b in r.fixed_buffers.iter().take(MAX_GAINS_TRIED) {
        println!(
            "  buffer {b} sets a lag on this cycle; its slot count is a number in the spec (make \
             it a parameter to try sizes with --set)"
        );
    }
}
