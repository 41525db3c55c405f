//! A submission is refused whole, before anything is enqueued, where a timeline would refuse
//! part of it (a signal not above its timeline's value, of a failed timeline, or repeated in the
//! list; a wait value out of range) or a command is out of bounds: the queue keeps its order
//! (the last writer on queue 0 is the later submission), and nothing of it runs.
use std::time::Duration;

use seqsync::backend::{CommandBackend, CopyOp};
use seqsync::graph::{Affinity, CommandBuffer, Lowering, Queues, Submit};
use seqsync::internal::backend::host::{HostKernel, HostMemory};
use seqsync::timeline::Timeline;
use seqsync::{Error, HostBackend};

fn writer(m: &HostMemory, value: u32, delay_ms: u64) -> CommandBuffer<HostBackend> {
    let mut cb = CommandBuffer::<HostBackend>::new();
    let m = m.clone();
    cb.kernel(
        "write",
        HostKernel::new(move || {
            std::thread::sleep(Duration::from_millis(delay_ms));
            m.lock()[0] = value;
        }),
        &[],
    );
    cb
}

#[test]
fn a_refused_signal_keeps_the_queue_order() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let t = Timeline::new(&host, "t", 0).unwrap();
    t.signal(10).unwrap();
    let m = host.alloc_words(1).unwrap();
    let mut first = writer(&m, 1, 200)
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    let mut second = writer(&m, 2, 0).finish().unwrap().lower(Lowering::Streams);
    let queue = Affinity::queue(0);
    let how = Submit {
        affinity: queue,
        waits: &[],
        signals: &[(&t, 5)],
    };
    let r = q.submit_with(&mut first, &how);
    assert!(matches!(r, Err(Error::NonMonotonic { .. })), "{r:?}");
    q.submit(&mut second, queue).unwrap();
    q.synchronize().unwrap();
    assert_eq!(
        host.read_words(&m).unwrap(),
        [2],
        "the next submission on queue 0 ran before the failed submission's commands"
    );
}

#[test]
fn a_signal_of_a_failed_timeline_keeps_the_queue_order() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let t = Timeline::new(&host, "t", 0).unwrap();
    t.fail(Error::Cancelled("gone".into()));
    let m = host.alloc_words(1).unwrap();
    let mut first = writer(&m, 1, 200)
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    let mut second = writer(&m, 2, 0).finish().unwrap().lower(Lowering::Streams);
    let queue = Affinity::queue(0);
    let how = Submit {
        affinity: queue,
        waits: &[],
        signals: &[(&t, 1)],
    };
    assert!(q.submit_with(&mut first, &how).is_err());
    q.submit(&mut second, queue).unwrap();
    q.synchronize().unwrap();
    assert_eq!(host.read_words(&m).unwrap(), [2]);
}

#[test]
fn an_out_of_bounds_copy_keeps_the_queue_order() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let m = host.alloc_words(1).unwrap();
    let small = host.alloc_words(1).unwrap();
    let mut cb = writer(&m, 1, 200);
    cb.copy(
        "bad",
        CopyOp {
            src: small.clone(),
            src_offset: 0,
            dst: small,
            dst_offset: 5,
            words: 1,
        },
        &["write"],
    );
    let mut first = cb.finish().unwrap().lower(Lowering::Streams);
    let mut second = writer(&m, 2, 0).finish().unwrap().lower(Lowering::Streams);
    let queue = Affinity::queue(0);
    assert!(q.submit(&mut first, queue).is_err());
    q.submit(&mut second, queue).unwrap();
    q.synchronize().unwrap();
    assert_eq!(host.read_words(&m).unwrap(), [2]);
}

#[test]
fn a_graph_replay_whose_signal_is_refused_keeps_the_queue_order() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let t = Timeline::new(&host, "t", 0).unwrap();
    t.signal(10).unwrap();
    let m = host.alloc_words(1).unwrap();
    let first = writer(&m, 1, 200)
        .finish()
        .unwrap()
        .instantiate(&host)
        .unwrap();
    let second = writer(&m, 2, 0)
        .finish()
        .unwrap()
        .instantiate(&host)
        .unwrap();
    let queue = Affinity::queue(0);
    let how = Submit {
        affinity: queue,
        waits: &[],
        signals: &[(&t, 5)],
    };
    assert!(q.submit_graph_with(&first, &how).is_err());
    q.submit_graph(&second, queue).unwrap();
    q.synchronize().unwrap();
    assert_eq!(host.read_words(&m).unwrap(), [2]);
}

