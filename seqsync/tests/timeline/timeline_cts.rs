//! IREE's semaphore conformance cases (`../shared/research/peer-suites.md` §1.1–1.3, §1.9),
//! ported to seqsync timelines, on the host backend and on CUDA. Each test is `cts_` + the
//! case's name in snake_case; a case name found in two of IREE's files gets the file's
//! suffix (`_async`) the second time.
//!
//! Mapping: a HAL *semaphore* is a [`Timeline`]; a *queue* is a stream; a *command buffer* or
//! *batch* is work enqueued on the stream (a busy wait, and the waits and signals of its
//! submission); `queue_barrier`/`queue_execute(waits, signals)` is `wait_on` for each wait then
//! `signal_on` for each signal; a HAL status code is an [`Error`] given to `fail`. A
//! *timepoint* (an async callback at a value, §1.9) is work enqueued after a `wait_on`, which
//! "fires" by signalling a probe timeline; a cancelled wait is a host wait cut short by its
//! timeout. IREE's failure value `>= FAILURE_VALUE` is [`Error::TimelineFailed`] from `query`.
//!
//! Not ported, because seqsync timelines have no such feature: `SignalWithFrontier`,
//! `FrontierCapacityOverflow` (timelines carry no causal frontier) and `TaintingWatermark`
//! (no taint tracking). `IndirectCommandBufferBindingTableRetainedUntilSignal` is ported as the
//! retention of what a deferred submission captured (the buffers of a closure on the host
//! backend, of a copy on CUDA).
//!
//! IREE's queue submissions are ordered only by their semaphores, not by the order they were
//! made in; a stream runs in order. So a submission that IREE makes on a queue behind one that
//! is blocked on a semaphore goes to a stream of its own here.

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Harness;
use seqsync::timeline::{wait_all, wait_any, Timeline};
use seqsync::{Error, HostBackend};

/// A copy enqueued on a stream, for the binding-table case.
trait Copies: Harness {
    /// What [`Copies::copy_after`] enqueued: it keeps the copy's buffers alive.
    type Copy;
    /// Enqueue on `stream` a copy of `data` into a new buffer (through the device on CUDA).
    fn copy_after(&self, stream: &Self::Stream, data: Vec<u8>) -> Self::Copy;
    /// The copy's result, once the stream got past it.
    fn read_copy(&self, copy: Self::Copy) -> Vec<u8>;
}

impl Copies for HostBackend {
    type Copy = Arc<std::sync::Mutex<Vec<u8>>>;
    fn copy_after(&self, stream: &Self::Stream, data: Vec<u8>) -> Self::Copy {
        let target = Self::Copy::default();
        let t = target.clone();
        stream.launch(move || *t.lock().unwrap() = data);
        target
    }
    fn read_copy(&self, copy: Self::Copy) -> Vec<u8> {
        copy.lock().unwrap().clone()
    }
}

#[cfg(feature = "cuda")]
impl Copies for seqsync::backend::cuda::CudaBackend {
    type Copy = (
        seqsync::backend::cuda::PinnedBuffer,
        seqsync::backend::cuda::DeviceBuffer,
        seqsync::backend::cuda::PinnedBuffer,
    );
    fn copy_after(&self, stream: &Self::Stream, data: Vec<u8>) -> Self::Copy {
        assert_eq!(data.len() % 4, 0);
        let n = data.len() / 4;
        let (src, dev, dst) = (
            self.alloc_pinned(n).unwrap(),
            self.alloc_device(n).unwrap(),
            self.alloc_pinned(n).unwrap(),
        );
        // SAFETY: nothing else uses the fresh buffers; the copies are ordered on `stream`, and
        // the buffers live in the returned tuple until `read_copy`, after the stream got there.
        unsafe {
            for (i, w) in src.as_mut_slice().iter_mut().enumerate() {
                *w = u32::from_ne_bytes(data[i * 4..i * 4 + 4].try_into().unwrap());
            }
            dev.copy_from_pinned_async(&src, stream).unwrap();
            dev.copy_to_pinned_async(&dst, stream).unwrap();
        }
        (src, dev, dst)
    }
    fn read_copy(&self, copy: Self::Copy) -> Vec<u8> {
        // SAFETY: the caller waited for a signal enqueued after the copies.
        unsafe { copy.2.as_slice() }
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect()
    }
}

const LONG: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_millis(30);
/// IREE's "infinite" timeout.
const INFINITE: Duration = Duration::MAX;

fn tl<B: Harness>(b: &B, initial: u64) -> Timeline<B> {
    Timeline::new(b, "s", initial).unwrap()
}

fn named<B: Harness>(b: &B, name: &str, initial: u64) -> Timeline<B> {
    Timeline::new(b, name, initial).unwrap()
}

/// `queue_execute(waits, signals)` on `queue`, with a little work in between.
fn submit<B: Harness>(
    b: &B,
    queue: &B::Stream,
    waits: &[(&Timeline<B>, u64)],
    signals: &[(&Timeline<B>, u64)],
) {
    for (t, v) in waits {
        t.wait_on(queue, *v).unwrap();
    }
    b.busy(queue, Duration::from_micros(200));
    for (t, v) in signals {
        t.signal_on(queue, *v).unwrap();
    }
}

