//! 64-bit words in pinned, device-mapped host memory: the host reads them with a load, streams
//! write and wait on them with stream memory operations.
//!
//! Words are handed out from 4 KiB pages (`cuMemHostAlloc` with `DEVICEMAP | PORTABLE`), one
//! word per 64-byte line so that two timelines never share a cache line. A word given back while
//! streams may still touch it is quarantined until an event recorded on each of those streams
//! completes; only then is it handed out again. Pages are never freed (a few KiB per backend).

use std::sync::Arc;

use crate::backend::cuda::driver;
use cudarc::driver::{sys, CudaContext, CudaStream};

use crate::backend::cuda::{make_current, CudaEvent, Deferred};
use crate::error::Result;

const PAGE: usize = 4096;
const LINE: usize = 64;

/// One word: its host address and the device address of the same memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MappedWord {
    pub(crate) host: *mut u64,
    pub(crate) dev: sys::CUdeviceptr,
}

// SAFETY: a slot is the address of pinned memory owned by its pool (never freed); the pool hands
// each slot to one owner at a time, who accesses it only through atomics.
unsafe impl Send for MappedWord {}
// SAFETY: shared references only read the two addresses; the memory behind them is accessed
// through atomics (see `atomic`).
unsafe impl Sync for MappedWord {}

/// A slot given back while a user on the host still had it (see [`MappedWords::give_back`]):
/// released by that user once done, with the slots of its own to give back then (a word's
/// markers) and the streams it kept (dropped by the pool's next reclaim, on a caller's thread:
/// the last drop of a stream is a driver call, which the releasing thread may not make).
/// Released without the pool's lock, which threads hold across driver calls.
#[derive(Default)]
pub(crate) struct Hold {
    released: std::sync::atomic::AtomicBool,
    kept: std::sync::Mutex<(Vec<MappedWord>, Vec<Arc<CudaStream>>)>,
}

