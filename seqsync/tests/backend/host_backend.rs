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

#[test]
fn a_full_queue_holds_the_enqueuer_back_while_the_worker_moves() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let host = HostBackend::new();
    let s = host.new_stream("slow").unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let n = seqsync::backend::host::HostStream::QUEUE_BOUND + 1500;
    for _ in 0..n {
        let r = ran.clone();
        s.launch(move || {
            std::thread::sleep(Duration::from_micros(50));
            r.fetch_add(1, Ordering::SeqCst);
        });
    }
    // The enqueuer ran ahead of the worker by at most the bound (and the one running).
    let behind = n - ran.load(Ordering::SeqCst);
    assert!(
        behind <= seqsync::backend::host::HostStream::QUEUE_BOUND + 1,
        "{behind} operations queued: the queue grew past its bound"
    );
    s.synchronize().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), n);
}

#[test]
fn a_full_queue_behind_a_wait_for_the_enqueuing_thread_does_not_hang() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let host = HostBackend::new();
    let s = host.new_stream("gated").unwrap();
    let go = seqsync::timeline::Timeline::new(&host, "go", 0).unwrap();
    // The worker waits for a value this thread signals only once the queue is full.
    go.wait_on(&s, 1).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let n = seqsync::backend::host::HostStream::QUEUE_BOUND + 10;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let (s, ran) = (&s, &ran);
        scope.spawn(move || {
            for _ in 0..n {
                let r = ran.clone();
                s.launch(move || {
                    r.fetch_add(1, Ordering::SeqCst);
                });
            }
            let _ = done_tx.send(());
        });
        let enqueued = done_rx.recv_timeout(Duration::from_secs(10));
        // Released either way, so that a failure here does not hang the test too.
        go.signal(1).unwrap();
        assert!(
            enqueued.is_ok(),
            "the enqueues waited for room the worker could not make"
        );
    });
    s.synchronize().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), n);
}