/// Where a stream wait before its signal is refused (CUDA `events`): checks that
/// `t.wait_on(q, v)` is refused (nothing enqueued) and returns `true`, and the case ends there
/// (what it checks needs such a wait). Elsewhere `false`, and nothing is done.
fn refuses_wait_before_signal<B: Harness>(b: &B, t: &Timeline<B>, q: &B::Stream, v: u64) -> bool {
    if b.holds_waits_before_signals() {
        return false;
    }
    common::assert_wait_refused(t.wait_on(q, v));
    true
}

fn is_failed_with(err: &Error, what: &str) -> bool {
    matches!(err.root_cause(), Error::Cancelled(m) if m == what)
}

// ---- §1.1 SemaphoreTest ----

fn cts_no_op<B: Harness>(b: &B) {
    let s = tl(b, 123);
    assert_eq!(s.query().unwrap(), 123);
    drop(s);
}

fn cts_normal_signaling<B: Harness>(b: &B) {
    let s = tl(b, 2);
    assert_eq!(s.query().unwrap(), 2);
    s.signal(3).unwrap();
    assert_eq!(s.query().unwrap(), 3);
    s.signal(40).unwrap();
    assert_eq!(s.query().unwrap(), 40);
}

fn cts_failure<B: Harness>(b: &B) {
    let s = tl(b, 2);
    s.signal(3).unwrap();
    assert_eq!(s.query().unwrap(), 3);
    s.fail(Error::Cancelled("unknown".into()));
    let err = s.query().unwrap_err();
    assert!(
        matches!(err, Error::TimelineFailed { value: 3, .. }),
        "{err}"
    );
    assert!(is_failed_with(&err, "unknown"));
}

fn cts_empty_wait<B: Harness>(_b: &B) {
    let none: [(&Timeline<B>, u64); 0] = [];
    for timeout in [INFINITE, LONG, Duration::ZERO] {
        wait_all(&none, timeout).unwrap();
        assert_eq!(wait_any(&none, timeout).unwrap(), None);
    }
}

fn cts_wait_already_signaled<B: Harness>(b: &B) {
    let s = tl(b, 2);
    for timeout in [INFINITE, LONG, Duration::ZERO] {
        s.wait(1, timeout).unwrap();
        s.wait(2, timeout).unwrap();
    }
}

fn cts_wait_unsignaled<B: Harness>(b: &B) {
    let s = tl(b, 2);
    let err = s.wait(3, Duration::ZERO).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
}

fn cts_wait_all_but_not_all_signaled<B: Harness>(b: &B) {
    let (a, c) = (tl(b, 0), tl(b, 1));
    let err = wait_all(&[(&a, 1), (&c, 1)], Duration::ZERO).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
}

fn cts_wait_all_and_all_signaled<B: Harness>(b: &B) {
    let (a, c) = (tl(b, 1), tl(b, 1));
    wait_all(&[(&a, 1), (&c, 1)], INFINITE).unwrap();
}

fn cts_wait_any_already_signaled<B: Harness>(b: &B) {
    let (a, c) = (tl(b, 0), tl(b, 1));
    assert_eq!(wait_any(&[(&a, 1), (&c, 1)], INFINITE).unwrap(), Some(1));
}

fn cts_fail_then_wait<B: Harness>(b: &B) {
    let s = tl(b, 0);
    s.fail(Error::Cancelled("cancelled".into()));
    let err = s.wait(1, INFINITE).unwrap_err();
    assert!(is_failed_with(&err, "cancelled"), "{err}");
    let err = s.query().unwrap_err();
    assert!(matches!(err, Error::TimelineFailed { .. }) && is_failed_with(&err, "cancelled"));
}

fn cts_failure_preserves_status_code<B: Harness>(b: &B) {
    let s = tl(b, 0);
    let fault = Error::Backend(seqsync::BackendError {
        backend: "test",
        op: "device fault",
        code: Some(15),
        message: "data loss".into(),
    });
    s.fail(fault);
    let err = s.query().unwrap_err();
    match err.root_cause() {
        Error::Backend(e) => {
            assert_eq!(
                (e.code, e.op, e.message.as_str()),
                (Some(15), "device fault", "data loss")
            )
        }
        other => panic!("status not preserved: {other}"),
    }
}

// ---- §1.2 SemaphoreThreadTest ----

fn cts_wait_later_signaled_beyond<B: Harness>(b: &B) {
    let s = tl(b, 2);
    let t = s.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        t.signal(10).unwrap();
    });
    s.wait(3, INFINITE).unwrap();
    assert_eq!(s.query().unwrap(), 10);
    th.join().unwrap();
}

fn cts_wait_any_later_signaled<B: Harness>(b: &B) {
    let (a, c) = (tl(b, 0), tl(b, 0));
    let t = c.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        t.signal(1).unwrap();
    });
    assert_eq!(wait_any(&[(&a, 1), (&c, 1)], INFINITE).unwrap(), Some(1));
    th.join().unwrap();
}

