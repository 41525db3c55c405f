//! The seed's pipeline on the pipeline runtime ([`Engine::Pipeline`]): the seed spec is
//! declared (same stage and stream names as `specs/seed.toml`), derived, and run by
//! [`seqsync::pipeline::run`] with stage closures that call the same [`Device`] methods
//! as the hand-written pipeline (`pipeline.rs`, variant Seed): get_data's input-buffer pool
//! events in the h2g stage, process_data after g2h's synchronize.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use super::device::{Device, Stream};
use super::names::parse_name;
use super::pipeline::{marked, Checker, InputPool, RunOptions, Variant, Verification};
use seqsync::backend::Backend;
use seqsync::internal::pipeline::{derive_unchecked, Slots};
use seqsync::pipeline::{self, RunConfig, StageCtx, Stages};
use seqsync::pipeline::{derive, PipelineSpec, Plan, StageSpec};
use seqsync::{Error, Result};

/// Which code drives the demo's pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Five hand-built rings and two hand-written thread loops, as in the seed.
    #[default]
    HandWritten,
    /// The seed spec, derived and run by the pipeline runtime (variant seed only).
    Pipeline,
    /// K batches' bodies lowered to a CUDA graph (host: the graph layer's host lowering),
    /// instantiated once per slot group and replayed, ordered by rings (variant seed only).
    Graph,
    /// One graph per ring slot and launch size: each batch launched as it arrives, K batches a
    /// launch only while batches wait (variant seed only).
    Adaptive,
    /// One kernel resident on the device for the whole run, taking each batch as it arrives
    /// (a store on the host releases it, no launch): copy in, f, g, h and copy out of each
    /// element in one thread, the host buffers read and written in place (variant seed only;
    /// on CUDA it needs unified addressing).
    Resident,
}

impl Engine {
    /// Every engine.
    pub const ALL: [Engine; 5] = [
        Engine::HandWritten,
        Engine::Pipeline,
        Engine::Graph,
        Engine::Adaptive,
        Engine::Resident,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Engine::HandWritten => "handwritten",
            Engine::Pipeline => "pipeline",
            Engine::Graph => "graph",
            Engine::Adaptive => "adaptive",
            Engine::Resident => "resident",
        }
    }

    /// Runs on graphs with `depth * K` slots in every buffer ([`Engine::Graph`]: depth
    /// [`GRAPH_DEPTH`](super::GRAPH_DEPTH); [`Engine::Adaptive`]: its own or automatic depth).
    pub fn uses_graphs(self) -> bool {
        matches!(self, Engine::Graph | Engine::Adaptive)
    }

    /// Has the same slots in every buffer, host input and output batches included (batch `s`
    /// in slot `s % S` everywhere): the graph engines and [`Engine::Resident`].
    pub fn slots_everywhere(self) -> bool {
        self.uses_graphs() || self == Engine::Resident
    }

    /// Copies batches between host and device as told (`--copy`, [`CopyBy`](super::CopyBy)):
    /// the graph engines in their nodes, [`Engine::Resident`] in its kernel (in place) or on
    /// copy streams.
    pub fn chooses_copies(self) -> bool {
        matches!(self, Engine::Graph | Engine::Adaptive | Engine::Resident)
    }

    /// Checks batches on process_data worker threads (`--process-threads`).
    pub fn has_process_threads(self) -> bool {
        matches!(self, Engine::Adaptive | Engine::Resident)
    }
}

impl std::str::FromStr for Engine {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "hand-written" => Ok(Engine::HandWritten),
            s => parse_name(s, "engine", &Engine::ALL, Engine::name),
        }
    }
}

