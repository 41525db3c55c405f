//! The [`Plan`]: what `derive` produces and the runtime, the deadlock check and a graph
//! lowering consume. Every op names its stage, ring and stream by index and its lag as an
//! `i64`; the plan's JSON and text show names.

use std::fmt;

use serde::Serialize;

use super::spec::Place;

/// How a consumer consumes a ring entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConsumerKind {
    /// A stream waits on the event (`EventRingbuf::wait`).
    Wait,
    /// The host thread blocks on the event (`EventRingbuf::synchronize`).
    Synchronize,
}

/// One consumer of a ring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Consumer {
    /// The stage that waits (for a `sync`, the producer stage itself).
    pub stage: String,
    /// The host thread making the call.
    pub thread: String,
    /// It consumes seq `s - lag` while handling batch `s` (never negative).
    pub lag: i64,
    /// Whether the call blocks until the seq is recorded.
    pub blocking: bool,
    /// Stream wait or host synchronize.
    pub kind: ConsumerKind,
    /// The buffer this wait protects (`None` for a `sync`).
    pub via: Option<String>,
}

/// One EventRingbuf: its parameters and why they are what they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ring {
    /// Ring name (= producer stage name).
    pub name: String,
    /// The stage that records on it.
    pub producer: String,
    /// The producer's host thread.
    pub thread: String,
    /// Where the producer runs.
    pub place: Place,
    /// Number of waits and synchronizes that name this ring.
    pub nconsumers: u32,
    /// The ring's capacity.
    pub max_size: u64,
    /// Smallest max_size that keeps the producer's thread from blocking on itself.
    pub bound: u64,
    /// Whether `record` blocks when the ring is full (a consumer is on another thread).
    pub record_blocking: bool,
    /// Why `max_size` has its value, in words.
    pub reason: String,
    /// The consumers, in thread and program order.
    pub consumers: Vec<Consumer>,
}

/// One operation of a thread's loop body, executed for batch `s` = the
/// iteration number. This is what a runtime executes.
///
/// Stages, rings and streams are indices into [`Plan::stages`], [`Plan::rings`] and
/// [`Plan::streams`]; ring `i` is the ring of stage `i`. Lags are `i64`, the type of a seq.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `ring.wait(stream, s - lag, blocking)` on behalf of `stage`.
    Wait {
        /// The stage about to launch.
        stage: usize,
        /// The ring waited on.
        ring: usize,
        /// Lag subtracted from the batch number (never negative).
        lag: i64,
        /// Blocking flag of the call.
        blocking: bool,
        /// The stream made to wait (the stage's stream).
        stream: usize,
    },
    /// `ring.synchronize(s - lag, blocking)`: the host thread waits.
    Synchronize {
        /// The stage on whose behalf the thread waits.
        stage: usize,
        /// The ring waited on.
        ring: usize,
        /// Lag subtracted from the batch number (never negative).
        lag: i64,
        /// Blocking flag of the call.
        blocking: bool,
    },
    /// Launch the stage's work for batch `s`.
    Launch {
        /// The stage.
        stage: usize,
    },
    /// `ring.record(stream, s, blocking)`, or for a host stage
    /// `ring.record_host(s, blocking)`.
    Record {
        /// The stage that just launched.
        stage: usize,
        /// Its ring.
        ring: usize,
        /// Blocking flag of the call.
        blocking: bool,
        /// The stream recorded on (`None` for a host stage).
        stream: Option<usize>,
    },
}

/// The operations of one host thread's loop body, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPlan {
    /// Thread name.
    pub name: String,
    /// Loop body.
    pub ops: Vec<Op>,
}

/// One stage, as the plan's ops refer to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StagePlan {
    /// Stage name (= its ring's name).
    pub name: String,
    /// Index of its thread in [`Plan::threads`].
    pub thread: usize,
    /// Index of its stream in [`Plan::streams`]; `None` for a host stage.
    pub stream: Option<usize>,
}

