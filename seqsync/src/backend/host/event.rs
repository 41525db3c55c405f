//! A host event: a position in a host stream.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::stream::StreamShared;

/// A point in a [`super::HostStream`]: complete once every operation enqueued on that stream
/// before the record has run. Never recorded, it counts as complete (as a CUDA event does).
pub struct HostEvent {
    /// The stream and the number of operations that precede the point, as of the last record.
    pub(crate) point: Mutex<Option<(Arc<StreamShared>, u64)>>,
    live: Arc<AtomicUsize>,
}

impl std::fmt::Debug for HostEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let point = self.snapshot();
        f.debug_struct("HostEvent")
            .field("stream", &point.as_ref().map(|(s, _)| s.name.clone()))
            .field("position", &point.as_ref().map(|(_, p)| *p))
            .finish()
    }
}

impl HostEvent {
    pub(crate) fn new(live: Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::Relaxed);
        HostEvent {
            point: Mutex::new(None),
            live,
        }
    }

    /// The point as of now; a later record does not change it (CUDA's rule for waits).
    pub(crate) fn snapshot(&self) -> Option<(Arc<StreamShared>, u64)> {
        self.point.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set(&self, stream: Arc<StreamShared>, pos: u64) {
        *self.point.lock().unwrap_or_else(|e| e.into_inner()) = Some((stream, pos));
    }
}

impl Drop for HostEvent {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}
