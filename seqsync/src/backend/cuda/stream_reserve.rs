//! Streams made ahead, for the streams asked for while a stream waits for a host store.
//!
//! While a stream waits (`cuStreamWaitValue64`) for a value nothing has written yet, the
//! driver's `cuStreamCreate` returns for a few dozen more streams, then spins until the wait is
//! released (BENCHMARKS.md §5, "Driver calls that wait for the device"): forever, when the
//! thread that would store the value is the one making the stream (a new stream per batch,
//! each waiting for its batch before the host signals it). So a backend makes streams only
//! while none of seqsync's word waits is open ([`open_waits::while_quiet`], which also keeps
//! one from being enqueued meanwhile), and then tops up a reserve of streams made ahead; a
//! stream asked for while a wait is open is one of those, or a named error.
//!
//! Who fills it: a `new_stream` with no wait open. Who takes from it: a `new_stream` with one
//! open. Its size ([`MADE_AHEAD`] by default, or the backend's choice): what a program may ask
//! for between two quiet moments; nothing grows past it.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaStream};

use super::{driver_error, open_waits};
use crate::error::{Error, Result};

/// Streams a backend keeps made ahead unless told otherwise
/// ([`super::CudaBackend::with_streams_made_ahead`]).
pub(crate) const MADE_AHEAD: usize = 256;

pub(crate) struct StreamReserve {
    made_ahead: usize,
    spare: Mutex<Vec<Arc<CudaStream>>>,
}

impl std::fmt::Debug for StreamReserve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamReserve")
            .field("made_ahead", &self.made_ahead)
            .field(
                "spare",
                &self.spare.lock().unwrap_or_else(|e| e.into_inner()).len(),
            )
            .finish()
    }
}

impl StreamReserve {
    pub(crate) fn new(made_ahead: usize) -> Self {
        StreamReserve {
            made_ahead,
            spare: Mutex::new(Vec::new()),
        }
    }

    /// A new stream of `ctx`: made now if no word wait is open (and the reserve topped up),
    /// else one made ahead.
    ///
    /// # Errors
    /// [`Error::NoStreamWhileWaitsOpen`] when a wait is open and the reserve is empty; a driver
    /// error from `cuStreamCreate`.
    pub(crate) fn take(&self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
        match open_waits::while_quiet(|| self.make(ctx)) {
            Ok(made) => made,
            Err(open) => self.take_made_ahead(open),
        }
    }

    /// With no wait open: a stream, and the reserve full again.
    fn make(&self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
        let stream = ctx
            .new_stream()
            .map_err(|e| driver_error("cuStreamCreate", e))?;
        self.top_up(ctx);
        Ok(stream)
    }

    /// With no wait open: the reserve full again (a stream the driver refuses to make ahead
    /// leaves it short; no call fails for it). Each stream made ahead has an event recorded on
    /// it now, so that whatever the driver sets up at a stream's first use is set up while no
    /// wait is open too.
    fn top_up(&self, ctx: &Arc<CudaContext>) {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() >= self.made_ahead {
            return;
        }
        let Ok(event) = ctx.new_event(None) else {
            return;
        };
        while spare.len() < self.made_ahead {
            match ctx.new_stream() {
                Ok(s) if event.record(&s).is_ok() => spare.push(s),
                _ => break,
            }
        }
    }

    #[cold]
    fn take_made_ahead(&self, open: usize) -> Result<Arc<CudaStream>> {
        self.spare
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .ok_or(Error::NoStreamWhileWaitsOpen {
                open,
                made_ahead: self.made_ahead,
            })
    }
}

impl Drop for StreamReserve {
    fn drop(&mut self) {
        let mut spare = Some(std::mem::take(
            self.spare.get_mut().unwrap_or_else(|e| e.into_inner()),
        ));
        // Destroyed while no wait is open, as they were made; else they stay (their destroy
        // could wait for the device as their making would).
        if open_waits::while_quiet(|| drop(spare.take())).is_err() {
            std::mem::forget(spare);
        }
    }
}
