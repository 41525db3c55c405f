//! Submissions' `(timeline, value)` wait and signal lists, on both backends: wait-before-signal,
//! signals after every command, failure propagation, order across queues through a timeline,
//! and graph replays that wait and signal.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seqsync::graph::{Affinity, CommandBuffer, Lowering, Queues, Submit};
use seqsync::internal::backend::GraphBackend;
use seqsync::timeline::Timeline;
use seqsync::Error;

const LONG: Duration = Duration::from_secs(10);

/// `n` independent host commands, each sleeping `(i % 4) ms` and counting itself.
fn counting<B: GraphBackend>(n: usize, count: &Arc<AtomicUsize>) -> CommandBuffer<B> {
    let mut cb = CommandBuffer::<B>::new();
    for i in 0..n {
        let c = count.clone();
        cb.host(
            &format!("c{i}"),
            move || {
                std::thread::sleep(Duration::from_millis((i % 4) as u64));
                c.fetch_add(1, Ordering::SeqCst);
            },
            &[],
        );
    }
    cb
}

/// Does a stream wait on `t` enqueued before its signal hold the commands behind it? Not with
/// the CUDA `events` mechanism (its documented limit: it refuses a stream wait before its
/// signal): there a submission that waits before its signal must be refused with
/// `WaitBeforeSignalUnsupported`, nothing enqueued.
fn waits_hold_commands<B: GraphBackend>(t: &Timeline<B>) -> bool {
    t.mechanism().holds_commands()
}

fn refused_before_its_signal(r: seqsync::Result<seqsync::graph::Submission>, value: u64) {
    match r {
        Err(Error::WaitBeforeSignalUnsupported {
            value: v,
            enqueued,
            ref mechanism,
            ..
        }) => {
            assert_eq!((v, enqueued, mechanism.as_str()), (value, 0, "events"));
        }
        other => panic!("expected WaitBeforeSignalUnsupported, got {other:?}"),
    }
}

fn submission_waits_for_a_value_signalled_later<B: GraphBackend>(b: &B) {
    // Before the timelines: dropped after them, so a failing test fails their pending stream
    // waits instead of hanging in the pool's drop.
    let mut pool = Queues::new(b.clone());
    let (ready, done) = (
        Timeline::new(b, "ready", 0).unwrap(),
        Timeline::new(b, "done", 0).unwrap(),
    );
    let count = Arc::new(AtomicUsize::new(0));
    let mut exe = counting::<B>(6, &count)
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    let how = Submit {
        affinity: Affinity::ANY,
        waits: &[(&ready, 3)],
        signals: &[(&done, 1)],
    };
    if !waits_hold_commands(&ready) {
        refused_before_its_signal(pool.submit_with(&mut exe, &how), 3);
        assert!(pool.is_empty(), "a refused submission took streams");
        // Once the signal is enqueued, the same submission is accepted and held by it.
        let s = b.new_stream("signaller").unwrap();
        b.launch_host(
            &s,
            Box::new(|| std::thread::sleep(Duration::from_millis(30))),
        )
        .unwrap();
        ready.signal_on(&s, 3).unwrap();
        pool.submit_with(&mut exe, &how).unwrap();
        done.wait(1, LONG).unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 6);
        return;
    }
    pool.submit_with(&mut exe, &how).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "ran before its wait was signalled"
    );
    assert_eq!(done.query().unwrap(), 0);
    ready.signal(3).unwrap();
    done.wait(1, LONG).unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 6);
}

fn signals_come_after_every_command<B: GraphBackend>(b: &B) {
    // Before the timelines: dropped after them, so a failing test fails their pending stream
    // waits instead of hanging in the pool's drop.
    let mut pool = Queues::new(b.clone());
    let done = Timeline::new(b, "done", 0).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let mut exe = counting::<B>(12, &count)
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    assert!(exe.report().streams > 1);
    for round in 1..=3u64 {
        let how = Submit {
            affinity: Affinity::queue(0),
            waits: &[],
            signals: &[(&done, round)],
        };
        pool.submit_with(&mut exe, &how).unwrap();
        done.wait(round, LONG).unwrap();
        assert_eq!(
            count.load(Ordering::SeqCst),
            12 * round as usize,
            "round {round}"
        );
    }
}

