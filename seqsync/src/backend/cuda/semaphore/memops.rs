//! Mechanism (b): stream memory operations on a word in pinned, device-mapped host memory.
//!
//! - `signal_on(s, v)`: `cuStreamWriteValue64(s, word, v)` (with its default memory barrier:
//!   the write lands after everything enqueued before it on `s`).
//! - `wait_on(s, v)`: `cuStreamWaitValue64(s, word, v, GEQ)`. `GEQ` is the cyclic
//!   `(int64)(word - v) >= 0`, which holds for `word >= v` and for a failed word `2^63 | c` with
//!   `c < v`: a failure releases every wait on values the timeline never reached.
//! - host `query`: a load of the word (no driver call).
//!
//! Writes are plain stores, so a lower value can land after a higher one (two streams' writes,
//! or a stream's write and a host store): the word *dips*. No stream waits for another's write
//! to prevent that (a cross-stream wait deadlocks a legal program); instead, once a word has
//! more than one writer, its writes are watched and the word is repaired on the host
//! (`write_order`, `repair`). A dip never releases a wait early, and the timeline layer never
//! reports one (it keeps the highest value it has seen).
//!
//! A failure stores `2^63` on the device, which the cyclic `GEQ` reads as reached for every
//! value `1..2^63`: the failed word `2^63 | c` would release only the values above `c`, and a
//! wait for a value at or below `c` that its stream got to after the failure would wait
//! forever. The host keeps `2^63 | c` apart and [`MemOpsWord::load`] gives it.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::mapped::{self, Hold, MappedWord, MappedWords};
use super::repair::{self, Repair};
use super::write_order::{Plan, Top, Watches};
use crate::backend::cuda::driver::{self, with_context};
use crate::backend::cuda::open_waits;
use crate::backend::cuda::{make_current, CudaEvent};
use crate::backend::semaphore::{failed_word, FAILED_BIT};
use crate::error::{Error, Result};

/// Streams listed as waiters of a word before they are traded for events at their ends (see
/// [`MemOpsWord::let_waiters_go`]).
const WAITERS_KEPT: usize = 64;

/// How often (at most) a host wait asks the driver whether a stream that should write the word
/// failed.
const HEALTH_EVERY_NS: u64 = 1_000_000;

pub(crate) struct MemOpsWord {
    slot: MappedWord,
    ctx: Arc<CudaContext>,
    pool: Arc<Mutex<MappedWords>>,
    /// The writes of the word, shared with the repair thread.
    writes: Arc<Writes>,
    /// `2^63 | c` once the host failed the word (the device word holds `2^63`), else 0.
    failed: AtomicU64,
    /// The highest value whose write is enqueued or stored (`u64::MAX` once failed): a wait
    /// at or below it is released by a write that is on its way, not by a host store to come.
    enqueued: AtomicU64,
    /// Streams that waited on the word (for the slot's quarantine on drop), and the last one
    /// added (a stream that waits again needs no lock).
    waiters: Mutex<Vec<Arc<CudaStream>>>,
    last_waiter: AtomicPtr<CudaStream>,
    /// Ends of streams let go from `waiters` (see [`MemOpsWord::add_waiter`]), with the
    /// streams, until they complete: the slot's quarantine waits for those not complete at the
    /// drop. The stream stays alive until then: its last drop while a wait on it is still
    /// open could block in the driver, behind the host signal that would release it.
    passed: Mutex<Vec<(CudaEvent, Arc<CudaStream>)>>,
    failure: Mutex<Option<Error>>,
    born: Instant,
    last_health_ns: AtomicU64,
}

/// The writes of a word. Two locks: `order`, held across the driver calls of a signal or a
/// store (which it serializes), and `watch`, held for a few loads and stores only, the one
/// lock the repair thread takes (so that no driver call, which may wait for the device, can
/// hold up a repair the device waits for).
struct Writes {
    at: &'static AtomicU64,
    order: Mutex<Top<Arc<CudaStream>>>,
    watch: Mutex<Watch>,
    /// Writes are watched: set by a signal or store (under `order`), cleared by the repair
    /// thread; a signal reads it without taking `watch`.
    watching: AtomicBool,
}

