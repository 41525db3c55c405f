//! Parsing a pipeline spec from TOML.
//!
//! # Format
//!
//! ```toml
//! # Optional, top-level (so before the first [table]). Without it, streams
//! # are implied by the stages that use them; with it, every stage's stream
//! # must be listed.
//! streams = ["s_h2g", "s_f"]
//!
//! # Named non-negative integers; buffer sizes may refer to them.
//! [params]
//! nin = 2
//!
//! # Data ring buffers: name = slot count (a number or a parameter name).
//! [buffers]
//! in = "nin"
//! x = 4
//!
//! # Optional: requested max_size per ring (a ring is named after its stage).
//! # [max_size]
//! # f = 3
//!
//! # Host threads, in order; each runs its stages in program order per batch.
//! [[thread]]
//! name = "h2g"
//!
//! [[thread.stage]]
//! name = "h2g"          # also the name of the stage's ring
//! stream = "s_h2g"      # or: host = true (runs on the thread itself)
//! writes = ["in"]       # buffers written (optional)
//!
//! [[thread.stage]]
//! name = "f"
//! stream = "s_f"
//! reads = ["in"]        # buffers read (optional)
//! writes = ["x"]
//! sync = false          # true: the thread synchronizes on this ring after recording
//! ```
//!
//! Unknown keys are errors. Every error names the line it is about.
//! Overrides (`--set NAME=VALUE`) are applied afterwards with
//! [`PipelineSpec::set`] or [`PipelineSpec::apply_assignment`].

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::spec::{
    BufferSpec, Ident, ParamSpec, PipelineSpec, Place, Slots, StageSpec, ThreadSpec,
};
use crate::error::PlanError;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    #[serde(default)]
    params: BTreeMap<String, Spanned<i64>>,
    #[serde(default)]
    streams: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    buffers: BTreeMap<String, Spanned<toml::Value>>,
    #[serde(default)]
    max_size: BTreeMap<String, Spanned<i64>>,
    #[serde(default, rename = "thread")]
    threads: Vec<RawThread>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThread {
    name: Spanned<String>,
    #[serde(default, rename = "stage")]
    stages: Vec<RawStage>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStage {
    name: Spanned<String>,
    #[serde(default)]
    stream: Option<Spanned<String>>,
    #[serde(default)]
    host: Option<Spanned<bool>>,
    #[serde(default)]
    reads: Vec<Spanned<String>>,
    #[serde(default)]
    writes: Vec<Spanned<String>>,
    #[serde(default)]
    sync: bool,
}

/// Maps byte offsets to 1-based line numbers.
struct Lines<'a> {
    src: &'a str,
    /// Byte offset of every `\n`, in order: a line number is a binary search (a spec of
    /// 100 000 entries used to count from the top of the file for each one).
    newlines: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn new(src: &'a str) -> Self {
        Lines {
            src,
            newlines: src
                .bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| i)
                .collect(),
        }
    }

    fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.src.len());
        self.newlines.partition_point(|&n| n < end) + 1
    }

    fn of<T>(&self, s: &Spanned<T>) -> Option<usize> {
        Some(self.line(s.span().start))
    }

    fn ident(&self, s: &Spanned<String>) -> Ident {
        Ident::at(s.get_ref().clone(), self.of(s))
    }

    fn span(&self, span: Option<Range<usize>>) -> Option<usize> {
        span.map(|r| self.line(r.start))
    }
}

/// The largest spec text: 8 MiB (about 80 000 stages; parsing, deriving and checking one
/// that large takes seconds and a few hundred MB: BENCHMARKS.md §8).
pub const MAX_SPEC_BYTES: usize = 8 << 20;

/// A spec of `bytes` bytes is within [`MAX_SPEC_BYTES`].
fn check_size(bytes: u64) -> Result<(), PlanError> {
    if bytes <= MAX_SPEC_BYTES as u64 {
        return Ok(());
    }
    Err(PlanError::Toml {
        line: None,
        message: format!(
            "the spec is {bytes} bytes, more than the {MAX_SPEC_BYTES} (8 MiB) a spec may be"
        ),
    })
}

impl PipelineSpec {
    /// Parses and validates a spec written in TOML (the `seqsync check` file format).
    ///
    /// # Errors
    /// [`PlanError::Toml`] for malformed TOML or an unknown key, or any
    /// validation error (see [`PipelineSpec::validate`]), each with its line.
    ///
    /// # Examples
    /// ```
    /// let spec = seqsync::pipeline::PipelineSpec::from_toml(r#"
    /// [buffers]
    /// a = 2
    /// [[thread]]
    /// name = "t"
    /// [[thread.stage]]
    /// name = "w"
    /// stream = "s0"
    /// writes = ["a"]
    /// "#).unwrap();
    /// assert_eq!(spec.threads[0].stages[0].name.name, "w");
    /// ```
    pub fn from_toml(src: &str) -> Result<PipelineSpec, PlanError> {
        check_size(src.len() as u64)?;
        let lines = Lines::new(src);
        let raw: RawSpec = toml::from_str(src).map_err(|e| PlanError::Toml {
            line: lines.span(e.span()),
            message: e.message().trim().replace('\n', "; "),
        })?;
        let spec = convert(&lines, raw)?;
        spec.validate()?;
        Ok(spec)
    }