fn cts_ping_pong<B: Harness>(b: &B) {
    let (a2b, b2a) = (named(b, "a2b", 0), named(b, "b2a", 0));
    let (x, y) = (a2b.clone(), b2a.clone());
    let th = std::thread::spawn(move || {
        x.wait(0, INFINITE).unwrap();
        y.signal(1).unwrap();
        x.wait(4, INFINITE).unwrap();
    });
    b2a.wait(1, INFINITE).unwrap();
    a2b.signal(4).unwrap();
    th.join().unwrap();
}

fn cts_wait_on_the_same_value_multiple_times<B: Harness>(b: &B) {
    let s = tl(b, 0);
    let t = s.clone();
    let th = std::thread::spawn(move || t.signal(1).unwrap());
    s.wait(1, INFINITE).unwrap();
    assert_eq!(s.query().unwrap(), 1);
    s.wait(1, INFINITE).unwrap();
    assert_eq!(s.query().unwrap(), 1);
    th.join().unwrap();
}

fn cts_simultaneous_multi_wait_all<B: Harness>(b: &B) {
    let (s1, s2) = (named(b, "s1", 0), named(b, "s2", 0));
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let (s1, s2) = (s1.clone(), s2.clone());
            std::thread::spawn(move || wait_all(&[(&s1, 1), (&s2, 1)], INFINITE))
        })
        .collect();
    let (t1, t2) = (s1.clone(), s2.clone());
    let signaller = std::thread::spawn(move || {
        t1.signal(1).unwrap();
        t2.signal(1).unwrap();
    });
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    signaller.join().unwrap();
    assert_eq!((s1.query().unwrap(), s2.query().unwrap()), (1, 1));
}

fn cts_wait_then_fail<B: Harness>(b: &B) {
    let s = tl(b, 0);
    let t = s.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        t.fail(Error::Cancelled("cancelled".into()));
    });
    let err = s.wait(1, INFINITE).unwrap_err();
    assert!(is_failed_with(&err, "cancelled"), "{err}");
    assert!(is_failed_with(&s.query().unwrap_err(), "cancelled"));
    th.join().unwrap();
}

// ---- §1.3 SemaphoreSubmissionTest ----

fn cts_submit_with_no_command_buffers<B: Harness>(b: &B) {
    let q = b.stream();
    let s = tl(b, 0);
    s.signal_on(&q, 1).unwrap(); // queue_barrier: no waits, no work
    s.wait(1, LONG).unwrap();
}

fn cts_submit_and_signal<B: Harness>(b: &B) {
    let q = b.stream();
    let s = tl(b, 0);
    submit(b, &q, &[], &[(&s, 1)]);
    s.wait(1, LONG).unwrap();
}

fn cts_submit_with_wait<B: Harness>(b: &B) {
    let q = b.stream();
    let (w, s) = (named(b, "w", 0), named(b, "s", 100));
    if refuses_wait_before_signal(b, &w, &q, 1) {
        return;
    }
    submit(b, &q, &[(&w, 1)], &[(&s, 101)]);
    std::thread::sleep(SHORT);
    assert_eq!(s.query().unwrap(), 100, "work started before its wait");
    w.signal(1).unwrap();
    s.wait(101, LONG).unwrap();
}

fn cts_cross_queue_wait_before_signal<B: Harness>(b: &B) {
    let (q0, q1) = (b.stream(), b.stream());
    let (producer, consumer) = (named(b, "producer", 0), named(b, "consumer", 0));
    if refuses_wait_before_signal(b, &producer, &q1, 1) {
        // Nothing enqueued: the consumer's signal is not held.
        consumer.signal_on(&q1, 1).unwrap();
        consumer.wait(1, LONG).unwrap();
        assert_eq!(producer.query().unwrap(), 0);
        return;
    }
    producer.wait_on(&q1, 1).unwrap();
    consumer.signal_on(&q1, 1).unwrap();
    std::thread::sleep(SHORT);
    assert!(
        consumer.wait(1, Duration::ZERO).is_err(),
        "consumer signalled early"
    );
    producer.signal_on(&q0, 1).unwrap();
    consumer.wait(1, LONG).unwrap();
}

fn cts_multi_queue_fan_out_different_values_before_signal<B: Harness>(b: &B) {
    let (q0, q1) = (b.stream(), b.stream());
    let p = named(b, "p", 0);
    let (q0done, q1done) = (named(b, "q0done", 0), named(b, "q1done", 0));
    if refuses_wait_before_signal(b, &p, &q1, 2) {
        return;
    }
    submit(b, &q1, &[(&p, 2)], &[(&q1done, 1)]);
    submit(b, &q0, &[(&p, 1)], &[(&q0done, 1)]);
    std::thread::sleep(SHORT);
    assert_eq!((q0done.query().unwrap(), q1done.query().unwrap()), (0, 0));
    // IREE's barrier on queue 0 is not behind queue 0's blocked batch; a stream is (see the
    // module docs), so the barrier goes to a stream of its own.
    p.signal_on(&b.stream(), 3).unwrap();
    wait_all(&[(&q0done, 1), (&q1done, 1)], LONG).unwrap();
    assert_eq!(p.query().unwrap(), 3);
}

