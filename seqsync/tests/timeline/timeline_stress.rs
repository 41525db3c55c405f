//! Timeline cases the conformance suites do not cover: thousands of waiters, timelines dropped
//! with many waits pending, wait-before-signal chains under chaos, and a failing stream.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Harness;
use seqsync::backend::host::Chaos;
use seqsync::timeline::{wait_all, wait_any, Timeline};
use seqsync::{Error, HostBackend};

const LONG: Duration = Duration::from_secs(20);

/// 4000 stream waits (enqueued before any signal, over 8 streams) and 64 host threads waiting
/// on one timeline that a host thread raises one step at a time.
fn thousands_of_waiters<B: Harness>(b: &B) {
    const STEPS: u64 = 500;
    let t = Timeline::new(b, "t", 0).unwrap();
    let streams: Vec<_> = (0..8).map(|_| b.stream()).collect();
    let probes: Vec<_> = (0..8)
        .map(|i| Timeline::new(b, &format!("probe{i}"), 0).unwrap())
        .collect();
    if !b.holds_waits_before_signals() {
        // CUDA `events`: a stream wait before its signal is refused, nothing enqueued.
        common::assert_wait_refused(t.wait_on(&streams[0], 1));
        return;
    }
    for (s, p) in streams.iter().zip(&probes) {
        for v in 1..=STEPS {
            t.wait_on(s, v).unwrap();
            p.signal_on(s, v).unwrap();
        }
    }
    let hosts: Vec<_> = (0..64u64)
        .map(|i| {
            let (t, p) = (t.clone(), probes[i as usize % 8].clone());
            std::thread::spawn(move || {
                let v = 1 + i * STEPS / 64;
                t.wait(v, LONG)?;
                // Every stream wait for `v` was released too: its probe gets there.
                wait_any(&[(&p, v)], LONG).map(drop)
            })
        })
        .collect();
    for v in 1..=STEPS {
        t.signal(v).unwrap();
    }
    for h in hosts {
        h.join().unwrap().unwrap();
    }
    let list: Vec<_> = probes.iter().map(|p| (p, STEPS)).collect();
    wait_all(&list, LONG).unwrap();
}

/// Dropping a timeline that 32 streams wait on (for different values) releases every one of
/// them, and fails what each signals after its wait.
fn dropped_with_many_pending_waits<B: Harness>(b: &B) {
    let t = Timeline::new(b, "doomed", 3).unwrap();
    let streams: Vec<_> = (0..32).map(|_| b.stream()).collect();
    let after: Vec<_> = (0..32)
        .map(|i| Timeline::new(b, &format!("after{i}"), 0).unwrap())
        .collect();
    if !b.holds_waits_before_signals() {
        // CUDA `events`: a stream wait before its signal is refused, nothing enqueued.
        common::assert_wait_refused(t.wait_on(&streams[0], 4));
        return;
    }
    for (i, (s, a)) in streams.iter().zip(&after).enumerate() {
        t.wait_on(s, 4 + i as u64).unwrap();
        a.signal_on(s, 1).unwrap();
    }
    drop(t);
    for a in &after {
        let err = a.wait(1, LONG).unwrap_err();
        assert!(
            matches!(
                err.root_cause(),
                Error::TimelineDropped {
                    value: 3,
                    pending: 32,
                    ..
                }
            ),
            "{err}"
        );
    }
    for s in &streams {
        b.sync_stream(s);
    }
}

on_both_backends!(thousands_of_waiters, dropped_with_many_pending_waits);

/// A relay over 6 host streams with random delays: every hop's wait is enqueued before the
/// signal it waits for, and each hop checks that the previous one wrote its value first.
#[test]
fn chaos_relay_with_waits_before_signals() {
    for seed in 0..4 {
        let host = HostBackend::with_chaos(Chaos {
            seed,
            max_delay: Duration::from_micros(300),
        });
        const HOPS: usize = 6;
        const ROUNDS: u64 = 40;
        let streams: Vec<_> = (0..HOPS)
            .map(|i| host.new_stream(&format!("s{i}")).unwrap())
            .collect();
        let done: Vec<_> = (0..HOPS)
            .map(|i| Timeline::new(&host, &format!("hop{i}"), 0).unwrap())
            .collect();
        let log = Arc::new(Mutex::new(vec![0u64; HOPS]));
        // Enqueue the hops from the last to the first: every wait precedes its signal.
        for round in 1..=ROUNDS {
            for hop in (0..HOPS).rev() {
                let s = &streams[hop];
                if hop > 0 {
                    done[hop - 1].wait_on(s, round).unwrap();
                }
                if round > 1 {
                    // The next hop has taken the previous round's value.
                    if hop + 1 < HOPS {
                        done[hop + 1].wait_on(s, round - 1).unwrap();
                    }
                }
                let log = log.clone();
                s.launch(move || {
                    let mut l = log.lock().unwrap();
                    if hop > 0 {
                        assert_eq!(l[hop - 1], round, "hop {hop} ran before hop {}", hop - 1);
                    }
                    assert_eq!(l[hop], round - 1);
                    l[hop] = round;
                });
                done[hop].signal_on(s, round).unwrap();
                host.chaos_pause();
            }
        }
        let list: Vec<_> = done.iter().map(|d| (d, ROUNDS)).collect();
        wait_all(&list, LONG).unwrap();
        for s in &streams {
            s.synchronize().unwrap();
        }
        assert_eq!(*log.lock().unwrap(), vec![ROUNDS; HOPS]);
    }
}