/// Everything a runtime needs: the stages, streams and rings, and each thread's loop body,
/// with every name resolved to an index.
///
/// [`derive`](crate::pipeline::derive) is its only constructor, so every index an op holds is
/// in range and every ring's consumer count matches its waits: the deadlock check, the
/// throughput prediction and the runtime take that as given. Read it with the accessors.
/// Serialized (and displayed) with names, as the spec wrote them.
///
/// ```
/// use seqsync::pipeline::{derive, PipelineSpec};
///
/// let spec = PipelineSpec::from_toml(
///     r#"
///     [buffers]
///     x = 2
///     [[thread]]
///     name = "main"
///     [[thread.stage]]
///     name = "fill"
///     stream = "a"
///     writes = ["x"]
///     [[thread.stage]]
///     name = "read"
///     stream = "b"
///     reads = ["x"]
///     "#,
/// )?;
/// let plan = derive(&spec)?;
/// assert_eq!(plan.streams(), ["a", "b"]);
/// assert_eq!(plan.ring("fill").unwrap().nconsumers, 1); // read waits on it
/// // fill: wait for read of batch s - 2 (the slot it overwrites), launch, record;
/// // read: wait for fill, launch, record.
/// assert_eq!(plan.threads()[0].ops.len(), 6);
/// # Ok::<(), seqsync::pipeline::PlanError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Every stage, in thread and program order; stage `i` produces ring `i`.
    pub(crate) stages: Vec<StagePlan>,
    /// Every stream name, in order of first use.
    pub(crate) streams: Vec<String>,
    /// One ring per stage, in thread and program order.
    pub(crate) rings: Vec<Ring>,
    /// One entry per host thread, in declaration order.
    pub(crate) threads: Vec<ThreadPlan>,
}

impl Plan {
    /// Every stage, in thread and program order; stage `i` produces ring `i`.
    pub fn stages(&self) -> &[StagePlan] {
        &self.stages
    }

    /// Every stream name, in order of first use.
    pub fn streams(&self) -> &[String] {
        &self.streams
    }

    /// One ring per stage, in thread and program order.
    pub fn rings(&self) -> &[Ring] {
        &self.rings
    }

    /// One entry per host thread, in declaration order.
    pub fn threads(&self) -> &[ThreadPlan] {
        &self.threads
    }

    /// The ring named `name`.
    pub fn ring(&self, name: &str) -> Option<&Ring> {
        self.rings.iter().find(|r| r.name == name)
    }

    /// The index of the ring named `name`.
    pub fn ring_index(&self, name: &str) -> Option<usize> {
        self.rings.iter().position(|r| r.name == name)
    }

    /// The index of the stage named `name`.
    pub fn stage_index(&self, name: &str) -> Option<usize> {
        self.stages.iter().position(|s| s.name == name)
    }

    /// The loop body of thread `name`.
    pub fn thread(&self, name: &str) -> Option<&ThreadPlan> {
        self.threads.iter().find(|t| t.name == name)
    }

    /// The plan without `stage`'s waits (and synchronizes) on `ring`, the ring's consumer count
    /// lowered to match: a plan that misorders on purpose, for negative controls. Every index
    /// stays in range. `None` if `stage` has no such wait.
    pub(crate) fn without_wait(mut self, stage: &str, ring: &str) -> Option<Plan> {
        let (g, r) = (self.stage_index(stage)?, self.ring_index(ring)?);
        let mut removed = 0u32;
        for t in &mut self.threads {
            t.ops.retain(|op| {
                let hit = matches!(*op, Op::Wait { stage, ring, .. } | Op::Synchronize { stage, ring, .. }
                    if (stage, ring) == (g, r));
                removed += u32::from(hit);
                !hit
            });
        }
        if removed == 0 {
            return None;
        }
        let ring = &mut self.rings[r];
        ring.nconsumers -= removed;
        ring.consumers.retain(|c| c.stage != stage);
        Some(self)
    }

    /// The plan with every wait and synchronize of thread `thread` given the blocking flag
    /// `blocking`: for tests of the deadlock check. `None` if there is no such thread.
    pub(crate) fn with_waits_blocking(mut self, thread: &str, blocking: bool) -> Option<Plan> {
        let t = self.threads.iter_mut().find(|t| t.name == thread)?;
        for op in &mut t.ops {
            if let Op::Wait { blocking: b, .. } | Op::Synchronize { blocking: b, .. } = op {
                *b = blocking;
            }
        }
        let thread = thread.to_string();
        for ring in &mut self.rings {
            for c in ring.consumers.iter_mut().filter(|c| c.thread == thread) {
                c.blocking = blocking;
            }
        }
        Some(self)
    }

    /// The plan as pretty JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain structs of strings and integers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// `op` with names instead of indices (`?` for an index out of range).
    pub fn named(&self, op: &Op) -> NamedOp<'_> {
        let stage = |i: usize| self.stages.get(i).map_or("?", |s| s.name.as_str());
        let ring = |i: usize| self.rings.get(i).map_or("?", |r| r.name.as_str());
        let stream = |i: usize| self.streams.get(i).map_or("?", String::as_str);
        match *op {
            Op::Wait {
                stage: g,
                ring: r,
                lag,
                blocking,
                stream: st,
            } => NamedOp::Wait {
                stage: stage(g),
                ring: ring(r),
                lag,
                blocking,
                stream: stream(st),
            },
            Op::Synchronize {
                stage: g,
                ring: r,
                lag,
                blocking,
            } => NamedOp::Synchronize {
                stage: stage(g),
                ring: ring(r),
                lag,
                blocking,
            },
            Op::Launch { stage: g } => NamedOp::Launch { stage: stage(g) },
            Op::Record {
                stage: g,
                ring: r,
                blocking,
                stream: st,
            } => NamedOp::Record {
                stage: stage(g),
                ring: ring(r),
                blocking,
                stream: st.map(stream),
            },
        }
    }
}

