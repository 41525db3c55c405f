//! A timeline dropped while stream waits on it are pending: the signals enqueued land and
//! release their waits in order; a signal held behind a wait of its own timeline that nothing
//! else reaches never lands, so the waits it would have released fail (`TimelineDropped`) once
//! everything that can land has, and no stream waits forever.
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use seqsync::timeline::Timeline;
use seqsync::{Error, HostBackend};

#[test]
fn a_dropped_timeline_whose_signal_sits_behind_its_own_wait_releases_the_stream() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let t = Timeline::new(&host, "t", 0).unwrap();
    let after = Timeline::new(&host, "after", 0).unwrap();
    t.wait_on(&s, 2).unwrap();
    t.signal_on(&s, 3).unwrap();
    after.signal_on(&s, 1).unwrap();
    drop(t);
    // The drop's stall bound (drain::STALL) is 5 s: three times that.
    let r = after.wait(1, Duration::from_secs(15));
    let hung = matches!(r, Err(Error::Timeout { .. }));
    if hung {
        // Dropping `s` would join a worker that never returns.
        std::mem::forget(s);
    }
    assert!(
        !hung,
        "stream 's' still waits on the dropped timeline after 15 s"
    );
    let err = r.unwrap_err();
    assert!(
        matches!(err.root_cause(), Error::TimelineDropped { .. }),
        "{err}"
    );
}

#[test]
fn a_dropped_timeline_lands_what_can_land_before_failing_the_waits_left() {
    let host = HostBackend::new();
    let (a, r, s) = (
        host.new_stream("a").unwrap(),
        host.new_stream("r").unwrap(),
        host.new_stream("s").unwrap(),
    );
    let t = Timeline::new(&host, "t", 0).unwrap();
    let (after_r, after_s) = (
        Timeline::new(&host, "after_r", 0).unwrap(),
        Timeline::new(&host, "after_s", 0).unwrap(),
    );
    // `a` signals 1 after slow work; `r` waits for it; `s` waits for 3, which only the signal
    // behind that very wait (4) would bring.
    let done = Arc::new(AtomicBool::new(false));
    let (d, seen) = (done.clone(), Arc::new(AtomicBool::new(false)));
    a.launch(move || {
        std::thread::sleep(Duration::from_millis(300));
        d.store(true, Ordering::SeqCst);
    });
    t.signal_on(&a, 1).unwrap();
    t.wait_on(&r, 1).unwrap();
    let (d, sn) = (done.clone(), seen.clone());
    r.launch(move || sn.store(d.load(Ordering::SeqCst), Ordering::SeqCst));
    after_r.signal_on(&r, 1).unwrap();
    t.wait_on(&s, 3).unwrap();
    t.signal_on(&s, 4).unwrap();
    after_s.signal_on(&s, 1).unwrap();
    drop(t);
    // `r`'s wait is released by the signal, after the slow work: not by the failure.
    after_r.wait(1, Duration::from_secs(10)).unwrap();
    assert!(
        seen.load(Ordering::SeqCst),
        "r ran before a's signal landed"
    );
    // `s`'s wait, which nothing can reach, fails, and what `s` signals after it fails.
    let e = after_s.wait(1, Duration::from_secs(10)).unwrap_err();
    assert!(
        matches!(e.root_cause(), Error::TimelineDropped { .. }),
        "{e}"
    );
}

#[test]
fn a_dropped_timeline_whose_held_signal_is_released_by_another_lands_it() {
    let host = HostBackend::new();
    let (a, r, s) = (
        host.new_stream("a").unwrap(),
        host.new_stream("r").unwrap(),
        host.new_stream("s").unwrap(),
    );
    let t = Timeline::new(&host, "t", 0).unwrap();
    let after = Timeline::new(&host, "after", 0).unwrap();
    // `s` signals 2 (after slow work) behind its wait for 1, which `a` brings after slow
    // work: every wait is reached, nothing fails, also while `s` works with the value at 1.
    a.launch(|| std::thread::sleep(Duration::from_millis(200)));
    t.signal_on(&a, 1).unwrap();
    t.wait_on(&s, 1).unwrap();
    s.launch(|| std::thread::sleep(Duration::from_millis(200)));
    t.signal_on(&s, 2).unwrap();
    t.wait_on(&r, 2).unwrap();
    after.signal_on(&r, 1).unwrap();
    drop(t);
    after.wait(1, Duration::from_secs(10)).unwrap();
    s.synchronize().unwrap();
}