fn cts_indirect_command_buffer_binding_table_retained_until_signal<B: Copies>(b: &B) {
    let q = b.stream();
    let (w, s) = (named(b, "w", 0), named(b, "s", 0));
    let source: Vec<u8> = (0..256u32).map(|i| (i as u8) ^ 0x5A).collect();
    if refuses_wait_before_signal(b, &w, &q, 1) {
        return;
    }
    w.wait_on(&q, 1).unwrap();
    let target = b.copy_after(&q, source.clone());
    s.signal_on(&q, 1).unwrap();
    drop(source.clone()); // the caller's handles go; the submission keeps its own
    w.signal(1).unwrap();
    s.wait(1, LONG).unwrap();
    assert_eq!(b.read_copy(target), source);
}

fn cts_submit_with_multiple_semaphores<B: Harness>(b: &B) {
    let q = b.stream();
    let (w1, w2, s1, s2) = (
        named(b, "w1", 0),
        named(b, "w2", 0),
        named(b, "s1", 0),
        named(b, "s2", 0),
    );
    if refuses_wait_before_signal(b, &w1, &q, 1) {
        return;
    }
    submit(b, &q, &[(&w1, 1), (&w2, 1)], &[(&s1, 1), (&s2, 1)]);
    std::thread::sleep(SHORT);
    assert_eq!((s1.query().unwrap(), s2.query().unwrap()), (0, 0));
    w1.signal(1).unwrap();
    w2.signal(1).unwrap();
    wait_all(&[(&s1, 1), (&s2, 1)], LONG).unwrap();
}

/// What [`host_and_device_setup`] makes: the device's queue, the four timelines and the host
/// thread.
type HostAndDevice<B> = (
    <B as seqsync::backend::Backend>::Stream,
    [Timeline<B>; 4],
    std::thread::JoinHandle<seqsync::Result<()>>,
);

/// `None` where a stream wait before its signal is refused (CUDA `events`; the refusal is
/// checked): the cases need one.
fn host_and_device_setup<B: Harness>(b: &B) -> Option<HostAndDevice<B>> {
    let q = b.stream();
    let (dw, ds, hw, hs) = (
        named(b, "dw", 0),
        named(b, "ds", 0),
        named(b, "hw", 0),
        named(b, "hs", 0),
    );
    if refuses_wait_before_signal(b, &dw, &q, 1) {
        return None;
    }
    submit(b, &q, &[(&dw, 1)], &[(&ds, 1)]);
    let (w, s) = (hw.clone(), hs.clone());
    let th = std::thread::spawn(move || {
        w.wait(1, INFINITE)?;
        s.signal(1)
    });
    std::thread::sleep(SHORT);
    assert_eq!((hs.query().unwrap(), ds.query().unwrap()), (0, 0));
    Some((q, [dw, ds, hw, hs], th))
}

fn cts_wait_all_host_and_device_semaphores<B: Harness>(b: &B) {
    let Some((_q, [dw, ds, hw, hs], th)) = host_and_device_setup(b) else {
        return;
    };
    hw.signal(1).unwrap();
    dw.signal(1).unwrap();
    wait_all(&[(&hs, 1), (&ds, 1)], LONG).unwrap();
    th.join().unwrap().unwrap();
}

fn cts_wait_any_host_and_device_semaphores_and_device_signals<B: Harness>(b: &B) {
    let Some((_q, [dw, ds, hw, hs], th)) = host_and_device_setup(b) else {
        return;
    };
    dw.signal(1).unwrap();
    assert_eq!(wait_any(&[(&hs, 1), (&ds, 1)], LONG).unwrap(), Some(1));
    assert_eq!((hs.query().unwrap(), ds.query().unwrap()), (0, 1));
    hw.signal(1).unwrap();
    th.join().unwrap().unwrap();
}

fn cts_intermediate_semaphore_between_device_batches<B: Harness>(b: &B) {
    let q = b.stream();
    let (s1, s2) = (named(b, "s1", 0), named(b, "s2", 0));
    // Second batch first; on another queue, since one queue runs in order.
    let q2 = b.stream();
    if refuses_wait_before_signal(b, &s1, &q2, 1) {
        return;
    }
    submit(b, &q2, &[(&s1, 1)], &[(&s2, 1)]);
    std::thread::sleep(SHORT);
    assert_eq!((s1.query().unwrap(), s2.query().unwrap()), (0, 0));
    submit(b, &q, &[], &[(&s1, 1)]);
    s1.wait(1, LONG).unwrap();
    s2.wait(1, LONG).unwrap();
}

fn cts_two_batches_waiting_on1_former_batch_amongst2<B: Harness>(b: &B) {
    let (q, q21, q22) = (b.stream(), b.stream(), b.stream());
    let (s11, s21, s22) = (named(b, "s11", 0), named(b, "s21", 0), named(b, "s22", 0));
    if refuses_wait_before_signal(b, &s11, &q22, 1) {
        return;
    }
    submit(b, &q22, &[(&s11, 1)], &[(&s22, 1)]);
    submit(b, &q21, &[(&s11, 1)], &[(&s21, 1)]);
    submit(b, &q, &[], &[]); // CB12: no waits, no signals
    std::thread::sleep(SHORT);
    assert_eq!([&s11, &s21, &s22].map(|s| s.query().unwrap()), [0, 0, 0]);
    submit(b, &q, &[], &[(&s11, 1)]);
    wait_all(&[(&s21, 1), (&s11, 1), (&s22, 1)], LONG).unwrap();
}

