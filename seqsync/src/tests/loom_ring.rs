//! Loom models of the ring's synchronization: every interleaving (up to the preemption bound)
//! of a producer and its consumers is run.
//!
//! The backend here is a model too: an event is a cell holding the seq last recorded into
//! it, and loom reports a data race if a consumer's backend call on an event is not ordered
//! after the producer's record of it, or a re-record not after every consumer's call.

use loom::cell::UnsafeCell;
use loom::sync::{Arc, Mutex};
use loom::thread;

use crate::backend::{Backend, EventOptions, Interrupt, SyncOutcome};
use crate::{Blocking, Error, EventRingbuf, Result};

#[derive(Clone)]
struct ModelBackend;

struct ModelEvent(UnsafeCell<i64>);

// SAFETY: every access goes through loom's UnsafeCell, which fails the model on any access
// pair not ordered by happens-before; that ordering is exactly what these tests check.
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
        ev.0.with(|p| unsafe { *p })
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
        Ok(ModelEvent(UnsafeCell::new(-1)))
    }
    fn record(&self, ev: &ModelEvent, stream: &ModelStream) -> Result<()> {
        let next = stream.0.lock().unwrap().len() as i64;
        // SAFETY: loom checks this write against consumers' reads (see ModelEvent).
        ev.0.with_mut(|p| unsafe { *p = next });
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
    fn synchronize_interruptible(&self, ev: &ModelEvent, _: &dyn Interrupt) -> Result<SyncOutcome> {
        Self::read(ev);
        Ok(SyncOutcome::Complete)
    }
    fn query(&self, _: &ModelEvent) -> Result<bool> {
        Ok(true)
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
        let ring = Arc::new(EventRingbuf::new(&ModelBackend, "m", 2, max_size).unwrap());
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
        let ring = Arc::new(EventRingbuf::new(&ModelBackend, "m", 1, 1).unwrap());
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
        let ring = Arc::new(EventRingbuf::new(&ModelBackend, "m", 1, 1).unwrap());
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
