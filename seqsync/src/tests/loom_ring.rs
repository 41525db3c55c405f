//! Loom models of the ring's synchronization: every interleaving (up to the preemption bound)
//! of a producer and its consumers is run.
//!
//! The backend here is a model too: an event is a cell holding the seq last recorded into
//! it, and loom reports a data race if a consumer's backend call on an event (a stream wait,
//! a query, a synchronize) is not ordered after the producer's record of it, or a re-record
//! not after every consumer's call.
//!
//! Events are not complete at once: a recorded event reports *pending* to its first query,
//! so every host synchronize goes through the backend's interruptible loop, querying the
//! event again (the ring's slot must stay held meanwhile). A [`Device::Hung`] backend's events
//! never complete: a synchronize then sleeps in the ring's [`Interrupt::sleep`] until a stop
//! wakes it — loom's condition variable never times out, so a lost wake-up there is a
//! deadlock that loom reports.

use loom::cell::UnsafeCell;
// The device's own state: plain std atomics, not loom's, so the model explores the ring's
// interleavings, not the model device's.
use loom::sync::{Arc, Mutex};
use loom::thread;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backend::{Backend, EventOptions, Interrupt, SyncOutcome};
use crate::{Blocking, Error, EventRingbuf, Result};

/// How the model device completes recorded events.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Device {
    /// Pending to the first query after each record, complete from the second on.
    Slow,
    /// Never complete once recorded.
    Hung,
}

#[derive(Clone)]
struct ModelBackend(Device);

const SLOW: ModelBackend = ModelBackend(Device::Slow);

struct ModelEvent {
    seq: UnsafeCell<i64>,
    /// Recorded and not yet seen complete.
    pending: AtomicBool,
}

// SAFETY: every access to `seq` goes through loom's UnsafeCell, which fails the model on any
// access pair not ordered by happens-before; that ordering is exactly what these tests check.
unsafe impl Sync for ModelEvent {}

/// A stream is the log of the seqs its waits saw.
struct ModelStream(Mutex<Vec<i64>>);

impl ModelStream {
    fn new() -> Self {
        ModelStream(Mutex::new(Vec::new()))
    }
    fn log(&self) -> Vec<i64> {
        self.0.lock().unwrap().clone()
    }
}

impl ModelBackend {
    fn read(ev: &ModelEvent) -> i64 {
        // SAFETY: loom checks this read against the producer's writes (see ModelEvent).
        ev.seq.with(|p| unsafe { *p })
    }
}

impl Backend for ModelBackend {
    type Stream = ModelStream;
    type Event = ModelEvent;

    fn name(&self) -> &'static str {
        "model"
    }
    fn new_stream(&self, _: &str) -> Result<ModelStream> {
        Ok(ModelStream::new())
    }
    fn launch_host(&self, _: &ModelStream, f: Box<dyn FnOnce() + Send + 'static>) -> Result<()> {
        f();
        Ok(())
    }
    fn synchronize_stream(&self, _: &ModelStream) -> Result<()> {
        Ok(())
    }
    fn create_event(&self, _: EventOptions) -> Result<ModelEvent> {
        Ok(ModelEvent {
            seq: UnsafeCell::new(-1),
            pending: AtomicBool::new(false),
        })
    }
    fn record(&self, ev: &ModelEvent, stream: &ModelStream) -> Result<()> {
        let next = stream.0.lock().unwrap().len() as i64;
        // SAFETY: loom checks this write against consumers' reads (see ModelEvent).
        ev.seq.with_mut(|p| unsafe { *p = next });
        ev.pending.store(true, Ordering::Relaxed);
        stream.0.lock().unwrap().push(next);
        Ok(())
    }
    fn wait(&self, stream: &ModelStream, ev: &ModelEvent) -> Result<()> {
        let seen = Self::read(ev);
        stream.0.lock().unwrap().push(seen);
        Ok(())
    }
    fn synchronize(&self, ev: &ModelEvent) -> Result<()> {
        Self::read(ev);
        Ok(())
    }
    /// The CUDA backend's loop, in small: query; while pending, spin (a slow device) or sleep
    /// on the interrupt (a hung one) until it fires.
    fn synchronize_interruptible(
        &self,
        ev: &ModelEvent,
        interrupt: &dyn Interrupt,
    ) -> Result<SyncOutcome> {
        loop {
            if self.query(ev)? {
                return Ok(SyncOutcome::Complete);
            }
            match self.0 {
                Device::Slow => {
                    if interrupt.interrupted() {
                        return Ok(SyncOutcome::Interrupted);
                    }
                    thread::yield_now();
                }
                Device::Hung => {
                    if interrupt.sleep(std::time::Duration::from_micros(20)) {
                        return Ok(SyncOutcome::Interrupted);
                    }
                }
            }
        }
    }
    fn query(&self, ev: &ModelEvent) -> Result<bool> {
        Self::read(ev);
        Ok(match self.0 {
            Device::Slow => !ev.pending.swap(false, Ordering::Relaxed),
            Device::Hung => !ev.pending.load(Ordering::Relaxed),
        })
    }

    // The ring does not use timelines: they are modelled in `loom_timeline.rs`.
    type Semaphore = crate::backend::host::HostSemaphore;
    fn stream_id(&self, _: &ModelStream) -> u64 {
        0
    }
    fn create_semaphore(
        &self,
        _: u64,
        _: crate::backend::SemaphoreWaker,
    ) -> Result<Self::Semaphore> {
        Err(Error::invalid("model", "no timelines in the ring's model"))
    }
    fn signal_on(&self, _: &ModelStream, _: &Self::Semaphore, _: u64) -> Result<()> {
        Err(Error::invalid("model", "no timelines in the ring's model"))
    }
    fn wait_on(&self, _: &ModelStream, _: &Self::Semaphore, _: u64) -> Result<()> {
        Err(Error::invalid("model", "no timelines in the ring's model"))
    }
}