/// An [`Op`] with names instead of indices ([`Plan::named`]): what the plan's JSON and text
/// show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "op")]
#[allow(missing_docs)] // the fields are those of `Op`, named
pub enum NamedOp<'a> {
    /// See [`Op::Wait`].
    Wait {
        stage: &'a str,
        ring: &'a str,
        lag: i64,
        blocking: bool,
        stream: &'a str,
    },
    /// See [`Op::Synchronize`].
    Synchronize {
        stage: &'a str,
        ring: &'a str,
        lag: i64,
        blocking: bool,
    },
    /// See [`Op::Launch`].
    Launch { stage: &'a str },
    /// See [`Op::Record`].
    Record {
        stage: &'a str,
        ring: &'a str,
        blocking: bool,
        stream: Option<&'a str>,
    },
}

impl Serialize for Plan {
    /// `{"rings": [...], "threads": [{"name", "ops": [{"op": "Wait", "stage", "ring", ...}]}]}`,
    /// every index replaced by its name.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct NamedThread<'a> {
            name: &'a str,
            ops: Vec<NamedOp<'a>>,
        }
        #[derive(Serialize)]
        struct NamedPlan<'a> {
            rings: &'a [Ring],
            threads: Vec<NamedThread<'a>>,
        }
        NamedPlan {
            rings: &self.rings,
            threads: self
                .threads
                .iter()
                .map(|t| NamedThread {
                    name: &t.name,
                    ops: t.ops.iter().map(|op| self.named(op)).collect(),
                })
                .collect(),
        }
        .serialize(serializer)
    }
}

/// `s` or `s-3`.
fn seq(lag: i64) -> String {
    if lag == 0 {
        "s".to_string()
    } else {
        format!("s-{lag}")
    }
}

impl fmt::Display for NamedOp<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = |blocking: &bool| {
            if *blocking {
                "blocking"
            } else {
                "non-blocking"
            }
        };
        match self {
            NamedOp::Wait {
                ring,
                lag,
                blocking,
                stream,
                ..
            } => write!(f, "{ring}.wait({stream}, {}, {})", seq(*lag), b(blocking)),
            NamedOp::Synchronize {
                ring,
                lag,
                blocking,
                ..
            } => write!(f, "{ring}.synchronize({}, {})", seq(*lag), b(blocking)),
            NamedOp::Launch { stage } => write!(f, "launch {stage}(s)"),
            NamedOp::Record {
                ring,
                blocking,
                stream,
                ..
            } => {
                let place = stream.unwrap_or("host");
                write!(f, "{ring}.record({place}, s, {})", b(blocking))
            }
        }
    }
}

impl fmt::Display for Consumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ConsumerKind::Wait => "",
            ConsumerKind::Synchronize => " sync",
        };
        let blocking = if self.blocking { " blocking" } else { "" };
        write!(f, "{}{kind}@{}{blocking}", self.stage, self.lag)
    }
}

/// Renders rows as left-aligned columns separated by two spaces.
fn table(rows: &[Vec<String>]) -> String {
    let ncols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..ncols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, s)| format!("{s:<w$}", w = widths[c]))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

impl fmt::Display for Plan {
    /// A table of rings (consumers as `stage@lag`, `sync` for a host
    /// synchronize, `blocking` for a blocking call), then each thread's loop.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rows = vec![[
            "ring",
            "producer",
            "record",
            "consumers",
            "nconsumers",
            "max_size",
            "reason",
        ]
        .map(String::from)
        .to_vec()];
        for r in &self.rings {
            let consumers: Vec<String> = r.consumers.iter().map(|c| c.to_string()).collect();
            rows.push(vec![
                r.name.clone(),
                format!("{} on {} ({})", r.producer, r.place, r.thread),
                if r.record_blocking {
                    "blocking"
                } else {
                    "non-blocking"
                }
                .to_string(),
                consumers.join(", "),
                r.nconsumers.to_string(),
                r.max_size.to_string(),
                r.reason.clone(),
            ]);
        }
        f.write_str(&table(&rows))?;
        for t in &self.threads {
            writeln!(f, "\nthread {}: for s in 0.. {{", t.name)?;
            for op in &t.ops {
                writeln!(f, "    {}", self.named(op))?;
            }
            writeln!(f, "}}")?;
        }
        Ok(())
    }
}
