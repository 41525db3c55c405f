//! Mechanism (b): stream memory operations on a word in pinned, device-mapped host memory.
//!
//! - `signal_on(s, v)`: `cuStreamWriteValue64(s, word, v)` (with its default memory barrier:
//!   the write lands after everything enqueued before it on `s`).
//! - `wait_on(s, v)`: `cuStreamWaitValue64(s, word, v, GEQ)`. `GEQ` is the cyclic
//!   `(int64)(word - v) >= 0`, which holds for `word >= v` and for a failed word `2^63 | c` with
//!   `c < v`: a failure releases every wait on values the timeline never reached.
//! - host `query`: a load of the word (no driver call).
//!
//! Writes are plain stores, so the word could go back when two writes land out of order. Two
//! rules keep it monotonic: a signal enqueued on a stream while another stream still has a
//! lower signal of the same timeline pending first waits (on the device) for that one, so
//! stream writes land in value order; and a host store (signal or failure) is written again on
//! every stream whose lower write is still pending, right after it, so a late lower write is
//! overwritten at once (the timeline layer never reports the brief dip: it keeps the highest
//! value it has seen).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::slots::{self, Pool, Slot};
use crate::backend::cuda::context::with_context;
use crate::backend::cuda::open_waits;
use crate::backend::cuda::{driver_error, make_current};
use crate::backend::semaphore::FAILED_BIT;
use crate::error::{Error, Result};

/// How often (at most) a host wait asks the driver whether a stream that should write the word
/// failed.
const HEALTH_EVERY_NS: u64 = 1_000_000;

pub(crate) struct MemOpsWord {
    slot: Slot,
    ctx: Arc<CudaContext>,
    pool: Arc<Mutex<Pool>>,
    /// Per stream: the highest value it was asked to write.
    writers: Mutex<Vec<(Arc<CudaStream>, u64)>>,
    /// Streams that waited on the word (for the slot's quarantine on drop).
    waiters: Mutex<Vec<Arc<CudaStream>>>,
    failure: Mutex<Option<Error>>,
    born: Instant,
    last_health_ns: AtomicU64,
}

fn check(op: &'static str, r: sys::CUresult) -> Result<()> {
    r.result().map_err(|e| driver_error(op, e))
}

impl MemOpsWord {
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        pool: &Arc<Mutex<Pool>>,
        initial: u64,
    ) -> Result<Self> {
        let slot = pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(ctx, initial)?;
        Ok(MemOpsWord {
            slot,
            ctx: ctx.clone(),
            pool: pool.clone(),
            writers: Mutex::new(Vec::new()),
            waiters: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
            born: Instant::now(),
            last_health_ns: AtomicU64::new(0),
        })
    }

    /// The word's memory. The pool never frees it, but gives the slot to another word once
    /// this one is dropped: hold the reference no longer than the word.
    pub(crate) fn at(&self) -> &'static AtomicU64 {
        // SAFETY: the slot comes from the pool and is owned by this word until drop.
        unsafe { slots::atomic(&self.slot) }
    }

    pub(crate) fn load(&self) -> u64 {
        self.at().load(Ordering::SeqCst)
    }

    fn write_on(&self, stream: &CudaStream, value: u64) -> Result<()> {
        // SAFETY: `stream` is a live stream of this word's context (a handle that names no
        // context was bound by the caller; with_context binds and retries should the driver
        // find no usable context) and `slot.dev` the device address of live pinned memory;
        // flags 0 = with memory barrier.
        with_context(&self.ctx, "cuStreamWriteValue64", || unsafe {
            sys::cuStreamWriteValue64_v2(stream.cu_stream(), self.slot.dev, value, 0)
        })
    }

    fn wait_geq(&self, stream: &CudaStream, value: u64) -> Result<()> {
        let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: as in `write_on`.
        with_context(&self.ctx, "cuStreamWaitValue64", || unsafe {
            sys::cuStreamWaitValue64_v2(stream.cu_stream(), self.slot.dev, value, geq)
        })
    }

    /// Enqueue a write of `value` on `stream` (context bound by the caller).
    pub(crate) fn signal_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        let now = self.load();
        let mut writers = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        let landed = |v: u64| now & FAILED_BIT == 0 && v <= now;
        // The highest lower write still pending on another stream: land after it.
        let before = writers
            .iter()
            .filter(|(s, v)| !Arc::ptr_eq(s, stream) && !landed(*v))
            .map(|(_, v)| *v)
            .max();
        if let Some(v) = before {
            self.wait_geq(stream, v)?;
        }
        self.write_on(stream, value)?;
        writers.retain(|(s, v)| !Arc::ptr_eq(s, stream) && !landed(*v));
        writers.push((stream.clone(), value));
        Ok(())
    }

    /// Enqueue a wait for `value` on `stream` (context bound by the caller).
    pub(crate) fn wait_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        open_waits::enqueue_wait(self.at(), value, || self.wait_geq(stream, value))?;
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if !waiters.iter().any(|s| Arc::ptr_eq(s, stream)) {
            waiters.push(stream.clone());
        }
        Ok(())
    }

    /// Host store of `word` (a value or a failed word), written again after every lower write
    /// still pending on a stream.
    pub(crate) fn store(&self, word: u64) -> Result<()> {
        let before = self.at().swap(word, Ordering::SeqCst);
        let mut writers = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        let mut first_err = None;
        let mut bound = false;
        for (s, v) in writers.iter_mut() {
            let pending = before & FAILED_BIT != 0 || *v > before;
            if pending && *v < word {
                if !bound {
                    make_current(&self.ctx)?;
                    bound = true;
                }
                match self.write_on(s, word) {
                    Ok(()) => *v = word,
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        drop(writers);
        open_waits::settle();
        first_err.map_or(Ok(()), Err)
    }

    /// Keep `e` (a driver error about this timeline found elsewhere) as its failure.
    pub(crate) fn note_failure(&self, e: &Error) {
        super::event_pool::remember(&self.failure, e);
    }

    pub(crate) fn failure(&self) -> Option<Error> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// At most every millisecond: ask the driver whether a stream that should still write the
    /// word failed (a faulted kernel makes the context's streams fail; the write never comes).
    pub(crate) fn health(&self) -> Result<()> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let now_ns = self.born.elapsed().as_nanos() as u64;
        let last = self.last_health_ns.load(Ordering::Relaxed);
        if now_ns.saturating_sub(last) < HEALTH_EVERY_NS
            || self
                .last_health_ns
                .compare_exchange(last, now_ns, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return Ok(());
        }
        let writers: Vec<_> = self
            .writers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(s, _)| s.clone())
            .collect();
        for s in writers {
            // SAFETY: a live stream handle; cuStreamQuery only reads its state.
            match unsafe { sys::cuStreamQuery(s.cu_stream()) } {
                sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_NOT_READY => {}
                other => {
                    let e = check("cuStreamQuery", other).expect_err("not a success code");
                    *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

impl Drop for MemOpsWord {
    fn drop(&mut self) {
        open_waits::forget(self.at());
        let mut users: Vec<Arc<CudaStream>> =
            std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
        for (s, _) in self
            .writers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            if !users.iter().any(|u| Arc::ptr_eq(u, &s)) {
                users.push(s);
            }
        }
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .give_back(&self.ctx, self.slot, &users);
    }
}
