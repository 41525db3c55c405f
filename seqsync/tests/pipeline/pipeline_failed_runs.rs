//! A run that fails ends, whatever its streams hold: a stall on hung stream work returns
//! `Stalled` (its streams are waited for a bounded time); a thread's own error that came before
//! a stall is the error returned; a thread with no stages does not keep a failed run going.
use seqsync::pipeline::{self, derive, PipelineSpec, RunConfig, StageSpec, Stages};
use seqsync::{Error, HostBackend};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One thread with one stage on stream `s` (synchronized by the thread if `sync`), whose
/// closure enqueues `work` for each of `batches` batches; `run()` on a thread of its own, with
/// `stall_timeout`. Its result, or `None` if it did not return within 5 s.
fn one_stream_stage(
    sync: bool,
    work: impl Fn() -> Box<dyn FnOnce() + Send> + Send + Sync + 'static,
    batches: i64,
    stall_timeout: Option<Duration>,
) -> Option<seqsync::Result<()>> {
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let stage = StageSpec::on_stream("s");
        let stage = if sync { stage.sync() } else { stage };
        let spec = PipelineSpec::builder()
            .thread("t0")
            .stage("k", stage)
            .build()
            .unwrap();
        let plan = derive(&spec).unwrap();
        let host = HostBackend::new();
        let streams = pipeline::new_streams(&host, &plan).unwrap();
        let stages = Stages::<HostBackend>::new().stage("k", move |cx| {
            cx.stream.unwrap().launch(work());
            Ok(())
        });
        let r = pipeline::run(RunConfig {
            plan: &plan,
            backend: &host,
            streams: &streams,
            stages: &stages,
            batches,
            stall_timeout,
        });
        let _ = done_tx.send(r.map(|_| ()));
    });
    done_rx.recv_timeout(Duration::from_secs(5)).ok()
}

/// Stream work that never finishes until the test sends on the returned channel (once per
/// batch).
fn hung_work() -> (
    mpsc::Sender<()>,
    impl Fn() -> Box<dyn FnOnce() + Send> + Send + Sync + 'static,
) {
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let work = move || -> Box<dyn FnOnce() + Send> {
        let rx = release_rx.clone();
        Box::new(move || {
            let _ = rx.lock().unwrap().recv();
        })
    };
    (release_tx, work)
}

#[test]
fn a_stall_on_hung_stream_work_returns_stalled() {
    let (release, work) = hung_work();
    let outcome = one_stream_stage(true, work, 3, Some(Duration::from_millis(200)));
    // Unblock the hung work so the process can exit either way.
    for _ in 0..3 {
        let _ = release.send(());
    }
    let r = outcome.expect("run() did not return within 5 s of a 200 ms stall (hangs in drain)");
    assert!(matches!(r, Err(Error::Stalled { .. })), "{r:?}");
}

#[test]
fn a_stage_error_is_returned_even_if_a_closure_outlives_the_watchdog() {
    let spec = PipelineSpec::builder()
        .thread("t0")
        .stage("a", StageSpec::on_stream("sa"))
        .thread("t1")
        .stage("b", StageSpec::on_stream("sb"))
        .build()
        .unwrap();
    let plan = derive(&spec).unwrap();
    let host = HostBackend::new();
    let streams = pipeline::new_streams(&host, &plan).unwrap();
    let stages = Stages::<HostBackend>::new()
        .stage("a", |cx| {
            Err(Error::Stage {
                stage: cx.stage.into(),
                message: format!("boom at {}", cx.seq),
            })
        })
        .stage("b", |cx| {
            if cx.seq == 0 {
                std::thread::sleep(Duration::from_millis(600));
            }
            Ok(())
        });
    let err = pipeline::run(RunConfig {
        plan: &plan,
        backend: &host,
        streams: &streams,
        stages: &stages,
        batches: 10,
        stall_timeout: Some(Duration::from_millis(100)),
    })
    .unwrap_err();
    assert!(
        matches!(&err, Error::Stage { stage, message } if stage == "a" && message == "boom at 0"),
        "the first real error was replaced: {err}"
    );
}

