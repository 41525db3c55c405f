//! [`OpenWait`]: device work of the caller's that waits for a host store seqsync does not make,
//! listed with seqsync's own open waits (`open_waits`) so that frees are held back meanwhile.

use std::sync::atomic::{AtomicU64, Ordering};

use super::open_waits;

/// Work on the device that may be waiting for the host (from
/// [`CudaBackend::open_wait`](super::CudaBackend::open_wait)): while it is neither released nor
/// dropped, seqsync frees none of its buffers (they are held and freed once no wait is open).
#[derive(Debug)]
pub struct OpenWait {
    /// 0 while open, 1 once released: what the open-wait list reads. Boxed, so that its
    /// address, which the list holds, stays put until `Drop` takes it out.
    word: Box<AtomicU64>,
}

impl OpenWait {
    pub(super) fn new() -> Self {
        let word = Box::new(AtomicU64::new(0));
        open_waits::list_open(&word);
        OpenWait { word }
    }

    /// The work no longer waits for the host: frees may run again (the held ones at the next
    /// free, host store or allocation). Idempotent.
    pub fn release(&self) {
        self.word.store(1, Ordering::SeqCst);
        open_waits::settle();
    }

    /// Released already?
    pub fn is_released(&self) -> bool {
        self.word.load(Ordering::SeqCst) != 0
    }
}

impl Drop for OpenWait {
    fn drop(&mut self) {
        self.release();
        open_waits::forget(&self.word);
    }
}