fn cts_device_batch_signal_another_and_host<B: Harness>(b: &B) {
    let (q1, q2) = (b.stream(), b.stream());
    let (s11, s12, s2) = (named(b, "s11", 0), named(b, "s12", 0), named(b, "s2", 0));
    if refuses_wait_before_signal(b, &s11, &q2, 1) {
        return;
    }
    submit(b, &q2, &[(&s11, 1)], &[(&s2, 1)]);
    let threads: Vec<_> = [&s11, &s12, &s2]
        .into_iter()
        .map(|s| {
            let s = s.clone();
            std::thread::spawn(move || s.wait(1, INFINITE))
        })
        .collect();
    std::thread::sleep(SHORT);
    assert_eq!([&s11, &s12, &s2].map(|s| s.query().unwrap()), [0, 0, 0]);
    submit(b, &q1, &[], &[(&s11, 1), (&s12, 1)]);
    for t in threads {
        t.join().unwrap().unwrap();
    }
    assert_eq!([&s11, &s12, &s2].map(|s| s.query().unwrap()), [1, 1, 1]);
}

fn cts_batch_waiting_on_smaller_value_after_signaled<B: Harness>(b: &B) {
    let q = b.stream();
    let (s1, s2) = (named(b, "s1", 0), named(b, "s2", 0));
    s1.signal(2).unwrap();
    submit(b, &q, &[(&s1, 1)], &[(&s2, 1)]);
    s2.wait(1, LONG).unwrap();
}

fn cts_batch_waiting_on_smaller_value_before_signaled<B: Harness>(b: &B) {
    let q = b.stream();
    let (s1, s2) = (named(b, "s1", 0), named(b, "s2", 0));
    if refuses_wait_before_signal(b, &s1, &q, 1) {
        return;
    }
    submit(b, &q, &[(&s1, 1)], &[(&s2, 1)]);
    let t = s1.clone();
    let th = std::thread::spawn(move || t.signal(2).unwrap());
    s2.wait(1, LONG).unwrap();
    th.join().unwrap();
}

fn cts_propagate_fail_signal<B: Harness>(b: &B) {
    let q = b.stream();
    let (s1, s2) = (named(b, "s1", 0), named(b, "s2", 0));
    if refuses_wait_before_signal(b, &s1, &q, 1) {
        return;
    }
    submit(b, &q, &[(&s1, 1)], &[(&s2, 1)]);
    let t = s1.clone();
    let th = std::thread::spawn(move || t.fail(Error::Cancelled("cancelled".into())));
    let err = s2.wait(1, LONG).unwrap_err();
    assert!(is_failed_with(&err, "cancelled"), "{err}");
    let err = s2.query().unwrap_err();
    assert!(matches!(err, Error::TimelineFailed { .. }), "{err}");
    th.join().unwrap();
    b.sync_stream(&q);
}

// ---- §1.9 async semaphore CTS: SemaphoreSyncTest ----

fn cts_create_query_release<B: Harness>(b: &B) {
    let s = tl(b, 42);
    assert_eq!(s.query().unwrap(), 42);
}

fn cts_signal_advances_value<B: Harness>(b: &B) {
    let s = tl(b, 0);
    s.signal(5).unwrap();
    assert_eq!(s.query().unwrap(), 5);
    s.signal(100).unwrap();
    assert_eq!(s.query().unwrap(), 100);
}

fn cts_signal_non_monotonic_fails<B: Harness>(b: &B) {
    let s = tl(b, 10);
    for got in [10, 5] {
        let err = s.signal(got).unwrap_err();
        assert!(
            matches!(err, Error::NonMonotonic { current: 10, .. }),
            "{err}"
        );
    }
    assert_eq!(s.query().unwrap(), 10);
}

fn cts_fail_sticky_status<B: Harness>(b: &B) {
    let s = tl(b, 0);
    let q = b.stream();
    let fired = named(b, "fired", 0);
    if refuses_wait_before_signal(b, &s, &q, 10) {
        // No pending timepoint (refused); the rest holds as it is.
        s.fail(Error::Cancelled("aborted".into()));
    } else {
        // A pending timepoint at 10.
        s.wait_on(&q, 10).unwrap();
        fired.signal_on(&q, 1).unwrap();
        s.fail(Error::Cancelled("aborted".into()));
        let err = fired.wait(1, LONG).unwrap_err(); // fired once, with the failure
        assert!(is_failed_with(&err, "aborted"), "{err}");
    }
    // A new timepoint at 20 fires at once, with the failure.
    let q2 = b.stream();
    let fired2 = named(b, "fired2", 0);
    s.wait_on(&q2, 20).unwrap();
    fired2.signal_on(&q2, 1).unwrap();
    assert!(is_failed_with(
        &fired2.wait(1, LONG).unwrap_err(),
        "aborted"
    ));
    // A second failure is ignored.
    s.fail(Error::Cancelled("internal".into()));
    assert!(is_failed_with(&s.query().unwrap_err(), "aborted"));
}

