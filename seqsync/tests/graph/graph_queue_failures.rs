//! A failure on a queue: a queue orders its submissions as one stream would, so a timeline
//! wait of one submission that fails fails the signals of every later submission on the
//! queue, whichever pool streams they were mapped to and whether they were submitted before
//! or after the failure; and a run of failures does not grow the pool.
use std::sync::mpsc;
use std::time::Duration;

use seqsync::graph::{Affinity, CommandBuffer, Executable, Lowering, Queues, Submit};
use seqsync::timeline::Timeline;
use seqsync::{Error, HostBackend};

const LONG: Duration = Duration::from_secs(10);

/// `n` independent host commands (the streams lowering puts each on a stream of its own).
fn commands(n: usize) -> Executable<HostBackend> {
    let mut cb = CommandBuffer::<HostBackend>::new();
    for i in 0..n {
        cb.host(&format!("c{i}"), || {}, &[]);
    }
    cb.finish().unwrap().lower(Lowering::Streams)
}

fn on_queue_0<'a>(
    waits: &'a [(&'a Timeline<HostBackend>, u64)],
    signals: &'a [(&'a Timeline<HostBackend>, u64)],
) -> Submit<'a, HostBackend> {
    Submit {
        affinity: Affinity::queue(0),
        waits,
        signals,
    }
}

/// Queue 0: a submission waits on `t` (not reached yet); the next one, of `n` independent
/// commands, signals `v`.
fn signal_behind_a_wait(
    host: &HostBackend,
    t: &Timeline<HostBackend>,
    n: usize,
) -> (Queues<HostBackend>, Timeline<HostBackend>) {
    let mut q = Queues::new(host.clone());
    let v = Timeline::new(host, "v", 0).unwrap();
    q.submit_with(&mut commands(1), &on_queue_0(&[(t, 1)], &[]))
        .unwrap();
    q.submit_with(&mut commands(n), &on_queue_0(&[], &[(&v, 1)]))
        .unwrap();
    (q, v)
}

#[test]
fn a_failed_wait_fails_the_queues_later_signals_whatever_their_streams() {
    let host = HostBackend::new();
    let t = Timeline::new(&host, "t", 0).unwrap();
    let (_q1, one) = signal_behind_a_wait(&host, &t, 1);
    let (_q3, three) = signal_behind_a_wait(&host, &t, 3);
    t.fail(Error::Cancelled("t broke".into()));
    for (name, v) in [("one command", one), ("three commands", three)] {
        let e = v.wait(1, LONG).unwrap_err();
        assert!(matches!(e, Error::TimelineFailed { .. }), "{name}: {e}");
    }
}

#[test]
fn a_failed_wait_fails_the_queues_signals_submitted_after_the_failure_too() {
    let host = HostBackend::new();
    let t = Timeline::new(&host, "t", 0).unwrap();
    let (v, w) = (
        Timeline::new(&host, "v", 0).unwrap(),
        Timeline::new(&host, "w", 0).unwrap(),
    );
    let other = Timeline::new(&host, "other queue", 0).unwrap();
    let mut q = Queues::new(host.clone());
    q.submit_with(&mut commands(2), &on_queue_0(&[(&t, 1)], &[]))
        .unwrap();
    q.submit_with(&mut commands(1), &on_queue_0(&[], &[(&v, 1)]))
        .unwrap();
    t.fail(Error::Cancelled("t broke".into()));
    q.submit_with(&mut commands(2), &on_queue_0(&[], &[(&w, 1)]))
        .unwrap();
    assert!(v.wait(1, LONG).is_err());
    assert!(w.wait(1, LONG).is_err());
    // Another queue does not depend on queue 0: its signals land.
    let how = Submit {
        affinity: Affinity::queue(1),
        waits: &[],
        signals: &[(&other, 1)],
    };
    q.submit_with(&mut commands(2), &how).unwrap();
    other.wait(1, LONG).unwrap();
}

/// Upstream failed; a consumer keeps submitting frames on its queue that wait on it.
#[test]
fn submissions_waiting_on_a_failed_timeline_do_not_grow_the_pool() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let upstream = Timeline::new(&host, "upstream", 0).unwrap();
    upstream.fail(Error::Cancelled("upstream gone".into()));
    let mut exe = commands(1);
    for frame in 1..=64u64 {
        q.submit_with(&mut exe, &on_queue_0(&[(&upstream, frame)], &[]))
            .unwrap();
        q.synchronize().unwrap();
    }
    assert!(q.len() <= 2, "64 submissions left {} pool streams", q.len());
}

/// Frames on no queue, each waiting on a timeline of its own that is then failed (cancelled):
/// each poisons its stream, which is replaced once idle.
#[test]
fn cancelled_frames_do_not_grow_the_pool() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let mut exe = commands(1);
    let done = Timeline::new(&host, "done", 0).unwrap();
    for frame in 1..=64u64 {
        let t = Timeline::new(&host, "frame", 0).unwrap();
        let how = Submit {
            affinity: Affinity::ANY,
            waits: &[(&t, 1)],
            signals: &[],
        };
        q.submit_with(&mut exe, &how).unwrap();
        t.fail(Error::Cancelled("frame cancelled".into()));
        q.synchronize().unwrap();
        // A frame that is not cancelled still runs and signals, on a healthy stream.
        let how = Submit {
            affinity: Affinity::ANY,
            waits: &[],
            signals: &[(&done, frame)],
        };
        q.submit_with(&mut exe, &how).unwrap();
        done.wait(frame, LONG).unwrap();
    }
    assert!(
        q.len() <= 4,
        "64 cancelled frames left {} pool streams",
        q.len()
    );
}

/// A `Queues` dropped while a submission waits for a value its caller signals only after the
/// drop (the natural order of locals: timelines first): the drop does not wait for it.
#[test]
fn dropping_the_queues_with_a_pending_wait_does_not_block() {
    let host = HostBackend::new();
    let t = Timeline::new(&host, "t", 0).unwrap();
    let mut pool = Queues::new(host.clone());
    let mut cb = CommandBuffer::<HostBackend>::new();
    cb.host("x", || {}, &[]);
    let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
    let how = Submit {
        affinity: Affinity::queue(0),
        waits: &[(&t, 1)],
        signals: &[],
    };
    pool.submit_with(&mut exe, &how).unwrap();
    let (tx, rx) = mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(pool);
        let _ = tx.send(());
    });
    let returned = rx.recv_timeout(Duration::from_secs(2)).is_ok();
    t.signal(1).unwrap(); // release it either way, so the test itself ends
    dropper.join().unwrap();
    assert!(
        returned,
        "dropping the Queues blocked on a wait its caller had not signalled yet"
    );
}
