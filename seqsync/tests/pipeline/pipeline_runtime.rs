//! The pipeline runtime: the seed spec runs on the host backend with chaos and every value is
//! checked; a failing or panicking stage
//! stops every ring, every thread is joined, and its error is the one returned; missing
//! closures and streams are named errors before anything runs.

use crate::seed_spec;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use seqsync::backend::host::{Chaos, HostStream};
use seqsync::internal::pipeline::without_wait;
use seqsync::pipeline::{self, Stages};
use seqsync::pipeline::{derive, PipelineSpec, Plan, StageSpec};
use seqsync::{Error, HostBackend};

type Buf = Arc<Vec<AtomicU64>>;

fn buf(n: u64) -> Buf {
    Arc::new((0..n).map(|_| AtomicU64::new(u64::MAX)).collect())
}

fn slot(s: i64, n: u64) -> usize {
    (s as u64 % n) as usize
}

/// The seed's dataflow on real (host) memory: in = 1000 s + 1, x = in + 1, y = 2 in,
/// out = x + y, then g2h copies out into one host word that process_data checks.
fn run_seed_values(host: &HostBackend, n: [u64; 4], batches: i64) -> (i64, Vec<i64>) {
    let [nin, nx, ny, nout] = n;
    let plan = derive(&seed_spec::seed_toml(nin, nx, ny, nout)).unwrap();
    run_plan_values(host, &plan, n, batches)
}

fn run_plan_values(host: &HostBackend, plan: &Plan, n: [u64; 4], batches: i64) -> (i64, Vec<i64>) {
    let [nin, nx, ny, nout] = n;
    let streams = pipeline::new_streams(host, plan).unwrap();
    let (bin, bx, by, bout) = (buf(nin), buf(nx), buf(ny), buf(nout));
    let local = Arc::new(AtomicU64::new(u64::MAX));
    let ok = AtomicI64::new(0);
    let wrong = std::sync::Mutex::new(Vec::new());
    let stages = Stages::<HostBackend>::new()
        .stage("h2g", |cx| {
            let (s, b) = (cx.seq, bin.clone());
            host.chaos_pause();
            cx.stream
                .unwrap()
                .launch(move || b[slot(s, nin)].store(1000 * s as u64 + 1, Ordering::SeqCst));
            Ok(())
        })
        .stage("f", |cx| {
            let (s, i, x) = (cx.seq, bin.clone(), bx.clone());
            cx.stream.unwrap().launch(move || {
                let v = i[slot(s, nin)].load(Ordering::SeqCst);
                // Wrapping: a slot read too early holds the u64::MAX sentinel.
                x[slot(s, nx)].store(v.wrapping_add(1), Ordering::SeqCst)
            });
            Ok(())
        })
        .stage("g", |cx| {
            let (s, i, y) = (cx.seq, bin.clone(), by.clone());
            cx.stream.unwrap().launch(move || {
                let v = i[slot(s, nin)].load(Ordering::SeqCst);
                y[slot(s, ny)].store(v.wrapping_mul(2), Ordering::SeqCst)
            });
            Ok(())
        })
        .stage("h", |cx| {
            let (s, x, y, o) = (cx.seq, bx.clone(), by.clone(), bout.clone());
            host.chaos_pause();
            cx.stream.unwrap().launch(move || {
                let v = x[slot(s, nx)]
                    .load(Ordering::SeqCst)
                    .wrapping_add(y[slot(s, ny)].load(Ordering::SeqCst));
                o[slot(s, nout)].store(v, Ordering::SeqCst)
            });
            Ok(())
        })
        .stage("g2h", |cx| {
            let (s, o, l) = (cx.seq, bout.clone(), local.clone());
            cx.stream
                .unwrap()
                .launch(move || l.store(o[slot(s, nout)].load(Ordering::SeqCst), Ordering::SeqCst));
            Ok(())
        })
        .after_sync("g2h", |s| {
            let input = 1000 * s as u64 + 1;
            if local.load(Ordering::SeqCst) == (input + 1) + 2 * input {
                ok.fetch_add(1, Ordering::Relaxed);
            } else {
                wrong.lock().unwrap().push(s);
            }
            Ok(())
        });
    let stats = pipeline::run(pipeline::RunConfig {
        plan,
        backend: host,
        streams: &streams,
        stages: &stages,
        batches,
        stall_timeout: None,
    })
    .unwrap();
    assert_eq!(stats.thread("h2g").unwrap().iterations, batches);
    assert_eq!(stats.thread("h2g").unwrap().launches, 4 * batches as u64);
    assert_eq!(stats.thread("g2h").unwrap().synchronizes, batches as u64);
    drop(stages);
    (ok.load(Ordering::Relaxed), wrong.into_inner().unwrap())
}