#[test]
fn a_refused_submission_enqueues_nothing() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let t = Timeline::new(&host, "t", 0).unwrap();
    let m = host.alloc_words(1).unwrap();
    let mut first = writer(&m, 1, 0).finish().unwrap().lower(Lowering::Streams);
    let queue = Affinity::queue(0);
    // The list's second signal of `t` is not above its first: refused as the timeline would.
    let how = Submit {
        affinity: queue,
        waits: &[],
        signals: &[(&t, 5), (&t, 3)],
    };
    let r = q.submit_with(&mut first, &how);
    assert!(
        matches!(
            r,
            Err(Error::NonMonotonic {
                current: 5,
                got: 3,
                ..
            })
        ),
        "{r:?}"
    );
    // A wait value out of range: refused too.
    let how = Submit {
        affinity: queue,
        waits: &[(&t, u64::MAX)],
        signals: &[],
    };
    let r = q.submit_with(&mut first, &how);
    assert!(matches!(r, Err(Error::ValueOutOfRange { .. })), "{r:?}");
    q.synchronize().unwrap();
    assert_eq!(host.read_words(&m).unwrap(), [0], "a refused command ran");
    assert_eq!(t.query().unwrap(), 0, "a refused signal landed");
    // The queue still works.
    q.submit_with(
        &mut first,
        &Submit {
            affinity: queue,
            waits: &[],
            signals: &[(&t, 5)],
        },
    )
    .unwrap();
    t.wait(5, Duration::from_secs(5)).unwrap();
    assert_eq!(host.read_words(&m).unwrap(), [1]);
}

#[test]
fn affinity_queue_out_of_range_does_not_panic() {
    let r = std::panic::catch_unwind(|| Affinity::queue(64));
    assert!(r.is_ok(), "Affinity::queue(64) panicked");
    assert_ne!(r.unwrap(), Affinity::queue(0), "queue 64 aliases queue 0");
    // It names no queue, and a submission on it is refused.
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let mut exe = CommandBuffer::<HostBackend>::new()
        .finish()
        .unwrap()
        .lower(Lowering::Streams);
    let e = q.submit(&mut exe, Affinity::queue(64)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

/// A copy within one memory whose ranges overlap is refused by name, on submission and at
/// instantiation (the copy engines give no defined result there, so the host backend refuses it
/// alike); disjoint ranges of one memory copy.
#[test]
fn an_overlapping_copy_in_one_memory_is_refused() {
    let host = HostBackend::new();
    let mut q = Queues::new(host.clone());
    let m = host.alloc_words(8).unwrap();
    host.write_words(&m, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    let copy = |src_offset, dst_offset, words| {
        let mut cb = CommandBuffer::<HostBackend>::new();
        cb.copy(
            "shift",
            CopyOp {
                src: m.clone(),
                src_offset,
                dst: m.clone(),
                dst_offset,
                words,
            },
            &[],
        );
        cb.finish().unwrap()
    };
    let overlap = |e: seqsync::Error| {
        assert!(
            matches!(e, seqsync::Error::InvalidArgument { .. })
                && e.to_string().contains("overlap"),
            "{e}"
        );
    };
    overlap(
        q.submit(&mut copy(0, 2, 4).lower(Lowering::Streams), Affinity::ANY)
            .unwrap_err(),
    );
    overlap(copy(2, 0, 4).instantiate(&host).err().expect("refused"));
    q.submit(&mut copy(0, 4, 4).lower(Lowering::Streams), Affinity::ANY)
        .unwrap();
    q.synchronize().unwrap();
    assert_eq!(host.read_words(&m).unwrap(), [1, 2, 3, 4, 1, 2, 3, 4]);
}
