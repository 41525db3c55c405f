//! Streams made ahead, for the streams asked for while a stream waits for a host store.
//!
//! While a stream waits (`cuStreamWaitValue64`) for a value nothing has written yet, the
//! driver's `cuStreamCreate` returns for a few dozen more streams, then spins until the wait is
//! released (BENCHMARKS.md §5, "Driver calls that wait for the device"): forever, when the
//! thread that would store the value is the one making the stream (a new stream per batch,
//! each waiting for its batch before the host signals it). So a backend makes streams only
//! while none of seqsync's word waits is open ([`open_waits::while_quiet`], which also keeps
//! one from being enqueued meanwhile), and then tops up a reserve of streams made ahead; a
//! stream asked for while a wait is open is one of those, else one made once the waits have
//! closed (they may be another thread's: [`QUIET_WAIT`] at most), else a named error. The
//! backends of one context share a reserve ([`StreamReserve::of_context`]) unless given one
//! of their own.
//!
//! Who fills it: the first `new_stream` with no wait open fills it whole; each later one puts
//! back at most [`REFILL_STEP`] more. Who takes from it: a `new_stream` with one open. Its
//! size ([`MADE_AHEAD`] by default, or the backend's choice): what a program may ask for while
//! waits stay open; nothing grows past it.
//!
//! Why a step and not a refill at once: "no wait of seqsync's open" is not "the device idle".
//! A stream may wait for a signal already enqueued on the device (a wait not listed as open),
//! and past a few dozen new streams `cuStreamCreate` waits for that to drain too. A whole refill
//! made then stalled the caller until the device drained (seen on the H100: a graph replay ran
//! to completion inside a `new_stream`); a few creations per call stall about as seldom as
//! making the caller's stream alone would, and the reserve still grows back between bursts
//! (each quiet call puts back up to two beside the one it hands out). The first fill still
//! makes the whole reserve at once: once per reserve, where a backend (the first of its
//! device) starts.
//!
//! A reserve dropped while a wait is open parks its streams (destroying one could wait for the
//! device as making one does); the next quiet `new_stream` destroys them.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaStream};

use super::{driver_error, open_waits};
use crate::error::{Error, Result};

/// Streams a backend keeps made ahead unless told otherwise
/// ([`super::CudaBackend::with_streams_made_ahead`]).
pub(crate) const MADE_AHEAD: usize = 256;

/// Streams a `new_stream` with no wait open puts back into a reserve filled before (beside the
/// one it returns).
const REFILL_STEP: usize = 2;

/// How long a `new_stream` that finds a wait open and the reserve empty waits for the open
/// waits to close (they may be other threads', about to be signalled) before it refuses.
pub(crate) const QUIET_WAIT: Duration = Duration::from_secs(1);

/// The reserves shared by the backends of each context (by `CUcontext` address), alive while
/// one of those is: a backend made while another's waits are open finds streams made ahead.
static SHARED: Mutex<Vec<(usize, Weak<StreamReserve>)>> = Mutex::new(Vec::new());

/// Streams of reserves dropped while a wait was open, destroyed at the next quiet moment (who
/// parks: a reserve's drop; who destroys: [`StreamReserve::make`]). At most the streams of the
/// reserves dropped between two quiet moments.
static PARKED: Mutex<Vec<Arc<CudaStream>>> = Mutex::new(Vec::new());

pub(crate) struct StreamReserve {
    made_ahead: usize,
    spare: Mutex<Spare>,
}

struct Spare {
    streams: Vec<Arc<CudaStream>>,
    /// Filled whole once: later quiet calls put back [`REFILL_STEP`] at most.
    filled: bool,
}

impl std::fmt::Debug for StreamReserve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamReserve")
            .field("made_ahead", &self.made_ahead)
            .field(
                "spare",
                &self
                    .spare
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .streams
                    .len(),
            )
            .finish()
    }
}