#[test]
fn seed_spec_runs_with_chaos_and_every_value_checks() {
    for (seed, n) in [(1, [2, 4, 3, 2]), (2, [1, 1, 1, 1]), (3, [3, 2, 5, 1])] {
        let host = HostBackend::with_chaos(Chaos::new(seed));
        let (ok, wrong) = run_seed_values(&host, n, 60);
        assert_eq!((ok, wrong), (60, vec![]), "chaos seed {seed}, sizes {n:?}");
    }
}

#[test]
fn the_value_check_catches_a_wait_taken_out_of_the_plan() {
    // Drop h's wait on f (h reads x before f wrote it) and one consumer of ring f.
    let plan = derive(&seed_spec::seed_toml(2, 4, 3, 2)).unwrap();
    let plan = without_wait(plan, "h", "f").unwrap();
    let host = HostBackend::with_chaos(Chaos::new(12));
    let (ok, wrong) = run_plan_values(&host, &plan, [2, 4, 3, 2], 60);
    assert!(
        !wrong.is_empty() && ok < 60,
        "a missing wait went unnoticed"
    );
}

/// A two-thread plan: t0 copies in and computes, t1 copies out with a sync.
fn small_plan() -> Plan {
    let spec = PipelineSpec::builder()
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
        .build()
        .unwrap();
    derive(&spec).unwrap()
}

fn noop_stages<'a>() -> Stages<'a, HostBackend> {
    Stages::new()
        .stage("copy_in", |_| Ok(()))
        .stage("kernel", |_| Ok(()))
        .stage("copy_out", |_| Ok(()))
}

fn boom(stage: &str, seq: i64) -> Error {
    Error::Stage {
        stage: stage.into(),
        message: format!("boom at {seq}"),
    }
}

#[test]
fn a_failing_stage_stops_every_ring_and_its_error_is_returned() {
    let plan = small_plan();
    // Fail on either thread: the other is blocked on a ring (t1 on `kernel`, t0 on
    // `copy_out`), so returning at all proves the stop cascade woke it and it was joined.
    for failing in ["kernel", "copy_out"] {
        let host = HostBackend::with_chaos(Chaos::new(9));
        let streams = pipeline::new_streams(&host, &plan).unwrap();
        let processed = AtomicI64::new(0);
        let stages = noop_stages()
            .stage(failing, |cx| {
                if cx.seq == 7 {
                    Err(boom(cx.stage, cx.seq))
                } else {
                    Ok(())
                }
            })
            .after_sync("copy_out", |_| {
                processed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            });
        let err = pipeline::run(pipeline::RunConfig {
            plan: &plan,
            backend: &host,
            streams: &streams,
            stages: &stages,
            batches: 1000,
            stall_timeout: None,
        })
        .unwrap_err();
        assert_eq!(err.to_string(), boom(failing, 7).to_string(), "{err}");
        assert!(processed.load(Ordering::Relaxed) < 1000);
    }
}

#[test]
fn a_failing_after_sync_and_a_panicking_stage_are_reported() {
    let plan = small_plan();
    let host = HostBackend::new();
    let streams = pipeline::new_streams(&host, &plan).unwrap();
    let stages = noop_stages().after_sync("copy_out", |s| {
        if s == 3 {
            Err(boom("copy_out", s))
        } else {
            Ok(())
        }
    });
    let err = pipeline::run(pipeline::RunConfig {
        plan: &plan,
        backend: &host,
        streams: &streams,
        stages: &stages,
        batches: 100,
        stall_timeout: None,
    })
    .unwrap_err();
    assert_eq!(err.to_string(), boom("copy_out", 3).to_string());

    let stages = noop_stages().stage("kernel", |cx| {
        assert!(cx.seq < 5, "kernel gave up");
        Ok(())
    });
    let err = pipeline::run(pipeline::RunConfig {
        plan: &plan,
        backend: &host,
        streams: &streams,
        stages: &stages,
        batches: 100,
        stall_timeout: None,
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::Stage { stage, message } if stage == "t0" && message.contains("kernel gave up")),
        "{err}"
    );
}

