//! The ring's limits and the messages users debug from: a seq whose record is in flight, seqs
//! across the 2^42 wrap of the slot tags and up to `i64::MAX - 1`, one `MAX_SIZE` shared with
//! the pipeline layer, and `synchronize_with_producer` reporting only what its docs list.

use std::sync::mpsc;
use std::sync::Mutex;

use seqsync::backend::host::HostStream;
use seqsync::backend::{Backend, EventOptions};
use seqsync::internal::backend::host::{HostEvent, HostSemaphore};
use seqsync::internal::backend::{Interrupt, SemaphoreWaker, SyncOutcome};
use seqsync::pipeline::{derive, PipelineSpec};
use seqsync::ring::MAX_SIZE;
use seqsync::{Blocking, Error, EventRingbuf, HostBackend, Result};

/// Where a held `record` says it entered, and waits for its go.
type Gate = std::sync::Arc<Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>>;

/// The host backend, with a `record` that can be held in the middle: it says it entered and
/// waits for a go.
#[derive(Clone)]
struct Gated {
    host: HostBackend,
    gate: Gate,
}

impl Backend for Gated {
    type Stream = HostStream;
    type Event = HostEvent;
    fn name(&self) -> &'static str {
        "gated"
    }
    fn new_stream(&self, name: &str) -> Result<HostStream> {
        Backend::new_stream(&self.host, name)
    }
    fn launch_host(&self, s: &HostStream, f: Box<dyn FnOnce() + Send + 'static>) -> Result<()> {
        self.host.launch_host(s, f)
    }
    fn synchronize_stream(&self, s: &HostStream) -> Result<()> {
        self.host.synchronize_stream(s)
    }
    fn create_event(&self, o: EventOptions) -> Result<HostEvent> {
        self.host.create_event(o)
    }
    fn record(&self, e: &HostEvent, s: &HostStream) -> Result<()> {
        if let Some((entered, go)) = self.gate.lock().unwrap().take() {
            entered.send(()).unwrap();
            go.recv().unwrap();
        }
        self.host.record(e, s)
    }
    fn wait(&self, s: &HostStream, e: &HostEvent) -> Result<()> {
        self.host.wait(s, e)
    }
    fn synchronize(&self, e: &HostEvent) -> Result<()> {
        self.host.synchronize(e)
    }
    fn synchronize_interruptible(&self, e: &HostEvent, i: &dyn Interrupt) -> Result<SyncOutcome> {
        self.host.synchronize_interruptible(e, i)
    }
    fn query(&self, e: &HostEvent) -> Result<bool> {
        self.host.query(e)
    }
    type Semaphore = HostSemaphore;
    fn stream_id(&self, s: &HostStream) -> u64 {
        self.host.stream_id(s)
    }
    fn create_semaphore(&self, initial: u64, waker: SemaphoreWaker) -> Result<HostSemaphore> {
        self.host.create_semaphore(initial, waker)
    }
    fn signal_on(&self, s: &HostStream, m: &HostSemaphore, v: u64) -> Result<()> {
        self.host.signal_on(s, m, v)
    }
    fn wait_on(&self, s: &HostStream, m: &HostSemaphore, v: u64) -> Result<()> {
        self.host.wait_on(s, m, v)
    }
}

#[test]
fn not_yet_produced_while_the_record_is_in_flight_says_so() {
    let host = HostBackend::new();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let b = Gated {
        host: host.clone(),
        gate: std::sync::Arc::new(Mutex::new(Some((entered_tx, go_rx)))),
    };
    let stream = host.new_stream("p").unwrap();
    let ring = EventRingbuf::new(&b, "f", 1, 2).unwrap();
    std::thread::scope(|scope| {
        let producer = scope.spawn(|| ring.record(&stream, 0, Blocking::No));
        entered_rx.recv().unwrap(); // seq 0's record is in flight
        let e = ring.wait(&stream, 0, Blocking::No).unwrap_err();
        go_tx.send(()).unwrap();
        let _ = producer.join().unwrap();
        assert!(
            matches!(
                e,
                Error::NotYetProduced {
                    seq: 0,
                    next: 1,
                    ..
                }
            ),
            "{e}"
        );
        let msg = e.to_string();
        assert!(msg.contains("record is in flight"), "{msg}");
        assert!(!msg.contains("next seq to record is 1"), "{msg}");
    });
    // Before any record: the next seq to record is named.
    let ring = EventRingbuf::new(&host, "g", 1, 2).unwrap();
    let e = ring.wait(&stream, 3, Blocking::No).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ring 'g': seq 3 not yet produced (next seq to record is 0) and blocking is off"
    );
}