impl StreamReserve {
    /// The reserve of [`MADE_AHEAD`] streams the backends of `ctx` share (made now if none of
    /// them is alive).
    pub(crate) fn of_context(ctx: &Arc<CudaContext>) -> Arc<StreamReserve> {
        let key = ctx.cu_ctx() as usize;
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        shared.retain(|(_, r)| r.strong_count() > 0);
        if let Some(r) = shared
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, r)| r.upgrade())
        {
            return r;
        }
        let r = Arc::new(StreamReserve::new(MADE_AHEAD));
        shared.push((key, Arc::downgrade(&r)));
        r
    }

    pub(crate) fn new(made_ahead: usize) -> Self {
        StreamReserve {
            made_ahead,
            spare: Mutex::new(Spare {
                streams: Vec::new(),
                filled: false,
            }),
        }
    }

    /// A new stream of `ctx`: made now if no word wait is open (and the reserve filled, or one
    /// step nearer full), else one made ahead, else made once the open waits have closed
    /// (within [`QUIET_WAIT`]).
    ///
    /// # Errors
    /// [`Error::NoStreamWhileWaitsOpen`] when waits stayed open and the reserve empty; a driver
    /// error from `cuStreamCreate`.
    pub(crate) fn take(&self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
        match open_waits::while_quiet(|| self.make(ctx)) {
            Ok(made) => made,
            Err(open) => self.take_made_ahead(ctx, open),
        }
    }

    /// With no wait open: a stream, the reserve nearer full, and the parked streams gone.
    fn make(&self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>> {
        drop(std::mem::take(
            &mut *PARKED.lock().unwrap_or_else(|e| e.into_inner()),
        ));
        let stream = ctx
            .new_stream()
            .map_err(|e| driver_error("cuStreamCreate", e))?;
        self.top_up(ctx);
        Ok(stream)
    }

    /// With no wait open: the reserve filled whole the first time, else [`REFILL_STEP`]
    /// streams nearer full (a stream the driver refuses to make ahead leaves it short; no call
    /// fails for it). Each stream made ahead has an event recorded on it now, so that whatever
    /// the driver sets up at a stream's first use is set up while no wait is open too.
    fn top_up(&self, ctx: &Arc<CudaContext>) {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        let want = if spare.filled {
            self.made_ahead.min(spare.streams.len() + REFILL_STEP)
        } else {
            self.made_ahead
        };
        spare.filled = true;
        if spare.streams.len() >= want {
            return;
        }
        let Ok(event) = ctx.new_event(None) else {
            return;
        };
        while spare.streams.len() < want {
            match ctx.new_stream() {
                Ok(s) if event.record(&s).is_ok() => spare.streams.push(s),
                _ => break,
            }
        }
    }

    /// With a wait open: a stream made ahead; with none left, one made as soon as no wait is
    /// open (polled every millisecond, for [`QUIET_WAIT`] at most: the waits may be the
    /// caller's own, signalled only after it has its stream).
    #[cold]
    fn take_made_ahead(&self, ctx: &Arc<CudaContext>, open: usize) -> Result<Arc<CudaStream>> {
        let pop = || {
            self.spare
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .streams
                .pop()
        };
        let deadline = Instant::now() + QUIET_WAIT;
        let mut open = open;
        loop {
            if let Some(stream) = pop() {
                return Ok(stream);
            }
            if Instant::now() >= deadline {
                return Err(Error::NoStreamWhileWaitsOpen {
                    open,
                    made_ahead: self.made_ahead,
                });
            }
            std::thread::sleep(Duration::from_millis(1));
            match open_waits::while_quiet(|| self.make(ctx)) {
                Ok(made) => return made,
                Err(n) => open = n,
            }
        }
    }
}

impl Drop for StreamReserve {
    fn drop(&mut self) {
        let mut spare = Some(std::mem::take(
            &mut self
                .spare
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .streams,
        ));
        // Destroyed while no wait is open, as they were made; else parked until no wait is
        // (their destroy could wait for the device as their making would).
        if open_waits::while_quiet(|| drop(spare.take())).is_err() {
            if let Some(streams) = spare {
                PARKED
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(streams);
            }
        }
    }
}
