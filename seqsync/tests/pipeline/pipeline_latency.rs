//! The runtime's latencies ([`RunStats::latency`]), one case per rule: a host stage's is its
//! closure's time; a stream stage's runs until a host synchronize at lag 0 saw it done, and a
//! stream stage none sees has none; a batch's end to end covers every observed stage; every
//! batch is counted, in memory that does not grow with the batches, and what that memory could
//! not keep is counted as dropped.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use seqsync::pipeline::{
    self, derive, Op, PipelineSpec, Plan, RunConfig, RunStats, StageSpec, Stages,
};
use seqsync::HostBackend;

const MS: Duration = Duration::from_millis(1);

fn plan(spec: seqsync::pipeline::PipelineBuilder) -> Plan {
    derive(&spec.build().unwrap()).unwrap()
}

fn run(
    plan: &Plan,
    stages: &Stages<'_, HostBackend>,
    host: &HostBackend,
    batches: i64,
) -> RunStats {
    let streams = pipeline::new_streams(host, plan).unwrap();
    pipeline::run(pipeline::RunConfig {
        plan,
        backend: host,
        streams: &streams,
        stages,
        batches,
        stall_timeout: Some(Duration::from_secs(60)),
    })
    .unwrap()
}

/// Stage `name`'s summary, which must exist and count every batch.
fn measured(stats: &RunStats, name: &str, batches: u64) -> pipeline::LatencySummary {
    let s = stats.latency.stage(name).unwrap();
    assert!(s.observed, "{s:?}");
    assert_eq!(s.dropped, 0, "{s:?}");
    let l = s
        .latency
        .unwrap_or_else(|| panic!("{name} has no latency: {s:?}"));
    assert_eq!(l.count, batches, "{s:?}");
    assert!(l.p50 <= l.p99 && l.p99 <= l.max, "{l:?}");
    l
}

fn sleep_kernel(cx: &pipeline::StageCtx<'_, HostBackend>, d: Duration) {
    cx.stream.unwrap().launch(move || std::thread::sleep(d));
}

#[test]
fn a_host_stage_latency_is_its_closure_time() {
    let plan = plan(
        PipelineSpec::builder()
            .buffer("a", 2)
            .thread("t0")
            .stage("slow", StageSpec::on_host().writes("a"))
            .stage("quick", StageSpec::on_host().reads("a")),
    );
    let stages = Stages::<HostBackend>::new()
        .stage("slow", |_| {
            std::thread::sleep(2 * MS);
            Ok(())
        })
        .stage("quick", |_| Ok(()));
    let stats = run(&plan, &stages, &HostBackend::new(), 30);
    let slow = measured(&stats, "slow", 30);
    let quick = measured(&stats, "quick", 30);
    assert!(slow.p50 >= 2 * MS, "{slow:?}");
    // The other stage's closure, on the same thread, is not in it.
    assert!(quick.p50 < MS, "{quick:?}");
    let s = stats.latency.stage("slow").unwrap();
    assert!(s.host && s.thread == "t0", "{s:?}");
}

#[test]
fn a_synchronized_stream_stage_lasts_until_its_work_is_observed_done() {
    let plan = plan(
        PipelineSpec::builder()
            .buffer("a", 2)
            .thread("t0")
            .stage("kernel", StageSpec::on_stream("s1").writes("a").sync()),
    );
    // The launch returns at once; the work it enqueues takes 2 ms.
    let stages = Stages::<HostBackend>::new().stage("kernel", |cx| {
        sleep_kernel(cx, 2 * MS);
        Ok(())
    });
    let stats = run(&plan, &stages, &HostBackend::new(), 30);
    let kernel = measured(&stats, "kernel", 30);
    assert!(kernel.p50 >= 2 * MS, "{kernel:?}");
    assert!(!stats.latency.stage("kernel").unwrap().host);
}

#[test]
fn a_host_stage_synchronizing_at_lag_0_on_another_thread_observes_a_stream_stage() {
    let plan = plan(
        PipelineSpec::builder()
            .buffer("a", 2)
            .thread("t0")
            .stage("kernel", StageSpec::on_stream("s1").writes("a"))
            .thread("t1")
            .stage("consume", StageSpec::on_host().reads("a")),
    );
    let stages = Stages::<HostBackend>::new()
        .stage("kernel", |cx| {
            sleep_kernel(cx, MS);
            Ok(())
        })
        .stage("consume", |_| Ok(()));
    let stats = run(&plan, &stages, &HostBackend::new(), 30);
    let kernel = measured(&stats, "kernel", 30);
    assert!(kernel.p50 >= MS, "{kernel:?}");
    assert_eq!(stats.latency.stage("kernel").unwrap().thread, "t0");
}