struct Watch {
    watches: Watches<Arc<CudaStream>, MappedWord>,
    /// Markers whose write landed, for the word's next watched writes (given back to the pool
    /// with the word).
    spare: Vec<MappedWord>,
    /// Handed to the repair thread, which has not let it go yet.
    queued: bool,
    /// The word is gone (its slot may serve another word): nothing may touch it any more,
    /// unless `orphan` is set.
    gone: bool,
    /// The word went while writes of it were still watched: the repair thread (which then
    /// holds it) goes on repairing it until the last one landed, then gives back its markers
    /// and lets its slot serve another word (which its quarantine waits for).
    orphan: Option<Orphan>,
    /// Streams of watched writes that landed, one entry a stream, dropped on a caller's
    /// thread (the word's next watched write, its drop, or the pool's reclaim after an
    /// orphan): a stream's last drop is a driver call, which the repair thread never makes.
    retired: Vec<Arc<CudaStream>>,
}

/// What a word gone with watched writes gives back once they landed (see [`Watch::orphan`]).
struct Orphan {
    /// Released (with the word's markers and retired streams) once the repair thread is done
    /// with the slot.
    hold: Arc<Hold>,
    /// The context of the slot's page: while the thread looks at the word, its memory stays
    /// even if every other handle of the context went (its last release frees the page).
    ctx: Arc<CudaContext>,
    /// When the word went: a write still pending [`ORPHAN_PATIENT`] later may wait for long
    /// (behind a wait for a host signal, or on a faulted context), so the thread looks at it
    /// only every [`ORPHAN_SLOW_POLL`] from then on.
    since: Instant,
}

/// How long the repair thread looks after a gone word's last watched writes at its usual pace.
const ORPHAN_PATIENT: Duration = Duration::from_secs(1);

/// How often it looks after that.
const ORPHAN_SLOW_POLL: Duration = Duration::from_millis(10);

impl Writes {
    fn order(&self) -> MutexGuard<'_, Top<Arc<CudaStream>>> {
        self.order.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn watch(&self) -> MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watch `value`'s write on `stream`, followed by `marker`, and hand the word to the repair
    /// thread unless it has it.
    fn add(self: &Arc<Self>, stream: Arc<CudaStream>, value: u64, marker: MappedWord) {
        let mut w = self.watch();
        w.watches.watch(stream, value, marker);
        self.watching.store(true, Ordering::SeqCst);
        if !w.queued {
            w.queued = true;
            let me: Arc<dyn Repair> = self.clone();
            repair::watch(Arc::downgrade(&me));
        }
        let retired = std::mem::take(&mut w.retired);
        drop(w);
        // Here, on the caller's thread, outside the lock the repair thread takes.
        drop(retired);
    }
}

/// `true` once the marker's write (of 1) landed.
fn marker_landed(m: &MappedWord) -> bool {
    // SAFETY: markers are slots of the word's pool, owned by the watched write until it is done.
    unsafe { mapped::atomic(m) }.load(Ordering::SeqCst) != 0
}

impl Repair for Writes {
    fn repair(&self) -> Option<Duration> {
        let mut w = self.watch();
        if w.gone && w.orphan.is_none() {
            w.queued = false;
            return None;
        }
        let Watch {
            watches,
            spare,
            retired,
            ..
        } = &mut *w;
        let (target, more) = watches.repair(marker_landed, |x| {
            spare.push(x.marker);
            if !retired.iter().any(|s| Arc::ptr_eq(s, &x.stream)) {
                retired.push(x.stream);
            }
        });
        // Every value in `target` was reached; a higher one the word holds stays.
        self.at.fetch_max(target, Ordering::SeqCst);
        if more {
            return Some(match &w.orphan {
                Some(o) if o.since.elapsed() > ORPHAN_PATIENT => ORPHAN_SLOW_POLL,
                _ => repair::POLL,
            });
        }
        w.queued = false;
        self.watching.store(false, Ordering::SeqCst);
        if let Some(o) = w.orphan.take() {
            // The word went before its last watched write landed; that one is repaired now.
            // Its markers landed (no stream writes them any more); they and its slot may
            // serve other words once its quarantine's streams are past it. This thread
            // touches none of them from here on, so the context may go too; where this would
            // be its last handle, it stays (its release is a driver call).
            let (slots, streams) = (std::mem::take(&mut w.spare), std::mem::take(&mut w.retired));
            drop(w);
            let Orphan { hold, ctx, .. } = o;
            if Arc::strong_count(&hold) > 1 {
                hold.release(slots, streams);
            } else {
                // The pool is gone (nothing will reclaim them): the streams stay, as their
                // last drop is a driver call.
                std::mem::forget(streams);
            }
            drop(hold);
            if Arc::strong_count(&ctx) == 1 {
                std::mem::forget(ctx);
            }
        }
        None
    }
}

