//! The stream half of the `Backend` trait, on every backend: `new_stream`, `launch_host`
//! (host work in stream order), `synchronize_stream`; and `EventRingbuf::record_host`, the ring
//! record of work a host thread has already done.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Harness;
use seqsync::backend::Backend;
use seqsync::hazard::ValidatingBackend;
use seqsync::internal::hazard::Access;
use seqsync::{AnyBackend, BackendKind, Blocking, Error, EventRingbuf, HostBackend};

/// Host work runs after the device work enqueued before it, and `synchronize_stream` returns
/// only once it has run.
fn launch_host_runs_after_earlier_work<B: Harness>(b: &B) {
    let s = b.new_stream("s").unwrap();
    let t0 = Instant::now();
    let ran_at = Arc::new(Mutex::new(None));
    b.busy(&s, Duration::from_millis(60));
    let r = ran_at.clone();
    b.launch_host(
        &s,
        Box::new(move || *r.lock().unwrap() = Some(t0.elapsed())),
    )
    .unwrap();
    b.synchronize_stream(&s).unwrap();
    let at = ran_at
        .lock()
        .unwrap()
        .expect("synchronize_stream returned before the host work");
    assert!(
        at >= Duration::from_millis(55),
        "host work ran at {at:?}, before the busy work"
    );
}

/// Work enqueued after host work waits for it: an event recorded after it completes only once
/// the closure has returned.
fn later_work_waits_for_host_work<B: Harness>(b: &B) {
    let s = b.new_stream("s").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    b.launch_host(
        &s,
        Box::new(move || {
            std::thread::sleep(Duration::from_millis(40));
            d.store(true, Ordering::SeqCst);
        }),
    )
    .unwrap();
    let ev = b.create_event(Default::default()).unwrap();
    b.record(&ev, &s).unwrap();
    b.synchronize(&ev).unwrap();
    assert!(
        done.load(Ordering::SeqCst),
        "the event completed before the host work"
    );
}

/// A stream wait orders host work too: host work on `b` after a wait for `a`'s busy work runs
/// after it.
fn host_work_honours_stream_waits<B: Harness>(b: &B) {
    let (s1, s2) = (b.new_stream("a").unwrap(), b.new_stream("b").unwrap());
    let t0 = Instant::now();
    b.busy(&s1, Duration::from_millis(60));
    let ev = b.create_event(Default::default()).unwrap();
    b.record(&ev, &s1).unwrap();
    b.wait(&s2, &ev).unwrap();
    let at = Arc::new(Mutex::new(None));
    let r = at.clone();
    b.launch_host(
        &s2,
        Box::new(move || *r.lock().unwrap() = Some(t0.elapsed())),
    )
    .unwrap();
    b.synchronize_stream(&s2).unwrap();
    let at = at.lock().unwrap().unwrap();
    assert!(
        at >= Duration::from_millis(55),
        "host work on b ran at {at:?}, before a's work"
    );
}

/// Host work runs once each, in launch order.
fn host_work_runs_once_in_order<B: Harness>(b: &B) {
    let s = b.new_stream("s").unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..50 {
        let l = log.clone();
        b.launch_host(&s, Box::new(move || l.lock().unwrap().push(i)))
            .unwrap();
    }
    b.synchronize_stream(&s).unwrap();
    assert_eq!(*log.lock().unwrap(), (0..50).collect::<Vec<_>>());
}

/// A panic in host work is caught and reported by the stream's next synchronize, naming the
/// panic; nothing hangs.
fn a_panicking_host_function_fails_synchronize_stream<B: Harness>(b: &B) {
    let s = b.new_stream("s").unwrap();
    b.launch_host(&s, Box::new(|| panic!("boom in host work")))
        .unwrap();
    let err = b.synchronize_stream(&s).unwrap_err();
    assert!(matches!(err, Error::Backend(_)), "{err}");
    assert!(err.to_string().contains("boom in host work"), "{err}");
}