#[test]
fn an_unsynchronized_stream_stage_reports_no_latency() {
    // `prepare` (host) synchronizes on `kernel`'s ring, but at lag 2 (the slot it is about to
    // overwrite): that is no observation of kernel's seq s.
    let plan = plan(
        PipelineSpec::builder()
            .buffer("a", 2)
            .thread("t0")
            .stage("prepare", StageSpec::on_host().writes("a"))
            .stage("kernel", StageSpec::on_stream("s1").reads("a")),
    );
    let kernel_ring = plan.stages().iter().position(|g| g.name == "kernel");
    assert!(plan.threads()[0].ops.iter().any(|op| matches!(
        *op,
        Op::Synchronize { ring, lag: 2, .. } if Some(ring) == kernel_ring
    )));
    let stages = Stages::<HostBackend>::new()
        .stage("prepare", |_| Ok(()))
        .stage("kernel", |cx| {
            sleep_kernel(cx, Duration::from_micros(200));
            Ok(())
        });
    let stats = run(&plan, &stages, &HostBackend::new(), 30);
    let kernel = stats.latency.stage("kernel").unwrap();
    assert!(
        !kernel.observed && kernel.latency.is_none() && kernel.dropped == 0,
        "{kernel:?}"
    );
    measured(&stats, "prepare", 30);

    // Nothing host-observed at all: no end to end either.
    let plan = self::plan(
        PipelineSpec::builder()
            .buffer("a", 2)
            .thread("t0")
            .stage("make", StageSpec::on_stream("s1").writes("a"))
            .stage("use", StageSpec::on_stream("s2").reads("a")),
    );
    let stages = Stages::<HostBackend>::new()
        .stage("make", |_| Ok(()))
        .stage("use", |_| Ok(()));
    let stats = run(&plan, &stages, &HostBackend::new(), 30);
    assert!(stats
        .latency
        .stages
        .iter()
        .all(|s| !s.observed && s.latency.is_none()));
    assert_eq!(stats.latency.end_to_end, None);
    assert_eq!(stats.latency.end_to_end_dropped, 0);
}

#[test]
fn end_to_end_runs_from_the_first_op_to_the_last_observed_completion() {
    // One thread: prepare (host, 1 ms), kernel (stream, 1 ms, sync), after_sync (2 ms). A
    // batch ends when its after_sync returns: at least 4 ms after its first op.
    let plan = plan(
        PipelineSpec::builder()
            .buffer("a", 2)
            .thread("t0")
            .stage("prepare", StageSpec::on_host().writes("a"))
            .stage("kernel", StageSpec::on_stream("s1").reads("a").sync()),
    );
    let stages = |prepare: Duration, after: Duration| {
        Stages::<HostBackend>::new()
            .stage("prepare", move |_| {
                std::thread::sleep(prepare);
                Ok(())
            })
            .stage("kernel", |cx| {
                sleep_kernel(cx, MS);
                Ok(())
            })
            .after_sync("kernel", move |_| {
                std::thread::sleep(after);
                Ok(())
            })
    };
    let stats = run(&plan, &stages(MS, 2 * MS), &HostBackend::new(), 30);
    let batch = stats.latency.end_to_end.unwrap();
    assert_eq!((batch.count, stats.latency.end_to_end_dropped), (30, 0));
    assert!(batch.p50 >= 4 * MS, "{batch:?}");

    // Two threads, t0's prepare (3 ms) the slower: t1 begins each batch first and waits for
    // it, so the batch starts at t0's first op, the earliest: 3 + 1 ms at least. And a batch
    // is never shorter than a stage it passes through.
    let plan = self::plan(
        PipelineSpec::builder()
            .buffer("a", 2)
            .thread("t0")
            .stage("prepare", StageSpec::on_host().writes("a"))
            .thread("t1")
            .stage("kernel", StageSpec::on_stream("s1").reads("a").sync()),
    );
    let stats = run(
        &plan,
        &stages(3 * MS, Duration::ZERO),
        &HostBackend::new(),
        30,
    );
    let batch = stats.latency.end_to_end.unwrap();
    assert_eq!((batch.count, stats.latency.end_to_end_dropped), (30, 0));
    assert!(batch.p50 >= 4 * MS, "{batch:?}");
    for name in ["prepare", "kernel"] {
        let stage = measured(&stats, name, 30);
        assert!(
            batch.p50 >= stage.p50 && batch.p99 >= stage.p99 && batch.max >= stage.max,
            "{name}: {stage:?}, batch {batch:?}"
        );
    }
}

