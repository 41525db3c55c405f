//! The declaration model of a pipeline and its Rust builder.
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

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::error::PlanError;

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
/// parse one with [`spec_toml::from_str`](super::spec_toml::from_str).
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

/// Rejects values too large to be used as seq-id lags.
/// The one max_size limit, [`crate::ring::MAX_SIZE`], in words.
pub(crate) fn max_size_limit() -> String {
    format!(
        "a ring holds at most 2^30 = {} entries (seqsync::ring::MAX_SIZE)",
        crate::ring::MAX_SIZE
    )
}

pub(crate) fn check_range(name: &str, value: u64, line: Option<usize>) -> Result<(), PlanError> {
    if value > MAX_VALUE {
        return Err(PlanError::InvalidValue {
            line,
            name: name.to_string(),
            value: i128::from(value),
            problem: format!("at most {MAX_VALUE}"),
        });
    }
    Ok(())
}

/// Builds a [`PipelineSpec`] in Rust; errors surface in [`build`](Self::build).
///
/// `stage` adds to the thread declared last.
#[derive(Debug, Default)]
pub struct PipelineBuilder {
    spec: PipelineSpec,
    error: Option<PlanError>,
}

impl PipelineBuilder {
    /// Declares a parameter.
    pub fn param(mut self, name: impl Into<String>, value: u64) -> Self {
        self.spec.params.push(ParamSpec {
            name: Ident::new(name),
            value,
        });
        self
    }

    /// Declares a stream (once any is declared, all used streams must be).
    pub fn stream(mut self, name: impl Into<String>) -> Self {
        self.spec
            .streams
            .get_or_insert_with(Vec::new)
            .push(Ident::new(name));
        self
    }

    /// Declares a data buffer with `slots` slots (a number or a parameter name).
    pub fn buffer(mut self, name: impl Into<String>, slots: impl Into<Slots>) -> Self {
        self.spec.buffers.push(BufferSpec {
            name: Ident::new(name),
            slots: slots.into(),
        });
        self
    }

    /// Declares a host thread; following `stage` calls add to it.
    pub fn thread(mut self, name: impl Into<String>) -> Self {
        self.spec.threads.push(ThreadSpec {
            name: Ident::new(name),
            stages: Vec::new(),
        });
        self
    }

    /// Appends stage `name` to the thread declared last.
    pub fn stage(mut self, name: impl Into<String>, mut stage: StageSpec) -> Self {
        let name = name.into();
        match self.spec.threads.last_mut() {
            Some(thread) => {
                stage.name = Ident::new(name);
                thread.stages.push(stage);
            }
            None => {
                self.error
                    .get_or_insert(PlanError::StageOutsideThread { stage: name });
            }
        }
        self
    }

    /// Requests a max_size for ring `ring` (checked by `derive`).
    pub fn max_size(mut self, ring: impl Into<String>, value: u64) -> Self {
        self.spec.max_size.push(MaxSizeOverride {
            ring: Ident::new(ring),
            value,
        });
        self
    }

    /// Validates and returns the spec.
    ///
    /// # Errors
    /// The first violated rule (see [`PipelineSpec::validate`]).
    pub fn build(self) -> Result<PipelineSpec, PlanError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.spec.validate()?;
        Ok(self.spec)
    }
}

/// Where a stage sits: its thread and its index in that thread's program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StageAt {
    pub thread: usize,
    pub index: usize,
}

/// A buffer's resolved slot count and the parameter it came from.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedSlots {
    pub count: u64,
    pub param: Option<String>,
}

/// The validated, indexed view of a spec that `derive` works from.
#[derive(Debug)]
pub(crate) struct Topology<'a> {
    pub spec: &'a PipelineSpec,
    /// Stages in global order (threads, then program order).
    pub stages: Vec<StageAt>,
    /// Buffer name -> its writer (global stage index).
    pub writer: HashMap<&'a str, usize>,
    /// Buffer name -> its readers (global stage indices, in global order).
    pub readers: HashMap<&'a str, Vec<usize>>,
    /// Buffer name -> slots.
    pub slots: HashMap<&'a str, ResolvedSlots>,
}

impl<'a> Topology<'a> {
    /// Validates `spec` and indexes it.
    pub fn new(spec: &'a PipelineSpec) -> Result<Self, PlanError> {
        check_duplicates(spec)?;
        if spec.threads.iter().all(|t| t.stages.is_empty()) {
            return Err(PlanError::NoStages);
        }
        let slots = resolve_slots(spec)?;
        check_overrides(spec)?;
        check_streams(spec)?;
        let stages: Vec<StageAt> = spec
            .threads
            .iter()
            .enumerate()
            .flat_map(|(t, th)| {
                (0..th.stages.len()).map(move |i| StageAt {
                    thread: t,
                    index: i,
                })
            })
            .collect();
        let mut topo = Topology {
            spec,
            stages,
            writer: HashMap::new(),
            readers: HashMap::new(),
            slots,
        };
        topo.link_buffers()?;
        topo.check_cycles()?;
        Ok(topo)
    }