#[test]
fn missing_closures_and_streams_are_named_errors_before_anything_runs() {
    let plan = small_plan();
    let host = HostBackend::new();
    let streams = pipeline::new_streams(&host, &plan).unwrap();
    let ran = AtomicI64::new(0);
    let stages = Stages::<HostBackend>::new()
        .stage("copy_in", |_| {
            ran.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .stage("copy_out", |_| Ok(()));
    let err = pipeline::run(pipeline::RunConfig {
        plan: &plan,
        backend: &host,
        streams: &streams,
        stages: &stages,
        batches: 10,
        stall_timeout: None,
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::Stage { stage, .. } if stage == "kernel"),
        "{err}"
    );
    assert!(err.to_string().contains("no closure"), "{err}");
    assert_eq!(ran.load(Ordering::Relaxed), 0);

    let mut fewer: HashMap<String, HostStream> = pipeline::new_streams(&host, &plan).unwrap();
    fewer.remove("s1");
    let err = pipeline::run(pipeline::RunConfig {
        plan: &plan,
        backend: &host,
        streams: &fewer,
        stages: &noop_stages(),
        batches: 10,
        stall_timeout: None,
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::Stage { stage, .. } if stage == "kernel"),
        "{err}"
    );
    assert!(err.to_string().contains("no stream `s1`"), "{err}");

    let err = pipeline::run(pipeline::RunConfig {
        plan: &plan,
        backend: &host,
        streams: &streams,
        stages: &noop_stages().stage("kernal", |_| Ok(())),
        batches: 10,
        stall_timeout: None,
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::Stage { stage, .. } if stage == "kernal"),
        "{err}"
    );

    let err = pipeline::run(pipeline::RunConfig {
        plan: &plan,
        backend: &host,
        streams: &streams,
        stages: &noop_stages().after_sync("kernel", |_| Ok(())),
        batches: 10,
        stall_timeout: None,
    })
    .unwrap_err();
    assert!(err.to_string().contains("no `sync`"), "{err}");
}

#[test]
fn a_host_stage_records_without_a_stream_and_orders_its_consumers() {
    // t0: a host stage produces `a`; a kernel on s1 reads it into `b`. t1 copies `b` out.
    let spec = PipelineSpec::builder()
        .buffer("a", 2)
        .buffer("b", 2)
        .thread("t0")
        .stage("produce", StageSpec::on_host().writes("a"))
        .stage("kernel", StageSpec::on_stream("s1").reads("a").writes("b"))
        .thread("t1")
        .stage("copy_out", StageSpec::on_stream("s2").reads("b").sync())
        .build()
        .unwrap();
    let plan = derive(&spec).unwrap();
    // A host stage's ring is published with record_host: no stream of its own.
    assert_eq!(
        seqsync::internal::pipeline::required_streams(&plan),
        ["s1", "s2"]
    );
    let host = HostBackend::with_chaos(Chaos::new(4));
    let streams = pipeline::new_streams(&host, &plan).unwrap();
    let (a, b, out) = (buf(2), buf(2), Arc::new(AtomicU64::new(0)));
    let ok = AtomicI64::new(0);
    let stages = Stages::<HostBackend>::new()
        .stage("produce", |cx| {
            assert!(cx.stream.is_none());
            a[slot(cx.seq, 2)].store(cx.seq as u64 * 3, Ordering::SeqCst);
            Ok(())
        })
        .stage("kernel", |cx| {
            let (s, a, b) = (cx.seq, a.clone(), b.clone());
            cx.stream.unwrap().launch(move || {
                b[slot(s, 2)].store(a[slot(s, 2)].load(Ordering::SeqCst) + 1, Ordering::SeqCst)
            });
            Ok(())
        })
        .stage("copy_out", |cx| {
            let (s, b, o) = (cx.seq, b.clone(), out.clone());
            cx.stream
                .unwrap()
                .launch(move || o.store(b[slot(s, 2)].load(Ordering::SeqCst), Ordering::SeqCst));
            Ok(())
        })
        .after_sync("copy_out", |s| {
            assert_eq!(out.load(Ordering::SeqCst), s as u64 * 3 + 1, "seq {s}");
            ok.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
    pipeline::run(pipeline::RunConfig {
        plan: &plan,
        backend: &host,
        streams: &streams,
        stages: &stages,
        batches: 80,
        stall_timeout: None,
    })
    .unwrap();
    assert_eq!(ok.load(Ordering::Relaxed), 80);
}