/// The seed's example as a [`PipelineSpec`]: the names of `specs/seed.toml`, with the four
/// buffers' slot counts as parameters `nin`, `nx`, `ny`, `nout`.
pub fn seed_spec(nin: u64, nx: u64, ny: u64, nout: u64) -> PipelineSpec {
    PipelineSpec::builder()
        .param("nin", nin)
        .param("nx", nx)
        .param("ny", ny)
        .param("nout", nout)
        .buffer("in", "nin")
        .buffer("x", "nx")
        .buffer("y", "ny")
        .buffer("out", "nout")
        .thread("h2g")
        .stage("h2g", StageSpec::on_stream("s_h2g").writes("in"))
        .stage("f", StageSpec::on_stream("s_f").reads("in").writes("x"))
        .stage("g", StageSpec::on_stream("s_g").reads("in").writes("y"))
        .stage(
            "h",
            StageSpec::on_stream("s_h")
                .reads("x")
                .reads("y")
                .writes("out"),
        )
        .thread("g2h")
        .stage("g2h", StageSpec::on_stream("s_g2h").reads("out").sync())
        .build()
        .expect("the seed spec is valid")
}

/// The slot counts `(nin, nx, ny, nout)` of a spec shaped like the seed's: the same threads,
/// stages, streams, reads and writes, so that its derived loop bodies are the seed's (ring
/// sizes may differ through `max_size` overrides).
///
/// # Errors
/// [`Error::InvalidArgument`] naming what differs, or the spec's own error.
pub fn seed_shape(spec: &PipelineSpec) -> Result<(usize, usize, usize, usize)> {
    let bad = |m: String| crate::invalid("spec", m);
    let count = |buffer: &str| -> Result<u64> {
        let b = spec
            .buffers
            .iter()
            .find(|b| b.name.name == buffer)
            .ok_or_else(|| bad(format!("not shaped like the seed: no buffer `{buffer}`")))?;
        match &b.slots {
            Slots::Count(n) => Ok(*n),
            Slots::Param(p) => spec
                .param(p)
                .ok_or_else(|| bad(format!("buffer `{buffer}` uses unknown parameter `{p}`"))),
        }
    };
    let (nin, nx, ny, nout) = (count("in")?, count("x")?, count("y")?, count("out")?);
    let mine = derive_unchecked(spec).map_err(|e| bad(e.to_string()))?;
    let seed = derive_unchecked(&seed_spec(nin, nx, ny, nout)).map_err(|e| bad(e.to_string()))?;
    // Indices alike and names alike: the same loop bodies over the same stages and streams.
    if mine.threads() != seed.threads()
        || mine.stages() != seed.stages()
        || mine.streams() != seed.streams()
    {
        return Err(bad(
            "not shaped like the seed (threads h2g: h2g, f, g, h and g2h: g2h with sync, on \
             streams s_h2g, s_f, s_g, s_h, s_g2h, reading and writing in, x, y, out)"
                .into(),
        ));
    }
    let us = |n: u64| usize::try_from(n).map_err(|_| bad(format!("{n} slots is too many")));
    Ok((us(nin)?, us(nx)?, us(ny)?, us(nout)?))
}

/// The plan the pipeline engine runs: `spec` (seed-shaped) or the seed spec with the given
/// slot counts, derived with its bounds checked.
pub(crate) fn plan_for(spec: Option<&PipelineSpec>, counts: [usize; 4]) -> Result<Plan> {
    let [nin, nx, ny, nout] = counts.map(|c| c as u64);
    let owned;
    let spec = match spec {
        Some(s) => s,
        None => {
            owned = seed_spec(nin, nx, ny, nout);
            &owned
        }
    };
    derive(spec).map_err(|e| crate::invalid("spec", e.to_string()))
}

fn stream_of<'a, B: Backend>(cx: &StageCtx<'a, B>) -> Result<&'a B::Stream> {
    cx.stream.ok_or_else(|| Error::Stage {
        stage: cx.stage.to_string(),
        message: "the demo's stages run on streams, not on the host".into(),
    })
}