/// Record, wait and synchronize `rounds` seqs from `first` on a fresh ring.
fn run_across(first: i64, max_size: usize, rounds: i64) {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let ring = EventRingbuf::starting_at(&host, "w", 2, max_size, first).unwrap();
    for seq in first..first + rounds {
        ring.record(&s, seq, Blocking::No).unwrap();
        ring.wait(&s, seq, Blocking::No).unwrap();
        ring.synchronize(seq, Blocking::No).unwrap();
    }
    assert_eq!(ring.next_seq(), first + rounds);
    assert_eq!(ring.unreleased(), 0);
}

#[test]
fn seqs_cross_the_2_pow_42_tag_wrap() {
    for max_size in [1, 2, 3, 4] {
        // Into the range where tags may wrap (2^40), then across the wrap itself.
        run_across((1 << 40) - 3, max_size, 8);
        run_across((1 << 42) - 5, max_size, 12);
        run_across((1 << 43) - 3, max_size, 7);
    }
}

#[test]
fn seqs_run_to_i64_max_minus_one() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let ring = EventRingbuf::starting_at(&host, "end", 1, 3, i64::MAX - 4).unwrap();
    for seq in i64::MAX - 4..i64::MAX {
        ring.record(&s, seq, Blocking::No).unwrap();
        ring.wait(&s, seq, Blocking::No).unwrap();
    }
    let e = ring.record(&s, i64::MAX, Blocking::No).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { message, .. } if message.contains("i64::MAX")),
        "{e}"
    );
    // Past 2^62 the ring is as good as at 0.
    run_across(1 << 62, 4, 9);
}

/// Each classification across the wrap, one ring per case (an error stops the ring).
#[test]
fn stale_not_yet_and_over_consumed_across_the_wrap() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let first = (1i64 << 42) - 2;
    let fresh = || EventRingbuf::starting_at(&host, "c", 1, 2, first).unwrap();
    let fill = |r: &EventRingbuf<HostBackend>, upto: i64| {
        for seq in first..upto {
            r.record(&s, seq, Blocking::No).unwrap();
            r.wait(&s, seq, Blocking::No).unwrap();
        }
    };
    // seq first+1 recycled by first+3 (max_size 2) across the wrap: Stale naming the holder.
    let r = fresh();
    fill(&r, first + 4);
    match r.wait(&s, first + 1, Blocking::No) {
        Err(Error::Stale { seq, current, .. }) => {
            assert_eq!((seq, current), (first + 1, first + 3))
        }
        e => panic!("{e:?}"),
    }
    // A seq one tag-wrap in the past of a held one is stale, not that one.
    let r = fresh();
    fill(&r, first + 4);
    let e = r.wait(&s, first + 3 - (1 << 42), Blocking::No).unwrap_err();
    assert!(matches!(e, Error::Stale { .. }), "{e}");
    // One tag-wrap (2^42) ahead of a held seq: not yet produced, not that seq.
    let r = fresh();
    fill(&r, first + 3);
    let e = r.wait(&s, first + 2 + (1 << 42), Blocking::No).unwrap_err();
    assert!(matches!(e, Error::NotYetProduced { .. }), "{e}");
    // Consumed once already (nconsumers 1): over-consumed, not mistaken for a later seq.
    let r = fresh();
    fill(&r, first + 3);
    let e = r.wait(&s, first + 2, Blocking::No).unwrap_err();
    assert!(matches!(e, Error::OverConsumed { .. }), "{e}");
    // The seqs just below first_seq count as consumed.
    let r = fresh();
    let e = r.wait(&s, first - 1, Blocking::No).unwrap_err();
    assert!(matches!(e, Error::OverConsumed { .. }), "{e}");
    // A blocking wait across the wrap wakes when its seq is recorded.
    let r = fresh();
    fill(&r, first + 2);
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| r.wait(&s, first + 2, Blocking::Yes));
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.record(&s, first + 2, Blocking::No).unwrap();
        waiter.join().unwrap().unwrap();
    });
}

