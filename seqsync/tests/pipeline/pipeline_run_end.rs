//! The issue's reproduction: thread A's stage `w` writes buffer `b` (3 slots), thread B's
//! stage `r` reads it; with `r.max_size = 1` the endless loops cannot deadlock, but every run
//! of more than one batch does: `w` releases `r`'s seq s only in its iteration s + 3, so the
//! last three seqs are never released and B waits at the end for room that never comes. The
//! checker must say so, with the interleaving; runs of the derived sizes must finish.

use std::sync::mpsc;
use std::time::Duration;

use seqsync::backend::Backend;
use seqsync::pipeline::{self, RunConfig, Stages};
use seqsync::pipeline::{check_deadlock, derive, PipelineSpec, Plan, Verdict};
use seqsync::HostBackend;

const SPEC: &str = r#"
[buffers]
b = 3

[[thread]]
name = "A"
[[thread.stage]]
name = "w"
stream = "sa"
writes = ["b"]

[[thread]]
name = "B"
[[thread.stage]]
name = "r"
stream = "sb"
reads = ["b"]
"#;

fn spec(r_max_size: Option<u64>) -> PipelineSpec {
    let mut spec = PipelineSpec::from_toml(SPEC).unwrap();
    if let Some(v) = r_max_size {
        spec.set("r.max_size", v).unwrap();
    }
    spec
}

/// Runs the plan on the host backend; `None` if it has not finished after `limit`.
fn run(plan: &Plan, batches: i64, limit: Duration) -> Option<seqsync::Result<()>> {
    let plan = plan.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let host = HostBackend::new();
        let streams = pipeline::new_streams(&host, &plan).unwrap();
        let mut stages = Stages::<HostBackend>::new();
        for s in ["w", "r"] {
            let h = host.clone();
            stages = stages.stage(s, move |cx| {
                h.launch_host(cx.stream.unwrap(), Box::new(|| {}))
            });
        }
        let r = pipeline::run(RunConfig {
            plan: &plan,
            backend: &host,
            streams: &streams,
            stages: &stages,
            batches,
            stall_timeout: None,
        });
        let _ = tx.send(r.map(|_| ()));
    });
    rx.recv_timeout(limit).ok()
}

#[test]
fn a_ring_smaller_than_a_consumers_lag_deadlocks_at_the_end_of_a_run() {
    let plan = derive(&spec(Some(1))).unwrap();
    let verdict = check_deadlock(&plan);
    let Verdict::Deadlock { trace } = &verdict else {
        panic!("expected a deadlock, got {verdict}");
    };
    assert!(
        trace.summary.contains("end of a run of 2 batches"),
        "{verdict}"
    );
    assert!(trace.summary.contains("thread A"), "{verdict}");
    let stuck = trace
        .stuck
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>();
    assert_eq!(stuck.len(), 1, "{verdict}");
    assert!(
        stuck[0].starts_with("B: BLOCKED: record r seq 1"),
        "{verdict}"
    );
    assert!(
        stuck[0].contains("finished its 2 batches at lag 3"),
        "{verdict}"
    );
    // And the run really hangs: the checker is right to refuse it.
    assert!(
        run(&plan, 2, Duration::from_millis(500)).is_none(),
        "a run of 2 batches finished"
    );
}

#[test]
fn the_derived_sizes_and_any_size_at_least_the_lag_finish() {
    for size in [None, Some(3), Some(4)] {
        let plan = derive(&spec(size)).unwrap();
        assert!(check_deadlock(&plan).is_deadlock_free(), "{size:?}");
        for batches in [1, 2, 3, 4, 7] {
            let outcome = run(&plan, batches, Duration::from_secs(20));
            assert!(
                matches!(outcome, Some(Ok(()))),
                "r.max_size {size:?}, {batches} batches: {outcome:?}"
            );
        }
    }
    // 1 and 2 are below the lag 3: a deadlock at the end of a run.
    for size in [1, 2] {
        let verdict = check_deadlock(&derive(&spec(Some(size))).unwrap());
        assert!(
            matches!(verdict, Verdict::Deadlock { .. }),
            "{size}: {verdict}"
        );
    }
}

/// The stall watchdog: the same run, unchecked, with a 200 ms timeout ends with an error that
/// names each thread, what it is blocked on and who must act, instead of hanging.
#[test]
fn the_watchdog_names_who_is_blocked_on_what() {
    let plan = derive(&spec(Some(1))).unwrap();
    let host = HostBackend::new();
    let streams = pipeline::new_streams(&host, &plan).unwrap();
    let mut stages = Stages::<HostBackend>::new();
    for s in ["w", "r"] {
        let h = host.clone();
        stages = stages.stage(s, move |cx| {
            h.launch_host(cx.stream.unwrap(), Box::new(|| {}))
        });
    }
    let start = std::time::Instant::now();
    let err = pipeline::run(RunConfig {
        plan: &plan,
        backend: &host,
        streams: &streams,
        stages: &stages,
        batches: 5,
        stall_timeout: Some(Duration::from_millis(200)),
    })
    .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let seqsync::Error::Stalled {
        timeout_ms,
        threads,
    } = &err
    else {
        panic!("expected a stall, got {err}");
    };
    assert_eq!(*timeout_ms, 200);
    assert_eq!(threads.len(), 2, "{err}");
    assert_eq!(threads[0], "thread A: finished its 5 batches", "{err}");
    assert!(
        threads[1]
            .starts_with("thread B: blocked in record on ring r at seq 3 (ring full, max_size 1): seq 2 must first be released"),
        "{err}"
    );
    assert!(
        threads[1].contains("w on thread A at lag 3 (finished its 5 batches)"),
        "{err}"
    );
    assert!(!err.to_string().contains('\n'), "{err}");
}
