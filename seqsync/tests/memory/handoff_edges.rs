//! A tracker's own edges: an event of another tracker is refused by every call that takes
//! one (it would read or fake another event's facts, or index past this tracker's events);
//! wrapping streams while submissions plan their waits takes the tracker's locks in one order;
//! a submission whose wait fails stamps nothing.
use seqsync::backend::Backend;
use seqsync::memory::handoff::TrackingBackend;
use seqsync::HostBackend;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

#[test]
fn synchronizing_another_trackers_event_does_not_complete_this_trackers_work() {
    let host = HostBackend::new();
    let ta = TrackingBackend::new(host.clone());
    let tb = TrackingBackend::new(host.clone());
    let s = ta.wrap_stream(host.new_stream("s").unwrap(), "s");
    let t = ta.wrap_stream(host.new_stream("t").unwrap(), "t");
    let x = ta.track(Arc::new(AtomicU32::new(0)));
    let ea = ta.create_event(Default::default()).unwrap(); // slot 0 of ta
    let eb = tb.create_event(Default::default()).unwrap(); // slot 0 of tb, never recorded
    ta.submit(&s, &[x.write()], |s, cx| {
        let x = x.get(cx).clone();
        s.launch(move || {
            std::thread::sleep(Duration::from_millis(300));
            x.store(1, Ordering::SeqCst);
        });
    })
    .unwrap();
    ta.record(&ea, &s).unwrap();
    // Refused (an event of another tracker); accepted, it would return at once (never
    // recorded) and mark `ea`'s snapshot (s, epoch 1) completed: the read below would skip its
    // wait for the write.
    let r = ta.synchronize(&eb);
    let seen = Arc::new(AtomicU32::new(99));
    let sub = ta
        .submit(&t, &[x.read()], |t, cx| {
            let (x, seen) = (x.get(cx).clone(), seen.clone());
            t.launch(move || seen.store(x.load(Ordering::SeqCst), Ordering::SeqCst));
        })
        .unwrap();
    ta.synchronize_stream(&t).unwrap();
    assert!(
        r.is_err() || sub.waits == 1,
        "read on t skipped the wait for s's write (waits {}, stats {:?})",
        sub.waits,
        ta.stats()
    );
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "t read before s's write landed"
    );
    ta.synchronize_stream(&s).unwrap();
}

#[test]
fn querying_another_trackers_event_is_an_error_not_a_panic() {
    let host = HostBackend::new();
    let ta = TrackingBackend::new(host.clone());
    let tb = TrackingBackend::new(host.clone()); // no events: slab empty
    let ea = ta.create_event(Default::default()).unwrap();
    // Looked up among `tb`'s events, it would index past them.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tb.query(&ea)));
    assert!(r.is_ok(), "tb.query(&event_of_ta) panicked");
    assert!(r.unwrap().is_err());
}

#[test]
fn wrapping_streams_while_submits_wait_does_not_deadlock() {
    let host = HostBackend::new();
    let tb = TrackingBackend::new(host.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = mpsc::channel();
    {
        let (tb, host, stop) = (tb.clone(), host.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let w = tb.wrap_stream(host.new_stream("w").unwrap(), "w");
                drop(w);
            }
        });
    }
    {
        let tb = tb.clone();
        let s: Vec<_> = (0..3)
            .map(|i| tb.wrap_stream(host.new_stream(&format!("s{i}")).unwrap(), "s"))
            .collect();
        std::thread::spawn(move || {
            let x = tb.track(());
            for _ in 0..3_000 {
                tb.submit(&s[1], &[x.read()], |_, _| ()).unwrap();
                tb.submit(&s[2], &[x.read()], |_, _| ()).unwrap();
                // Two waits (s1, s2) planned under the tracker's lock: the list of streams is
                // taken under it.
                tb.submit(&s[0], &[x.write()], |_, _| ()).unwrap();
            }
            let _ = done_tx.send(());
        });
    }
    let r = done_rx.recv_timeout(Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    assert!(
        r.is_ok(),
        "submit and wrap_stream deadlocked (lock order streams/state)"
    );
}

/// A submission whose wait the backend refuses leaves the buffer's history as it was: a
/// retry needs (and gets, or is refused) the same wait, never none.
#[test]
fn a_submit_whose_wait_failed_does_not_let_the_retry_skip_it() {
    let host = HostBackend::new();
    let ta = TrackingBackend::new(host.clone());
    let tb = TrackingBackend::new(host.clone());
    let outer = TrackingBackend::new(ta.clone());
    let s1 = outer.wrap_stream(ta.new_stream("s1").unwrap(), "s1");
    let s2 = outer.wrap_stream(tb.new_stream("s2").unwrap(), "s2"); // same type, other inner tracker
    let x = outer.track(Arc::new(AtomicU32::new(0)));
    outer
        .submit(&s2, &[x.write()], |s, cx| {
            let x = x.get(cx).clone();
            s.inner().launch(move || {
                std::thread::sleep(Duration::from_millis(300));
                x.store(2, Ordering::SeqCst);
            });
        })
        .unwrap();
    // Needs a wait on s2: ta.record(spare, s2.inner) fails ("belongs to another tracker").
    let first = outer.submit(&s1, &[x.write()], |_, _| ());
    assert!(first.is_err());
    // The retry fails the same way: the failed submission left no stamp behind.
    let retry = outer.submit(&s1, &[x.write()], |s, cx| {
        let x = x.get(cx).clone();
        s.inner().launch(move || x.store(1, Ordering::SeqCst));
    });
    match &retry {
        Ok(r) => assert_eq!(
            r.waits, 1,
            "retry skipped the wait the failed submit needed"
        ),
        Err(e) => assert!(e.to_string().contains("another tracker"), "{e}"),
    }
    drop(s1);
    drop(s2);
}