/// A ring that started at 0: seqs one tag-wrap ahead of recorded ones are not produced.
#[test]
fn far_future_seqs_are_not_produced_on_a_young_ring() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    for far in [(1i64 << 40) + 1, 1 << 42, (1 << 42) + 1] {
        let ring = EventRingbuf::new(&host, "y", 1, 2).unwrap();
        ring.record(&s, 0, Blocking::No).unwrap();
        ring.record(&s, 1, Blocking::No).unwrap();
        let e = ring.wait(&s, far, Blocking::No).unwrap_err();
        assert!(matches!(e, Error::NotYetProduced { .. }), "{far}: {e}");
    }
}

#[test]
fn starting_at_rejects_a_negative_first_seq() {
    let host = HostBackend::new();
    let e = EventRingbuf::starting_at(&host, "n", 1, 2, -1).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

/// One limit: the ring's MAX_SIZE is what the pipeline layer accepts, requested or derived.
#[test]
fn max_size_limit_is_the_same_for_check_and_the_ring() {
    let host = HostBackend::new();
    let e = EventRingbuf::new(&host, "big", 0, MAX_SIZE + 1).unwrap_err();
    assert!(e.to_string().contains("exceeds 2^20"), "{e}");
    // Requested through an override.
    let mut spec = two_threads(3);
    let e = spec.set("w.max_size", MAX_SIZE as u64 + 1).unwrap_err();
    assert!(e.to_string().contains("2^20"), "{e}");
    spec.set("w.max_size", MAX_SIZE as u64).unwrap();
    assert_eq!(derive(&spec).unwrap().rings()[0].max_size, MAX_SIZE as u64);
    // Derived from a slot count: the plan is refused, not a ring that cannot be built.
    let e = derive(&two_threads(MAX_SIZE as u64 + 1)).unwrap_err();
    assert!(e.to_string().contains("2^20"), "{e}");
}

/// Thread A writes `b` (slots slots) in stage w; thread B reads it in stage r.
fn two_threads(slots: u64) -> PipelineSpec {
    let text = format!(
        r#"
[buffers]
b = {slots}
[[thread]]
name = "A"
[[thread.stage]]
name = "w"
host = true
writes = ["b"]
[[thread]]
name = "B"
[[thread.stage]]
name = "r"
host = true
reads = ["b"]
"#
    );
    seqsync::pipeline::PipelineSpec::from_toml(&text).unwrap()
}

/// `synchronize_with_producer` fails only with `Stopped`, even for seqs far past anything
/// recorded (which used to be `NotYetProduced` past the old tag limit).
#[test]
fn synchronize_with_producer_reports_only_stopped() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    for seq in [5, 1 << 42, i64::MAX - 1] {
        let ring = EventRingbuf::new(&host, "p", 1, 2).unwrap();
        ring.record(&s, 0, Blocking::No).unwrap();
        ring.synchronize_with_producer(0).unwrap();
        std::thread::scope(|scope| {
            let h = scope.spawn(|| ring.synchronize_with_producer(seq));
            std::thread::sleep(std::time::Duration::from_millis(10));
            ring.stop("done");
            let e = h.join().unwrap().unwrap_err();
            assert!(matches!(e, Error::Stopped { .. }), "seq {seq}: {e}");
        });
    }
}

/// A ring without consumers (a counter) refuses seq i64::MAX like any ring.
#[allow(unused_imports)]
mod counter_at_i64_max {
    use seqsync::{Blocking, Error, EventRingbuf, HostBackend};

    #[test]
    fn a_counter_ring_refuses_seq_i64_max_like_any_ring() {
        let host = HostBackend::new();
        let s = host.new_stream("s").unwrap();
        let ring = EventRingbuf::starting_at(&host, "counter", 0, 1, i64::MAX - 1).unwrap();
        ring.record(&s, i64::MAX - 1, Blocking::No).unwrap();
        assert_eq!(ring.next_seq(), i64::MAX);
        // Must be the documented InvalidArgument, not a panic / wrap to i64::MIN.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ring.record(&s, i64::MAX, Blocking::No)
        }));
        let r = r.expect("record(i64::MAX) panicked on a nconsumers == 0 ring");
        assert!(
            matches!(&r, Err(Error::InvalidArgument { message, .. }) if message.contains("i64::MAX")),
            "{r:?}"
        );
        assert_eq!(ring.next_seq(), i64::MAX, "next wrapped");
        assert!(ring.is_stopped());
    }
}