impl Hold {
    /// The user is done with the slot; `slots` go back to the pool with it, and `streams` are
    /// dropped there.
    pub(crate) fn release(&self, slots: Vec<MappedWord>, streams: Vec<Arc<CudaStream>>) {
        *self.kept.lock().unwrap_or_else(|e| e.into_inner()) = (slots, streams);
        self.released
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn released(&self) -> bool {
        self.released.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn take_kept(&self) -> (Vec<MappedWord>, Vec<Arc<CudaStream>>) {
        std::mem::take(&mut *self.kept.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A slot given back while streams may still touch it.
struct Quarantined {
    slot: MappedWord,
    /// Recorded at the ends of the streams that may touch it.
    events: Vec<CudaEvent>,
    /// Released by a user on the host that still had it, where given.
    hold: Option<Arc<Hold>>,
    /// Those streams, kept until the events completed: a stream's last drop while it is still
    /// held up (by a wait for a value a host signal brings later) could block in the driver.
    streams: Vec<Arc<CudaStream>>,
}

pub(crate) struct MappedWords {
    free: Vec<MappedWord>,
    /// Slots given back while streams may still touch them: each free once the events
    /// recorded on those streams completed and, where given, its hold was released.
    quarantine: Vec<Quarantined>,
    /// The backend's store of errors that cleanup could not return.
    errors: Arc<Deferred>,
}

impl MappedWords {
    pub(crate) fn new(errors: Arc<Deferred>) -> Self {
        MappedWords {
            free: Vec::new(),
            quarantine: Vec::new(),
            errors,
        }
    }

    /// A word holding `initial`.
    pub(crate) fn take(&mut self, ctx: &Arc<CudaContext>, initial: u64) -> Result<MappedWord> {
        self.reclaim();
        if self.free.is_empty() {
            self.grow(ctx)?;
        }
        let slot = self.free.pop().expect("grow added slots");
        // SAFETY: the slot is 8-byte aligned pinned memory that only its owner (now us) uses.
        unsafe { atomic(&slot) }.store(initial, std::sync::atomic::Ordering::SeqCst);
        Ok(slot)
    }

    /// An event at the current end of `stream`: once it completed, the stream is past
    /// everything enqueued on it so far (see [`give_back`](Self::give_back)'s `passed`).
    pub(crate) fn mark_end(
        &self,
        ctx: &Arc<CudaContext>,
        stream: &CudaStream,
    ) -> Result<CudaEvent> {
        record_now(ctx, &self.errors, stream)
    }

    /// Give `slot` back once the streams in `users` are past everything enqueued on them now,
    /// the events in `passed` completed (ends of streams that used it, marked before, with
    /// those streams), and `hold` (when given) was released. The streams are kept until then.
    pub(crate) fn give_back(
        &mut self,
        ctx: &Arc<CudaContext>,
        slot: MappedWord,
        users: Vec<Arc<CudaStream>>,
        passed: Vec<(CudaEvent, Arc<CudaStream>)>,
        hold: Option<Arc<Hold>>,
    ) {
        let (mut events, mut streams): (Vec<_>, Vec<_>) = passed.into_iter().unzip();
        for s in users {
            match record_now(ctx, &self.errors, &s) {
                Ok(ev) => events.push(ev),
                // Cannot tell when the stream is done with the word: never reuse it.
                Err(_) => return,
            }
            streams.push(s);
        }
        self.quarantine.push(Quarantined {
            slot,
            events,
            hold,
            streams,
        });
    }

    /// Give back `slot`, which no stream touches any more.
    pub(crate) fn give_back_idle(&mut self, slot: MappedWord) {
        self.free.push(slot);
    }

    fn reclaim(&mut self) {
        let mut i = 0;
        while i < self.quarantine.len() {
            let q = &self.quarantine[i];
            let done = q.hold.as_ref().is_none_or(|h| h.released())
                && q.events.iter().all(|e| {
                    // SAFETY: the events are live handles owned by the quarantine entry.
                    unsafe { driver::event_query(e.raw) }.code() == sys::CUresult::CUDA_SUCCESS
                });
            if done {
                let Quarantined {
                    slot,
                    hold,
                    streams,
                    ..
                } = self.quarantine.swap_remove(i);
                self.free.push(slot);
                // Past the word: their last drops no longer wait for anything.
                drop(streams);
                if let Some(h) = hold {
                    let (slots, streams) = h.take_kept();
                    self.free.extend(slots);
                    drop(streams);
                }
            } else {
                i += 1;
            }
        }
    }

    fn grow(&mut self, ctx: &Arc<CudaContext>) -> Result<()> {
        make_current(ctx)?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the context is current; `host` is a valid out-pointer; on success we own a
        // page of pinned memory, which we never free.
        unsafe { driver::mem_host_alloc(&mut host, PAGE, flags) }.check()?;
        let mut dev: sys::CUdeviceptr = 0;
        // SAFETY: `host` was returned by cuMemHostAlloc with DEVICEMAP in the current context;
        // `dev` is a valid out-pointer; flags must be 0.
        unsafe { driver::mem_host_get_device_pointer(&mut dev, host, 0) }.check()?;
        for i in (0..PAGE / LINE).rev() {
            self.free.push(MappedWord {
                // SAFETY: `i * LINE < PAGE`: the pointer stays inside the page.
                host: unsafe { (host as *mut u8).add(i * LINE) } as *mut u64,
                dev: dev + (i * LINE) as u64,
            });
        }
        Ok(())
    }
}

/// The word as an atomic.
///
/// # Safety
/// `slot` must come from a [`MappedWords`] (pinned memory that is never freed, 64-byte aligned).
pub(crate) unsafe fn atomic(slot: &MappedWord) -> &'static std::sync::atomic::AtomicU64 {
    // SAFETY: the caller guarantees the memory lives forever and is aligned; every host access
    // to it goes through this atomic, and device writes are whole aligned 64-bit stores.
    unsafe { &*(slot.host as *const std::sync::atomic::AtomicU64) }
}

/// An event recorded at the current end of `stream`.
fn record_now(
    ctx: &Arc<CudaContext>,
    deferred: &Arc<Deferred>,
    stream: &CudaStream,
) -> Result<CudaEvent> {
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    let ev = CudaEvent::create(ctx, deferred, flags)?;
    // SAFETY: both handles are live and belong to `ctx`.
    unsafe { driver::event_record(ev.raw, stream.cu_stream()) }.check()?;
    Ok(ev)
}
