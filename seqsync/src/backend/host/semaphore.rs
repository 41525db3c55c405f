//! The host backend's semaphore word: an atomic that only grows.
//!
//! A stream signal is an operation on the stream's worker that raises the word (`fetch_max`, so a
//! failed word, which is above every value, stays failed) and then calls the timeline's waker; a
//! stream wait is an operation that blocks the worker on a condition variable until the word
//! reaches the value or fails.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::backend::semaphore::{
    failed_word, Mechanism, Semaphore, SemaphoreWaker, StreamFailureHook, FAILED_BIT,
};
use crate::error::{BackendError, Error, Result};

/// A host semaphore word: an atomic that only grows. A stream signal raises it on the
/// stream's worker; a stream wait blocks the worker until it reaches the value or fails.
pub struct HostSemaphore {
    pub(crate) word: Arc<HostWord>,
    /// Is the waker called after stream writes (false on a [polling](super::HostBackend::polling)
    /// backend)?
    notifies: bool,
}

impl std::fmt::Debug for HostSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSemaphore")
            .field("word", &self.word.value.load(Ordering::Relaxed))
            .finish()
    }
}

pub(crate) struct HostWord {
    value: AtomicU64,
    /// Stream workers blocked in [`HostWord::wait_at_least`].
    blocked: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
    waker: SemaphoreWaker,
    /// Set when a stream that signals the word had failed.
    failure: Mutex<Option<Error>>,
    /// The timeline's [`StreamFailureHook`], told of such a failure before the word fails.
    on_failure: OnceLock<StreamFailureHook>,
}

impl HostSemaphore {
    pub(crate) fn new(initial: u64, waker: SemaphoreWaker, notifies: bool) -> Self {
        HostSemaphore {
            word: Arc::new(HostWord {
                value: AtomicU64::new(initial),
                blocked: AtomicUsize::new(0),
                lock: Mutex::new(()),
                cv: Condvar::new(),
                waker,
                failure: Mutex::new(None),
                on_failure: OnceLock::new(),
            }),
            notifies,
        }
    }
}

impl HostWord {
    /// Raise the word to `word` (never lowers it) and release blocked stream workers.
    pub(crate) fn raise(&self, word: u64) {
        self.value.fetch_max(word, Ordering::SeqCst);
        // SeqCst pairs with `wait_at_least`: either it sees the new value, or we see its count.
        if self.blocked.load(Ordering::SeqCst) > 0 {
            drop(self.lock.lock().unwrap_or_else(|e| e.into_inner()));
            self.cv.notify_all();
        }
    }

    /// The operation a stream signal runs on the worker.
    pub(crate) fn signal_from_stream(&self, value: u64, stream: &str, failure: Option<Arc<str>>) {
        match failure {
            None => self.raise(value),
            Some(why) => {
                let mut slot = self.failure.lock().unwrap_or_else(|e| e.into_inner());
                let cause = slot
                    .get_or_insert_with(|| {
                        Error::Backend(BackendError::new(
                            "host",
                            "stream signal",
                            format!("stream '{stream}' failed before signalling {value}: {why}"),
                        ))
                    })
                    .clone();
                drop(slot);
                let last = self.value.load(Ordering::SeqCst);
                // The timeline first: it marks the failure and poisons the streams that wait
                // on it while their waits still hold, then fails the word itself (or a
                // failure under way on another thread does, once it has spread).
                let handled = last & FAILED_BIT == 0
                    && self.on_failure.get().is_some_and(|hook| hook(cause, last));
                if !handled {
                    self.raise(failed_word(last));
                }
            }
        }
        (self.waker)();
    }

    /// The operation a stream wait runs on the worker: block until the word is `>= value` (a
    /// failed word is above every value).
    pub(crate) fn wait_at_least(&self, value: u64) {
        if self.value.load(Ordering::SeqCst) >= value {
            return;
        }
        let mut guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.blocked.fetch_add(1, Ordering::SeqCst);
        while self.value.load(Ordering::SeqCst) < value {
            guard = self.cv.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        self.blocked.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Semaphore for HostSemaphore {
    fn load(&self) -> Result<u64> {
        Ok(self.word.value.load(Ordering::SeqCst))
    }

    fn store(&self, value: u64) -> Result<()> {
        debug_assert!(value < FAILED_BIT);
        self.word.raise(value);
        Ok(())
    }

    fn fail(&self, last_value: u64) {
        self.word.raise(failed_word(last_value));
    }

    fn on_stream_failure(&self, hook: StreamFailureHook) {
        // Set once, by the timeline that made the word.
        let _ = self.word.on_failure.set(hook);
    }

    fn failure(&self) -> Option<Error> {
        self.word
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn notifies(&self) -> bool {
        self.notifies
    }

    fn mechanism(&self) -> Mechanism {
        Mechanism::HostWord
    }
}
