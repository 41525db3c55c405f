//! A pool stream whose work failed (a host command panicked) is not free for other queues'
//! submissions, and its failure is not theirs: they take another stream.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use seqsync::graph::{Affinity, CommandBuffer, Lowering, Queues};
use seqsync::HostBackend;

/// Queue 0's stream fails: a host command submitted on it panics.
fn fail_queue_0(q: &mut Queues<HostBackend>) {
    let mut bad = CommandBuffer::<HostBackend>::new();
    bad.host("boom", || panic!("boom"), &[]);
    let mut bad = bad.finish().unwrap().lower(Lowering::Streams);
    q.submit(&mut bad, Affinity::queue(0)).unwrap();
}

/// One host command that counts its runs in `ran`.
fn counting(ran: &Arc<AtomicUsize>) -> CommandBuffer<HostBackend> {
    let mut cb = CommandBuffer::<HostBackend>::new();
    let r = ran.clone();
    cb.host(
        "count",
        move || {
            r.fetch_add(1, Ordering::SeqCst);
        },
        &[],
    );
    cb
}

#[test]
fn a_panicked_command_does_not_fail_unrelated_submissions() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    fail_queue_0(&mut q);
    assert!(q.synchronize().is_err());

    let ran = Arc::new(AtomicUsize::new(0));
    let mut good = counting(&ran).finish().unwrap().lower(Lowering::Streams);
    for affinity in [Affinity::queue(1), Affinity::ANY] {
        let sub = q
            .submit(&mut good, affinity)
            .unwrap_or_else(|e| panic!("unrelated submission on {affinity:?} refused: {e}"));
        q.stream(sub.streams[0]).synchronize().unwrap();
    }
    assert_eq!(ran.load(Ordering::SeqCst), 2);
}

/// A replay of a graph follows its previous replay on another stream, but that stream's
/// failure stays its own: the replay on another queue runs and signals.
#[test]
fn a_replay_after_one_on_a_failed_stream_runs_and_signals() {
    use seqsync::graph::Submit;
    use seqsync::timeline::Timeline;
    use std::time::Duration;
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    fail_queue_0(&mut q);
    let ran = Arc::new(AtomicUsize::new(0));
    let exe = counting(&ran).finish().unwrap().instantiate(&host).unwrap();
    // On queue 0's failed stream: skipped.
    q.submit_graph(&exe, Affinity::queue(0)).unwrap();
    let t = Timeline::new(&host, "t", 0).unwrap();
    let how = Submit {
        affinity: Affinity::queue(1),
        waits: &[],
        signals: &[(&t, 1)],
    };
    q.submit_graph_with(&exe, &how).unwrap();
    t.wait(1, Duration::from_secs(5)).unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// A synchronize after a failure on one pool stream still waits for every other stream's
/// work before it returns the failure.
#[test]
fn a_synchronize_after_a_failure_waits_for_every_stream() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    fail_queue_0(&mut q);
    let ran = Arc::new(AtomicUsize::new(0));
    let mut slow = CommandBuffer::<HostBackend>::new();
    let r = ran.clone();
    slow.host(
        "slow",
        move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            r.fetch_add(1, Ordering::SeqCst);
        },
        &[],
    );
    let mut slow = slow.finish().unwrap().lower(Lowering::Streams);
    q.submit(&mut slow, Affinity::queue(1)).unwrap();
    assert!(q.synchronize().is_err(), "queue 0's failure is reported");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the synchronize returned before queue 1's work ran"
    );
}

/// Streams whose work failed are replaced in place once idle: a run of panicking submissions
/// does not grow the pool (each stream a thread on the host backend).
#[test]
fn a_run_of_panicking_submissions_does_not_grow_the_pool() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let mut bad = CommandBuffer::<HostBackend>::new();
    bad.host("boom", || panic!("boom"), &[]);
    let mut bad = bad.finish().unwrap().lower(Lowering::Streams);
    for _ in 0..40 {
        q.submit(&mut bad, Affinity::ANY).unwrap();
        assert!(q.synchronize().is_err());
    }
    assert!(
        q.len() <= 2,
        "{} streams for one submission at a time",
        q.len()
    );
    // And the pool still runs work.
    let ran = Arc::new(AtomicUsize::new(0));
    let mut good = counting(&ran).finish().unwrap().lower(Lowering::Streams);
    let sub = q.submit(&mut good, Affinity::ANY).unwrap();
    q.stream(sub.streams[0]).synchronize().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// Submissions still in flight each hold a stream; past `MAX_STREAMS` of them the next is
/// refused by name, with nothing enqueued, and once they are done streams are free again.
#[test]
fn submissions_in_flight_past_the_stream_limit_are_refused_by_name() {
    use seqsync::graph::Submit;
    use seqsync::timeline::Timeline;
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let gate = Timeline::new(&host, "gate", 0).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let mut exe = counting(&ran).finish().unwrap().lower(Lowering::Streams);
    let how = Submit {
        affinity: Affinity::ANY,
        waits: &[(&gate, 1)],
        signals: &[],
    };
    let limit = Queues::<HostBackend>::MAX_STREAMS;
    for _ in 0..limit {
        q.submit_with(&mut exe, &how).unwrap();
    }
    let e = q.submit_with(&mut exe, &how).unwrap_err();
    assert!(
        matches!(e, seqsync::Error::TooManyStreams { limit: l, needed: 1, busy }
            if l == limit && busy == limit),
        "{e}"
    );
    assert!(
        e.to_string().contains("wait for earlier submissions"),
        "{e}"
    );
    assert_eq!(q.len(), limit);
    gate.signal(1).unwrap();
    q.synchronize().unwrap();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        limit,
        "the refused one ran nothing"
    );
    q.submit_with(&mut exe, &how).unwrap();
    q.synchronize().unwrap();
    assert_eq!(q.len(), limit);
}

/// A graph whose lowering alone needs more streams than a pool may hold (more independent
/// branches than `MAX_STREAMS`) is refused by name on an empty pool, saying that no wait
/// helps, with nothing run.
#[test]
fn a_graph_wider_than_the_stream_limit_is_refused_saying_no_wait_helps() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let limit = Queues::<HostBackend>::MAX_STREAMS;
    let ran = Arc::new(AtomicUsize::new(0));
    let mut cb = CommandBuffer::<HostBackend>::new();
    for i in 0..limit + 10 {
        let r = ran.clone();
        cb.host(
            &format!("branch {i}"),
            move || {
                r.fetch_add(1, Ordering::SeqCst);
            },
            &[],
        );
    }
    let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
    let e = q.submit(&mut exe, Affinity::ANY).unwrap_err();
    assert!(
        matches!(e, seqsync::Error::TooManyStreams { limit: l, needed, busy: 0 }
            if l == limit && needed > limit),
        "{e}"
    );
    assert!(e.to_string().contains("fewer parallel branches"), "{e}");
    q.synchronize().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing ran");
}
