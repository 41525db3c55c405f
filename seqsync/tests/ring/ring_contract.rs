//! One named test per row of the EventRingbuf contract (DESIGN.md), on the host backend and,
//! where a GPU is present, on the CUDA backend.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Harness;
use seqsync::{Blocking, Error, EventRingbuf};

const SHORT: Duration = Duration::from_millis(50);

fn new_rejects_zero_max_size<B: Harness>(b: &B) {
    let err = EventRingbuf::new(b, "r", 1, 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("'r'") && err.to_string().contains("max_size"));
}

fn new_rejects_too_many_consumers<B: Harness>(b: &B) {
    let err = EventRingbuf::new(b, "r", 5000, 1).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("nconsumers=5000"));
}

fn zero_consumers_is_a_counter<B: Harness>(b: &B) {
    let s = b.stream();
    let r = EventRingbuf::new(b, "count", 0, 1).unwrap();
    for seq in 0..100 {
        r.record(&s, seq, Blocking::No).unwrap();
    }
    assert_eq!(r.next_seq(), 100);
    r.wait(&s, -1, Blocking::No).unwrap();
    let err = r.wait(&s, 3, Blocking::No).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OverConsumed {
                seq: 3,
                nconsumers: 0,
                ..
            }
        ),
        "{err}"
    );
    let r = EventRingbuf::new(b, "count2", 0, 1).unwrap();
    let err = r.synchronize(0, Blocking::Yes).unwrap_err();
    assert!(matches!(err, Error::OverConsumed { .. }), "{err}");
}

fn record_out_of_order<B: Harness>(b: &B) {
    let s = b.stream();
    let r = EventRingbuf::new(b, "r", 1, 4).unwrap();
    r.record(&s, 0, Blocking::No).unwrap();
    let err = r.record(&s, 2, Blocking::No).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfOrder {
                expected: 1,
                got: 2,
                ..
            }
        ),
        "{err}"
    );
}

fn record_overflow_without_blocking<B: Harness>(b: &B) {
    let s = b.stream();
    let r = EventRingbuf::new(b, "r", 1, 2).unwrap();
    r.record(&s, 0, Blocking::No).unwrap();
    r.record(&s, 1, Blocking::No).unwrap();
    let err = r.record(&s, 2, Blocking::No).unwrap_err();
    match err {
        Error::Overflow {
            seq,
            oldest,
            max_size,
            nconsumers,
            ..
        } => {
            assert_eq!((seq, oldest, max_size, nconsumers), (2, 0, 2, 1))
        }
        e => panic!("{e}"),
    }
}

fn record_blocks_until_oldest_released<B: Harness>(b: &B) {
    let (s, c) = (b.stream(), b.stream());
    let r = EventRingbuf::new(b, "r", 1, 1).unwrap();
    r.record(&s, 0, Blocking::No).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            r.record(&s, 1, Blocking::Yes).unwrap();
            done.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(SHORT);
        assert!(
            !done.load(Ordering::SeqCst),
            "record must block while seq 0 is unreleased"
        );
        r.wait(&c, 0, Blocking::No).unwrap();
    });
    assert!(done.load(Ordering::SeqCst));
    assert_eq!(r.next_seq(), 2);
}

fn wait_negative_seq_is_noop<B: Harness>(b: &B) {
    let s = b.stream();
    let r = EventRingbuf::new(b, "r", 1, 1).unwrap();
    r.wait(&s, -1, Blocking::No).unwrap();
    r.synchronize(-5, Blocking::No).unwrap();
    assert!(!r.is_stopped());
    r.stop("done");
    assert!(r.wait(&s, -1, Blocking::No).unwrap_err().is_stopped());
}

fn wait_not_yet_produced_without_blocking<B: Harness>(b: &B) {
    let s = b.stream();
    let r = EventRingbuf::new(b, "r", 1, 2).unwrap();
    let err = r.wait(&s, 0, Blocking::No).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotYetProduced {
                seq: 0,
                next: 0,
                ..
            }
        ),
        "{err}"
    );
    let r = EventRingbuf::new(b, "r2", 1, 2).unwrap();
    let err = r.synchronize(1, Blocking::No).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotYetProduced {
                seq: 1,
                next: 0,
                ..
            }
        ),
        "{err}"
    );
}