/// A stream made after another was dropped may take its place in the tracker: a write on the
/// new stream is still waited for by a read elsewhere (the old stream's completion covers none
/// of the new one's work).
#[test]
fn a_stream_made_after_one_was_dropped_is_waited_for_as_its_own() {
    let host = HostBackend::new();
    let tb = TrackingBackend::new(host.clone());
    let x = tb.track(Arc::new(AtomicU32::new(0)));
    let old = tb.wrap_stream(host.new_stream("old").unwrap(), "old");
    tb.submit(&old, &[x.write()], |s, cx| {
        let x = x.get(cx).clone();
        s.launch(move || x.store(1, Ordering::SeqCst));
    })
    .unwrap();
    drop(old);
    let new = tb.wrap_stream(host.new_stream("new").unwrap(), "new");
    tb.submit(&new, &[x.write()], |s, cx| {
        let x = x.get(cx).clone();
        s.launch(move || {
            std::thread::sleep(Duration::from_millis(200));
            x.store(2, Ordering::SeqCst);
        });
    })
    .unwrap();
    let t = tb.wrap_stream(host.new_stream("t").unwrap(), "t");
    let seen = Arc::new(AtomicU32::new(0));
    let r = tb
        .submit(&t, &[x.read()], |t, cx| {
            let (x, seen) = (x.get(cx).clone(), seen.clone());
            t.launch(move || seen.store(x.load(Ordering::SeqCst), Ordering::SeqCst));
        })
        .unwrap();
    tb.synchronize_stream(&t).unwrap();
    assert_eq!(r.waits, 1);
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "read before the new stream's write"
    );
}

/// A tracked stream whose last handle is dropped by its own work: the drop does not wait for
/// itself, and nothing of the stream counts as completed.
#[test]
fn a_tracked_stream_dropped_by_its_own_work_does_not_hang() {
    let host = HostBackend::new();
    let tb = TrackingBackend::new(host.clone());
    let s = Arc::new(tb.wrap_stream(host.new_stream("s").unwrap(), "s"));
    let held = Arc::new(std::sync::Mutex::new(Some(s.clone())));
    let (go, gate) = mpsc::channel::<()>();
    let (done, finished) = mpsc::channel::<()>();
    let h = held.clone();
    s.inner().launch(move || {
        gate.recv().unwrap();
        drop(h.lock().unwrap().take());
        done.send(()).unwrap();
    });
    drop(s);
    go.send(()).unwrap();
    assert!(
        finished.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the tracked stream's drop waited for itself"
    );
}

/// A tracked stream dropped by its own work, which goes on writing a buffer: a read elsewhere
/// still waits for that write (the stream stays tracked until its work so far has run).
#[test]
fn a_tracked_stream_dropped_by_its_own_work_is_still_waited_for() {
    let host = HostBackend::new();
    let tb = TrackingBackend::new(host.clone());
    let x = tb.track(Arc::new(AtomicU32::new(0)));
    let s = Arc::new(tb.wrap_stream(host.new_stream("s").unwrap(), "s"));
    let held = Arc::new(std::sync::Mutex::new(Some(s.clone())));
    let (dropped_tx, dropped) = mpsc::channel::<()>();
    let h = held.clone();
    tb.submit(&s, &[x.write()], |inner, cx| {
        let x = x.get(cx).clone();
        inner.launch(move || {
            drop(h.lock().unwrap().take());
            dropped_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            x.store(1, Ordering::SeqCst);
        });
    })
    .unwrap();
    drop(s);
    dropped.recv_timeout(Duration::from_secs(10)).unwrap();
    let t = tb.wrap_stream(host.new_stream("t").unwrap(), "t");
    let seen = Arc::new(AtomicU32::new(9));
    tb.submit(&t, &[x.read()], |t, cx| {
        let (x, seen) = (x.get(cx).clone(), seen.clone());
        t.launch(move || seen.store(x.load(Ordering::SeqCst), Ordering::SeqCst));
    })
    .unwrap();
    tb.synchronize_stream(&t).unwrap();
    assert_eq!(
        seen.load(Ordering::SeqCst),
        1,
        "read before the dropped stream's write"
    );
}