impl MemOpsWord {
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        pool: &Arc<Mutex<MappedWords>>,
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
            writes: Arc::new(Writes {
                // SAFETY: the slot comes from the pool and is owned by this word until drop.
                at: unsafe { mapped::atomic(&slot) },
                order: Mutex::new(Top::new()),
                watch: Mutex::new(Watch {
                    watches: Watches::new(initial),
                    spare: Vec::new(),
                    queued: false,
                    gone: false,
                    orphan: None,
                    retired: Vec::new(),
                }),
                watching: AtomicBool::new(false),
            }),
            failed: AtomicU64::new(0),
            enqueued: AtomicU64::new(initial),
            waiters: Mutex::new(Vec::new()),
            last_waiter: AtomicPtr::new(std::ptr::null_mut()),
            passed: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
            born: Instant::now(),
            last_health_ns: AtomicU64::new(0),
        })
    }

    /// The word's memory. The pool never frees it, but gives the slot to another word once
    /// this one is dropped: hold the reference no longer than the word.
    pub(crate) fn at(&self) -> &'static AtomicU64 {
        self.writes.at
    }

    /// The word, or `2^63 | c` once failed.
    pub(crate) fn load(&self) -> u64 {
        let word = self.at().load(Ordering::SeqCst);
        if word & FAILED_BIT != 0 {
            // `failed` is set before the device word takes the bit.
            return self.failed.load(Ordering::SeqCst).max(word);
        }
        word
    }

    fn write_on(&self, stream: &CudaStream, at: sys::CUdeviceptr, value: u64) -> Result<()> {
        // SAFETY: `stream` is a live stream of this word's context (a handle that names no
        // context was bound by the caller; with_context binds and retries should the driver
        // find no usable context) and `at` the device address of a slot of the word's pool
        // (live pinned memory); flags 0 = with memory barrier (the write lands after
        // everything enqueued before it).
        with_context(&self.ctx, || unsafe {
            driver::stream_write_value64(stream.cu_stream(), at, value, 0)
        })
    }

    fn wait_geq(&self, stream: &CudaStream, value: u64) -> Result<()> {
        let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
        // SAFETY: as in `write_on`.
        with_context(&self.ctx, || unsafe {
            driver::stream_wait_value64(stream.cu_stream(), self.slot.dev, value, geq)
        })
    }

    /// Enqueue a write of `value` on `stream` (context bound by the caller).
    pub(crate) fn signal_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        let mut o = self.writes.order();
        let now = self.at().load(Ordering::SeqCst);
        if now & FAILED_BIT != 0 {
            // Failed: every wait is released, and a write would only undo that.
            return Ok(());
        }
        let watching = self.writes.watching.load(Ordering::SeqCst);
        match o.plan(stream, now, watching, Arc::ptr_eq) {
            Plan::Plain => {
                self.write_on(stream, self.slot.dev, value)?;
                o.wrote(stream.clone(), value);
            }
            Plan::Watch(top) => self.watched_write(&mut o, top, stream, value)?,
        }
        // Under the lock, which every writer of `enqueued` holds: a store, not an RMW.
        self.enqueued.store(value, Ordering::SeqCst);
        Ok(())
    }

    /// A write that may land out of order: followed by a marker, and so is the top write of
    /// another stream (`top`) that may still be pending.
    #[cold]
    #[inline(never)]
    fn watched_write(
        &self,
        o: &mut Top<Arc<CudaStream>>,
        top: Option<Arc<CudaStream>>,
        stream: &Arc<CudaStream>,
        value: u64,
    ) -> Result<()> {
        repair::ready()?;
        if let Some(s) = top {
            let m = self.follow_with_marker(&s)?;
            if let Some((s, v)) = o.take() {
                self.writes.add(s, v, m);
            }
        }
        // A top on this stream is before this write: the watch after it covers both.
        o.take();
        let marker = self.marker()?;
        if let Err(e) = self.write_on(stream, self.slot.dev, value) {
            self.give_back_marker(marker);
            return Err(e);
        }
        if let Err(e) = self.write_on(stream, marker.dev, 1) {
            // The write is enqueued and cannot be watched: the word may stay below it.
            self.note_failure(&e);
            self.give_back_marker(marker);
            return Err(e);
        }
        self.writes.add(stream.clone(), value, marker);
        Ok(())
    }

    /// A marker word holding 0: one of the word's spare markers, or a new slot.
    fn marker(&self) -> Result<MappedWord> {
        if let Some(m) = self.writes.watch().spare.pop() {
            // SAFETY: a spare marker is a slot of the pool whose one write landed: the word
            // owns it, and no stream touches it any more.
            unsafe { mapped::atomic(&m) }.store(0, Ordering::SeqCst);
            return Ok(m);
        }
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(&self.ctx, 0)
    }

    fn give_back_marker(&self, marker: MappedWord) {
        self.writes.watch().spare.push(marker);
    }

    /// A marker written on `stream` after everything enqueued on it so far.
    fn follow_with_marker(&self, stream: &Arc<CudaStream>) -> Result<MappedWord> {
        let marker = self.marker()?;
        make_current(&self.ctx)?;
        match self.write_on(stream, marker.dev, 1) {
            Ok(()) => Ok(marker),
            Err(e) => {
                self.give_back_marker(marker);
                Err(e)
            }
        }
    }

    /// Enqueue a wait for `value` on `stream` (context bound by the caller).
    #[inline]
    pub(crate) fn wait_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        if value <= self.enqueued.load(Ordering::SeqCst) {
            // Its write is on its way (or stored): the wait never waits on the host.
            self.wait_geq(stream, value)?;
        } else {
            // Wait-before-signal: listed while open (see `open_waits`).
            open_waits::enqueue_wait(self.at(), value, || self.wait_geq(stream, value))?;
        }
        if !std::ptr::eq(
            self.last_waiter.load(Ordering::Relaxed),
            Arc::as_ptr(stream),
        ) {
            self.add_waiter(stream);
        }
        Ok(())
    }

    #[cold]
    fn add_waiter(&self, stream: &Arc<CudaStream>) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        if !waiters.iter().any(|s| Arc::ptr_eq(s, stream)) {
            if waiters.len() >= WAITERS_KEPT {
                self.let_waiters_go(&mut waiters);
            }
            waiters.push(stream.clone());
        }
        // The list keeps the stream alive, so the address names it for as long as the word is.
        self.last_waiter
            .store(Arc::as_ptr(stream) as *mut CudaStream, Ordering::Relaxed);
    }

    /// Trade the streams in `waiters` for events at their ends (a stream that waits again is
    /// listed again), and forget the events that completed: a word waited on by a new stream
    /// per batch keeps a bounded list, of the streams whose waits may still be open. A stream
    /// whose end cannot be marked stays listed.
    #[cold]
    fn let_waiters_go(&self, waiters: &mut Vec<Arc<CudaStream>>) {
        let mut passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        passed.retain(|(e, _)| {
            // SAFETY: a live event owned by the list; cuEventQuery only reads it.
            unsafe { driver::event_query(e.raw) }.code() != sys::CUresult::CUDA_SUCCESS
        });
        // Before any stream goes: a stream made later at a freed one's address must not pass
        // for the last waiter.
        self.last_waiter
            .store(std::ptr::null_mut(), Ordering::SeqCst);
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept = Vec::new();
        for s in waiters.drain(..) {
            match pool.mark_end(&self.ctx, &s) {
                Ok(end) => passed.push((end, s)),
                Err(_) => kept.push(s),
            }
        }
        *waiters = kept;
    }

    /// Host store of `value` (above every write enqueued).
    pub(crate) fn store(&self, value: u64) -> Result<()> {
        debug_assert!(value & FAILED_BIT == 0);
        self.store_word(value)
    }

    /// Fail the word at `last_value`: `2^63` on the device (every wait released), `2^63 |
    /// last_value` for the host.
    pub(crate) fn fail(&self, last_value: u64) {
        self.failed.store(failed_word(last_value), Ordering::SeqCst);
        // An error here is kept as the word's failure or belongs to a broken stream.
        drop(self.store_word(FAILED_BIT));
    }

    fn store_word(&self, word: u64) -> Result<()> {
        let mut o = self.writes.order();
        let before = self.at().load(Ordering::SeqCst);
        let mut first_err = None;
        if let Some(s) = o.before_store(before) {
            // The top write may land after this store: watch it.
            match repair::ready().and_then(|()| self.follow_with_marker(&s)) {
                Ok(m) => {
                    if let Some((s, v)) = o.take() {
                        self.writes.add(s, v, m);
                    }
                }
                Err(e) => {
                    self.note_failure(&e);
                    first_err = Some(e);
                }
            }
        }
        // The store is the highest value now: nothing pending can be taken for it.
        o.take();
        {
            let mut w = self.writes.watch();
            self.at().fetch_max(word, Ordering::SeqCst);
            w.watches.stored(word);
        }
        let enqueued = if word & FAILED_BIT != 0 {
            u64::MAX
        } else {
            word
        };
        self.enqueued.store(enqueued, Ordering::SeqCst);
        drop(o);
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
        let mut writers: Vec<_> = self.writes.order().stream().cloned().into_iter().collect();
        writers.extend(self.writes.watch().watches.streams().cloned());
        for s in writers {
            // SAFETY: a live stream handle; cuStreamQuery only reads its state.
            let r = unsafe { driver::stream_query(s.cu_stream()) };
            match r.code() {
                sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_NOT_READY => {}
                _ => {
                    let e = r.check().expect_err("not a success code");
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
        let passed = std::mem::take(&mut *self.passed.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some((s, _)) = self.writes.order().take() {
            if !users.iter().any(|u| Arc::ptr_eq(u, &s)) {
                users.push(s);
            }
        }
        let mut orphaned = None;
        let (watched, spare, retired) = {
            let mut w = self.writes.watch();
            w.gone = true;
            if w.watches.watching() {
                // A watched write may still land below a later value (a dip) after this: the
                // repair thread keeps the word and repairs it until the last one landed (a
                // stream waiting on it may be released only by that repair), then lets the
                // slot go.
                for s in w.watches.streams() {
                    if !users.iter().any(|u| Arc::ptr_eq(u, s)) {
                        users.push(s.clone());
                    }
                }
                let hold = Arc::new(Hold::default());
                w.orphan = Some(Orphan {
                    hold: hold.clone(),
                    ctx: self.ctx.clone(),
                    since: Instant::now(),
                });
                orphaned = Some(hold);
                (Vec::new(), Vec::new(), Vec::new())
            } else {
                // From here on the repair thread leaves the slot alone.
                (
                    w.watches.take(),
                    std::mem::take(&mut w.spare),
                    std::mem::take(&mut w.retired),
                )
            }
        };
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        for m in spare {
            pool.give_back_idle(m);
        }
        for w in watched {
            if marker_landed(&w.marker) {
                pool.give_back_idle(w.marker);
            } else {
                pool.give_back(
                    &self.ctx,
                    w.marker,
                    vec![w.stream.clone()],
                    Vec::new(),
                    None,
                );
            }
            if !users.iter().any(|u| Arc::ptr_eq(u, &w.stream)) {
                users.push(w.stream);
            }
        }
        pool.give_back(&self.ctx, self.slot, users, passed, orphaned.clone());
        drop(pool);
        drop(retired);
        if orphaned.is_some() {
            let me: Arc<dyn Repair> = self.writes.clone();
            repair::keep(me);
        }
    }
}