fn wait_blocks_until_recorded<B: Harness>(b: &B) {
    let (s, c) = (b.stream(), b.stream());
    let r = EventRingbuf::new(b, "r", 2, 2).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            r.wait(&c, 0, Blocking::Yes).unwrap();
            r.synchronize(0, Blocking::Yes).unwrap();
            done.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(SHORT);
        assert!(
            !done.load(Ordering::SeqCst),
            "wait must block until seq 0 is recorded"
        );
        r.record(&s, 0, Blocking::No).unwrap();
    });
    assert!(done.load(Ordering::SeqCst));
}

fn stale_seq<B: Harness>(b: &B) {
    let (s, c) = (b.stream(), b.stream());
    let r = EventRingbuf::new(b, "r", 1, 1).unwrap();
    r.record(&s, 0, Blocking::No).unwrap();
    r.wait(&c, 0, Blocking::No).unwrap();
    r.record(&s, 1, Blocking::No).unwrap();
    let err = r.wait(&c, 0, Blocking::No).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Stale {
                seq: 0,
                current: 1,
                ..
            }
        ),
        "{err}"
    );
}

fn over_consumed_seq<B: Harness>(b: &B) {
    let (s, c) = (b.stream(), b.stream());
    let r = EventRingbuf::new(b, "r", 1, 2).unwrap();
    r.record(&s, 0, Blocking::No).unwrap();
    r.wait(&c, 0, Blocking::No).unwrap();
    let err = r.wait(&c, 0, Blocking::No).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OverConsumed {
                seq: 0,
                nconsumers: 1,
                ..
            }
        ),
        "{err}"
    );
}

fn stale_and_over_consumed_are_distinct<B: Harness>(b: &B) {
    let (s, c) = (b.stream(), b.stream());
    let r = EventRingbuf::new(b, "r", 2, 1).unwrap();
    r.record(&s, 0, Blocking::No).unwrap();
    r.wait(&c, 0, Blocking::No).unwrap();
    r.synchronize(0, Blocking::No).unwrap();
    // seq 0 released by both consumers, slot not yet recycled: over-consumed.
    assert!(matches!(
        r.wait(&c, 0, Blocking::No),
        Err(Error::OverConsumed { .. })
    ));
    let r = EventRingbuf::new(b, "r2", 2, 1).unwrap();
    r.record(&s, 0, Blocking::No).unwrap();
    r.wait(&c, 0, Blocking::No).unwrap();
    r.wait(&c, 0, Blocking::No).unwrap();
    r.record(&s, 1, Blocking::No).unwrap();
    // slot recycled for seq 1: stale.
    assert!(matches!(
        r.wait(&c, 0, Blocking::No),
        Err(Error::Stale { .. })
    ));
}

fn synchronize_with_producer_waits_and_consumes_nothing<B: Harness>(b: &B) {
    let (s, c) = (b.stream(), b.stream());
    let r = EventRingbuf::new(b, "r", 1, 1).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            r.synchronize_with_producer(0).unwrap();
            done.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(SHORT);
        assert!(!done.load(Ordering::SeqCst));
        r.record(&s, 0, Blocking::No).unwrap();
    });
    assert!(done.load(Ordering::SeqCst));
    // Nothing was consumed: the one consumer can still take seq 0, then seq 1 fits.
    r.wait(&c, 0, Blocking::No).unwrap();
    r.record(&s, 1, Blocking::No).unwrap();
    // Already recycled: returns at once.
    r.synchronize_with_producer(0).unwrap();
    r.synchronize_with_producer(-3).unwrap();
    // Pure counter too.
    let counter = EventRingbuf::new(b, "count", 0, 1).unwrap();
    std::thread::scope(|scope| {
        let h = scope.spawn(|| counter.synchronize_with_producer(2));
        for seq in 0..3 {
            std::thread::sleep(Duration::from_millis(5));
            counter.record(&s, seq, Blocking::No).unwrap();
        }
        h.join().unwrap().unwrap();
    });
}