/// A host stream whose closure panicked fails every timeline it signals afterwards, with the
/// panic's message; what it signalled before is unaffected.
#[test]
fn failing_stream_fails_its_later_signals() {
    let host = HostBackend::new();
    let s = host.new_stream("worker").unwrap();
    let (before, after) = (
        Timeline::new(&host, "before", 0).unwrap(),
        Timeline::new(&host, "after", 0).unwrap(),
    );
    before.signal_on(&s, 1).unwrap();
    s.launch(|| panic!("kernel fault"));
    after.signal_on(&s, 1).unwrap();
    let err = after.wait(1, LONG).unwrap_err();
    assert!(
        matches!(err, Error::TimelineFailed { value: 0, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("kernel fault"), "{err}");
    assert!(
        err.to_string()
            .contains("stream 'worker' failed before signalling 1"),
        "{err}"
    );
    assert_eq!(before.query().unwrap(), 1);
    // It spreads like any failure: a stream that waited on `after` fails what it signals.
    let (s2, next) = (
        host.new_stream("next").unwrap(),
        Timeline::new(&host, "next", 0).unwrap(),
    );
    after.wait_on(&s2, 1).unwrap();
    next.signal_on(&s2, 1).unwrap();
    assert!(next
        .wait(1, LONG)
        .unwrap_err()
        .to_string()
        .contains("kernel fault"));
}

/// CPU time the calling thread has used so far (`CLOCK_THREAD_CPUTIME_ID`, through `cpu-time`).
fn thread_cpu() -> Duration {
    cpu_time::ThreadTime::try_now()
        .expect("the thread CPU clock")
        .as_duration()
}

/// A host wait of 100 ms of stream work costs at most 5 % of a core (it spins for `SPIN`, then
/// parks until the stream's signal wakes it), the first time and once it has learnt the length.
#[test]
fn host_wait_of_100ms_uses_at_most_5_percent_of_a_core() {
    let host = HostBackend::new();
    let s = host.new_stream("work").unwrap();
    let t = Timeline::new(&host, "t", 0).unwrap();
    for v in 1..=3 {
        s.launch(|| std::thread::sleep(Duration::from_millis(100)));
        t.signal_on(&s, v).unwrap();
        let (c0, w0) = (thread_cpu(), std::time::Instant::now());
        t.wait(v, LONG).unwrap();
        let (cpu, wall) = (thread_cpu() - c0, w0.elapsed());
        assert!(wall >= Duration::from_millis(90), "{wall:?}");
        assert!(
            cpu <= wall / 20,
            "wait {v}: {cpu:?} of CPU during a {wall:?} wait"
        );
    }
}

/// `wait_on` racing `fail` on another thread: every stream that waited on the failing timeline
/// (for a value it never reaches) is poisoned, whether its wait was enqueued before, during or
/// after the failure, so every timeline it signals afterwards fails.
#[test]
fn waits_racing_a_failure_all_poison_their_streams() {
    let host = HostBackend::new();
    for round in 0..6 {
        let a = Timeline::new(&host, "a", 0).unwrap();
        let streams: Vec<_> = (0..32)
            .map(|i| host.new_stream(&format!("s{i}")).unwrap())
            .collect();
        let signalled: Vec<_> = (0..32)
            .map(|i| Timeline::new(&host, &format!("b{i}"), 0).unwrap())
            .collect();
        let wait_then_signal = |i: usize| {
            a.wait_on(&streams[i], 1).unwrap();
            signalled[i].signal_on(&streams[i], 1).unwrap();
        };
        let started = std::sync::Barrier::new(2);
        std::thread::scope(|scope| {
            (0..8).for_each(wait_then_signal); // before the failure
            let failer = scope.spawn(|| {
                started.wait();
                std::thread::sleep(Duration::from_micros(10 * round));
                a.fail(Error::Cancelled("upstream".into()));
            });
            started.wait();
            (8..24).for_each(wait_then_signal); // racing it
            failer.join().unwrap();
        });
        (24..32).for_each(wait_then_signal); // after it
        for (i, b) in signalled.iter().enumerate() {
            let err = b.wait(1, LONG).unwrap_err();
            assert!(
                err.to_string().contains("upstream"),
                "round {round}, stream {i}: {err}"
            );
        }
    }
}
