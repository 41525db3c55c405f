//! [`StageTimes`]: how long each stage's work takes, the input of a throughput prediction, and
//! its text form (`f=12us,g=30us,g2h.after=2ms,host=1us`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::error::PlanError;

/// The longest time one stage may be given: a bound, so that sums over a cycle of every stage
/// of a large plan stay exact in nanoseconds.
pub const MAX_STAGE_TIME: Duration = Duration::from_secs(3600);

/// How long each stage's work takes once it runs, and what the host threads spend besides:
/// what [`predict`](super::predict) turns into a period.
///
/// - **work**: a stream stage's time on its stream (a kernel, a copy), or a host stage's time
///   in its closure;
/// - **after sync**: host work after a `sync = true` stage's synchronize (the seed's
///   `process_data`);
/// - **launch**: what a stream stage's launch costs its host thread (preparing the batch,
///   the driver call), 0 unless given;
/// - **host call**: what each ring call and launch costs its host thread (0 by default).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use seqsync::pipeline::StageTimes;
///
/// let t = StageTimes::parse("f=12us, g=1.5ms, g2h.after=300ns, host=2us").unwrap();
/// assert_eq!(t.work("f"), Some(Duration::from_micros(12)));
/// assert_eq!(t.after_sync_work("g2h"), Some(Duration::from_nanos(300)));
/// assert_eq!(t.host_call_time(), Duration::from_micros(2));
///
/// // A time needs its unit, and a name.
/// assert!(StageTimes::parse("f=12").is_err());
/// assert!(StageTimes::parse("=12us").is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StageTimes {
    work: BTreeMap<String, Duration>,
    after_sync: BTreeMap<String, Duration>,
    launch: BTreeMap<String, Duration>,
    host_call: Duration,
    one_at_a_time: Vec<(String, Vec<String>)>,
}

impl StageTimes {
    /// No times yet (every stage must be given one before a prediction).
    pub fn new() -> Self {
        Self::default()
    }

    /// Stage `name`'s work takes `d` (replaces an earlier time).
    pub fn stage(mut self, name: impl Into<String>, d: Duration) -> Self {
        self.work.insert(name.into(), d);
        self
    }

    /// The host work after stage `name`'s synchronize takes `d`.
    pub fn after_sync(mut self, name: impl Into<String>, d: Duration) -> Self {
        self.after_sync.insert(name.into(), d);
        self
    }

    /// Launching stream stage `name`'s work costs its host thread `d`.
    pub fn launch(mut self, name: impl Into<String>, d: Duration) -> Self {
        self.launch.insert(name.into(), d);
        self
    }

    /// The works of `stages` run one at a time, whatever their streams: they share
    /// `resource` (e.g. host functions on CUDA streams, which the driver runs on one thread).
    /// Their times, added up, bound the period.
    pub fn one_at_a_time(
        mut self,
        resource: impl Into<String>,
        stages: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let stages = stages.into_iter().map(Into::into).collect();
        self.one_at_a_time.push((resource.into(), stages));
        self
    }

    /// The resources given with [`one_at_a_time`](Self::one_at_a_time), with their stages.
    pub fn shared_resources(&self) -> &[(String, Vec<String>)] {
        &self.one_at_a_time
    }

    /// Each ring call and launch costs its host thread `d`.
    pub fn host_call(mut self, d: Duration) -> Self {
        self.host_call = d;
        self
    }

    /// Stage `name`'s work time, if given.
    pub fn work(&self, name: &str) -> Option<Duration> {
        self.work.get(name).copied()
    }

    /// The host work after stage `name`'s synchronize, if given.
    pub fn after_sync_work(&self, name: &str) -> Option<Duration> {
        self.after_sync.get(name).copied()
    }

    /// What launching stream stage `name`'s work costs its host thread, if given.
    pub fn launch_work(&self, name: &str) -> Option<Duration> {
        self.launch.get(name).copied()
    }

