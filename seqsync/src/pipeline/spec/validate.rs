//! Validation of a [`PipelineSpec`]: names, ranges, dataflow; and the indexed view of a valid
//! spec ([`Topology`]) that `derive` works from.

use std::collections::HashMap;

use super::{Ident, PipelineSpec, Place, Slots, StageSpec, MAX_VALUE};
use crate::error::PlanError;

/// Rejects values too large to be used as seq-id lags.
/// The one max_size limit, [`crate::ring::MAX_SIZE`], in words.
pub(crate) fn max_size_limit() -> String {
    format!(
        "a ring holds at most 2^20 = {} entries (seqsync::ring::MAX_SIZE)",
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
    /// The declared buffer names (a reference is resolved in constant time).
    declared: std::collections::HashSet<&'a str>,
}

impl<'a> Topology<'a> {
    /// Validates `spec` and indexes it.
    pub fn new(spec: &'a PipelineSpec) -> Result<Self, PlanError> {
        check_names(spec)?;
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
            declared: spec.buffers.iter().map(|b| b.name.name.as_str()).collect(),
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
        self.declared
            .get(r.name.as_str())
            .copied()
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

/// Depth-first search from `start` for a cycle through grey nodes, with an explicit stack (a
/// chain of 100 000 stages must not overflow the thread's stack): the cycle as (from, edge)
/// pairs, if one is reachable.
fn dfs(
    start: usize,
    adj: &[Vec<Edge>],
    color: &mut [Color],
    path: &mut Vec<(usize, Edge)>,
) -> Option<Vec<(usize, Edge)>> {
    // (node, index of the next edge of it to follow); `path` holds the edges taken to reach
    // the top of the stack.
    let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
    color[start] = Color::Grey;
    while let Some(&mut (node, ref mut next)) = stack.last_mut() {
        let Some(e) = adj[node].get(*next) else {
            color[node] = Color::Black;
            stack.pop();
            path.pop();
            continue;
        };
        *next += 1;
        match color[e.to] {
            Color::Grey => {
                let from = path
                    .iter()
                    .position(|(from, _)| *from == e.to)
                    .unwrap_or(path.len());
                let mut cycle: Vec<(usize, Edge)> = path[from..].to_vec();
                cycle.push((node, e.clone()));
                return Some(cycle);
            }
            Color::White => {
                path.push((node, e.clone()));
                color[e.to] = Color::Grey;
                stack.push((e.to, 0));
            }
            Color::Black => {}
        }
    }
    None
}

/// Is `id` fit to be a name (see [`crate::name`])?
fn check_name(kind: &'static str, id: &Ident) -> Result<(), PlanError> {
    match crate::name::problem(&id.name) {
        None => Ok(()),
        Some(problem) => Err(PlanError::BadName {
            line: id.line,
            kind,
            name: crate::name::quoted(&id.name),
            problem,
        }),
    }
}

/// Every name the spec declares or refers to.
fn check_names(spec: &PipelineSpec) -> Result<(), PlanError> {
    for p in &spec.params {
        check_name("parameter", &p.name)?;
    }
    for b in &spec.buffers {
        check_name("buffer", &b.name)?;
        if let Slots::Param(p) = &b.slots {
            check_name("parameter", &Ident::at(p.clone(), b.name.line))?;
        }
    }
    for s in spec.streams.iter().flatten() {
        check_name("stream", s)?;
    }
    for t in &spec.threads {
        check_name("thread", &t.name)?;
        for s in &t.stages {
            check_name("stage", &s.name)?;
            if let Some(stream) = s.place.stream() {
                check_name("stream", &Ident::at(stream, s.place_line.or(s.name.line)))?;
            }
            for r in &s.reads {
                check_name("buffer", r)?;
            }
            for w in &s.writes {
                check_name("buffer", w)?;
            }
        }
    }
    for o in &spec.max_size {
        check_name("ring", &o.ring)?;
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(n: usize, back_edge: bool) -> Vec<Vec<Edge>> {
        let edge = |to| Edge {
            to,
            via: None,
            line: None,
        };
        let mut adj: Vec<Vec<Edge>> = (0..n)
            .map(|g| if g + 1 < n { vec![edge(g + 1)] } else { vec![] })
            .collect();
        if back_edge {
            adj[n - 1].push(edge(n / 2));
        }
        adj
    }

    /// The cycle search walks a chain of a million stages without recursing (it used to
    /// overflow the stack near 100 000), and finds a cycle at its far end.
    #[test]
    fn the_cycle_search_walks_a_long_chain_on_its_own_stack() {
        let n = 1_000_000;
        for back_edge in [false, true] {
            let adj = chain(n, back_edge);
            let mut color = vec![Color::White; n];
            let mut path = Vec::new();
            let cycle = dfs(0, &adj, &mut color, &mut path);
            match back_edge {
                false => assert!(cycle.is_none() && path.is_empty()),
                true => {
                    let cycle = cycle.expect("the back edge closes a cycle");
                    assert_eq!(cycle.len(), n - n / 2);
                    assert_eq!(cycle[0].0, n / 2);
                    assert_eq!(
                        cycle.last().map(|(from, e)| (*from, e.to)),
                        Some((n - 1, n / 2))
                    );
                }
            }
        }
    }
}