fn a_failed_wait_fails_the_signals<B: GraphBackend>(b: &B) {
    // Before the timelines: dropped after them, so a failing test fails their pending stream
    // waits instead of hanging in the pool's drop.
    let mut pool = Queues::new(b.clone());
    let (ready, done) = (
        Timeline::new(b, "ready", 0).unwrap(),
        Timeline::new(b, "done", 0).unwrap(),
    );
    let count = Arc::new(AtomicUsize::new(0));
    let mut exe = counting::<B>(3, &count)
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    let how = Submit {
        affinity: Affinity::ANY,
        waits: &[(&ready, 1)],
        signals: &[(&done, 1)],
    };
    if !waits_hold_commands(&ready) {
        refused_before_its_signal(pool.submit_with(&mut exe, &how), 1);
        return;
    }
    pool.submit_with(&mut exe, &how).unwrap();
    ready.fail(Error::Stage {
        stage: "upstream".into(),
        message: "broke".into(),
    });
    let err = done.wait(1, LONG).unwrap_err();
    assert!(matches!(err, Error::TimelineFailed { .. }), "{err}");
    assert!(err.root_cause().to_string().contains("broke"), "{err}");
}

/// Two submissions on no common queue, ordered only by a timeline: the second reads what the
/// first wrote.
fn a_timeline_orders_submissions_across_queues<B: GraphBackend>(b: &B) {
    // Before the timelines: dropped after them, so a failing test fails their pending stream
    // waits instead of hanging in the pool's drop.
    let mut pool = Queues::new(b.clone());
    let t = Timeline::new(b, "t", 0).unwrap();
    let done = Timeline::new(b, "done", 0).unwrap();
    let slot = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let mut first = CommandBuffer::<B>::new();
    let s = slot.clone();
    first.host(
        "write",
        move || {
            std::thread::sleep(Duration::from_millis(30));
            s.store(42, Ordering::SeqCst);
        },
        &[],
    );
    let mut second = CommandBuffer::<B>::new();
    let (s, r) = (slot.clone(), seen.clone());
    second.host(
        "read",
        move || r.store(s.load(Ordering::SeqCst), Ordering::SeqCst),
        &[],
    );
    let mut e1 = first.finish().unwrap().lower(Lowering::Streams);
    let mut e2 = second.finish().unwrap().lower(Lowering::Streams);
    pool.submit_with(
        &mut e1,
        &Submit {
            affinity: Affinity::queue(1),
            waits: &[],
            signals: &[(&t, 1)],
        },
    )
    .unwrap();
    pool.submit_with(
        &mut e2,
        &Submit {
            affinity: Affinity::queue(2),
            waits: &[(&t, 1)],
            signals: &[(&done, 1)],
        },
    )
    .unwrap();
    done.wait(1, LONG).unwrap();
    assert_eq!(seen.load(Ordering::SeqCst), 42);
}

/// Replay k of a graph waits for `go = k` and signals `done = k`.
fn graph_replays_wait_and_signal<B: GraphBackend>(b: &B) {
    // Before the timelines: dropped after them, so a failing test fails their pending stream
    // waits instead of hanging in the pool's drop.
    let mut pool = Queues::new(b.clone());
    let (go, done) = (
        Timeline::new(b, "go", 0).unwrap(),
        Timeline::new(b, "done", 0).unwrap(),
    );
    let count = Arc::new(AtomicUsize::new(0));
    let exe = counting::<B>(4, &count)
        .finish()
        .unwrap()
        .instantiate(b)
        .unwrap();
    if !waits_hold_commands(&go) {
        let how = Submit {
            affinity: Affinity::ANY,
            waits: &[(&go, 1)],
            signals: &[(&done, 1)],
        };
        refused_before_its_signal(pool.submit_graph_with(&exe, &how), 1);
        assert_eq!(count.load(Ordering::SeqCst), 0);
        return;
    }
    for k in 1..=3u64 {
        let how = Submit {
            affinity: Affinity::ANY,
            waits: &[(&go, k)],
            signals: &[(&done, k)],
        };
        pool.submit_graph_with(&exe, &how).unwrap();
    }
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(count.load(Ordering::SeqCst), 0);
    for k in 1..=3u64 {
        go.signal(k).unwrap();
        done.wait(k, LONG).unwrap();
        assert!(count.load(Ordering::SeqCst) >= 4 * k as usize);
    }
    pool.synchronize().unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 12);
}

