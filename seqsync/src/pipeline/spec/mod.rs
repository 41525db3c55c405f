//! The declaration model of a pipeline and its Rust builder.
//!
//! It may use: nothing outside `pipeline` (its error type, [`PlanError`]) but the ring's size
//! limits (`ring`) and `name` (names checked and shown).
//!
//! A [`PipelineSpec`] says *what* runs where and which data buffers each stage
//! reads and writes; [`derive`](super::derive()) turns it into the ring
//! parameters and the exact wait/record sequence.
//!
//! Names: parameters, buffers, threads and stages each have their own
//! namespace, except that stage names are global (every stage owns the ring of
//! the same name). A thread and a stage may share a name, as in the seed.
//! Streams are implied by the stages that use them unless the spec declares
//! them (builder [`PipelineBuilder::stream`], TOML `streams = [...]`); once any
//! stream is declared, every stage's stream must be declared.
//!
//! | file | what it is |
//! |---|---|
//! | `mod.rs` | the model: [`PipelineSpec`] and its parts |
//! | `builder.rs` | [`PipelineBuilder`] |
//! | `validate.rs` | validation, and the indexed view (`Topology`) that `derive` works from |

mod builder;
mod validate;

pub use builder::PipelineBuilder;
pub use validate::buffer_slots;
pub(crate) use validate::{check_range, max_size_limit, ResolvedSlots, Topology};

use std::fmt;

use serde::Serialize;

use crate::error::PlanError;

/// Largest value accepted for a parameter, a slot count or a max_size, so that
/// every seq id and lag fits an `i64` with room to spare.
pub const MAX_VALUE: u64 = 1 << 40;

/// A name as written in a spec, with the 1-based line it came from (TOML only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// The line it was written on, `None` when built in Rust.
    pub line: Option<usize>,
}

impl Ident {
    /// A name without a line (built in Rust).
    pub fn new(name: impl Into<String>) -> Self {
        Ident {
            name: name.into(),
            line: None,
        }
    }

    /// A name written on `line` of a spec file.
    pub fn at(name: impl Into<String>, line: Option<usize>) -> Self {
        Ident {
            name: name.into(),
            line,
        }
    }
}

/// The slot count of a data buffer: a number, or the name of a parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slots {
    /// A fixed number of slots.
    Count(u64),
    /// The value of the named parameter.
    Param(String),
}

impl Slots {
    /// A fixed slot count.
    pub fn count(n: u64) -> Self {
        Slots::Count(n)
    }

    /// A slot count taken from parameter `name`.
    pub fn param(name: impl Into<String>) -> Self {
        Slots::Param(name.into())
    }
}

impl From<u64> for Slots {
    fn from(n: u64) -> Self {
        Slots::Count(n)
    }
}

impl From<&str> for Slots {
    fn from(name: &str) -> Self {
        Slots::Param(name.to_string())
    }
}

/// Where a stage's work runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Place {
    /// On its host thread itself (waits become host synchronizes).
    Host,
    /// On the named stream (waits are stream waits).
    Stream(String),
}

impl Place {
    /// The stream name, or `None` for [`Place::Host`].
    pub fn stream(&self) -> Option<&str> {
        match self {
            Place::Host => None,
            Place::Stream(s) => Some(s),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Host => f.write_str("host"),
            Place::Stream(s) => f.write_str(s),
        }
    }
}

/// A named non-negative integer that buffer slot counts may refer to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    /// Name and line.
    pub name: Ident,
    /// Current value (overrides replace it).
    pub value: u64,
}

/// A ring buffer of data slots (in GPU or host memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferSpec {
    /// Name and line.
    pub name: Ident,
    /// How many batches it holds.
    pub slots: Slots,
}

/// One stage: a kernel or copy launched once per batch, owning one ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageSpec {
    /// Stage name, also its ring's name (set by [`PipelineBuilder::stage`]).
    pub name: Ident,
    /// Where it runs.
    pub place: Place,
    /// Line of the place declaration (TOML `stream`/`host` key).
    pub place_line: Option<usize>,
    /// Buffers it reads, in order.
    pub reads: Vec<Ident>,
    /// Buffers it writes, in order.
    pub writes: Vec<Ident>,
    /// Whether its thread synchronizes on its ring right after the record.
    pub sync: bool,
}

impl StageSpec {
    /// A stage launched on `stream`.
    pub fn on_stream(stream: impl Into<String>) -> Self {
        Self::with_place(Place::Stream(stream.into()))
    }

    /// A stage that runs on its host thread itself.
    pub fn on_host() -> Self {
        Self::with_place(Place::Host)
    }

    /// A stage at `place`, reading and writing nothing yet.
    pub fn with_place(place: Place) -> Self {
        StageSpec {
            name: Ident::new(""),
            place,
            place_line: None,
            reads: Vec::new(),
            writes: Vec::new(),
            sync: false,
        }
    }

    /// Adds a buffer this stage reads.
    pub fn reads(mut self, buffer: impl Into<String>) -> Self {
        self.reads.push(Ident::new(buffer));
        self
    }

    /// Adds a buffer this stage writes.
    pub fn writes(mut self, buffer: impl Into<String>) -> Self {
        self.writes.push(Ident::new(buffer));
        self
    }