/// A timepoint at `v` on a fresh stream; the returned probe reaches 1 when it fires.
fn timepoint<B: Harness>(b: &B, s: &Timeline<B>, v: u64) -> (B::Stream, Timeline<B>) {
    let q = b.stream();
    let probe = named(b, "timepoint", 0);
    s.wait_on(&q, v).unwrap();
    probe.signal_on(&q, 1).unwrap();
    (q, probe)
}

fn cts_timepoint_immediate_satisfaction<B: Harness>(b: &B) {
    let s = tl(b, 10);
    let (_q5, p5) = timepoint(b, &s, 5);
    let (_q10, p10) = timepoint(b, &s, 10);
    wait_all(&[(&p5, 1), (&p10, 1)], LONG).unwrap();
}

fn cts_timepoint_pending_then_signal<B: Harness>(b: &B) {
    let s = tl(b, 0);
    if !b.holds_waits_before_signals() {
        common::assert_wait_refused(s.wait_on(&b.stream(), 10));
        return;
    }
    let (_q, p) = timepoint(b, &s, 10);
    s.signal(5).unwrap();
    std::thread::sleep(SHORT);
    assert_eq!(p.query().unwrap(), 0, "fired at 5");
    s.signal(10).unwrap();
    p.wait(1, LONG).unwrap();
}

fn cts_timepoint_cancel<B: Harness>(b: &B) {
    let s = tl(b, 0);
    // The "timepoint" is a host wait, cancelled by its timeout before the signal.
    let err = s.wait(10, Duration::from_millis(5)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    s.signal(20).unwrap();
    assert_eq!(s.query().unwrap(), 20);
    s.wait(10, Duration::ZERO).unwrap();
}

fn cts_timepoint_cancel_after_fire<B: Harness>(b: &B) {
    let s = tl(b, 0);
    let count = Arc::new(AtomicU32::new(0));
    s.signal(10).unwrap();
    // It fired; a "cancel" afterwards (a wait timing out on a higher value) changes nothing.
    s.wait(10, Duration::ZERO).unwrap();
    count.fetch_add(1, Ordering::SeqCst);
    assert!(s.wait(11, Duration::ZERO).is_err());
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert_eq!(s.query().unwrap(), 10);
}

fn cts_multiple_timepoints<B: Harness>(b: &B) {
    let s = tl(b, 0);
    if !b.holds_waits_before_signals() {
        common::assert_wait_refused(s.wait_on(&b.stream(), 5));
        return;
    }
    let (_a, p5) = timepoint(b, &s, 5);
    let (_b, p10) = timepoint(b, &s, 10);
    let (_c, p15) = timepoint(b, &s, 15);
    let fired = || [&p5, &p10, &p15].map(|p| p.query().unwrap());
    s.signal(7).unwrap();
    p5.wait(1, LONG).unwrap();
    std::thread::sleep(SHORT);
    assert_eq!(fired(), [1, 0, 0]);
    s.signal(12).unwrap();
    p10.wait(1, LONG).unwrap();
    std::thread::sleep(SHORT);
    assert_eq!(fired(), [1, 1, 0]);
    s.signal(20).unwrap();
    p15.wait(1, LONG).unwrap();
    assert_eq!(fired(), [1, 1, 1]);
}

fn cts_retain_release<B: Harness>(b: &B) {
    let s = tl(b, 0);
    let retained = s.clone();
    drop(s);
    retained.signal(1).unwrap();
    assert_eq!(retained.query().unwrap(), 1);
}

fn cts_timepoint_cross_thread<B: Harness>(b: &B) {
    let s = tl(b, 0);
    if !b.holds_waits_before_signals() {
        common::assert_wait_refused(s.wait_on(&b.stream(), 1));
        return;
    }
    let (_q, p) = timepoint(b, &s, 1);
    let t = s.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        t.signal(1).unwrap();
    });
    p.wait(1, LONG).unwrap();
    th.join().unwrap();
    std::thread::sleep(SHORT);
    assert_eq!(p.query().unwrap(), 1, "fired more than once");
}

fn cts_destroy_with_pending_timepoints<B: Harness>(b: &B) {
    let s = tl(b, 0);
    if !b.holds_waits_before_signals() {
        common::assert_wait_refused(s.wait_on(&b.stream(), 10));
        return;
    }
    let (q, p) = timepoint(b, &s, 10);
    drop(s);
    let err = p.wait(1, LONG).unwrap_err();
    assert!(
        matches!(err.root_cause(), Error::TimelineDropped { .. }),
        "{err}"
    );
    b.sync_stream(&q);
}

// ---- §1.9 SemaphoreAsyncTest (proactor operations) ----

fn cts_signal_single<B: Harness>(b: &B) {
    let q = b.stream();
    let s = tl(b, 0);
    s.signal_on(&q, 1).unwrap();
    s.wait(1, LONG).unwrap();
}

