//! `SharedTimeline` on CUDA streams (memops on the segment): a stream wait before any signal
//! is enqueued, a waiting process ordered after the signalling process's kernels (and its
//! negative control), a failure made in another process and a killed peer, each releasing the
//! stream waits and poisoning their streams.
#![cfg(feature = "cuda")]

use std::process::Child;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seqsync::backend::Backend;
use seqsync::ipc::{Mechanism, SharedTimeline};
use seqsync::timeline::Timeline;
use seqsync::Error;

use crate::common;
use crate::harness::{
    self, await_ready, data_path, exit_code, kill_later, unique, Data, DATA, RING, SLOTS,
};

crate::gpu_required!();

const VALUES: u64 = 30;

/// This binary again, running this module's test `name` as the other process.
fn child(name: &str, timeline: &str, data: Option<&std::path::Path>) -> Child {
    harness::child(&format!("cuda_timeline::{name}"), timeline, data)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_timeline_a_stream_waits_for_a_value_no_signal_was_enqueued_for() {
    let Some(g) = common::gpu::gpu() else { return };
    let b = &g.backend;
    let name = unique("cuda-tl-before");
    let t = SharedTimeline::create(b, &name, 0).unwrap();
    let other = SharedTimeline::open(b, &name).unwrap();
    assert_eq!(t.mechanism(), Mechanism::MemOps);
    let (p, c) = (b.new_stream("p").unwrap(), b.new_stream("c").unwrap());
    // Value 2 is awaited before anything signals it: the stream must hold.
    other.wait_on(&c, 2).unwrap();
    let start = Instant::now();
    g.spin(&p, Duration::from_millis(200));
    t.signal_on(&p, 1).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    t.signal_on(&p, 2).unwrap();
    b.synchronize_stream(&c).unwrap();
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(180), "{took:?}");
    assert_eq!(other.query().unwrap(), 2);
    // A reached value enqueues nothing, and a value signalled already is refused.
    other.wait_on(&c, 1).unwrap();
    let e = other.signal_on(&c, 2).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NonMonotonic {
                current: 2,
                got: 2,
                ..
            }
        ),
        "{e}"
    );
    b.synchronize_stream(&p).unwrap();
}

/// Signalling process: per value, a 2 ms kernel, host work on the same stream that writes the
/// value into the shared data, then `signal_on`. Returns the waiting child's exit code (how
/// many values it saw too early).
fn ordered_run(child_test: &str) -> i32 {
    let g = common::gpu::gpu().expect("gpu");
    let b = &g.backend;
    let name = unique(child_test);
    let path = data_path(child_test);
    let data = Arc::new(Data::create(&path));
    for k in 0..SLOTS as i64 {
        data.word(k).store(-1, Ordering::SeqCst);
    }
    let t = SharedTimeline::create(b, &name, 0).unwrap();
    let mut c = child(child_test, &name, Some(&path));
    await_ready(&mut c);
    let p = b.new_stream("signals").unwrap();
    for v in 1..=VALUES {
        g.spin(&p, Duration::from_millis(2));
        let d = data.clone();
        b.launch_host(
            &p,
            Box::new(move || d.word(v as i64).store(v as i64, Ordering::SeqCst)),
        )
        .unwrap();
        t.signal_on(&p, v).unwrap();
        // The data has one word per value mod SLOTS: keep the waiter at most that far behind.
        if v >= SLOTS as u64 {
            t.wait(v + 1 - SLOTS as u64, Duration::from_secs(30)).ok();
        }
    }
    b.synchronize_stream(&p).unwrap();
    let code = exit_code(c, Duration::from_secs(60));
    let _ = std::fs::remove_file(&path);
    code
}

