//! What `seqsync run --measure` sees of a run: each stage's durations as they ran (its work,
//! its launch's host time, the host work after its synchronize) and when each batch was done,
//! and what they give: the mean [`StageTimes`] to predict from, and the rate the run reached
//! once full.

use std::collections::BTreeMap;
use std::time::Duration;

use seqsync::pipeline::StageTimes;
use serde::Serialize;

/// Batches a measured run may have: every one keeps a few samples until the run ends.
pub const MAX_MEASURED_BATCHES: i64 = 100_000;

/// Durations and completions seen during one run, in microseconds.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    work: BTreeMap<String, Vec<f64>>,
    launch: BTreeMap<String, Vec<f64>>,
    after: BTreeMap<String, Vec<f64>>,
    /// Per seq, the latest end of anything done for it.
    done: BTreeMap<i64, f64>,
}

/// The measured side of a prediction, as printed and serialized.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// The means, as `--times` would take them.
    pub times: String,
    /// Batches per second once the pipeline is full: from the completions of the last three
    /// quarters of the batches.
    pub steady_batches_per_second: Option<f64>,
    /// The batches those completions span.
    pub steady_batches: i64,
}

/// The mean: a stage busy batch after batch takes its mean time per batch in the long run
/// (a median would miss the slow ones).
fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

fn dur(us: f64) -> Duration {
    Duration::from_secs_f64((us.max(0.0) / 1e6).min(3600.0))
}

impl Samples {
    /// Stage `stage`'s work took `us` for `seq`, ending at `end_us`.
    pub fn work(&mut self, stage: &str, seq: i64, us: f64, end_us: f64) {
        self.work.entry(stage.to_string()).or_default().push(us);
        self.done(seq, end_us);
    }

    /// Launching stage `stage` took its host thread `us`.
    pub fn launch(&mut self, stage: &str, us: f64) {
        self.launch.entry(stage.to_string()).or_default().push(us);
    }

    /// The host work after stage `stage`'s synchronize took `us` for `seq`, ending at `end_us`.
    pub fn after(&mut self, stage: &str, seq: i64, us: f64, end_us: f64) {
        self.after.entry(stage.to_string()).or_default().push(us);
        self.done(seq, end_us);
    }

    fn done(&mut self, seq: i64, end_us: f64) {
        let e = self.done.entry(seq).or_insert(end_us);
        *e = e.max(end_us);
    }

    /// The mean of each stage's samples.
    pub fn stage_times(&self) -> StageTimes {
        let mut t = StageTimes::new();
        for (k, v) in &self.work {
            t = t.stage(k.clone(), dur(mean(v)));
        }
        for (k, v) in &self.launch {
            t = t.launch(k.clone(), dur(mean(v)));
        }
        for (k, v) in &self.after {
            t = t.after_sync(k.clone(), dur(mean(v)));
        }
        t
    }

    /// The means and the steady rate.
    pub fn measured(&self) -> Measured {
        let times = self.stage_times();
        let mut parts: Vec<String> = times
            .stages()
            .map(|(k, d)| format!("{k}={}", us(d)))
            .collect();
        parts.extend(
            times
                .launches()
                .map(|(k, d)| format!("{k}.launch={}", us(d))),
        );
        parts.extend(
            times
                .after_syncs()
                .map(|(k, d)| format!("{k}.after={}", us(d))),
        );
        let (rate, span) = self.steady();
        Measured {
            times: parts.join(","),
            steady_batches_per_second: rate,
            steady_batches: span,
        }
    }

    /// Batches per second between the completion of the batch a quarter in and the last.
    fn steady(&self) -> (Option<f64>, i64) {
        // A batch is done once everything of it and of every batch before it is done.
        let mut t = f64::MIN;
        let done: Vec<(i64, f64)> = self
            .done
            .iter()
            .map(|(&s, &e)| {
                t = t.max(e);
                (s, t)
            })
            .collect();
        let (Some(&(last, t_last)), Some(&(first, t_first))) =
            (done.last(), done.get(done.len() / 4))
        else {
            return (None, 0);
        };
        let span = last - first;
        if span <= 0 || t_last <= t_first {
            return (None, span.max(0));
        }
        (Some(span as f64 / (t_last - t_first) * 1e6), span)
    }

    /// The samples in a trace (`--trace`'s JSON) of the seed's pipeline: device spans per
    /// stage (named by `stage_of` from their labels), `launch X` and `process` host spans.
    pub fn from_trace(
        trace: &serde_json::Value,
        stage_of: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let mut s = Samples::default();
        let Some(events) = trace["traceEvents"].as_array() else {
            return s;
        };
        for e in events.iter().filter(|e| e["ph"] == "X") {
            let (Some(ts), Some(d), Some(seq)) = (
                e["ts"].as_f64(),
                e["dur"].as_f64(),
                e["args"]["seq"].as_i64(),
            ) else {
                continue;
            };
            let label = e["args"]["stage"].as_str().unwrap_or_default();
            match e["cat"].as_str() {
                Some("stream") => {
                    if let Some(stage) = stage_of(label) {
                        s.work(&stage, seq, d, ts + d);
                    }
                }
                _ => {
                    if let Some(stage) = label.strip_prefix("launch ") {
                        s.launch(stage, d);
                    } else if label == "process" {
                        if let Some(stage) = stage_of("process") {
                            s.after(&stage, seq, d, ts + d);
                        }
                    }
                }
            }
        }
        s
    }
}

fn us(d: Duration) -> String {
    format!("{:.1}us", d.as_secs_f64() * 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_the_steady_rate() {
        let mut s = Samples::default();
        for seq in 0..100 {
            // One batch per 10 µs once started; the first ones slow.
            let end = if seq < 5 {
                1000.0
            } else {
                1000.0 + 10.0 * seq as f64
            };
            s.work("f", seq, if seq % 2 == 0 { 4.0 } else { 6.0 }, end);
        }
        s.launch("f", 1.0);
        let m = s.measured();
        assert_eq!(s.stage_times().work("f"), Some(Duration::from_micros(5)));
        let r = m.steady_batches_per_second.unwrap();
        assert!((r - 100_000.0).abs() < 1.0, "{r}");
        assert!(m.times.contains("f.launch=1.0us"), "{}", m.times);
    }
}