#[test]
fn every_batch_is_counted_in_a_long_run_of_bounded_memory() {
    let plan = plan(
        PipelineSpec::builder()
            .buffer("in", 2)
            .buffer("out", 2)
            .thread("t0")
            .stage("copy_in", StageSpec::on_stream("s0").writes("in"))
            .stage(
                "kernel",
                StageSpec::on_stream("s1").reads("in").writes("out"),
            )
            .thread("t1")
            .stage("copy_out", StageSpec::on_stream("s2").reads("out").sync())
            .stage("process", StageSpec::on_host().reads("out")),
    );
    let stages = Stages::<HostBackend>::new()
        .stage("copy_in", |_| Ok(()))
        .stage("kernel", |_| Ok(()))
        .stage("copy_out", |_| Ok(()))
        .stage("process", |_| Ok(()));
    let batches = 20_000;
    let stats = run(&plan, &stages, &HostBackend::new(), batches);
    // Far more batches than the slots kept for seqs in flight, each slot reused thousands
    // of times: none lost.
    // kernel is observed by process's synchronize (it reads `out`), copy_out by its own.
    for name in ["kernel", "copy_out", "process"] {
        measured(&stats, name, batches as u64);
    }
    let batch = stats.latency.end_to_end.unwrap();
    assert_eq!(
        (batch.count, stats.latency.end_to_end_dropped),
        (batches as u64, 0)
    );
    assert!(!stats.latency.stage("copy_in").unwrap().observed);
}

#[test]
fn threads_that_drift_apart_drop_end_to_end_samples_and_count_them() {
    // No ring links `fast` and `slow`: `fast` runs every batch while `slow` is still in its
    // first. The seqs in flight outnumber the slots kept for them (memory does not grow with
    // the batches), so most batches cannot be measured end to end: they are counted as
    // dropped, never reported with a made-up number.
    let plan = plan(
        PipelineSpec::builder()
            .thread("fast")
            .stage("a", StageSpec::on_host())
            .thread("slow")
            .stage("b", StageSpec::on_host()),
    );
    let batches = 20_000;
    let done = AtomicI64::new(0);
    let stages = Stages::<HostBackend>::new()
        .stage("a", |_| {
            done.fetch_add(1, Ordering::Release);
            Ok(())
        })
        .stage("b", |cx| {
            while cx.seq == 0 && done.load(Ordering::Acquire) < batches {
                std::thread::sleep(MS);
            }
            Ok(())
        });
    let stats = run(&plan, &stages, &HostBackend::new(), batches);
    let batch = stats.latency.end_to_end.unwrap();
    let dropped = stats.latency.end_to_end_dropped;
    assert!(dropped > batches as u64 / 2, "{batch:?}, dropped {dropped}");
    assert_eq!(batch.count + dropped, batches as u64);
    // Host stages need no slots: each counts every batch.
    measured(&stats, "a", batches as u64);
    measured(&stats, "b", batches as u64);
}

/// A thread with no stages (allowed) starts no batch: the batches still end end to end.
#[test]
fn an_idle_thread_does_not_drop_every_end_to_end_sample() {
    let spec = PipelineSpec::builder()
        .thread("idle")
        .thread("t0")
        .stage("work", StageSpec::on_host())
        .build()
        .unwrap();
    let plan = derive(&spec).unwrap();
    let host = HostBackend::new();
    let streams = pipeline::new_streams(&host, &plan).unwrap();
    let stages = Stages::<HostBackend>::new().stage("work", |_| Ok(()));
    let stats = pipeline::run(RunConfig {
        plan: &plan,
        backend: &host,
        streams: &streams,
        stages: &stages,
        batches: 10,
        stall_timeout: None,
    })
    .unwrap();
    assert_eq!(stats.latency.end_to_end_dropped, 0, "{:?}", stats.latency);
    assert_eq!(stats.latency.end_to_end.map(|l| l.count), Some(10));
}
