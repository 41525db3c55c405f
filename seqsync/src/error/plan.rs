//! Errors of the pipeline layer: a malformed spec, a bad override, or a plan
//! that cannot be derived or checked. It lives beside the crate's error type, which wraps it
//! (`Error::Plan`), so that the error type needs nothing of the layers above it; the pipeline
//! layer re-exports it.
//!
//! Every variant is named for its cause. When the spec came from TOML the
//! variant carries the 1-based `line` of the offending item and the message
//! starts with `line N: `; specs built in Rust have `line: None`.

use thiserror::Error;

/// Renders an optional line number as a message prefix (`"line 7: "` or `""`).
fn at(line: &Option<usize>) -> String {
    match line {
        Some(n) => format!("line {n}: "),
        None => String::new(),
    }
}

/// Renders an optional "first declared at" suffix.
fn first_at(line: &Option<usize>) -> String {
    match line {
        Some(n) => format!(" (first declared on line {n})"),
        None => String::new(),
    }
}

/// Renders an optional parameter name behind a buffer's slot count.
fn via_param(param: &Option<String>) -> String {
    match param {
        Some(p) => format!(" (parameter `{p}` is 0)"),
        None => String::new(),
    }
}

/// Why a pipeline spec could not be parsed, validated, derived or checked.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The TOML text is not valid TOML or does not have the expected shape
    /// (unknown key, wrong type, duplicate key).
    #[error("{}invalid spec: {message}", at(.line))]
    Toml {
        /// Line of the problem, when the TOML parser reported one.
        line: Option<usize>,
        /// The parser's description.
        message: String,
    },

    /// The spec file could not be read.
    #[error("cannot read `{path}`: {message}")]
    Io {
        /// The path that was read.
        path: String,
        /// The operating system's description.
        message: String,
    },

    /// A stage reads or writes a buffer that is not declared.
    #[error("{}stage `{stage}` uses unknown buffer `{buffer}`", at(.line))]
    UnknownBuffer {
        /// Line of the `reads`/`writes` entry.
        line: Option<usize>,
        /// The stage naming the buffer.
        stage: String,
        /// The undeclared buffer.
        buffer: String,
    },

    /// A buffer's slot count names a parameter that is not declared.
    #[error("{}buffer `{buffer}` uses unknown parameter `{param}`", at(.line))]
    UnknownParam {
        /// Line of the buffer declaration.
        line: Option<usize>,
        /// The buffer whose slot count names the parameter.
        buffer: String,
        /// The undeclared parameter.
        param: String,
    },

    /// The spec declares its streams and a stage runs on another one.
    #[error("{}stage `{stage}` runs on undeclared stream `{stream}`", at(.line))]
    UnknownStream {
        /// Line of the stage's `stream` key.
        line: Option<usize>,
        /// The stage.
        stage: String,
        /// The undeclared stream.
        stream: String,
    },

    /// A buffer is read by a stage but no stage writes it.
    #[error("{}buffer `{buffer}` is read by stage `{reader}` but never written", at(.line))]
    NeverWritten {
        /// Line of the `reads` entry.
        line: Option<usize>,
        /// The buffer.
        buffer: String,
        /// The first stage that reads it.
        reader: String,
    },

    /// Two stages write the same buffer (each buffer has exactly one writer).
    #[error("{}buffer `{buffer}` is written by two stages: `{first}` and `{second}`", at(.line))]
    MultipleWriters {
        /// Line of the second `writes` entry.
        line: Option<usize>,
        /// The buffer.
        buffer: String,
        /// The first writer.
        first: String,
        /// The second writer.
        second: String,
    },

    /// A buffer has zero slots (directly or through a parameter that is 0).
    #[error("{}buffer `{buffer}` has 0 slots{}", at(.line), via_param(.param))]
    ZeroSlots {
        /// Line of the buffer declaration.
        line: Option<usize>,
        /// The buffer.
        buffer: String,
        /// The parameter its slot count comes from, if any.
        param: Option<String>,
    },

    /// Two items of the same kind share a name.
    #[error("{}duplicate {kind} `{name}`{}", at(.line), first_at(.first_line))]
    DuplicateName {
        /// Line of the second declaration.
        line: Option<usize>,
        /// What is duplicated: `thread`, `stage`, `buffer`, `parameter`,
        /// `stream`, or `read`/`write` of a buffer within one stage.
        kind: &'static str,
        /// The duplicated name.
        name: String,
        /// Line of the first declaration.
        first_line: Option<usize>,
    },

    /// Lag-0 dependencies form a cycle: each stage in `cycle` waits, in the
    /// same batch, for the next one, so none can start.
    #[error("{}lag-0 dependency cycle: {description}", at(.line))]
    LagZeroCycle {
        /// Line of a `reads` entry that closes the cycle.
        line: Option<usize>,
        /// The stages on the cycle, in dependency order.
        cycle: Vec<String>,
        /// The cycle in words, e.g. ``f reads `x` from h; h runs after f on thread t``.
        description: String,
    },

    /// A stage has no place, or both a stream and `host = true`.
    #[error("{}stage `{stage}`: {problem}", at(.line))]
    BadPlacement {
        /// Line of the stage.
        line: Option<usize>,
        /// The stage.
        stage: String,
        /// What is wrong with its place.
        problem: String,
    },

    /// A number in the spec is out of range (negative, or too large for a seq id).
    #[error("{}`{name}` = {value} is out of range: {problem}", at(.line))]
    InvalidValue {
        /// Line of the value.
        line: Option<usize>,
        /// The parameter, buffer or ring.
        name: String,
        /// The value as written.
        value: i128,
        /// The allowed range.
        problem: String,
    },

    /// A name is empty, too long, or holds a character that cannot be printed or passed on
    /// (a control character such as NUL, a newline or an escape).
    #[error("{}{kind} name {name}: {problem}", at(.line))]
    BadName {
        /// Line of the declaration.
        line: Option<usize>,
        /// What is named: `thread`, `stage`, `buffer`, `parameter`, `stream`, `ring`.
        kind: &'static str,
        /// The name, quoted and escaped, cut to its first 40 characters.
        name: String,
        /// What is wrong with it.
        problem: String,
    },

    /// A builder call to `stage` came before any `thread`.
    #[error("stage `{stage}` is declared before any thread")]
    StageOutsideThread {
        /// The stage.
        stage: String,
    },

    /// An override (`--set NAME=VALUE`) names no parameter and no ring.
    #[error("{}cannot set `{name}`: {problem}", at(.line))]
    UnknownOverride {
        /// Line of a `[max_size]` entry in TOML, if it came from there.
        line: Option<usize>,
        /// The name as given.
        name: String,
        /// Why it is not known.
        problem: String,
    },

    /// An override is not of the form `NAME=VALUE` with a non-negative integer.
    #[error("bad assignment `{text}`: expected NAME=VALUE with VALUE a non-negative integer")]
    BadAssignment {
        /// The text as given.
        text: String,
    },

    /// A ring's requested `max_size` is below what its same-thread consumers
    /// need: the producer's thread would block on itself.
    #[error("ring `{ring}`: max_size {requested} is below the bound {bound} ({reason}); the thread would block on itself")]
    MaxSizeBelowBound {
        /// The ring.
        ring: String,
        /// The requested max_size.
        requested: u64,
        /// The smallest max_size that does not self-deadlock.
        bound: u64,
        /// Which consumer sets the bound.
        reason: String,
    },

    /// The spec declares no stage at all: there is nothing to derive or run.
    #[error("the spec declares no stages: add a [[thread]] with at least one [[thread.stage]]")]
    NoStages,

    /// A stage time (`--times`, [`StageTimes`](crate::pipeline::StageTimes)) is malformed,
    /// names no stage of the plan, or is missing for one.
    #[error("stage time {entry}: {problem}")]
    StageTime {
        /// The entry (or the stage it is missing for), quoted.
        entry: String,
        /// What is wrong.
        problem: String,
    },

    /// The throughput prediction's search for the critical cycle passed its bound on rounds or
    /// on the work of all rounds together, on a graph of `nodes` nodes and `arcs` arcs.
    #[error(
        "the throughput prediction gave up: its graph of {nodes} nodes and {arcs} arcs did not \
         converge within {max_rounds} rounds or {max_work} node and arc visits"
    )]
    PredictionLimit {
        /// Nodes of the timed event graph.
        nodes: usize,
        /// Its arcs.
        arcs: usize,
        /// The bound on rounds.
        max_rounds: usize,
        /// The bound on node and arc visits over all rounds.
        max_work: usize,
    },
}

impl PlanError {
    /// The 1-based spec line this error points at, if known.
    pub fn line(&self) -> Option<usize> {
        match self {
            PlanError::Toml { line, .. }
            | PlanError::UnknownBuffer { line, .. }
            | PlanError::UnknownParam { line, .. }
            | PlanError::UnknownStream { line, .. }
            | PlanError::NeverWritten { line, .. }
            | PlanError::MultipleWriters { line, .. }
            | PlanError::ZeroSlots { line, .. }
            | PlanError::DuplicateName { line, .. }
            | PlanError::LagZeroCycle { line, .. }
            | PlanError::BadPlacement { line, .. }
            | PlanError::InvalidValue { line, .. }
            | PlanError::BadName { line, .. }
            | PlanError::UnknownOverride { line, .. } => *line,
            PlanError::Io { .. }
            | PlanError::StageOutsideThread { .. }
            | PlanError::BadAssignment { .. }
            | PlanError::MaxSizeBelowBound { .. }
            | PlanError::StageTime { .. }
            | PlanError::PredictionLimit { .. }
            | PlanError::NoStages => None,
        }
    }
}