fn stop_wakes_blocked_record<B: Harness>(b: &B) {
    let s = b.stream();
    let r = EventRingbuf::new(b, "r", 1, 1).unwrap();
    r.record(&s, 0, Blocking::No).unwrap();
    std::thread::scope(|scope| {
        let h = scope.spawn(|| r.record(&s, 1, Blocking::Yes));
        std::thread::sleep(SHORT);
        r.stop("shutting down");
        let err = h.join().unwrap().unwrap_err();
        assert!(
            matches!(&err, Error::Stopped { reason, .. } if &**reason == "shutting down"),
            "{err}"
        );
    });
}

fn stop_wakes_blocked_wait<B: Harness>(b: &B) {
    let c = b.stream();
    let r = EventRingbuf::new(b, "r", 1, 1).unwrap();
    std::thread::scope(|scope| {
        let h = scope.spawn(|| r.wait(&c, 0, Blocking::Yes));
        let h2 = scope.spawn(|| r.synchronize_with_producer(0));
        std::thread::sleep(SHORT);
        r.stop("bye");
        assert!(h.join().unwrap().unwrap_err().is_stopped());
        assert!(h2.join().unwrap().unwrap_err().is_stopped());
    });
}

/// A host thread blocked in `synchronize` on an event whose device work is still running
/// wakes within a millisecond of `stop`. Tries until one wake-up is that quick, at most
/// `TRIES` times (a loaded machine can be slow to run the woken thread once or twice; an
/// implementation that does not wake it waits out the 400 ms of device work every time).
fn stop_wakes_synchronize_on_pending_event<B: Harness>(b: &B) {
    const TRIES: usize = 5;
    let mut tries = Vec::new();
    while tries.len() < TRIES {
        let s = b.stream();
        let r = EventRingbuf::new(b, "r", 1, 1).unwrap();
        b.busy(&s, Duration::from_millis(400));
        r.record(&s, 0, Blocking::No).unwrap();
        let latency = std::thread::scope(|scope| {
            let h = scope.spawn(|| {
                let e = r.synchronize(0, Blocking::No).unwrap_err();
                (Instant::now(), e)
            });
            std::thread::sleep(SHORT);
            let t0 = Instant::now();
            r.stop("abort");
            let (woke, err) = h.join().unwrap();
            assert!(err.is_stopped(), "{err}");
            woke.duration_since(t0)
        });
        b.sync_stream(&s);
        tries.push(latency);
        if latency < Duration::from_millis(1) {
            break;
        }
    }
    eprintln!("stop -> synchronize wake-up, try by try: {tries:?}");
    let best = tries.iter().min().unwrap();
    assert!(
        *best < Duration::from_millis(1),
        "woke {best:?} after stop at best, in {TRIES} tries: {tries:?}"
    );
}

fn later_calls_return_stopped_with_reason<B: Harness>(b: &B) {
    let s = b.stream();
    let r = EventRingbuf::new(b, "ring7", 1, 1).unwrap();
    r.stop("operator pressed stop");
    for err in [
        r.record(&s, 0, Blocking::No).unwrap_err(),
        r.wait(&s, 0, Blocking::Yes).unwrap_err(),
        r.synchronize(0, Blocking::Yes).unwrap_err(),
        r.synchronize_with_producer(0).unwrap_err(),
    ] {
        assert_eq!(
            err.to_string(),
            "ring 'ring7' is stopped: operator pressed stop"
        );
    }
    r.stop("second stop does not replace the first");
    assert!(r
        .record(&s, 0, Blocking::No)
        .unwrap_err()
        .to_string()
        .contains("operator"));
}

