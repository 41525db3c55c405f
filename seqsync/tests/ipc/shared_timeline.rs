//! `SharedTimeline` on the host backend: the timeline contract's rows with both handles in one
//! process (the same code paths as two), then across processes: a stream wait released by
//! another process's signal (and its negative control), a failure and a killed peer reaching
//! the other process.

use std::process::Child;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seqsync::backend::Backend;
use seqsync::ipc::{Mechanism, SharedTimeline};
use seqsync::{Error, HostBackend};

use crate::harness::{
    self, await_ready, data_path, exit_code, kill_later, unique, Data, DATA, RING, SLOTS,
};

const LONG: Duration = Duration::from_secs(10);

/// This binary again, running this module's test `name` as the other process.
fn child(name: &str, timeline: &str, data: Option<&std::path::Path>) -> Child {
    harness::child(&format!("shared_timeline::{name}"), timeline, data)
}

fn pair(
    what: &str,
    initial: u64,
) -> (
    HostBackend,
    SharedTimeline<HostBackend>,
    SharedTimeline<HostBackend>,
) {
    let host = HostBackend::new();
    let name = unique(what);
    let a = SharedTimeline::create(&host, &name, initial).unwrap();
    let b = SharedTimeline::open(&host, &name).unwrap();
    (host, a, b)
}

#[test]
fn create_starts_at_initial_and_every_handle_sees_it() {
    let (_h, a, b) = pair("initial", 7);
    assert_eq!((a.query().unwrap(), b.query().unwrap()), (7, 7));
    assert_eq!(b.mechanism(), Mechanism::HostWord);
    a.wait(7, Duration::ZERO).unwrap();
    b.wait(3, Duration::ZERO).unwrap();
}

#[test]
fn a_signal_not_above_the_highest_signalled_or_enqueued_is_non_monotonic() {
    let (host, a, b) = pair("monotonic", 0);
    a.signal(3).unwrap();
    let e = b.signal(3).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NonMonotonic {
                current: 3,
                got: 3,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(b.query().unwrap(), 3);
    assert!(!a.is_failed());
    // A signal enqueued (not landed yet) counts too.
    let s = host.new_stream("held").unwrap();
    let gate = SharedTimeline::create(&host, &unique("monotonic-gate"), 0).unwrap();
    gate.wait_on(&s, 1).unwrap();
    a.signal_on(&s, 5).unwrap();
    let e = b.signal(4).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NonMonotonic {
                current: 5,
                got: 4,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(b.query().unwrap(), 3);
    gate.signal(1).unwrap();
    b.wait(5, LONG).unwrap();
}

#[test]
fn a_wait_not_reached_in_time_times_out_and_can_be_repeated() {
    let (_h, a, b) = pair("timeout", 1);
    for _ in 0..2 {
        let e = b.wait(2, Duration::from_millis(20)).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("to reach 2 (at 1)"), "{e}");
    }
    a.signal(2).unwrap();
    b.wait(2, Duration::ZERO).unwrap();
}

#[test]
fn a_stream_wait_before_its_signal_holds_the_work_after_it() {
    let (host, a, b) = pair("wait-before-signal", 0);
    let s = host.new_stream("waits").unwrap();
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    b.wait_on(&s, 2).unwrap();
    let r = ran.clone();
    s.launch(move || r.store(true, Ordering::SeqCst));
    a.signal(1).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !ran.load(Ordering::SeqCst),
        "ran before the value reached 2"
    );
    a.signal(2).unwrap();
    s.synchronize().unwrap();
    assert!(ran.load(Ordering::SeqCst));
}

#[test]
fn fail_wakes_waiters_everywhere_and_a_second_failure_is_ignored() {
    let (_h, a, b) = pair("fail", 0);
    let waiter = std::thread::spawn(move || b.wait(1, LONG));
    std::thread::sleep(Duration::from_millis(30));
    a.fail(Error::Cancelled("shutting down".into()));
    a.fail(Error::Cancelled("second".into()));
    // The handle that failed it keeps the error itself...
    let e = a.wait(1, LONG).unwrap_err();
    assert!(
        matches!(e.root_cause(), Error::Cancelled(why) if why == "shutting down"),
        "{e}"
    );
    // ...another handle (here or in another process) gets its message and the process.
    let e = waiter.join().unwrap().unwrap_err();
    assert!(matches!(&e, Error::TimelineFailed { .. }), "{e}");
    assert!(
        matches!(e.root_cause(), Error::FailedElsewhere { pid, message }
            if *pid == std::process::id() && message.contains("shutting down")),
        "{e}"
    );
    assert!(a.query().is_err() && a.signal(1).is_err() && a.is_failed());
}

