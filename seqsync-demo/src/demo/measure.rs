//! One demo run on one device: warm up, the timed runs (alternating with the baselines), and
//! the report with its bounds and ratios.

use std::time::Instant;

use seqsync::Result;

use super::device::Device;
use super::dispatch::{graph_depth, graph_k, graph_span};
use super::pipeline::{self, RunOptions, Verification};
use super::trace::{self, HostSpans};
use super::{
    adaptive_engine, baseline, bounds, engine, graph_engine, host_steal, pool_pipeline,
    resident_engine,
};
use super::{DemoConfig, DemoReport, Engine, GraphEdge, Release, SlotWait, Variant};

pub(super) fn run_on<D: Device>(
    dev: &D,
    device: String,
    config: &DemoConfig,
    batch_bytes: usize,
) -> Result<DemoReport> {
    let gb = |secs: f64, batches: i64| batches as f64 * batch_bytes as f64 / secs / 1e9;
    let t0 = Instant::now();
    let spans = config.trace.then(|| HostSpans::new(t0));
    let progress = config.progress.clone();
    let batches = config.batches;
    let report_progress = move |done: i64| {
        if let Some(p) = &progress {
            p(done, batches);
        }
    };
    let plan = match config.engine {
        Engine::Pipeline => Some(engine::plan_for(
            config.spec.as_ref(),
            [config.nin, config.nx, config.ny, config.nout],
        )?),
        Engine::HandWritten | Engine::Graph | Engine::Adaptive | Engine::Resident => None,
    };
    let graph_batches = config
        .engine
        .uses_graphs()
        .then(|| graph_k(config, batch_bytes));
    let graph_span = (config.engine == Engine::Adaptive).then(|| graph_span(config, batch_bytes));
    // Engine::Adaptive: the release asked for, or the one the backend's timelines allow.
    let release = match config.engine {
        Engine::Adaptive => Some(Release::on(
            config
                .release
                .or((config.drop_edge == Some(GraphEdge::ArrivalWait)).then_some(Release::Device)),
            dev.backend(),
            batch_bytes,
        )?),
        _ => None,
    };
    let slot_wait = release
        .map(|r| SlotWait::for_release(config.slot_wait, r))
        .transpose()?;
    let process_threads = config.engine.has_process_threads().then(|| {
        config
            .process_threads
            .unwrap_or_else(|| pipeline::auto_process_threads(dev.layout()))
    });
    let pool = match config.variant {
        Variant::Pool => Some((pool_pipeline::pool_for(dev)?, pipeline::Streams::new(dev)?)),
        _ => None,
    };
    let pool_stats = std::sync::Mutex::new(None);
    // Engine::Adaptive: launches of the first timed run.
    let launches = std::sync::Mutex::new(None::<u64>);
    let run_once = |o: &RunOptions<'_>| match (&plan, &pool, graph_batches) {
        (Some(p), _, _) => engine::run(dev, p, o),
        (None, Some((pool, streams)), _) => {
            let (wall, v, stats) = pool_pipeline::run(dev, pool, streams, o)?;
            let mut kept = pool_stats.lock().unwrap_or_else(|e| e.into_inner());
            if o.spans.is_some() || o.progress.is_some() {
                kept.get_or_insert(stats);
            }
            Ok((wall, v))
        }
        (None, None, None) if config.engine == Engine::Resident => resident_engine::run(
            dev,
            o,
            process_threads.expect("resolved for the resident engine"),
            config.drop_edge,
        ),
        (None, None, Some(k)) if config.engine == Engine::Adaptive => {
            let how = adaptive_engine::Launching {
                k,
                span: graph_span.expect("resolved for the adaptive engine"),
                depth: graph_depth(config, batch_bytes),
                release: release.expect("resolved for the adaptive engine"),
                slot_wait: slot_wait.expect("resolved for the adaptive engine"),
                process_threads: process_threads.expect("resolved for the adaptive engine"),
            };
            let (wall, v, n) = adaptive_engine::run(dev, o, how, config.drop_edge)?;
            if o.progress.is_some() {
                let mut kept = launches.lock().unwrap_or_else(|e| e.into_inner());
                kept.get_or_insert(n);
            }
            Ok((wall, v))
        }
        (None, None, Some(k)) => graph_engine::run(dev, o, k, config.drop_edge),
        (None, None, None) => pipeline::run(dev, o),
    };
    // Warm up (module load, first launches, allocations touched) outside the timed run.
    let warm = RunOptions {
        batches: batches.min(4),
        variant: config.variant,
        host_slots: config.host_slots,
        drop: None,
        spans: None,
        progress: None,
        rate: None,
    };
    run_once(&warm)?;
    let opt = RunOptions {
        batches,
        variant: config.variant,
        host_slots: config.host_slots,
        drop: config.drop_wait,
        spans: spans.as_ref(),
        progress: Some(&report_progress),
        rate: config.rate,
    };
    let repeat = config.repeat.max(1);
    let (mut walls, mut hand_walls, mut written_walls) = (Vec::new(), Vec::new(), Vec::new());
    let mut verification: Option<Verification> = None;
    // The hypervisor's steal during the engine's timed runs (not the baselines').
    let mut steal: Option<f64> = None;
    for r in 0..repeat {
        let opt = RunOptions {
            spans: if r == 0 { opt.spans } else { None },
            ..opt
        };
        let before = host_steal::steal_ms();
        let (wall, v) = run_once(&opt)?;
        if let (Some(a), Some(b)) = (before, host_steal::steal_ms()) {
            *steal.get_or_insert(0.0) += (b - a).max(0.0);
        }
        walls.push(wall.as_secs_f64());
        // Keep the first run's verification, or the first that failed.
        if verification
            .as_ref()
            .is_none_or(|kept| kept.matched == batches && v.matched != batches)
        {
            verification = Some(v);
        }
        if config.baselines {
            let (hand, hv) = baseline::handrolled(dev, batches)?;
            check_baseline("hand-rolled", &hv, batches)?;
            hand_walls.push(hand.as_secs_f64());
            if config.engine != Engine::HandWritten || config.variant == Variant::Pool {
                // The hand-written pipeline on fixed rings, in the same run, alternating with
                // the engine's (or the pool variant's).
                let plain = RunOptions {
                    spans: None,
                    progress: None,
                    drop: None,
                    rate: None,
                    variant: if config.variant == Variant::Pool {
                        Variant::Seed
                    } else {
                        opt.variant
                    },
                    ..opt
                };
                let (w, hv) = pipeline::run(dev, &plain)?;
                check_baseline("hand-written pipeline", &hv, batches)?;
                written_walls.push(w.as_secs_f64());
            }
        }
    }
    let v = verification.expect("at least one run");
    let wall = median(walls);
    let trace = match &spans {
        Some(s) => {
            let device_spans = trace::spans_from_marks(dev.take_marks(t0)?);
            Some(trace::to_chrome_json(&device_spans, &s.take()))
        }
        None => None,
    };
    let gbps = gb(wall, batches);
    let mut report = DemoReport {
        backend: if device == "host" { "host" } else { "cuda" },
        device,
        variant: config.variant,
        engine: config.engine,
        batches,
        batch_bytes,
        nin: config.nin,
        nx: config.nx,
        ny: config.ny,
        nout: config.nout,
        intensity: config.intensity,
        chaos: config.chaos,
        verified: v.matched,
        wrong: v.wrong,
        wrong_seqs: v.wrong_seqs.clone(),
        missing: v.missing,
        duplicated: v.duplicated,
        wall_s: wall,
        host_steal_ms: steal,
        gbps,
        stages: Vec::new(),
        bound_gbps: None,
        bound_stage: None,
        compute_bound_gbps: None,
        copies_bound_gbps: None,
        resource_bound_gbps: None,
        ratio_to_resource_bound: None,
        device_bound_gbps: None,
        device_bound_batches: None,
        device_bound_span: None,
        device_bound_copy: None,
        device_bound_by: None,
        ratio_to_device_bound: None,
        isolated_latency_us: None,
        p50_over_isolated: None,
        p99_over_isolated: None,
        repeat: config.repeat.max(1),
        ratio_to_bound: None,
        serialized_gbps: None,
        handrolled_gbps: None,
        ratio_to_serialized: None,
        ratio_to_handrolled: None,
        handwritten_gbps: None,
        ratio_to_handwritten: None,
        pool: pool_stats.into_inner().unwrap_or_else(|e| e.into_inner()),
        graph_batches,
        graph_span,
        copy_by: config
            .engine
            .chooses_copies()
            .then_some(dev.layout().copy_by),
        batches_per_launch: launches
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .map(|n| batches as f64 / n.max(1) as f64),
        release,
        slot_wait,
        process_threads,
        latency_p50_us: v.latency_us(0.5),
        latency_p99_us: v.latency_us(0.99),
        latency_max_us: v.latency_max_us(),
        latency_histogram_us: v.latency_histogram_us(),
        rate: config.rate,
        stage_latency: v.stage_latency.clone(),
        phases: v.phases.clone(),
        trace,
    };
    if config.baselines {
        add_baselines(dev, config, &mut report, median(hand_walls), gb)?;
        if !written_walls.is_empty() {
            let written = gb(median(written_walls), batches);
            report.handwritten_gbps = Some(written);
            report.ratio_to_handwritten = Some(report.gbps / written);
        }
    }
    Ok(report)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn add_baselines<D: Device>(
    dev: &D,
    config: &DemoConfig,
    report: &mut DemoReport,
    hand_wall: f64,
    gb: impl Fn(f64, i64) -> f64,
) -> Result<()> {
    let stages = baseline::stages(dev, config.batches.min(200))?;
    let together = stages
        .iter()
        .find(|s| s.stage.contains("together"))
        .map(|s| s.seconds_per_batch);
    let slowest = stages
        .iter()
        .filter(|s| !s.stage.contains("together"))
        .max_by(|a, b| a.seconds_per_batch.total_cmp(&b.seconds_per_batch))
        .expect("five stages");
    let compute: f64 = stages
        .iter()
        .filter(|s| matches!(s.stage, "f" | "g" | "h"))
        .map(|s| s.seconds_per_batch)
        .sum();
    let bound = gb(slowest.seconds_per_batch, 1);
    report.bound_gbps = Some(bound);
    report.bound_stage = Some(slowest.stage);
    let compute_bound = gb(compute, 1);
    let copies_bound = together.map(|t| gb(t, 1)).unwrap_or(bound);
    let resource = compute_bound.min(copies_bound).min(bound);
    report.compute_bound_gbps = Some(compute_bound);
    report.copies_bound_gbps = Some(copies_bound);
    report.resource_bound_gbps = Some(resource);
    report.ratio_to_resource_bound = Some(report.gbps / resource);
    report.ratio_to_bound = Some(report.gbps / bound);
    report.stages = stages;
    // Merged as the adaptive engine merges a launch's batches: its automatic span at this
    // size, or its own span when it runs and merges more; copy nodes or copy kernels,
    // whichever is faster (the same bound for every engine of a sweep at the automatic
    // span).
    let batch_bytes = dev.layout().n * 4;
    let mut span = adaptive_engine::auto_launch_batches(batch_bytes);
    if config.engine == Engine::Adaptive {
        span = span.max(graph_span(config, batch_bytes));
    }
    if let Some(d) = bounds::device_bound(dev, config.batches, span)? {
        let device = gb(d.seconds, d.batches as i64);
        report.device_bound_gbps = Some(device);
        report.device_bound_batches = Some(d.batches);
        report.device_bound_span = Some(d.span);
        report.device_bound_copy = Some(d.copy_by);
        report.device_bound_by = Some(d.by);
        report.ratio_to_device_bound = Some(report.gbps / device);
    }
    let isolated = bounds::isolated_floor(dev, bounds::ISOLATED_ROUNDS)?;
    report.isolated_latency_us = Some(isolated);
    report.p50_over_isolated = report.latency_p50_us.map(|l| l / isolated);
    report.p99_over_isolated = report.latency_p99_us.map(|l| l / isolated);
    let (serial, sv) = baseline::serialized(dev, config.batches)?;
    check_baseline("serialized", &sv, config.batches)?;
    let serial = gb(serial.as_secs_f64(), config.batches);
    let hand = gb(hand_wall, config.batches);
    report.serialized_gbps = Some(serial);
    report.handrolled_gbps = Some(hand);
    report.ratio_to_serialized = Some(report.gbps / serial);
    report.ratio_to_handrolled = Some(report.gbps / hand);
    Ok(())
}

fn check_baseline(name: &str, v: &Verification, batches: i64) -> Result<()> {
    if v.matched != batches {
        return Err(crate::invalid(
            "demo",
            format!(
                "the {name} baseline verified only {} of {batches} batches",
                v.matched
            ),
        ));
    }
    Ok(())
}