    /// Every stage given a launch time, with it.
    pub fn launches(&self) -> impl Iterator<Item = (&str, Duration)> {
        self.launch.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// What each ring call and launch costs its host thread.
    pub fn host_call_time(&self) -> Duration {
        self.host_call
    }

    /// Every stage given a work time, with it.
    pub fn stages(&self) -> impl Iterator<Item = (&str, Duration)> {
        self.work.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Every stage given after-sync work, with it.
    pub fn after_syncs(&self) -> impl Iterator<Item = (&str, Duration)> {
        self.after_sync.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Parses `NAME=DURATION` entries separated by commas or newlines: `NAME` a stage (its work),
    /// `STAGE.after` (host work after its synchronize), `STAGE.launch` (its launch's host
    /// time) or `host` (each host call); `DURATION`
    /// a number with a unit `ns`, `us` (or `µs`), `ms` or `s`.
    ///
    /// # Errors
    /// [`PlanError::StageTime`] naming the entry: no `=`, an empty name, a number without a
    /// unit, a negative or non-finite number, or one above [`MAX_STAGE_TIME`].
    pub fn parse(text: &str) -> Result<Self, PlanError> {
        let mut out = StageTimes::new();
        for entry in text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            let bad = |problem: String| PlanError::StageTime {
                entry: crate::name::quoted(entry),
                problem,
            };
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| bad("expected NAME=DURATION, e.g. f=12us".into()))?;
            let (name, value) = (name.trim(), value.trim());
            if name.is_empty() {
                return Err(bad("no stage name before `=`".into()));
            }
            let d = parse_duration(value).map_err(bad)?;
            if name == "host" {
                out.host_call = d;
            } else if let Some(stage) = name.strip_suffix(".after") {
                out.after_sync.insert(stage.to_string(), d);
            } else if let Some(stage) = name.strip_suffix(".launch") {
                out.launch.insert(stage.to_string(), d);
            } else {
                out.work.insert(name.to_string(), d);
            }
        }
        Ok(out)
    }
}

/// `12us`, `1.5ms`, `300ns`, `2s`, `12µs`: a non-negative finite number and a unit, at most
/// [`MAX_STAGE_TIME`].
///
/// # Errors
/// What is wrong with it, in words.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. 12us, 1.5ms, 300ns or 2s"))?;
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        other => {
            return Err(format!(
                "unknown unit {} (ns, us, ms or s)",
                crate::name::quoted(other)
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{number}` is not a number"))?;
    let secs = value * scale;
    if !secs.is_finite() || secs > MAX_STAGE_TIME.as_secs_f64() {
        return Err(format!(
            "{text} is longer than the limit of {} s",
            MAX_STAGE_TIME.as_secs()
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_every_unit_and_refuse_the_rest() {
        assert_eq!(parse_duration("12us"), Ok(Duration::from_micros(12)));
        assert_eq!(parse_duration("12µs"), Ok(Duration::from_micros(12)));
        assert_eq!(parse_duration("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_duration("300ns"), Ok(Duration::from_nanos(300)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0us"), Ok(Duration::ZERO));
        for bad in [
            "12",
            "us",
            "-3us",
            "1e400s",
            "4000s",
            "1.2.3ms",
            "12 parsecs",
            "",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn an_entry_names_a_stage_its_after_sync_work_or_the_host() {
        let t = StageTimes::parse("f=1us,g2h.after=2us,host=3us,f=4us").unwrap();
        assert_eq!(t.work("f"), Some(Duration::from_micros(4)), "the last wins");
        assert_eq!(t.after_sync_work("g2h"), Some(Duration::from_micros(2)));
        assert_eq!(t.host_call_time(), Duration::from_micros(3));
        let e = StageTimes::parse("f=1us,g").unwrap_err();
        assert!(
            matches!(&e, PlanError::StageTime { entry, .. } if entry == "`g`"),
            "{e}"
        );
    }

    #[test]
    fn entries_may_stand_one_per_line() {
        let t = StageTimes::parse("f=1us\r\ng=2us,\n\nh=3us\n").unwrap();
        assert_eq!(t.work("f"), Some(Duration::from_micros(1)));
        assert_eq!(t.work("g"), Some(Duration::from_micros(2)));
        assert_eq!(t.work("h"), Some(Duration::from_micros(3)));
    }
}
