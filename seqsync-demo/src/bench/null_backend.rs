//! A backend whose stream operations cost (almost) nothing, for measuring a layer's own cost:
//! a timeline's `signal_on` + `wait_on` on it against the backend's own `signal_on` + `wait_on`
//! is the timeline layer's bookkeeping alone.
//!
//! Its streams are an idle device far behind the host: a stream signal only raises the word's
//! *pending* value (one atomic `fetch_max`), a stream wait does nothing, and nothing lands until
//! [`NullBackend::catch_up`], when every word takes its pending value. So between catch-ups
//! every `wait_on` finds its value not yet reached and takes the full path, as on a GPU that
//! runs behind the host's enqueueing. Events are always complete; host work runs at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use seqsync::backend::{Backend, EventOptions};
use seqsync::internal::backend::{Interrupt, Mechanism, Semaphore, SemaphoreWaker, SyncOutcome};
use seqsync::{Error, Result};

/// Stream ids of this backend start here, far above any real backend's.
const FIRST_STREAM_ID: u64 = 1 << 62;
static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(FIRST_STREAM_ID);

/// See the [module docs](self).
#[derive(Clone, Default)]
pub struct NullBackend {
    words: Arc<Mutex<Vec<Weak<NullWord>>>>,
}

/// A stream of the [`NullBackend`]: only an id.
pub struct NullStream(u64);

struct NullWord {
    value: AtomicU64,
    pending: AtomicU64,
}

/// A semaphore word of the [`NullBackend`].
pub struct NullSemaphore(Arc<NullWord>);

impl NullBackend {
    /// Every stream signal enqueued so far lands.
    pub fn catch_up(&self) {
        let mut words = self.words.lock().unwrap_or_else(|e| e.into_inner());
        words.retain(|w| match w.upgrade() {
            Some(w) => {
                w.value
                    .fetch_max(w.pending.load(Ordering::Relaxed), Ordering::Release);
                true
            }
            None => false,
        });
    }
}

impl Semaphore for NullSemaphore {
    fn load(&self) -> Result<u64> {
        Ok(self.0.value.load(Ordering::Acquire))
    }
    fn store(&self, value: u64) -> Result<()> {
        self.0.pending.fetch_max(value, Ordering::Relaxed);
        self.0.value.fetch_max(value, Ordering::Release);
        Ok(())
    }
    fn fail(&self, last_value: u64) {
        let w = seqsync::internal::backend::failed_word(last_value);
        self.0.value.fetch_max(w, Ordering::Release);
    }
    fn failure(&self) -> Option<Error> {
        None
    }
    fn notifies(&self) -> bool {
        false
    }
    fn mechanism(&self) -> Mechanism {
        Mechanism::HostWord
    }
}

impl Backend for NullBackend {
    type Stream = NullStream;
    type Event = ();
    type Semaphore = NullSemaphore;

    fn name(&self) -> &'static str {
        "null"
    }
    fn new_stream(&self, _name: &str) -> Result<NullStream> {
        Ok(NullStream(NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed)))
    }
    fn launch_host(&self, _: &NullStream, f: Box<dyn FnOnce() + Send + 'static>) -> Result<()> {
        f();
        Ok(())
    }
    fn synchronize_stream(&self, _: &NullStream) -> Result<()> {
        self.catch_up();
        Ok(())
    }
    fn create_event(&self, _: EventOptions) -> Result<()> {
        Ok(())
    }
    fn record(&self, _: &(), _: &NullStream) -> Result<()> {
        Ok(())
    }
    fn wait(&self, _: &NullStream, _: &()) -> Result<()> {
        Ok(())
    }
    fn synchronize(&self, _: &()) -> Result<()> {
        Ok(())
    }
    fn synchronize_interruptible(&self, _: &(), _: &dyn Interrupt) -> Result<SyncOutcome> {
        Ok(SyncOutcome::Complete)
    }
    fn query(&self, _: &()) -> Result<bool> {
        Ok(true)
    }
    fn stream_id(&self, stream: &NullStream) -> u64 {
        stream.0
    }
    fn create_semaphore(&self, initial: u64, _: SemaphoreWaker) -> Result<NullSemaphore> {
        let w = Arc::new(NullWord {
            value: AtomicU64::new(initial),
            pending: AtomicU64::new(initial),
        });
        self.words
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&w));
        Ok(NullSemaphore(w))
    }
    fn signal_on(&self, _: &NullStream, sem: &NullSemaphore, value: u64) -> Result<()> {
        sem.0.pending.fetch_max(value, Ordering::Relaxed);
        Ok(())
    }
    fn wait_on(&self, _: &NullStream, _: &NullSemaphore, _: u64) -> Result<()> {
        Ok(())
    }
}