/// A producer and two consumers on other threads (one stream wait, one host synchronize).
fn producer_two_consumers(max_size: usize, nseq: i64) {
    loom::model(move || {
        let ring = Arc::new(EventRingbuf::new(&SLOW, "m", 2, max_size).unwrap());
        let consumer = {
            let ring = ring.clone();
            thread::spawn(move || {
                let s = ModelStream::new();
                for seq in 0..nseq {
                    ring.wait(&s, seq, Blocking::Yes).unwrap();
                }
                s.log()
            })
        };
        let syncer = {
            let ring = ring.clone();
            thread::spawn(move || {
                for seq in 0..nseq {
                    ring.synchronize(seq, Blocking::Yes).unwrap();
                }
            })
        };
        let producer = ModelStream::new();
        for seq in 0..nseq {
            ring.record(&producer, seq, Blocking::Yes).unwrap();
        }
        // The consumer saw each seq's event as recorded for that seq, in order.
        assert_eq!(consumer.join().unwrap(), (0..nseq).collect::<Vec<_>>());
        syncer.join().unwrap();
        assert_eq!(ring.unreleased(), 0);
    });
}

#[test]
fn loom_two_consumers_ring_of_one() {
    producer_two_consumers(1, 2);
}

#[test]
fn loom_two_consumers_ring_of_two() {
    producer_two_consumers(2, 3);
}

/// A blocking record racing the release of the slot it needs.
#[test]
fn loom_blocking_record_against_release() {
    loom::model(|| {
        let ring = Arc::new(EventRingbuf::new(&SLOW, "m", 1, 1).unwrap());
        let s = ModelStream::new();
        ring.record(&s, 0, Blocking::No).unwrap();
        let releaser = {
            let ring = ring.clone();
            thread::spawn(move || {
                let c = ModelStream::new();
                ring.wait(&c, 0, Blocking::No).unwrap();
                ring.wait(&c, 1, Blocking::Yes).unwrap();
            })
        };
        ring.record(&s, 1, Blocking::Yes).unwrap();
        releaser.join().unwrap();
    });
}

/// `stop` racing threads blocked in a record and in a wait: both wake with `Stopped`.
#[test]
fn loom_stop_wakes_blocked_threads() {
    loom::model(|| {
        let ring = Arc::new(EventRingbuf::new(&SLOW, "m", 1, 1).unwrap());
        ring.record(&ModelStream::new(), 0, Blocking::No).unwrap();
        let recorder = {
            let ring = ring.clone();
            thread::spawn(move || ring.record(&ModelStream::new(), 1, Blocking::Yes))
        };
        let waiter = {
            let ring = ring.clone();
            thread::spawn(move || ring.wait(&ModelStream::new(), 1, Blocking::Yes))
        };
        ring.stop("stop");
        assert!(matches!(
            recorder.join().unwrap(),
            Err(Error::Stopped { .. })
        ));
        assert!(matches!(waiter.join().unwrap(), Err(Error::Stopped { .. })));
    });
}

/// A host synchronize on a pending event holds its slot until the event completes: the
/// producer's blocking record of the next seq in that slot waits for it (loom reports a race
/// on the event if the slot were released before the synchronize's last query).
#[test]
fn loom_pending_synchronize_against_blocking_record() {
    loom::model(|| {
        let ring = Arc::new(EventRingbuf::new(&SLOW, "m", 1, 1).unwrap());
        let s = ModelStream::new();
        ring.record(&s, 0, Blocking::No).unwrap();
        let syncer = {
            let ring = ring.clone();
            thread::spawn(move || ring.synchronize(0, Blocking::Yes))
        };
        ring.record(&s, 1, Blocking::Yes).unwrap();
        syncer.join().unwrap().unwrap();
    });
}

/// `stop` wakes a host synchronize sleeping on an event that never completes, in every
/// interleaving: the stop may land before the synchronize starts, between its query and its
/// sleep, or while it sleeps.
#[test]
fn loom_stop_wakes_synchronize_on_a_hung_event() {
    loom::model(|| {
        let hung = ModelBackend(Device::Hung);
        let ring = Arc::new(EventRingbuf::new(&hung, "m", 1, 1).unwrap());
        ring.record(&ModelStream::new(), 0, Blocking::No).unwrap();
        let syncer = {
            let ring = ring.clone();
            thread::spawn(move || ring.synchronize(0, Blocking::Yes))
        };
        ring.stop("stop");
        assert!(matches!(syncer.join().unwrap(), Err(Error::Stopped { .. })));
    });
}