fn misuse_error_stops_the_ring<B: Harness>(b: &B) {
    let (s, c) = (b.stream(), b.stream());
    let r = EventRingbuf::new(b, "r", 1, 2).unwrap();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| r.wait(&c, 5, Blocking::Yes));
        std::thread::sleep(SHORT);
        let err = r.record(&s, 3, Blocking::No).unwrap_err();
        assert!(matches!(err, Error::OutOfOrder { .. }));
        let woke = waiter.join().unwrap().unwrap_err();
        match &woke {
            Error::Stopped {
                cause: Some(cause), ..
            } => {
                assert!(matches!(
                    **cause,
                    Error::OutOfOrder {
                        expected: 0,
                        got: 3,
                        ..
                    }
                ))
            }
            e => panic!("expected Stopped caused by OutOfOrder, got {e}"),
        }
        assert!(std::error::Error::source(&woke).is_some());
    });
    assert!(r.record(&s, 0, Blocking::No).unwrap_err().is_stopped());
}

fn wait_orders_stream_work<B: Harness>(b: &B) {
    // The consumer stream's work after the wait must not start before the producer's busy
    // work: measured on the host clock through the consumer's completion.
    let (s, c) = (b.stream(), b.stream());
    let r = EventRingbuf::new(b, "r", 1, 1).unwrap();
    let t0 = Instant::now();
    b.busy(&s, Duration::from_millis(100));
    r.record(&s, 0, Blocking::No).unwrap();
    r.wait(&c, 0, Blocking::No).unwrap();
    b.busy(&c, Duration::from_millis(1));
    b.sync_stream(&c);
    assert!(
        t0.elapsed() >= Duration::from_millis(100),
        "consumer finished before producer work"
    );
}

on_both_backends!(
    new_rejects_zero_max_size,
    new_rejects_too_many_consumers,
    zero_consumers_is_a_counter,
    record_out_of_order,
    record_overflow_without_blocking,
    record_blocks_until_oldest_released,
    wait_negative_seq_is_noop,
    wait_not_yet_produced_without_blocking,
    wait_blocks_until_recorded,
    stale_seq,
    over_consumed_seq,
    stale_and_over_consumed_are_distinct,
    synchronize_with_producer_waits_and_consumes_nothing,
    stop_wakes_blocked_record,
    stop_wakes_blocked_wait,
    stop_wakes_synchronize_on_pending_event,
    later_calls_return_stopped_with_reason,
    misuse_error_stops_the_ring,
    wait_orders_stream_work,
);

on_polling_host!(
    new_rejects_zero_max_size,
    new_rejects_too_many_consumers,
    zero_consumers_is_a_counter,
    record_out_of_order,
    record_overflow_without_blocking,
    record_blocks_until_oldest_released,
    wait_negative_seq_is_noop,
    wait_not_yet_produced_without_blocking,
    wait_blocks_until_recorded,
    stale_seq,
    over_consumed_seq,
    stale_and_over_consumed_are_distinct,
    synchronize_with_producer_waits_and_consumes_nothing,
    stop_wakes_blocked_record,
    stop_wakes_blocked_wait,
    stop_wakes_synchronize_on_pending_event,
    later_calls_return_stopped_with_reason,
    misuse_error_stops_the_ring,
    wait_orders_stream_work,
);

#[test]
fn zero_consumers_creates_no_events() {
    let host = seqsync::HostBackend::new();
    let _r = EventRingbuf::new(&host, "count", 0, 8).unwrap();
    assert_eq!(host.live_events(), 0);
    let _r2 = EventRingbuf::new(&host, "ring", 2, 8).unwrap();
    assert_eq!(host.live_events(), 8);
}

#[test]
fn blocking_converts_from_bool() {
    assert_eq!(Blocking::from(true), Blocking::Yes);
    assert_eq!(Blocking::from(false), Blocking::No);
}

#[test]
fn new_rejects_a_huge_max_size() {
    let host = seqsync::HostBackend::new();
    let err = EventRingbuf::new(&host, "r", 1, (1 << 20) + 1).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("2^20"), "{err}");
}