    /// Reads, parses and validates a spec file.
    ///
    /// # Errors
    /// [`PlanError::Io`] if the file cannot be read, otherwise as [`PipelineSpec::from_toml`].
    pub fn from_path(path: impl AsRef<Path>) -> Result<PipelineSpec, PlanError> {
        let path = path.as_ref();
        // Not read at all if it is larger than a spec may be.
        if let Ok(m) = std::fs::metadata(path) {
            check_size(m.len())?;
        }
        let src = std::fs::read_to_string(path).map_err(|e| PlanError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_toml(&src)
    }
}

fn convert(lines: &Lines<'_>, raw: RawSpec) -> Result<PipelineSpec, PlanError> {
    let mut spec = PipelineSpec {
        params: convert_params(lines, &raw.params)?,
        streams: raw
            .streams
            .as_ref()
            .map(|v| v.iter().map(|s| lines.ident(s)).collect()),
        buffers: convert_buffers(lines, &raw.buffers)?,
        threads: raw
            .threads
            .iter()
            .map(|t| convert_thread(lines, t))
            .collect::<Result<_, _>>()?,
        max_size: Vec::new(),
    };
    for (ring, v) in sorted_by_span(&raw.max_size) {
        let line = lines.of(v);
        let name = format!("{ring}.max_size");
        let value = non_negative(&name, *v.get_ref(), line)?;
        spec.set_at(&name, value, line)?;
    }
    Ok(spec)
}

/// Map entries in the order they were written.
fn sorted_by_span<T>(map: &BTreeMap<String, Spanned<T>>) -> Vec<(&String, &Spanned<T>)> {
    let mut v: Vec<_> = map.iter().collect();
    v.sort_by_key(|(_, s)| s.span().start);
    v
}

fn non_negative(name: &str, v: i64, line: Option<usize>) -> Result<u64, PlanError> {
    u64::try_from(v).map_err(|_| PlanError::InvalidValue {
        line,
        name: name.to_string(),
        value: i128::from(v),
        problem: "must be a non-negative integer".into(),
    })
}

fn convert_params(
    lines: &Lines<'_>,
    params: &BTreeMap<String, Spanned<i64>>,
) -> Result<Vec<ParamSpec>, PlanError> {
    sorted_by_span(params)
        .into_iter()
        .map(|(name, v)| {
            let line = lines.of(v);
            Ok(ParamSpec {
                name: Ident::at(name.clone(), line),
                value: non_negative(name, *v.get_ref(), line)?,
            })
        })
        .collect()
}

fn convert_buffers(
    lines: &Lines<'_>,
    buffers: &BTreeMap<String, Spanned<toml::Value>>,
) -> Result<Vec<BufferSpec>, PlanError> {
    sorted_by_span(buffers)
        .into_iter()
        .map(|(name, v)| {
            let line = lines.of(v);
            let slots = match v.get_ref() {
                toml::Value::Integer(n) => Slots::Count(non_negative(name, *n, line)?),
                toml::Value::String(p) => Slots::Param(p.clone()),
                other => {
                    return Err(PlanError::Toml {
                        line,
                        message: format!(
                            "buffer `{name}`: expected a slot count or a parameter name, found {}",
                            other.type_str()
                        ),
                    })
                }
            };
            Ok(BufferSpec {
                name: Ident::at(name.clone(), line),
                slots,
            })
        })
        .collect()
}

fn convert_thread(lines: &Lines<'_>, t: &RawThread) -> Result<ThreadSpec, PlanError> {
    Ok(ThreadSpec {
        name: lines.ident(&t.name),
        stages: t
            .stages
            .iter()
            .map(|s| convert_stage(lines, s))
            .collect::<Result<_, _>>()?,
    })
}

fn convert_stage(lines: &Lines<'_>, s: &RawStage) -> Result<StageSpec, PlanError> {
    let name = lines.ident(&s.name);
    let bad = |problem: &str| PlanError::BadPlacement {
        line: name.line,
        stage: name.name.clone(),
        problem: problem.to_string(),
    };
    let host = s.host.as_ref().filter(|h| *h.get_ref());
    let (place, place_line) = match (&s.stream, host) {
        (Some(st), None) => (Place::Stream(st.get_ref().clone()), lines.of(st)),
        (None, Some(h)) => (Place::Host, lines.of(h)),
        (Some(_), Some(_)) => return Err(bad("has both `stream` and `host = true`")),
        (None, None) => return Err(bad("needs `stream = \"...\"` or `host = true`")),
    };
    Ok(StageSpec {
        name,
        place,
        place_line,
        reads: s.reads.iter().map(|r| lines.ident(r)).collect(),
        writes: s.writes.iter().map(|w| lines.ident(w)).collect(),
        sync: s.sync,
    })
}