#[test]
fn an_empty_thread_ends_after_a_stage_error() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let spec = PipelineSpec::builder()
            .thread("idle")
            .thread("t0")
            .stage("a", StageSpec::on_stream("sa"))
            .build()
            .unwrap();
        let plan = derive(&spec).unwrap();
        let host = HostBackend::new();
        let streams = pipeline::new_streams(&host, &plan).unwrap();
        let stages = Stages::<HostBackend>::new().stage("a", |cx| {
            Err(Error::Stage {
                stage: cx.stage.into(),
                message: "boom".into(),
            })
        });
        let r = pipeline::run(RunConfig {
            plan: &plan,
            backend: &host,
            streams: &streams,
            stages: &stages,
            batches: i64::MAX,
            stall_timeout: None,
        });
        let _ = tx.send(r.map(|_| ()));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("run() did not return after its only stage failed");
    assert!(matches!(r, Err(Error::Stage { .. })), "{r:?}");
}

/// Hung stream work that no thread synchronizes on: every thread ends, and the run's stall
/// timeout bounds the wait for the streams' last work too (it returns `Stalled`).
#[test]
fn hung_unsynchronized_stream_work_does_not_hang_a_watched_run() {
    let (release, work) = hung_work();
    let outcome = one_stream_stage(false, work, 3, Some(Duration::from_millis(200)));
    for _ in 0..3 {
        let _ = release.send(());
    }
    let r = outcome.expect("run() with a 200 ms stall_timeout hung waiting for its streams");
    assert!(matches!(r, Err(Error::Stalled { .. })), "{r:?}");
}

/// A panic payload whose own drop panics.
struct Bomb;
impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("payload drop");
    }
}

/// A stage panics with a payload whose drop panics too: the run still stops every ring and
/// returns the panic.
#[test]
fn a_panic_payload_that_panics_on_drop_still_stops_the_run() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let spec = PipelineSpec::builder()
            .buffer("x", 2)
            .thread("t0")
            .stage("c", StageSpec::on_stream("sc").reads("x"))
            .thread("t1")
            .stage("p", StageSpec::on_stream("sp").writes("x"))
            .build()
            .unwrap();
        let plan = derive(&spec).unwrap();
        let host = HostBackend::new();
        let streams = pipeline::new_streams(&host, &plan).unwrap();
        let stages = Stages::<HostBackend>::new()
            .stage("c", |_| Ok(()))
            .stage("p", |_| std::panic::panic_any(Bomb));
        let r = pipeline::run(RunConfig {
            plan: &plan,
            backend: &host,
            streams: &streams,
            stages: &stages,
            batches: 10,
            stall_timeout: None,
        });
        let _ = tx.send(r.map(|_| ()));
    });
    let r = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("run() hung: the rings were never stopped");
    assert!(r.is_err());
}

/// Stream work queued by every batch at once (no host synchronize: a ring slot frees once its
/// wait is enqueued), each batch well within the stall timeout but all of them not: the run
/// ends normally.
#[test]
fn queued_stream_work_longer_than_the_stall_timeout_in_all_is_not_a_stall() {
    let work = || -> Box<dyn FnOnce() + Send> {
        Box::new(|| std::thread::sleep(Duration::from_millis(30)))
    };
    let r = one_stream_stage(false, work, 20, Some(Duration::from_millis(200)));
    let r = r.expect("the run hung");
    assert!(r.is_ok(), "{:?}", r.err());
}

/// A stall timeout too long for any deadline (`Duration::MAX`): the run ends normally.
#[test]
fn the_longest_stall_timeout_is_no_deadline() {
    let work = || -> Box<dyn FnOnce() + Send> { Box::new(|| ()) };
    let r = one_stream_stage(false, work, 5, Some(Duration::MAX)).expect("the run hung");
    assert!(r.is_ok(), "{:?}", r.err());
}