/// IREE's BarrierSignals: a queue barrier (no commands, no waits) signals; with a wait, it
/// signals only after the wait's value.
fn cts_barrier_signals<B: GraphBackend>(b: &B) {
    let mut pool = Queues::new(b.clone());
    let (t, s) = (
        Timeline::new(b, "t", 0).unwrap(),
        Timeline::new(b, "s", 0).unwrap(),
    );
    let mut empty = CommandBuffer::<B>::new()
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    let how = Submit {
        affinity: Affinity::queue(0),
        waits: &[],
        signals: &[(&s, 1)],
    };
    pool.submit_with(&mut empty, &how).unwrap();
    s.wait(1, LONG).unwrap();
    let mut how = Submit {
        affinity: Affinity::queue(0),
        waits: &[(&t, 1)],
        signals: &[(&s, 2)],
    };
    if !waits_hold_commands(&t) {
        // The barrier's wait comes before its signal, which the mechanism cannot hold: refused
        // on a queue and on none, until the wait's signal is on the device.
        refused_before_its_signal(pool.submit_with(&mut empty, &how), 1);
        how.affinity = Affinity::ANY;
        refused_before_its_signal(pool.submit_with(&mut empty, &how), 1);
        let sig = b.new_stream("signaller").unwrap();
        t.signal_on(&sig, 1).unwrap();
        pool.submit_with(&mut empty, &how).unwrap();
        s.wait(2, LONG).unwrap();
        return;
    }
    pool.submit_with(&mut empty, &how).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(s.query().unwrap(), 1);
    t.signal(1).unwrap();
    s.wait(2, LONG).unwrap();
}

/// Commands on a stream each: writer `i` sleeps `delays[i]` ms and stores 1 in `cells[i]`.
fn writers<B: GraphBackend>(cells: &Arc<Vec<AtomicUsize>>, delays: &[u64]) -> CommandBuffer<B> {
    let mut cb = CommandBuffer::<B>::new();
    for (i, &ms) in delays.iter().enumerate() {
        let c = cells.clone();
        cb.host(
            &format!("w{i}"),
            move || {
                std::thread::sleep(Duration::from_millis(ms));
                c[i].store(1, Ordering::SeqCst);
            },
            &[],
        );
    }
    cb
}

/// One command that stores the sum of `cells` in `seen`.
fn reader<B: GraphBackend>(
    cells: &Arc<Vec<AtomicUsize>>,
    seen: &Arc<AtomicUsize>,
) -> CommandBuffer<B> {
    let mut cb = CommandBuffer::<B>::new();
    let (c, s) = (cells.clone(), seen.clone());
    cb.host(
        "read",
        move || {
            let sum = c.iter().map(|x| x.load(Ordering::SeqCst)).sum();
            s.store(sum, Ordering::SeqCst);
        },
        &[],
    );
    cb
}

fn empty<B: GraphBackend>() -> seqsync::graph::Executable<B> {
    CommandBuffer::<B>::new()
        .finish()
        .unwrap()
        .lower(Lowering::Streams)
}

/// A queue orders its submissions whatever their shape: an empty command buffer (no waits, no
/// signals) between two submissions of one queue leaves the third behind both writers of the
/// first (it used to erase the queue's last end, so the reader ran before the slow writer).
fn an_empty_submission_keeps_the_queue_order<B: GraphBackend>(b: &B) {
    let mut pool = Queues::new(b.clone());
    let done = Timeline::new(b, "done", 0).unwrap();
    let cells = Arc::new(vec![AtomicUsize::new(0), AtomicUsize::new(0)]);
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let mut first = writers::<B>(&cells, &[0, 60])
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    assert_eq!(first.report().streams, 2, "two independent writers");
    let mut third = reader::<B>(&cells, &seen)
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    let q = Affinity::queue(0);
    pool.submit_with(&mut first, &Submit::on(q)).unwrap();
    pool.submit_with(&mut empty(), &Submit::on(q)).unwrap();
    let how = Submit {
        affinity: q,
        waits: &[],
        signals: &[(&done, 1)],
    };
    pool.submit_with(&mut third, &how).unwrap();
    done.wait(1, LONG).unwrap();
    assert_eq!(
        seen.load(Ordering::SeqCst),
        2,
        "the reader ran before a writer"
    );
}