fn cts_signal_multiple<B: Harness>(b: &B) {
    let q = b.stream();
    let (x, y) = (named(b, "x", 0), named(b, "y", 0));
    x.signal_on(&q, 1).unwrap();
    y.signal_on(&q, 2).unwrap();
    wait_all(&[(&x, 1), (&y, 2)], LONG).unwrap();
}

fn cts_signal_non_monotonic_fails_async<B: Harness>(b: &B) {
    let q = b.stream();
    let s = tl(b, 10);
    for got in [10, 5] {
        let err = s.signal_on(&q, got).unwrap_err();
        assert!(
            matches!(err, Error::NonMonotonic { current: 10, .. }),
            "{err}"
        );
    }
    b.sync_stream(&q);
    assert_eq!(s.query().unwrap(), 10);
}

fn cts_wait_single_already_satisfied<B: Harness>(b: &B) {
    let s = tl(b, 5);
    let (_q, p) = timepoint(b, &s, 5);
    p.wait(1, LONG).unwrap();
}

fn cts_wait_single_pending<B: Harness>(b: &B) {
    let s = tl(b, 0);
    if !b.holds_waits_before_signals() {
        common::assert_wait_refused(s.wait_on(&b.stream(), 1));
        return;
    }
    let (_q, p) = timepoint(b, &s, 1);
    std::thread::sleep(SHORT);
    assert_eq!(p.query().unwrap(), 0);
    s.signal(1).unwrap();
    p.wait(1, LONG).unwrap();
}

fn cts_wait_all_mode_partial<B: Harness>(b: &B) {
    let ts = [named(b, "a", 0), named(b, "b", 0), named(b, "c", 0)];
    ts[0].signal(1).unwrap();
    ts[1].signal(1).unwrap();
    let list: Vec<_> = ts.iter().map(|t| (t, 1)).collect();
    assert!(matches!(wait_all(&list, SHORT), Err(Error::Timeout { .. })));
}

fn cts_wait_all_mode_complete<B: Harness>(b: &B) {
    let ts = [named(b, "a", 0), named(b, "b", 0), named(b, "c", 0)];
    let q = b.stream();
    for t in &ts {
        t.signal_on(&q, 1).unwrap();
    }
    let list: Vec<_> = ts.iter().map(|t| (t, 1)).collect();
    wait_all(&list, LONG).unwrap();
}

fn cts_wait_any_mode<B: Harness>(b: &B) {
    let ts = [named(b, "a", 0), named(b, "b", 0), named(b, "c", 0)];
    let q = b.stream();
    b.busy(&q, Duration::from_millis(20));
    ts[2].signal_on(&q, 1).unwrap();
    let list: Vec<_> = ts.iter().map(|t| (t, 1)).collect();
    assert_eq!(wait_any(&list, LONG).unwrap(), Some(2));
}

fn cts_wait_semaphore_failed<B: Harness>(b: &B) {
    let s = tl(b, 0);
    let t = s.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        t.fail(Error::Cancelled("failed".into()));
    });
    assert!(is_failed_with(&s.wait(1, LONG).unwrap_err(), "failed"));
    th.join().unwrap();
}

fn cts_wait_semaphore_already_failed<B: Harness>(b: &B) {
    let s = tl(b, 0);
    s.fail(Error::Cancelled("failed".into()));
    assert!(is_failed_with(&s.wait(1, LONG).unwrap_err(), "failed"));
    assert!(is_failed_with(
        &wait_any(&[(&s, 1)], LONG).unwrap_err(),
        "failed"
    ));
}

fn cts_wait_cancellation<B: Harness>(b: &B) {
    // A pending wait cut short (by its timeout) ends with an error, never with success.
    let s = tl(b, 0);
    let err = s.wait(1, Duration::from_millis(10)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert_eq!(s.query().unwrap(), 0);
}

fn cts_signal_wakes_pending_wait<B: Harness>(b: &B) {
    let s = tl(b, 0);
    let t = s.clone();
    let waiter = std::thread::spawn(move || t.wait(1, LONG));
    std::thread::sleep(SHORT);
    let q = b.stream();
    s.signal_on(&q, 1).unwrap();
    waiter.join().unwrap().unwrap();
}

// ---- §1.9 semaphore_linked_test ----

fn cts_linked_wait_failure_cancels_chain<B: Harness>(b: &B) {
    let q = b.stream();
    let (s, nop) = (named(b, "s", 0), named(b, "nop", 0));
    if refuses_wait_before_signal(b, &s, &q, 1) {
        return;
    }
    s.wait_on(&q, 1).unwrap(); // WAIT(linked) -> NOP
    nop.signal_on(&q, 1).unwrap();
    s.fail(Error::Cancelled("cancelled".into()));
    assert!(is_failed_with(&nop.wait(1, LONG).unwrap_err(), "cancelled"));
}

fn cts_linked_signal_failure_cancels_chain<B: Harness>(b: &B) {
    let q = b.stream();
    let (s, next) = (named(b, "s", 5), named(b, "next", 0));
    // The non-monotonic signal is refused when enqueued: nothing of it reaches the stream,
    // and a successor that waits on its value is not released.
    let err = s.signal_on(&q, 3).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NonMonotonic {
                current: 5,
                got: 3,
                ..
            }
        ),
        "{err}"
    );
    if refuses_wait_before_signal(b, &s, &q, 6) {
        return;
    }
    s.wait_on(&q, 6).unwrap();
    next.signal_on(&q, 1).unwrap();
    std::thread::sleep(SHORT);
    assert_eq!(next.query().unwrap(), 0);
    s.signal(6).unwrap();
    next.wait(1, LONG).unwrap();
}