/// The waiting process: per value, a stream wait (unless `skip`), then host work on its stream
/// that reads the value's word (below the value: it ran before the signaller's work); it exits
/// with the count of early reads.
fn waiter(skip: bool) {
    let (Ok(name), Ok(path)) = (std::env::var(RING), std::env::var(DATA)) else {
        return;
    };
    let g = common::gpu::gpu().expect("gpu");
    let b = &g.backend;
    let t = SharedTimeline::open(b, &name).unwrap();
    let data = Arc::new(Data::open(std::path::Path::new(&path)));
    let s = b.new_stream("waits").unwrap();
    let wrong = Arc::new(std::sync::atomic::AtomicI32::new(0));
    println!("{}", harness::READY);
    for v in 1..=VALUES {
        if skip {
            // Only keep pace (the data words are reused): no stream wait.
            while t.query().unwrap() + 1 < v {
                std::thread::sleep(Duration::from_micros(200));
            }
        } else {
            t.wait_on(&s, v).unwrap();
        }
        let (d, w) = (data.clone(), wrong.clone());
        b.launch_host(
            &s,
            Box::new(move || {
                if d.word(v as i64).load(Ordering::SeqCst) < v as i64 {
                    w.fetch_add(1, Ordering::SeqCst);
                }
            }),
        )
        .unwrap();
        b.synchronize_stream(&s).unwrap();
    }
    std::process::exit(wrong.load(Ordering::SeqCst).min(100));
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_timeline_a_waiting_process_runs_each_value_after_the_signallers_kernel() {
    if common::gpu::gpu().is_none() {
        return;
    }
    assert_eq!(ordered_run("child_cuda_timeline_waiter"), 0);
}

#[test]
#[ignore = "run as the child process of cuda_timeline_a_waiting_process_runs_each_value_after_the_signallers_kernel"]
fn child_cuda_timeline_waiter() {
    waiter(false);
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_timeline_negative_control_a_process_that_skips_its_wait_reads_wrong() {
    if common::gpu::gpu().is_none() {
        return;
    }
    assert!(ordered_run("child_cuda_timeline_waiter_skips") > 0);
}

#[test]
#[ignore = "run as the child process of cuda_timeline_negative_control_a_process_that_skips_its_wait_reads_wrong"]
fn child_cuda_timeline_waiter_skips() {
    waiter(true);
}

/// A stream waits on `t` for a value nobody signals, then signals `after` (shared) and
/// `local` (in-process): once `t` fails, the stream is let go and both fail.
fn poisoned_stream_case(
    g: &common::gpu::Gpu,
    t: &SharedTimeline<seqsync::backend::cuda::CudaBackend>,
    what: &str,
    fail_it: impl FnOnce(),
    expect_cause: impl Fn(&Error) -> bool,
) {
    let b = &g.backend;
    let tag = what.replace(' ', "-");
    let after = SharedTimeline::create(b, &unique(&format!("{tag}-after")), 0).unwrap();
    let local = Timeline::new(b, "local", 0).unwrap();
    let s = b.new_stream("waits").unwrap();
    t.wait_on(&s, 5).unwrap();
    after.signal_on(&s, 1).unwrap();
    local.signal_on(&s, 1).unwrap();
    let start = Instant::now();
    fail_it();
    // The stream wait is let go (the failed word) within a second or so.
    b.synchronize_stream(&s).unwrap();
    assert!(
        start.elapsed() < Duration::from_millis(1500),
        "{what}: {:?}",
        start.elapsed()
    );
    let e = t.wait(5, Duration::from_secs(1)).unwrap_err();
    match &e {
        Error::TimelineFailed { cause, .. } => assert!(expect_cause(cause), "{what}: {e}"),
        _ => panic!("{what}: {e}"),
    }
    // Work after the released wait must not count as done: what the stream signalled fails.
    assert!(
        after.is_failed(),
        "{what}: the shared timeline signalled after the wait"
    );
    let e = local.query().unwrap_err();
    assert!(matches!(e, Error::TimelineFailed { .. }), "{what}: {e}");
    // A later signal from the poisoned stream fails its timeline too.
    let later = Timeline::new(b, "later", 0).unwrap();
    later.signal_on(&s, 1).unwrap();
    b.synchronize_stream(&s).unwrap();
    assert!(later.query().is_err(), "{what}");
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_timeline_a_failure_in_another_process_lets_a_stream_wait_go_and_poisons_it() {
    let Some(g) = common::gpu::gpu() else { return };
    let name = unique("cuda-tl-fail");
    let t = SharedTimeline::create(&g.backend, &name, 0).unwrap();
    let mut c = child("child_cuda_timeline_fails_it", &name, None);
    await_ready(&mut c);
    let go = std::cell::RefCell::new(Some(c));
    poisoned_stream_case(
        &g,
        &t,
        "failed elsewhere",
        || {
            // The child fails it 300 ms after it is ready, then exits.
            let c = go.borrow_mut().take().unwrap();
            assert_eq!(exit_code(c, Duration::from_secs(10)), 0);
        },
        |cause| matches!(cause, Error::FailedElsewhere { message, .. } if message.contains("sensor unplugged")),
    );
}

#[test]
#[ignore = "run as the child process of cuda_timeline_a_failure_in_another_process_lets_a_stream_wait_go_and_poisons_it"]
fn child_cuda_timeline_fails_it() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let g = common::gpu::gpu().expect("gpu");
    let t = SharedTimeline::open(&g.backend, &name).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_millis(300));
    t.fail(Error::Cancelled("sensor unplugged".into()));
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_timeline_a_killed_peer_lets_a_stream_wait_go_with_peer_lost() {
    let Some(g) = common::gpu::gpu() else { return };
    let name = unique("cuda-tl-kill");
    let t = SharedTimeline::create(&g.backend, &name, 0).unwrap();
    let mut c = child("child_cuda_timeline_opens_and_sleeps", &name, None);
    await_ready(&mut c);
    let pid = c.id();
    let go = std::cell::RefCell::new(Some(c));
    poisoned_stream_case(
        &g,
        &t,
        "killed",
        || {
            let c = go.borrow_mut().take().unwrap();
            let (_, mut c) = kill_later(c, Duration::from_millis(100)).join().unwrap();
            c.wait().unwrap();
        },
        |cause| matches!(cause, Error::PeerLost { pid: p, .. } if *p == pid),
    );
}

#[test]
#[ignore = "run as the child process of cuda_timeline_a_killed_peer_lets_a_stream_wait_go_with_peer_lost"]
fn child_cuda_timeline_opens_and_sleeps() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let g = common::gpu::gpu().expect("gpu");
    let _t = SharedTimeline::open(&g.backend, &name).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_secs(60));
}