#[test]
fn values_above_the_limit_are_out_of_range() {
    let (host, a, _b) = pair("range", 0);
    let max = seqsync::timeline::MAX_VALUE;
    let s = host.new_stream("s").unwrap();
    for e in [
        a.signal(max + 1).unwrap_err(),
        a.wait(max + 1, Duration::ZERO).unwrap_err(),
        a.wait_on(&s, max + 1).unwrap_err(),
        SharedTimeline::create(&host, &unique("range-new"), max + 1).unwrap_err(),
    ] {
        assert!(matches!(e, Error::ValueOutOfRange { .. }), "{e}");
    }
    assert!(!a.is_failed());
}

#[test]
fn work_that_waited_on_a_failed_timeline_fails_what_it_signals_next() {
    let (host, a, _b) = pair("propagate", 0);
    let downstream = SharedTimeline::create(&host, &unique("propagate-down"), 0).unwrap();
    let unrelated = SharedTimeline::create(&host, &unique("propagate-other"), 0).unwrap();
    let s = host.new_stream("s").unwrap();
    a.wait_on(&s, 1).unwrap();
    downstream.signal_on(&s, 1).unwrap();
    a.fail(Error::Cancelled("upstream".into()));
    let e = downstream.wait(1, LONG).unwrap_err();
    assert!(matches!(&e, Error::TimelineFailed { .. }), "{e}");
    unrelated.signal(1).unwrap();
    assert_eq!(unrelated.query().unwrap(), 1);
}

#[test]
fn a_stream_wait_nobody_can_release_fails_the_timeline_as_dropped() {
    let host = HostBackend::new();
    let t = SharedTimeline::create(&host, &unique("dropped"), 0).unwrap();
    let after = SharedTimeline::create(&host, &unique("dropped-after"), 0).unwrap();
    let s = host.new_stream("s").unwrap();
    t.wait_on(&s, 5).unwrap();
    after.signal_on(&s, 1).unwrap();
    drop(t);
    let start = Instant::now();
    let e = after.wait(1, LONG).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(e.root_cause(), Error::TimelineDropped { .. })
            || e.to_string().contains("dropped"),
        "{e}"
    );
}

/// A stream dropped before the shared timeline it waits on (locals in their natural order):
/// its drop does not wait for the value; the timeline's drop then releases the wait.
#[test]
fn a_stream_dropped_before_the_shared_timeline_it_waits_on_does_not_hang() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let host = HostBackend::new();
        let t = SharedTimeline::create(&host, &unique("stream-first"), 0).unwrap();
        let s = host.new_stream("s").unwrap();
        t.wait_on(&s, 1).unwrap();
        drop(s);
        drop(t);
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(LONG).is_ok(),
        "the stream's drop waited for a value only the timeline's later drop releases"
    );
}

/// Through a wrapping backend (the hazard checker's), a shared timeline still fails when the
/// stream that would signal it failed first: the wrapper passes on how the host backend runs
/// host work (which reports a failed stream's signal instead of skipping it).
#[test]
fn a_failed_stream_fails_a_shared_timeline_it_signals_through_a_validating_backend() {
    let vb = seqsync::hazard::ValidatingBackend::new(HostBackend::new());
    let s = vb.new_stream("s").unwrap();
    let tl = SharedTimeline::create(&vb, &unique("validating"), 0).unwrap();
    vb.launch_host(&s, Box::new(|| panic!("boom"))).unwrap();
    tl.signal_on(&s, 1).unwrap();
    let _ = vb.synchronize_stream(&s);
    let e = tl.wait(1, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, Error::TimelineFailed { .. }), "{e}");
}