/// A stream dropped before the timeline it waits on (the natural order of locals declared
/// timeline first): the stream's drop does not wait for the value (as a CUDA stream's destroy),
/// the timeline's drop then releases the wait, and the work behind it still runs.
#[test]
fn a_stream_dropped_before_the_timeline_it_waits_on_does_not_hang() {
    let (tx, rx) = std::sync::mpsc::channel();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    std::thread::spawn(move || {
        let host = HostBackend::new();
        let t = Timeline::new(&host, "t", 0).unwrap();
        let s = host.new_stream("s").unwrap();
        t.wait_on(&s, 1).unwrap();
        s.launch(move || r.store(true, Ordering::SeqCst));
        drop(s);
        drop(t);
        tx.send(()).unwrap();
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(15)).is_ok(),
        "dropping the stream waited for a value only the timeline's later drop releases"
    );
    // Skipped or run, the work behind the released wait is reached: the thread ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !ran.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A stream dropped with plain closures still to run finishes them before its drop returns.
#[test]
fn a_dropped_stream_runs_its_closures_before_the_drop_returns() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    s.launch(|| std::thread::sleep(Duration::from_millis(50)));
    s.launch(move || r.store(true, Ordering::SeqCst));
    drop(s);
    assert!(ran.load(Ordering::SeqCst));
}

/// A stream whose last handle is dropped by one of its own closures: the closure returns, the
/// rest of the stream's work runs, and its thread ends (the drop does not wait for itself).
#[test]
fn a_stream_dropped_by_its_own_closure_ends() {
    let host = HostBackend::new();
    let s = Arc::new(host.new_stream("s").unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let held = std::sync::Mutex::new(Some(s.clone()));
    let held = Arc::new(held);
    let h = held.clone();
    let (go, gate) = std::sync::mpsc::channel::<()>();
    // Once this thread's handle is gone: the closure's is the last.
    s.launch(move || {
        gate.recv().unwrap();
        drop(h.lock().unwrap().take());
    });
    s.launch(move || tx.send(()).unwrap());
    drop(s);
    go.send(()).unwrap();
    assert!(
        rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the work after the closure that dropped the stream never ran"
    );
    assert!(held.lock().unwrap().is_none());
}

/// Work on a stream that synchronizes its own stream would wait for itself: the synchronize
/// returns `WaitsForItself` at once, and the stream goes on.
#[test]
fn a_stream_s_own_work_that_synchronizes_it_is_told_instead_of_hanging() {
    let host = HostBackend::new();
    let s = Arc::new(host.new_stream("s").unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let me = s.clone();
    s.launch(move || tx.send(me.synchronize()).unwrap());
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the synchronize waited for itself");
    assert!(
        matches!(r, Err(Error::WaitsForItself { ref stream }) if stream == "s"),
        "{r:?}"
    );
    s.synchronize().unwrap();
}

/// A closure that panics with a payload whose own drop panics fails its stream like any other
/// panic: the stream's waiters are told, nobody hangs.
#[test]
fn a_panic_payload_that_panics_on_drop_fails_the_stream() {
    struct Bomb;
    impl Drop for Bomb {
        fn drop(&mut self) {
            panic!("payload drop");
        }
    }
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    s.launch(|| std::panic::panic_any(Bomb));
    let (tx, rx) = std::sync::mpsc::channel();
    let s = Arc::new(s);
    let s2 = s.clone();
    std::thread::spawn(move || tx.send(s2.synchronize()).unwrap());
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the stream's synchronize hung");
    assert!(r.is_err());
}

/// Work on a stream that synchronizes an event recorded on its own stream after it would wait
/// for itself (on a host backend that polls events too): `WaitsForItself` at once; an event
/// recorded before it is waited for as usual.
#[test]
fn a_stream_s_own_work_that_waits_for_a_later_event_of_it_is_told() {
    use seqsync::backend::{Backend, EventOptions};
    for host in [HostBackend::new(), HostBackend::polling()] {
        let s = Arc::new(host.new_stream("s").unwrap());
        let (before, after) = (
            Arc::new(host.create_event(EventOptions::default()).unwrap()),
            Arc::new(host.create_event(EventOptions::default()).unwrap()),
        );
        host.record(&before, &s).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, gate) = std::sync::mpsc::channel::<()>();
        let (h, b, a) = (host.clone(), before.clone(), after.clone());
        s.launch(move || {
            gate.recv().unwrap(); // `after` is recorded behind this closure by then
            tx.send((h.synchronize(&b), h.synchronize(&a))).unwrap();
        });
        host.record(&after, &s).unwrap();
        go.send(()).unwrap();
        let (b, a) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a synchronize waited for itself");
        assert!(b.is_ok(), "{b:?}");
        assert!(matches!(a, Err(Error::WaitsForItself { .. })), "{a:?}");
        s.synchronize().unwrap();
    }
}