    /// The stage at global index `g`.
    pub fn stage(&self, g: usize) -> &'a StageSpec {
        let at = self.stages[g];
        &self.spec.threads[at.thread].stages[at.index]
    }

    /// The name of the thread running global stage `g`.
    pub fn thread_name(&self, g: usize) -> &'a str {
        &self.spec.threads[self.stages[g].thread].name.name
    }

    fn link_buffers(&mut self) -> Result<(), PlanError> {
        for g in 0..self.stages.len() {
            let stage = self.stage(g);
            for w in &stage.writes {
                let buf = self.known_buffer(stage, w)?;
                if let Some(&first) = self.writer.get(buf) {
                    return Err(PlanError::MultipleWriters {
                        line: w.line,
                        buffer: buf.to_string(),
                        first: self.stage(first).name.name.clone(),
                        second: stage.name.name.clone(),
                    });
                }
                self.writer.insert(buf, g);
            }
            for r in &stage.reads {
                let buf = self.known_buffer(stage, r)?;
                self.readers.entry(buf).or_default().push(g);
            }
        }
        for g in 0..self.stages.len() {
            let stage = self.stage(g);
            if let Some(r) = stage
                .reads
                .iter()
                .find(|r| !self.writer.contains_key(r.name.as_str()))
            {
                return Err(PlanError::NeverWritten {
                    line: r.line,
                    buffer: r.name.clone(),
                    reader: stage.name.name.clone(),
                });
            }
        }
        Ok(())
    }

    /// Resolves a buffer reference to the declared name (borrowed from the spec).
    fn known_buffer(&self, stage: &StageSpec, r: &Ident) -> Result<&'a str, PlanError> {
        self.spec
            .buffers
            .iter()
            .find(|b| b.name.name == r.name)
            .map(|b| b.name.name.as_str())
            .ok_or_else(|| PlanError::UnknownBuffer {
                line: r.line,
                stage: stage.name.name.clone(),
                buffer: r.name.clone(),
            })
    }

    /// Lag-0 dependency edges: program order, and writer -> reader.
    fn lag0_edges(&self) -> Vec<Vec<Edge>> {
        let mut adj: Vec<Vec<Edge>> = vec![Vec::new(); self.stages.len()];
        for g in 1..self.stages.len() {
            if self.stages[g].thread == self.stages[g - 1].thread {
                adj[g - 1].push(Edge {
                    to: g,
                    via: None,
                    line: None,
                });
            }
        }
        for g in 0..self.stages.len() {
            for r in &self.stage(g).reads {
                let w = self.writer[r.name.as_str()];
                adj[w].push(Edge {
                    to: g,
                    via: Some(r.name.clone()),
                    line: r.line,
                });
            }
        }
        adj
    }

    fn check_cycles(&self) -> Result<(), PlanError> {
        let adj = self.lag0_edges();
        let mut color = vec![Color::White; adj.len()];
        let mut path: Vec<(usize, Edge)> = Vec::new();
        for start in 0..adj.len() {
            if color[start] == Color::White {
                if let Some(cycle) = dfs(start, &adj, &mut color, &mut path) {
                    return Err(self.cycle_error(&cycle));
                }
            }
        }
        Ok(())
    }

    /// Describes a cycle given as (from, edge) pairs.
    fn cycle_error(&self, cycle: &[(usize, Edge)]) -> PlanError {
        let name = |g: usize| self.stage(g).name.name.clone();
        let mut parts = Vec::new();
        for (from, e) in cycle {
            match &e.via {
                Some(buf) => parts.push(format!(
                    "`{}` reads `{buf}` from `{}` at lag 0",
                    name(e.to),
                    name(*from)
                )),
                None => parts.push(format!(
                    "`{}` runs after `{}` on thread `{}`",
                    name(e.to),
                    name(*from),
                    self.thread_name(e.to)
                )),
            }
        }
        let line = cycle
            .iter()
            .rev()
            .find(|(_, e)| e.via.is_some())
            .and_then(|(_, e)| e.line);
        PlanError::LagZeroCycle {
            line,
            cycle: cycle.iter().map(|(from, _)| name(*from)).collect(),
            description: parts.join("; "),
        }
    }
}