/// `record_host`: a host thread publishes work it has done; a consumer stream's wait and a
/// host synchronize are ordered after it, with no stream involved.
fn record_host_orders_consumers<B: Harness>(b: &B) {
    let consumer = b.new_stream("consumer").unwrap();
    let ring = EventRingbuf::new(b, "host stage", 2, 2).unwrap();
    let value = Arc::new(AtomicI64::new(-1));
    let seen = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|scope| {
        let (ring, produced) = (&ring, value.clone());
        scope.spawn(move || {
            for seq in 0..20 {
                std::thread::sleep(Duration::from_micros(300));
                produced.store(seq, Ordering::SeqCst); // the host stage's work
                ring.record_host(seq, Blocking::Yes).unwrap();
            }
        });
        for seq in 0..20 {
            ring.wait(&consumer, seq, Blocking::Yes).unwrap();
            let (v, s) = (value.clone(), seen.clone());
            b.launch_host(
                &consumer,
                Box::new(move || s.lock().unwrap().push((seq, v.load(Ordering::SeqCst)))),
            )
            .unwrap();
            ring.synchronize(seq, Blocking::Yes).unwrap();
            assert!(value.load(Ordering::SeqCst) >= seq);
        }
    });
    b.synchronize_stream(&consumer).unwrap();
    for (seq, v) in seen.lock().unwrap().iter() {
        assert!(
            v >= seq,
            "the consumer of seq {seq} saw value {v}: ordered before the host work"
        );
    }
}

fn record_host_keeps_the_ring_contract<B: Harness>(b: &B) {
    let ring = EventRingbuf::new(b, "host stage", 1, 1).unwrap();
    ring.record_host(0, Blocking::No).unwrap();
    let err = ring.record_host(1, Blocking::No).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Overflow {
                seq: 1,
                max_size: 1,
                ..
            }
        ),
        "{err}"
    );
    let ring = EventRingbuf::new(b, "host stage", 1, 2).unwrap();
    let err = ring.record_host(1, Blocking::No).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfOrder {
                expected: 0,
                got: 1,
                ..
            }
        ),
        "{err}"
    );
}

on_both_backends!(
    launch_host_runs_after_earlier_work,
    later_work_waits_for_host_work,
    host_work_honours_stream_waits,
    host_work_runs_once_in_order,
    a_panicking_host_function_fails_synchronize_stream,
    record_host_orders_consumers,
    record_host_keeps_the_ring_contract,
);

/// Generic code creates streams, launches host work and synchronizes on `AnyBackend` too.
#[test]
fn any_backend_has_the_stream_operations() {
    let b = AnyBackend::new(BackendKind::Host).unwrap();
    let s = Backend::new_stream(&b, "any").unwrap();
    let n = Arc::new(AtomicU32::new(0));
    let m = n.clone();
    b.launch_host(
        &s,
        Box::new(move || {
            m.fetch_add(1, Ordering::SeqCst);
        }),
    )
    .unwrap();
    b.synchronize_stream(&s).unwrap();
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

/// The validating backend: `synchronize_stream` orders the calling thread after the stream's
/// work, so a host read after it is no hazard; without it, the same read is one.
#[test]
fn validating_synchronize_stream_orders_the_thread() {
    for synchronize in [true, false] {
        let vb = ValidatingBackend::new(HostBackend::new());
        let s = vb.new_stream("s_copy").unwrap();
        vb.launch_host(&s, Box::new(|| {})).unwrap();
        vb.access(&s, Access::write("copy", "out", 0, 0));
        if synchronize {
            vb.synchronize_stream(&s).unwrap();
        }
        vb.host_access(Access::read("process", "out", 0, 0));
        assert_eq!(
            vb.checker().is_clean(),
            synchronize,
            "synchronize_stream = {synchronize}: {}",
            vb.checker().report()
        );
        vb.synchronize_stream(&s).unwrap();
    }
}
