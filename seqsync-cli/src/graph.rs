//! `seqsync graph FILE.toml`: lower a command graph and report it; `--run` runs it.

use std::path::PathBuf;

use clap::Args;
use seqsync::backend::Backend;
use seqsync::graph::{Lowering, Report};
use seqsync::internal::backend::GraphBackend;
use seqsync::internal::graph::{report, spec_toml, Analysis};
use seqsync::{AnyBackend, BackendKind};
use seqsync_demo::graph_run as run;

use crate::Failure;

#[derive(Args)]
pub(crate) struct GraphArgs {
    /// The graph file: `[[command]]` entries with name, kind, after, us, or barrier = true.
    file: PathBuf,
    /// streams (exact, no false dependency), cuda-graph (one graph, replayed) or levels
    /// (fork-join baseline).
    #[arg(long, default_value = "streams", value_parser = crate::parse::<Lowering>)]
    lower: Lowering,
    /// auto (CUDA if a GPU is present), host or cuda (for --run).
    #[arg(long, default_value = "auto", value_parser = crate::parse::<BackendKind>)]
    backend: BackendKind,
    /// Print one JSON object and nothing else on stdout.
    #[arg(long)]
    json: bool,
    /// Run the graph and report its makespan.
    #[arg(long)]
    run: bool,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// With --run on the host backend: write a Chrome/Perfetto trace of one run to FILE (each
    /// command on its stream; render it with tools/trace-svg.py).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

pub(crate) fn run(a: GraphArgs) -> Result<(), Failure> {
    // Not read at all if it is larger than a graph file may be.
    if let Ok(m) = std::fs::metadata(&a.file) {
        spec_toml::check_size(m.len()).map_err(|e| Failure {
            message: format!("{}: {e}", a.file.display()),
            code: 2,
        })?;
    }
    let text = std::fs::read_to_string(&a.file).map_err(|e| Failure {
        message: format!("cannot read {}: {e}", a.file.display()),
        code: 2,
    })?;
    let spec = spec_toml::from_str(&text).map_err(|e| Failure {
        message: format!("{}: {e}", a.file.display()),
        code: 2,
    })?;
    let analysis = Analysis::of(&spec.dag);
    let report = report(&spec.dag, &analysis, a.lower);
    let ran = if a.run {
        let backend = AnyBackend::new(a.backend)?;
        let r = match &backend {
            AnyBackend::Host(h) => run_on(h, &spec, a.lower, a.runs)?,
            AnyBackend::Cuda(c) => run_on(c, &spec, a.lower, a.runs)?,
            other => {
                return Err(Failure {
                    message: format!("seqsync graph cannot run on the {} backend", other.name()),
                    code: 2,
                })
            }
        };
        if let Some(path) = &a.trace {
            let AnyBackend::Host(h) = &backend else {
                return Err(Failure {
                    message:
                        "--trace needs --backend host (CUDA runs host functions on one thread)"
                            .into(),
                    code: 2,
                });
            };
            let spans = run::trace(h, &spec, a.lower)?;
            write_trace(path, &spans)?;
        }
        Some((backend.name(), r))
    } else {
        None
    };
    if a.json {
        let mut v = serde_json::to_value(&report).expect("report serializes");
        if let Some((backend, r)) = &ran {
            v["backend"] = (*backend).into();
            v["makespan_us"] = r.makespan_us.into();
            v["critical_path_us"] = r.critical_path_us.into();
            v["serial_us"] = r.serial_us.into();
        }
        println!("{v}");
    } else {
        print_report(&a, &spec.dag, &report, &analysis);
        if let Some((backend, r)) = ran {
            println!(
                "run on {backend}: makespan {:.0} us (median of {}), critical path {} us, serial {} us; makespan/critical path {:.2}",
                r.makespan_us,
                r.runs,
                r.critical_path_us,
                r.serial_us,
                r.makespan_us / r.critical_path_us.max(1) as f64
            );
        }
    }
    Ok(())
}

fn run_on<B: GraphBackend>(
    backend: &B,
    spec: &spec_toml::GraphSpec,
    lowering: Lowering,
    runs: usize,
) -> Result<run::RunReport, Failure> {
    Ok(run::run(backend, spec, lowering, runs)?)
}

fn print_report(
    a: &GraphArgs,
    dag: &seqsync::internal::graph::Dag,
    r: &Report,
    analysis: &Analysis,
) {
    println!(
        "{}: {} commands, {} dependencies ({} in the transitive reduction), width {}",
        a.file.display(),
        r.commands,
        dag.edges(),
        analysis.reduced_edges(),
        r.width
    );
    let mut streams: Vec<Vec<&str>> = Vec::new();
    for x in &r.assignment {
        if streams.len() <= x.stream {
            streams.resize(x.stream + 1, Vec::new());
        }
        let s = &mut streams[x.stream];
        if s.len() <= x.index {
            s.resize(x.index + 1, "");
        }
        s[x.index] = &x.name;
    }
    for (i, s) in streams.iter().enumerate() {
        println!("  stream {i}: {}", s.join(" "));
    }
    for w in &r.waits {
        if w.join {
            println!("  wait: {}'s join -> {}", w.from, w.to);
        } else {
            println!("  wait: {} -> {}", w.from, w.to);
        }
    }
    println!(
        "lowering {:?}: {} streams, {} events (lower bound {}), {} false dependencies",
        a.lower, r.streams, r.events, r.events_lower_bound, r.false_dependencies
    );
}

fn write_trace(path: &std::path::Path, spans: &[run::Span]) -> Result<(), Failure> {
    let mut events = Vec::new();
    let streams = spans.iter().map(|s| s.stream + 1).max().unwrap_or(0);
    for i in 0..streams {
        events.push(serde_json::json!({
            "ph": "M", "name": "thread_name", "pid": 1, "tid": i,
            "args": {"name": format!("stream {i}")}
        }));
    }
    for s in spans {
        events.push(serde_json::json!({
            "ph": "X", "name": s.name, "pid": 1, "tid": s.stream,
            "ts": s.start_us, "dur": s.dur_us,
            "args": {"stage": s.name, "seq": 0}
        }));
    }
    let text = serde_json::json!({ "traceEvents": events }).to_string();
    crate::output::PendingFile::create(path)
        .and_then(|f| f.commit(text.as_bytes()))
        .map_err(|e| Failure {
            message: format!("cannot write trace file {}: {e}", path.display()),
            code: 2,
        })
}