#[derive(Debug, Clone)]
struct Edge {
    to: usize,
    via: Option<String>,
    line: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Color {
    White,
    Grey,
    Black,
}

/// Depth-first search; returns the cycle (as (from, edge) pairs) if one is found.
fn dfs(
    node: usize,
    adj: &[Vec<Edge>],
    color: &mut [Color],
    path: &mut Vec<(usize, Edge)>,
) -> Option<Vec<(usize, Edge)>> {
    color[node] = Color::Grey;
    for e in &adj[node] {
        match color[e.to] {
            Color::Grey => {
                let start = path
                    .iter()
                    .position(|(from, _)| *from == e.to)
                    .unwrap_or(path.len());
                let mut cycle: Vec<(usize, Edge)> = path[start..].to_vec();
                cycle.push((node, e.clone()));
                return Some(cycle);
            }
            Color::White => {
                path.push((node, e.clone()));
                if let Some(c) = dfs(e.to, adj, color, path) {
                    return Some(c);
                }
                path.pop();
            }
            Color::Black => {}
        }
    }
    color[node] = Color::Black;
    None
}

/// Reports the second of two equal names.
fn first_duplicate<'a>(
    kind: &'static str,
    names: impl Iterator<Item = &'a Ident>,
) -> Result<(), PlanError> {
    let mut seen: HashMap<&str, Option<usize>> = HashMap::new();
    for id in names {
        if let Some(first) = seen.get(id.name.as_str()) {
            return Err(PlanError::DuplicateName {
                line: id.line,
                kind,
                name: id.name.clone(),
                first_line: *first,
            });
        }
        seen.insert(&id.name, id.line);
    }
    Ok(())
}

fn check_duplicates(spec: &PipelineSpec) -> Result<(), PlanError> {
    first_duplicate("parameter", spec.params.iter().map(|p| &p.name))?;
    first_duplicate("buffer", spec.buffers.iter().map(|b| &b.name))?;
    if let Some(streams) = &spec.streams {
        first_duplicate("stream", streams.iter())?;
    }
    first_duplicate("thread", spec.threads.iter().map(|t| &t.name))?;
    let stages = spec.threads.iter().flat_map(|t| t.stages.iter());
    first_duplicate("stage", stages.clone().map(|s| &s.name))?;
    for s in stages {
        first_duplicate("read of a buffer in one stage", s.reads.iter())?;
        first_duplicate("write of a buffer in one stage", s.writes.iter())?;
    }
    first_duplicate("max_size request", spec.max_size.iter().map(|o| &o.ring))
}

/// Every buffer's slot count, parameters resolved.
///
/// # Errors
/// [`PlanError`] for a buffer whose slot count names an unknown parameter or is out of range.
pub fn buffer_slots(spec: &PipelineSpec) -> Result<HashMap<String, u64>, PlanError> {
    Ok(resolve_slots(spec)?
        .into_iter()
        .map(|(name, s)| (name.to_owned(), s.count))
        .collect())
}

fn resolve_slots(spec: &PipelineSpec) -> Result<HashMap<&str, ResolvedSlots>, PlanError> {
    let mut out = HashMap::new();
    for p in &spec.params {
        check_range(&p.name.name, p.value, p.name.line)?;
    }
    for b in &spec.buffers {
        let line = b.name.line;
        let (count, param) = match &b.slots {
            Slots::Count(n) => (*n, None),
            Slots::Param(p) => {
                let value = spec.param(p).ok_or_else(|| PlanError::UnknownParam {
                    line,
                    buffer: b.name.name.clone(),
                    param: p.clone(),
                })?;
                (value, Some(p.clone()))
            }
        };
        check_range(&b.name.name, count, line)?;
        if count == 0 {
            return Err(PlanError::ZeroSlots {
                line,
                buffer: b.name.name.clone(),
                param,
            });
        }
        out.insert(b.name.name.as_str(), ResolvedSlots { count, param });
    }
    Ok(out)
}

fn check_overrides(spec: &PipelineSpec) -> Result<(), PlanError> {
    for o in &spec.max_size {
        let name = format!("{}.max_size", o.ring.name);
        if spec.stage(&o.ring.name).is_none() {
            return Err(PlanError::UnknownOverride {
                line: o.ring.line,
                name,
                problem: format!("no stage (ring) named `{}`", o.ring.name),
            });
        }
        check_range(&name, o.value, o.ring.line)?;
        if o.value == 0 {
            return Err(PlanError::InvalidValue {
                line: o.ring.line,
                name,
                value: 0,
                problem: "a ring's max_size must be at least 1".into(),
            });
        }
    }
    Ok(())
}

fn check_streams(spec: &PipelineSpec) -> Result<(), PlanError> {
    let Some(declared) = &spec.streams else {
        return Ok(());
    };
    for s in spec.threads.iter().flat_map(|t| t.stages.iter()) {
        if let Place::Stream(name) = &s.place {
            if !declared.iter().any(|d| &d.name == name) {
                return Err(PlanError::UnknownStream {
                    line: s.place_line.or(s.name.line),
                    stage: s.name.name.clone(),
                    stream: name.clone(),
                });
            }
        }
    }
    Ok(())
}
