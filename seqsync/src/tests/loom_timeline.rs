//! Loom models of a timeline's host side: host signals, stream signals (the backend's waker
//! path) and failures racing with parked host waiters, `wait_any`, and a stream wait racing a
//! failure (the ledgers). A lost wake-up shows as a deadlock (loom's condition variables never
//! time out).

use std::time::Duration;

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::backend::semaphore::failed_word;
use crate::backend::SyncOutcome;
use crate::backend::{Backend, EventOptions, Interrupt, Mechanism, Semaphore, SemaphoreWaker};
use crate::timeline::{wait_any, Timeline};
use crate::{Error, Result};

struct ModelWord {
    word: AtomicU64,
    waker: SemaphoreWaker,
}

impl ModelWord {
    /// What a host stream's signal operation does: raise the word, then call the waker.
    fn stream_signal(&self, v: u64) {
        self.word.fetch_max(v, Ordering::SeqCst);
        (self.waker)();
    }
}

impl Semaphore for ModelWord {
    fn load(&self) -> Result<u64> {
        Ok(self.word.load(Ordering::SeqCst))
    }
    fn store(&self, value: u64) -> Result<()> {
        self.word.fetch_max(value, Ordering::SeqCst);
        Ok(())
    }
    fn fail(&self, last_value: u64) {
        self.word
            .fetch_max(failed_word(last_value), Ordering::SeqCst);
    }
    fn failure(&self) -> Option<Error> {
        None
    }
    fn notifies(&self) -> bool {
        true
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::HostWord
    }
}

fn not_modelled<T>() -> Result<T> {
    Err(Error::invalid(
        "model",
        "host work and events are not in the timeline model",
    ))
}

/// The models' backend: its semaphore word is a loom atomic, and its streams are only ids
/// (stream signals and waits enqueue nothing: the models are about the host side, not the
/// device). Each model iteration takes fresh stream ids, so the process-wide ledgers of
/// earlier iterations play no part.
#[derive(Clone)]
struct ModelBackend;

fn fresh_stream_id() -> u64 {
    // Far above the host backend's ids; std's atomic: a counter, not state to model.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 60);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Backend for ModelBackend {
    type Stream = u64;
    type Event = ();
    fn name(&self) -> &'static str {
        "timeline-model"
    }
    fn new_stream(&self, _: &str) -> Result<u64> {
        Ok(fresh_stream_id())
    }
    fn launch_host(&self, _: &u64, _: Box<dyn FnOnce() + Send + 'static>) -> Result<()> {
        not_modelled()
    }
    fn synchronize_stream(&self, _: &u64) -> Result<()> {
        Ok(())
    }
    fn create_event(&self, _: EventOptions) -> Result<()> {
        not_modelled()
    }
    fn record(&self, _: &(), _: &u64) -> Result<()> {
        not_modelled()
    }
    fn wait(&self, _: &u64, _: &()) -> Result<()> {
        not_modelled()
    }
    fn synchronize(&self, _: &()) -> Result<()> {
        not_modelled()
    }
    fn synchronize_interruptible(&self, _: &(), _: &dyn Interrupt) -> Result<SyncOutcome> {
        not_modelled()
    }
    fn query(&self, _: &()) -> Result<bool> {
        not_modelled()
    }
    type Semaphore = ModelWord;
    fn stream_id(&self, s: &u64) -> u64 {
        *s
    }
    fn create_semaphore(&self, initial: u64, waker: SemaphoreWaker) -> Result<ModelWord> {
        Ok(ModelWord {
            word: AtomicU64::new(initial),
            waker,
        })
    }
    fn signal_on(&self, _: &u64, _: &ModelWord, _: u64) -> Result<()> {
        Ok(())
    }
    fn wait_on(&self, _: &u64, _: &ModelWord, _: u64) -> Result<()> {
        Ok(())
    }
}

const FOREVER: Duration = Duration::MAX;

#[test]
fn loom_host_signal_vs_waiters() {
    loom::model(|| {
        let t = Arc::new(Timeline::new(&ModelBackend, "t", 0).unwrap());
        let waiter = {
            let t = t.clone();
            thread::spawn(move || t.wait(2, FOREVER))
        };
        t.signal(1).unwrap();
        t.signal(2).unwrap();
        waiter.join().unwrap().unwrap();
        assert_eq!(t.query().unwrap(), 2);
    });
}

#[test]
fn loom_stream_signal_vs_waiter() {
    loom::model(|| {
        let t = Arc::new(Timeline::new(&ModelBackend, "t", 0).unwrap());
        let stream = {
            let t = t.clone();
            thread::spawn(move || t.semaphore().stream_signal(1))
        };
        t.wait(1, FOREVER).unwrap();
        stream.join().unwrap();
    });
}

#[test]
fn loom_fail_vs_waiters() {
    loom::model(|| {
        let t = Arc::new(Timeline::new(&ModelBackend, "t", 0).unwrap());
        let waiter = {
            let t = t.clone();
            thread::spawn(move || t.wait(1, FOREVER))
        };
        t.fail(Error::Cancelled("stop".into()));
        let err = waiter.join().unwrap().unwrap_err();
        assert!(matches!(err.root_cause(), Error::Cancelled(m) if m == "stop"));
        // A signal racing with the failure never un-fails it.
        assert!(t.signal(1).is_err() && t.query().is_err());
    });
}

#[test]
fn loom_wait_any_vs_signal() {
    loom::model(|| {
        let a = Arc::new(Timeline::new(&ModelBackend, "a", 0).unwrap());
        let b = Arc::new(Timeline::new(&ModelBackend, "b", 0).unwrap());
        let signaller = {
            let b = b.clone();
            thread::spawn(move || b.semaphore().stream_signal(1))
        };
        assert_eq!(wait_any(&[(&*a, 1), (&*b, 1)], FOREVER).unwrap(), Some(1));
        signaller.join().unwrap();
    });
}

/// A stream waits on `t` for a value `t` never reaches, then signals `u`, while another thread
/// fails `t`: in every interleaving `u` fails. The failure either finds the wait in the
/// stream's ledger (and poisons the stream, failing the signal already there or refusing the
/// next), or the `wait_on` sees the failure after adding its entry. A `wait_on` that looked
/// for the failure before adding its entry would let `u` succeed.
///
/// The ledger is made before the threads start, so the model explores the race itself (the
/// registry's lock and lookup caches are loom's too: see `timeline/propagate.rs`).
#[test]
fn loom_wait_on_racing_a_failure_poisons_the_stream() {
    loom::model(|| {
        let b = ModelBackend;
        let s = b.new_stream("s").unwrap();
        let t = Arc::new(Timeline::new(&b, "t", 0).unwrap());
        let u = Arc::new(Timeline::new(&b, "u", 0).unwrap());
        // The stream's ledger exists now (a wait on a timeline nobody fails or signals).
        let idle = Timeline::new(&b, "idle", 0).unwrap();
        idle.wait_on(&s, 1).unwrap();
        let stream = {
            let (t, u) = (t.clone(), u.clone());
            thread::spawn(move || {
                t.wait_on(&s, 1).unwrap();
                u.signal_on(&s, 1).unwrap();
            })
        };
        t.fail(Error::Cancelled("upstream".into()));
        stream.join().unwrap();
        let err = u.query().unwrap_err();
        assert!(matches!(err.root_cause(), Error::Cancelled(m) if m == "upstream"));
        idle.fail(Error::Cancelled("end of the model".into()));
    });
}