    /// Makes the thread synchronize on this stage's ring right after its record.
    pub fn sync(mut self) -> Self {
        self.sync = true;
        self
    }
}

/// A host thread: runs its stages in program order, once per batch, forever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSpec {
    /// Name and line.
    pub name: Ident,
    /// Stages in program order.
    pub stages: Vec<StageSpec>,
}

/// A user-requested `max_size` for one ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaxSizeOverride {
    /// The ring (stage) name and the line of the request.
    pub ring: Ident,
    /// The requested max_size (at least 1).
    pub value: u64,
}

/// A whole pipeline declaration. Build one with [`PipelineSpec::builder`] or
/// parse one with [`PipelineSpec::from_toml`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PipelineSpec {
    /// Parameters, in declaration order.
    pub params: Vec<ParamSpec>,
    /// Declared streams; `None` means streams are implied by the stages.
    pub streams: Option<Vec<Ident>>,
    /// Data buffers, in declaration order.
    pub buffers: Vec<BufferSpec>,
    /// Host threads, each with its stages in program order.
    pub threads: Vec<ThreadSpec>,
    /// Requested max_size per ring.
    pub max_size: Vec<MaxSizeOverride>,
}

impl PipelineSpec {
    /// Starts a builder.
    pub fn builder() -> PipelineBuilder {
        PipelineBuilder::default()
    }

    /// Checks every rule a spec must obey (see [`PlanError`] for the list).
    ///
    /// # Errors
    /// The first violated rule, with its line when the spec came from TOML.
    pub fn validate(&self) -> Result<(), PlanError> {
        Topology::new(self).map(|_| ())
    }

    /// The value of parameter `name`, if declared.
    pub fn param(&self, name: &str) -> Option<u64> {
        self.params
            .iter()
            .find(|p| p.name.name == name)
            .map(|p| p.value)
    }

    /// The stage named `name` and its thread's name.
    pub fn stage(&self, name: &str) -> Option<(&ThreadSpec, &StageSpec)> {
        self.threads.iter().find_map(|t| {
            t.stages
                .iter()
                .find(|s| s.name.name == name)
                .map(|s| (t, s))
        })
    }

    /// Applies an override: `set("nin", 5)` changes a parameter,
    /// `set("h.max_size", 3)` requests a ring's max_size.
    ///
    /// # Errors
    /// [`PlanError::UnknownOverride`] if no such parameter or ring exists;
    /// [`PlanError::InvalidValue`] if the value is out of range (a max_size
    /// must be at least 1).
    pub fn set(&mut self, name: &str, value: u64) -> Result<(), PlanError> {
        self.set_at(name, value, None)
    }

    /// Like [`set`](Self::set), remembering the spec line of the request.
    pub(crate) fn set_at(
        &mut self,
        name: &str,
        value: u64,
        line: Option<usize>,
    ) -> Result<(), PlanError> {
        check_range(name, value, line)?;
        if let Some(ring) = name.strip_suffix(".max_size") {
            return self.set_max_size(ring, value, line);
        }
        match self.params.iter_mut().find(|p| p.name.name == name) {
            Some(p) => {
                p.value = value;
                Ok(())
            }
            None => Err(PlanError::UnknownOverride {
                line,
                name: name.to_string(),
                problem: "no such parameter (a ring's size is set as `RING.max_size`)".into(),
            }),
        }
    }

    /// Applies an override written as `NAME=VALUE` (the CLI's `--set`).
    ///
    /// # Errors
    /// [`PlanError::BadAssignment`] if the text is malformed, otherwise as
    /// [`set`](Self::set).
    pub fn apply_assignment(&mut self, text: &str) -> Result<(), PlanError> {
        let bad = || PlanError::BadAssignment {
            text: text.to_string(),
        };
        let (name, value) = text.split_once('=').ok_or_else(bad)?;
        let value: u64 = value.trim().parse().map_err(|_| bad())?;
        self.set(name.trim(), value)
    }

    fn set_max_size(
        &mut self,
        ring: &str,
        value: u64,
        line: Option<usize>,
    ) -> Result<(), PlanError> {
        if self.stage(ring).is_none() {
            return Err(PlanError::UnknownOverride {
                line,
                name: format!("{ring}.max_size"),
                problem: format!("no stage (ring) named `{ring}`"),
            });
        }
        if value == 0 {
            return Err(PlanError::InvalidValue {
                line,
                name: format!("{ring}.max_size"),
                value: 0,
                problem: "a ring's max_size must be at least 1".into(),
            });
        }
        if value > crate::ring::MAX_SIZE as u64 {
            return Err(PlanError::InvalidValue {
                line,
                name: format!("{ring}.max_size"),
                value: i128::from(value),
                problem: max_size_limit(),
            });
        }
        self.max_size.retain(|o| o.ring.name != ring);
        self.max_size.push(MaxSizeOverride {
            ring: Ident::at(ring, line),
            value,
        });
        Ok(())
    }

    /// The requested max_size of `ring`, if overridden.
    pub fn max_size_override(&self, ring: &str) -> Option<u64> {
        self.max_size
            .iter()
            .find(|o| o.ring.name == ring)
            .map(|o| o.value)
    }
}
