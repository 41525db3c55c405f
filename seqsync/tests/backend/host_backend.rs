//! The host backend's stream and event semantics.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use seqsync::backend::host::Chaos;
use seqsync::backend::Backend;
use seqsync::{Error, HostBackend};

#[test]
fn closures_run_in_order() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..100 {
        let l = log.clone();
        s.launch(move || l.lock().unwrap().push(i));
    }
    s.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), (0..100).collect::<Vec<_>>());
}

#[test]
fn event_completes_after_prior_work_only() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let ev = host.create_event(Default::default()).unwrap();
    assert!(
        host.query(&ev).unwrap(),
        "a never-recorded event counts as complete"
    );
    s.launch(|| std::thread::sleep(Duration::from_millis(50)));
    host.record(&ev, &s).unwrap();
    s.launch(|| std::thread::sleep(Duration::from_secs(1)));
    assert!(!host.query(&ev).unwrap());
    let t = std::time::Instant::now();
    host.synchronize(&ev).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "synchronize waited for later work"
    );
}

#[test]
fn rerecord_does_not_change_earlier_waits() {
    let host = HostBackend::new();
    let (a, b) = (host.new_stream("a").unwrap(), host.new_stream("b").unwrap());
    let ev = host.create_event(Default::default()).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    a.launch(move || {
        std::thread::sleep(Duration::from_millis(20));
        l.lock().unwrap().push("a1")
    });
    host.record(&ev, &a).unwrap();
    host.wait(&b, &ev).unwrap();
    let l = log.clone();
    b.launch(move || l.lock().unwrap().push("b"));
    // Re-record after a long second closure: b's wait must still stand for a1 only.
    let l = log.clone();
    a.launch(move || {
        std::thread::sleep(Duration::from_millis(300));
        l.lock().unwrap().push("a2")
    });
    host.record(&ev, &a).unwrap();
    b.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), ["a1", "b"]);
    a.synchronize().unwrap();
}

#[test]
fn panic_becomes_an_error_for_waiters() {
    let host = HostBackend::new();
    let (a, b) = (host.new_stream("a").unwrap(), host.new_stream("b").unwrap());
    let ev = host.create_event(Default::default()).unwrap();
    let before = host.create_event(Default::default()).unwrap();
    host.record(&before, &a).unwrap();
    a.launch(|| panic!("kernel exploded"));
    host.record(&ev, &a).unwrap();
    let err = host.synchronize(&ev).unwrap_err();
    assert!(matches!(err, Error::Backend(_)));
    assert!(err.to_string().contains("kernel exploded"), "{err}");
    assert!(err.to_string().contains("'a'"), "{err}");
    // Work before the panic is fine.
    host.synchronize(&before).unwrap();
    // A stream that waits on the failed event fails too, without hanging.
    host.wait(&b, &ev).unwrap();
    b.launch(|| {});
    let err = b.synchronize().unwrap_err();
    assert!(err.to_string().contains("failed stream"), "{err}");
    assert!(a.is_failed() && b.is_failed());
}

#[test]
fn drop_finishes_enqueued_work() {
    let host = HostBackend::new();
    let done = Arc::new(Mutex::new(0));
    {
        let s = host.new_stream("s").unwrap();
        for _ in 0..10 {
            let d = done.clone();
            s.launch(move || {
                std::thread::sleep(Duration::from_millis(2));
                *d.lock().unwrap() += 1;
            });
        }
    }
    assert_eq!(*done.lock().unwrap(), 10);
}

#[test]
fn chaos_delays_but_keeps_order() {
    let host = HostBackend::with_chaos(Chaos {
        seed: 42,
        max_delay: Duration::from_micros(500),
    });
    let s = host.new_stream("s").unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let t = std::time::Instant::now();
    for i in 0..50 {
        let l = log.clone();
        s.launch(move || l.lock().unwrap().push(i));
    }
    s.synchronize().unwrap();
    assert_eq!(*log.lock().unwrap(), (0..50).collect::<Vec<_>>());
    assert!(
        t.elapsed() > Duration::from_micros(500),
        "chaos added no delay"
    );
}