/// Run the seed's pipeline through the runtime; returns the wall time and what process_data
/// saw, with the runtime's latencies ([`Verification::stage_latency`]).
pub(crate) fn run<D: Device>(
    dev: &D,
    plan: &Plan,
    opt: &RunOptions<'_>,
) -> Result<(Duration, Verification)> {
    // `DemoConfig::validate` refuses the other variants and `--drop-wait` with this engine.
    debug_assert!(opt.variant == Variant::Seed && opt.drop.is_none());
    let l = *dev.layout();
    let (nin, nx, ny, nout, np) = l.lags();
    let streams: HashMap<String, Stream<D>> = seqsync::pipeline::new_streams(dev.backend(), plan)?;
    let b = dev.backend();
    let pool = InputPool::new(dev)?;
    let checker = Checker::paced(opt.batches, opt.rate);
    let tracing = opt.spans.is_some();
    let slot = |s: i64, n: i64| (s % n) as usize;
    let stats = {
        // With --trace (and --measure), each launch's host time is a span on its thread's
        // track too.
        let launched = |cx: &StageCtx<'_, D::B>, f: &dyn Fn() -> Result<()>| match opt.spans {
            Some(spans) => spans.time(
                &format!("thread {}", cx.thread),
                &format!("launch {}", cx.stage),
                cx.seq,
                f,
            ),
            None => f(),
        };
        let stages = Stages::<D::B>::new()
            .stage("h2g", |cx| {
                launched(cx, &|| {
                    dev.chaos_pause();
                    let (s, st) = (cx.seq, stream_of(cx)?);
                    let hin = slot(s, np);
                    // get_data: the host batch for s (its buffer's previous copy has finished).
                    pool.wait_free(dev, s)?;
                    dev.fill_input(s);
                    checker.issued(s);
                    marked(dev, tracing, st, "s_h2g", "copy in", s, || {
                        dev.copy_in(st, hin, slot(s, nin))
                    })?;
                    pool.copy_enqueued(dev, st, s)
                })
            })
            .stage("f", |cx| {
                launched(cx, &|| {
                    let (s, st) = (cx.seq, stream_of(cx)?);
                    marked(dev, tracing, st, "s_f", "f", s, || {
                        dev.launch_f(st, slot(s, nin), slot(s, nx))
                    })
                })
            })
            .stage("g", |cx| {
                launched(cx, &|| {
                    let (s, st) = (cx.seq, stream_of(cx)?);
                    marked(dev, tracing, st, "s_g", "g", s, || {
                        dev.launch_g(st, slot(s, nin), slot(s, ny))
                    })?;
                    dev.chaos_pause();
                    Ok(())
                })
            })
            .stage("h", |cx| {
                launched(cx, &|| {
                    let (s, st) = (cx.seq, stream_of(cx)?);
                    marked(dev, tracing, st, "s_h", "h", s, || {
                        dev.launch_h(st, slot(s, nx), slot(s, ny), slot(s, nout))
                    })
                })
            })
            .stage("g2h", |cx| {
                launched(cx, &|| {
                    dev.chaos_pause();
                    let (s, st) = (cx.seq, stream_of(cx)?);
                    marked(dev, tracing, st, "s_g2h", "copy out", s, || {
                        dev.copy_out(st, slot(s, nout), 0)
                    })
                })
            })
            .after_sync("g2h", |s| {
                // process_data: the copy into host output buffer 0 has completed.
                let process = || checker.process(dev, 0, s);
                match opt.spans {
                    Some(spans) => spans.time("process", "process", s, process),
                    None => process(),
                }
                if let Some(p) = opt.progress {
                    p(s + 1);
                }
                Ok(())
            });
        // With --trace, every blocking ring call becomes a span on its thread's track.
        let stages = match opt.spans {
            Some(spans) => stages.observe(move |c| {
                let label = format!("{} {}", c.call, c.ring);
                spans.add(
                    &format!("thread {}", c.thread),
                    &label,
                    c.seq,
                    c.start,
                    c.end,
                );
            }),
            None => stages,
        };
        pipeline::run(RunConfig {
            plan,
            backend: b,
            streams: &streams,
            stages: &stages,
            batches: opt.batches,
            stall_timeout: Some(super::watchdog::stall_timeout(dev.layout())),
        })?
    };
    let mut verification = checker.finish();
    verification.stage_latency = Some(stats.latency);
    Ok((stats.wall, verification))
}