fn cts_independent_chains<B: Harness>(b: &B) {
    let (q1, q2) = (b.stream(), b.stream());
    let (a, a_done, c, c_done) = (
        named(b, "a", 0),
        named(b, "a_done", 0),
        named(b, "c", 0),
        named(b, "c_done", 0),
    );
    if refuses_wait_before_signal(b, &a, &q1, 1) {
        return;
    }
    submit(b, &q1, &[(&a, 1)], &[(&a_done, 1)]);
    submit(b, &q2, &[(&c, 1)], &[(&c_done, 1)]);
    a.fail(Error::Cancelled("chain a".into()));
    c.signal(1).unwrap();
    c_done.wait(1, LONG).unwrap();
    assert!(is_failed_with(
        &a_done.wait(1, LONG).unwrap_err(),
        "chain a"
    ));
}

fn cts_linked_failure_cancels_mixed_chain<B: Harness>(b: &B) {
    let q = b.stream();
    let (s, signalled, sent) = (named(b, "s", 0), named(b, "signal", 0), named(b, "send", 0));
    if refuses_wait_before_signal(b, &s, &q, 1) {
        return;
    }
    s.wait_on(&q, 1).unwrap();
    signalled.signal_on(&q, 1).unwrap();
    b.busy(&q, Duration::from_micros(100));
    sent.signal_on(&q, 1).unwrap();
    s.fail(Error::Cancelled("cancelled".into()));
    // The skipped SIGNAL has no effect (the value never becomes 1), and SEND fails.
    let err = signalled.query().unwrap_err();
    assert!(
        matches!(err, Error::TimelineFailed { value: 0, .. }),
        "{err}"
    );
    assert!(is_failed_with(
        &sent.wait(1, LONG).unwrap_err(),
        "cancelled"
    ));
    b.sync_stream(&q);
    assert!(matches!(
        signalled.query().unwrap_err(),
        Error::TimelineFailed { value: 0, .. }
    ));
}

on_both_backends!(
    cts_no_op,
    cts_normal_signaling,
    cts_failure,
    cts_empty_wait,
    cts_wait_already_signaled,
    cts_wait_unsignaled,
    cts_wait_all_but_not_all_signaled,
    cts_wait_all_and_all_signaled,
    cts_wait_any_already_signaled,
    cts_fail_then_wait,
    cts_failure_preserves_status_code,
    cts_wait_later_signaled_beyond,
    cts_wait_any_later_signaled,
    cts_ping_pong,
    cts_wait_on_the_same_value_multiple_times,
    cts_simultaneous_multi_wait_all,
    cts_wait_then_fail,
    cts_submit_with_no_command_buffers,
    cts_submit_and_signal,
    cts_submit_with_wait,
    cts_cross_queue_wait_before_signal,
    cts_multi_queue_fan_out_different_values_before_signal,
    cts_indirect_command_buffer_binding_table_retained_until_signal,
    cts_submit_with_multiple_semaphores,
    cts_wait_all_host_and_device_semaphores,
    cts_wait_any_host_and_device_semaphores_and_device_signals,
    cts_intermediate_semaphore_between_device_batches,
    cts_two_batches_waiting_on1_former_batch_amongst2,
    cts_device_batch_signal_another_and_host,
    cts_batch_waiting_on_smaller_value_after_signaled,
    cts_batch_waiting_on_smaller_value_before_signaled,
    cts_propagate_fail_signal,
    cts_create_query_release,
    cts_signal_advances_value,
    cts_signal_non_monotonic_fails,
    cts_fail_sticky_status,
    cts_timepoint_immediate_satisfaction,
    cts_timepoint_pending_then_signal,
    cts_timepoint_cancel,
    cts_timepoint_cancel_after_fire,
    cts_multiple_timepoints,
    cts_retain_release,
    cts_timepoint_cross_thread,
    cts_destroy_with_pending_timepoints,
    cts_signal_single,
    cts_signal_multiple,
    cts_signal_non_monotonic_fails_async,
    cts_wait_single_already_satisfied,
    cts_wait_single_pending,
    cts_wait_all_mode_partial,
    cts_wait_all_mode_complete,
    cts_wait_any_mode,
    cts_wait_semaphore_failed,
    cts_wait_semaphore_already_failed,
    cts_wait_cancellation,
    cts_signal_wakes_pending_wait,
    cts_linked_wait_failure_cancels_chain,
    cts_linked_signal_failure_cancels_chain,
    cts_independent_chains,
    cts_linked_failure_cancels_mixed_chain,
);