#[test]
fn names_are_checked_and_a_ring_and_a_timeline_do_not_share_them() {
    let host = HostBackend::new();
    let name = unique("names");
    let _t = SharedTimeline::create(&host, &name, 0).unwrap();
    let e = SharedTimeline::create(&host, &name, 0).unwrap_err();
    assert!(
        e.to_string()
            .contains("a shared timeline of this name exists"),
        "{e}"
    );
    // The same name as a ring is another thing.
    let _r = seqsync::ipc::SharedRing::create(&host, &name, 0, 1).unwrap();
    let e = SharedTimeline::open(&host, &unique("names-missing")).unwrap_err();
    assert!(
        e.to_string().contains("no shared timeline of this name"),
        "{e}"
    );
    let e = SharedTimeline::create(&host, "bad/name", 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

// Across processes.

/// The parent writes word `k` of the shared data, then signals `k`; the child's stream waits
/// for each `k` and reads the word. Returns the child's exit code: how many reads were wrong.
fn ordered_run(child_test: &str) -> i32 {
    let host = HostBackend::new();
    let name = unique(child_test);
    let path = data_path(child_test);
    let data = Data::create(&path);
    for k in 0..SLOTS as i64 {
        data.word(k).store(-1, Ordering::SeqCst);
    }
    let t = SharedTimeline::create(&host, &name, 0).unwrap();
    let mut c = child(child_test, &name, Some(&path));
    await_ready(&mut c);
    for k in 1..=20i64 {
        std::thread::sleep(Duration::from_millis(3));
        data.word(k).store(k, Ordering::SeqCst);
        t.signal(k as u64).unwrap();
    }
    let code = exit_code(c, Duration::from_secs(30));
    let _ = std::fs::remove_file(&path);
    code
}

/// The child of [`ordered_run`]: enqueues every wait at once (before any signal), each
/// followed by a read of word `k`, unless `skip_waits`.
fn child_reads(skip_waits: bool) {
    let (Ok(name), Ok(path)) = (std::env::var(RING), std::env::var(DATA)) else {
        return;
    };
    let host = HostBackend::new();
    let t = SharedTimeline::open(&host, &name).unwrap();
    let data = Arc::new(Data::open(std::path::Path::new(&path)));
    let s = host.new_stream("reader").unwrap();
    let wrong = Arc::new(std::sync::atomic::AtomicI32::new(0));
    for k in 1..=20i64 {
        if !skip_waits {
            t.wait_on(&s, k as u64).unwrap();
        }
        let (d, w) = (data.clone(), wrong.clone());
        s.launch(move || {
            // Word k mod SLOTS holds k from k's signal on, and only larger values after it
            // (k + SLOTS, ...): below k, the read ran before the signal.
            if d.word(k).load(Ordering::SeqCst) < k {
                w.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    println!("{}", harness::READY);
    s.synchronize().unwrap();
    std::process::exit(wrong.load(Ordering::SeqCst).min(100));
}

#[test]
fn a_stream_in_another_process_runs_each_wait_after_its_signal() {
    assert_eq!(ordered_run("child_waits_then_reads"), 0);
}

#[test]
#[ignore = "run as the child process of a_stream_in_another_process_runs_each_wait_after_its_signal"]
fn child_waits_then_reads() {
    child_reads(false);
}

#[test]
fn negative_control_a_stream_that_skips_its_waits_reads_wrong() {
    assert!(ordered_run("child_reads_without_waiting") > 0);
}

#[test]
#[ignore = "run as the child process of negative_control_a_stream_that_skips_its_waits_reads_wrong"]
fn child_reads_without_waiting() {
    child_reads(true);
}

#[test]
fn a_failure_in_one_process_wakes_a_wait_in_another_with_its_message() {
    let host = HostBackend::new();
    let name = unique("fail-across");
    let t = SharedTimeline::create(&host, &name, 0).unwrap();
    let mut c = child("child_waits_for_a_failure", &name, None);
    await_ready(&mut c);
    std::thread::sleep(Duration::from_millis(50));
    t.fail(Error::Cancelled("operator stop".into()));
    assert_eq!(exit_code(c, Duration::from_secs(10)), 0);
}

#[test]
#[ignore = "run as the child process of a_failure_in_one_process_wakes_a_wait_in_another_with_its_message"]
fn child_waits_for_a_failure() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let t = SharedTimeline::open(&HostBackend::new(), &name).unwrap();
    println!("{}", harness::READY);
    let e = t.wait(1, LONG).unwrap_err();
    let ok = matches!(
        e.root_cause(),
        Error::FailedElsewhere { pid, message }
            if *pid == std::os::unix::process::parent_id() && message.contains("operator stop")
    );
    if !ok {
        eprintln!("unexpected: {e}");
    }
    std::process::exit(if ok { 0 } else { 1 });
}

#[test]
fn a_killed_process_fails_the_timeline_with_peer_lost_within_a_second() {
    let host = HostBackend::new();
    let name = unique("kill");
    let t = SharedTimeline::create(&host, &name, 0).unwrap();
    let mut c = child("child_opens_and_hangs", &name, None);
    await_ready(&mut c);
    let pid = c.id();
    let s = host.new_stream("s").unwrap();
    let after = SharedTimeline::create(&host, &unique("kill-after"), 0).unwrap();
    t.wait_on(&s, 1).unwrap();
    after.signal_on(&s, 1).unwrap();
    let killer = kill_later(c, Duration::from_millis(200));
    let e = t.wait(1, LONG).unwrap_err();
    let (killed, mut c) = killer.join().unwrap();
    let late = killed.elapsed();
    assert!(
        matches!(e.root_cause(), Error::PeerLost { pid: p, role: "opening", .. } if *p == pid),
        "{e}"
    );
    assert!(
        late < Duration::from_secs(1),
        "PeerLost {late:?} after the kill"
    );
    // The stream that waited fails what it signals next.
    assert!(after.wait(1, LONG).is_err());
    c.wait().unwrap();
}

#[test]
#[ignore = "run as the child process of the kill test"]
fn child_opens_and_hangs() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let _t = SharedTimeline::open(&HostBackend::new(), &name).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn stream_waits_in_two_processes_that_nobody_can_release_fail_it_as_dropped() {
    let host = HostBackend::new();
    let name = unique("dropped-two");
    let t = SharedTimeline::create(&host, &name, 0).unwrap();
    let after = SharedTimeline::create(&host, &unique("dropped-two-after"), 0).unwrap();
    let mut c = child("child_waits_then_drops_its_handle", &name, None);
    await_ready(&mut c);
    let s = host.new_stream("s").unwrap();
    t.wait_on(&s, 5).unwrap();
    after.signal_on(&s, 1).unwrap();
    // Neither process can signal 5 any more: the other process only waits.
    drop(t);
    let start = Instant::now();
    let e = after.wait(1, LONG).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert!(e.to_string().contains("dropped"), "{e}");
    assert_eq!(exit_code(c, Duration::from_secs(10)), 0);
}

#[test]
#[ignore = "run as the child process of stream_waits_in_two_processes_that_nobody_can_release_fail_it_as_dropped"]
fn child_waits_then_drops_its_handle() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let host = HostBackend::new();
    let t = SharedTimeline::open(&host, &name).unwrap();
    let s = host.new_stream("s").unwrap();
    t.wait_on(&s, 5).unwrap();
    drop(t);
    println!("{}", harness::READY);
    // Its stream fails once the timeline does (dropped: nobody can signal 5).
    assert!(host.synchronize_stream(&s).is_err());
}

/// A stream wait fails as dropped only when no handle can signal any more: another open of
/// the timeline in this very process still can.
#[test]
fn shared_timeline_a_second_open_in_this_process_can_still_release_a_stream_wait() {
    let host = HostBackend::new();
    let name = unique("tl-twin");
    let created = SharedTimeline::create(&host, &name, 0).unwrap();
    let opened = SharedTimeline::open(&host, &name).unwrap();
    let s = host.new_stream("s").unwrap();
    created.wait_on(&s, 1).unwrap();
    drop(created); // `opened`, in this very process, can still signal 1
                   // Longer than CHECK_EVERY (100 ms): the stream job's liveness check runs meanwhile.
    std::thread::sleep(Duration::from_millis(400));
    opened.signal(1).unwrap();
    host.synchronize_stream(&s).unwrap();
    assert!(!opened.is_failed());
}

#[test]
fn shared_timeline_two_opens_in_this_process_count_as_signallers() {
    let host = HostBackend::new();
    let name = unique("tl-twin2");
    let creator = SharedTimeline::create(&host, &name, 0).unwrap();
    let a = SharedTimeline::open(&host, &name).unwrap();
    let b = SharedTimeline::open(&host, &name).unwrap();
    let s = host.new_stream("s").unwrap();
    a.wait_on(&s, 1).unwrap();
    drop(a);
    drop(creator);
    std::thread::sleep(Duration::from_millis(400));
    b.signal(1).unwrap();
    host.synchronize_stream(&s).unwrap();
}