/// A submission with waits and no commands is a queue barrier: the next submission on its
/// queue runs only once the barrier's waits are reached, with or without signals of its own
/// (it used to enqueue nothing without signals).
fn a_barrier_with_waits_holds_its_queue<B: GraphBackend>(b: &B) {
    for with_signal in [false, true] {
        let mut pool = Queues::new(b.clone());
        let (gate, mark, done) = (
            Timeline::new(b, "gate", 0).unwrap(),
            Timeline::new(b, "mark", 0).unwrap(),
            Timeline::new(b, "done", 0).unwrap(),
        );
        let cells = Arc::new(vec![AtomicUsize::new(0)]);
        let seen = Arc::new(AtomicUsize::new(usize::MAX));
        let q = Affinity::queue(3);
        let signals: &[(&Timeline<B>, u64)] = if with_signal { &[(&mark, 1)] } else { &[] };
        let barrier = Submit {
            affinity: q,
            waits: &[(&gate, 1)],
            signals,
        };
        if !waits_hold_commands(&gate) {
            refused_before_its_signal(pool.submit_with(&mut empty(), &barrier), 1);
            assert!(pool.is_empty(), "a refused barrier took streams");
            continue;
        }
        pool.submit_with(&mut empty(), &barrier).unwrap();
        let mut next = reader::<B>(&cells, &seen)
            .finish()
            .unwrap()
            .lower(Lowering::Streams);
        let how = Submit {
            affinity: q,
            waits: &[],
            signals: &[(&done, 1)],
        };
        pool.submit_with(&mut next, &how).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(
            done.query().unwrap(),
            0,
            "ran past the barrier (signal: {with_signal})"
        );
        cells[0].store(1, Ordering::SeqCst);
        gate.signal(1).unwrap();
        done.wait(1, LONG).unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 1, "signal: {with_signal}");
        if with_signal {
            mark.wait(1, LONG).unwrap();
        }
    }
}

/// A pool stream that a failure poisoned (its submission waited on a timeline that failed) is
/// not given to a later submission that does not depend on the failure: that one's signals
/// succeed (they used to fail, poisoned through the reused stream).
fn a_poisoned_pool_stream_is_not_reused<B: GraphBackend>(b: &B) {
    let mut pool = Queues::new(b.clone());
    let (t, a, c) = (
        Timeline::new(b, "t", 0).unwrap(),
        Timeline::new(b, "a", 0).unwrap(),
        Timeline::new(b, "c", 0).unwrap(),
    );
    let how = Submit {
        affinity: Affinity::ANY,
        waits: &[(&t, 1)],
        signals: &[(&a, 1)],
    };
    match pool.submit_with(&mut empty(), &how) {
        // A mechanism that holds no commands behind a wait before its signal refuses it.
        Err(Error::WaitBeforeSignalUnsupported { .. }) if !waits_hold_commands(&t) => return,
        r => drop(r.unwrap()),
    }
    t.fail(Error::Cancelled("t broke".into()));
    assert!(a.wait(1, LONG).is_err());
    pool.synchronize().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let mut exe = counting::<B>(1, &count)
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    let how = Submit {
        affinity: Affinity::ANY,
        waits: &[],
        signals: &[(&c, 1)],
    };
    pool.submit_with(&mut exe, &how).unwrap();
    c.wait(1, LONG).unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 1);
}

/// A graph dropped while a replay of it is in flight keeps its host nodes' closures until the
/// replay has run (the driver calls them through pointers: freeing them at the drop was a use
/// after free on CUDA). Nothing here depends on how long the submission takes: each host node
/// checks that the gate has opened when it runs, and the closures are checked alive only if
/// the gate was still shut after that look (a replay cannot have run then).
fn a_graph_dropped_mid_replay_keeps_its_host_nodes<B: GraphBackend>(b: &B) {
    let mut pool = Queues::new(b.clone());
    let (go, done) = (
        Timeline::new(b, "go", 0).unwrap(),
        Timeline::new(b, "done", 0).unwrap(),
    );
    let opened = Arc::new(AtomicBool::new(false));
    let (count, early) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut cb = CommandBuffer::<B>::new();
    for i in 0..3 {
        let (opened, count, early) = (opened.clone(), count.clone(), early.clone());
        cb.host(
            &format!("c{i}"),
            move || {
                if !opened.load(Ordering::SeqCst) {
                    early.fetch_add(1, Ordering::SeqCst);
                }
                count.fetch_add(1, Ordering::SeqCst);
            },
            &[],
        );
    }
    let exe = cb.finish().unwrap().instantiate(b).unwrap();
    let gate = b.new_stream("gate").unwrap();
    let gate_opens = opened.clone();
    b.launch_host(
        &gate,
        Box::new(move || {
            std::thread::sleep(Duration::from_millis(200));
            gate_opens.store(true, Ordering::SeqCst);
        }),
    )
    .unwrap();
    go.signal_on(&gate, 1).unwrap();
    let how = Submit {
        affinity: Affinity::ANY,
        waits: &[(&go, 1)],
        signals: &[(&done, 1)],
    };
    pool.submit_graph_with(&exe, &how).unwrap();
    drop(exe);
    // Alive first, then the gate: shut after the look means no replay had run at it.
    let alive = Arc::strong_count(&count) > 1;
    if !opened.load(Ordering::SeqCst) {
        assert!(
            alive,
            "the host nodes went with the graph while its replay was in flight"
        );
    }
    done.wait(1, LONG).unwrap();
    pool.synchronize().unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 3);
    assert_eq!(early.load(Ordering::SeqCst), 0, "ran before its wait");
}

/// A wait whose signal is enqueued on a stream behind a wait before its own signal: the
/// submission waiting for it is held until both values come. (CUDA `events` refuses the first
/// wait, nothing enqueued: the signal behind it goes to the device at once, and a submission
/// waiting for it is accepted and held by it.)
fn a_wait_on_a_signal_held_behind_another_wait<B: GraphBackend>(b: &B) {
    let mut pool = Queues::new(b.clone());
    let (first, second, done) = (
        Timeline::new(b, "first", 0).unwrap(),
        Timeline::new(b, "second", 0).unwrap(),
        Timeline::new(b, "done", 0).unwrap(),
    );
    let s = b.new_stream("s").unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let mut exe = counting::<B>(2, &count)
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    let how = Submit {
        affinity: Affinity::ANY,
        waits: &[(&second, 1)],
        signals: &[(&done, 1)],
    };
    if !waits_hold_commands(&second) {
        common::assert_wait_refused(first.wait_on(&s, 1));
        b.launch_host(
            &s,
            Box::new(|| std::thread::sleep(Duration::from_millis(30))),
        )
        .unwrap();
        second.signal_on(&s, 1).unwrap();
        pool.submit_with(&mut exe, &how).unwrap();
        done.wait(1, LONG).unwrap();
        assert_eq!(second.query().unwrap(), 1);
        assert_eq!(first.query().unwrap(), 0);
    } else {
        first.wait_on(&s, 1).unwrap();
        second.signal_on(&s, 1).unwrap();
        pool.submit_with(&mut exe, &how).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(count.load(Ordering::SeqCst), 0, "ran before its wait");
        first.signal(1).unwrap();
    }
    done.wait(1, LONG).unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

on_both_backends!(
    a_graph_dropped_mid_replay_keeps_its_host_nodes,
    a_wait_on_a_signal_held_behind_another_wait,
    a_poisoned_pool_stream_is_not_reused,
    an_empty_submission_keeps_the_queue_order,
    a_barrier_with_waits_holds_its_queue,
    cts_barrier_signals,
    submission_waits_for_a_value_signalled_later,
    signals_come_after_every_command,
    a_failed_wait_fails_the_signals,
    a_timeline_orders_submissions_across_queues,
    graph_replays_wait_and_signal,
);
