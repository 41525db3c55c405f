//! Mechanism (c), `hybrid`: events for waits whose signal is already enqueued, stream
//! memory operations only for waits enqueued before their signal.
//!
//! - `signal_on(s, v)`: record a (reused) event on `s` as the point of value `v`; if a stream
//!   waits on the word for a value `<= v` that no word write enqueued so far releases, also
//!   enqueue `cuStreamWriteValue64(s, word, v)`, with the stream-memory-operation rules that
//!   keep the word monotonic (see `memops`).
//! - `wait_on(s, v)`: nothing if `v` is known reached; `cuStreamWaitEvent` on the lowest point
//!   `>= v` if one is enqueued; else `cuStreamWaitValue64(s, word, v, GEQ)` (wait-before-signal:
//!   held on the device, so any work enqueued after it on `s`, timeline or not, waits too).
//! - host `signal`: a store of the word (released word waits see it) and the points up to it
//!   are reached; `fail`: the failed word, which releases every word wait.
//! - host `query`: the higher of the word and the highest point whose event completed.
//!
//! An ordered `signal_on` + `wait_on` pair costs an event record and an event wait, with no
//! memory operation; a wait-before-signal costs one word wait and, at its signal, one write.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaStream};

use super::event_pool::{EventPoints, EventPool};
use super::mapped::MappedWords;
use super::memops::MemOpsWord;
use super::points::WordWaits;
use crate::backend::semaphore::{failed_word, FAILED_BIT};
use crate::error::{Error, Result};
use crate::lock::{Guard, Lock};

/// Word writes and word waits the `hybrid` timelines of a backend enqueued (a
/// diagnostic: an ordered pair must enqueue neither).
#[derive(Debug, Default)]
pub(crate) struct WordOps {
    pub(crate) writes: AtomicU64,
    pub(crate) waits: AtomicU64,
}

/// `repr(C)`, like [`HybridWord`]: the points' hot fields, the word's address and the lowest
/// uncovered word wait in the word's first two cache lines.
#[repr(C)]
struct State {
    events: EventPoints,
    /// The word (`word`'s slot), for `wait_on`'s read.
    at: &'static AtomicU64,
    word_waits: WordWaits,
}

/// `repr(C, align(64))`: an ordered `signal_on` or `wait_on` reads two cache lines of it (the
/// lock and the points' ring in the first, the rest of what it needs in the second) besides
/// the ring's slot and the word. Every cache line an enqueue touches costs (BENCHMARKS.md §5,
/// "Cache lines, not locks").
#[repr(C, align(64))]
pub(crate) struct HybridWord {
    /// The crate's short-section lock (`lock/`): held for an event record or stream wait, and
    /// the lists.
    state: Lock<State>,
    ctx: Arc<CudaContext>,
    word: MemOpsWord,
    ops: Arc<WordOps>,
}

impl HybridWord {
    pub(crate) fn new(
        ctx: &Arc<CudaContext>,
        slots: &Arc<Mutex<MappedWords>>,
        events: &Arc<EventPool>,
        ops: &Arc<WordOps>,
        initial: u64,
    ) -> Result<Self> {
        let word = MemOpsWord::new(ctx, slots, initial)?;
        Ok(HybridWord {
            state: Lock::new(State {
                events: EventPoints::new(events, initial),
                at: word.at(),
                word_waits: WordWaits::default(),
            }),
            ctx: ctx.clone(),
            word,
            ops: ops.clone(),
        })
    }

    /// A panic under the lock (none is expected: driver errors are values) leaves at worst a
    /// point or a word wait not listed: a later wait takes the word, a later load asks again.
    fn state(&self) -> Guard<'_, State> {
        self.state.lock()
    }

    /// The caller bound a stream handle that names no context (`bind_for`).
    #[inline(always)]
    pub(crate) fn signal_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        let mut st = self.state();
        st.events.record(&self.ctx, stream, value)?;
        if st.word_waits.signal_needs_write(value) {
            return self.write_word(stream, value);
        }
        Ok(())
    }

    /// The signal of `value` also writes the word, for the word waits it releases.
    #[cold]
    #[inline(never)]
    fn write_word(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        self.ops.writes.fetch_add(1, Ordering::Relaxed);
        self.word.signal_on(stream, value)
    }

    /// The caller bound a stream handle that names no context (`bind_for`).
    #[inline(always)]
    pub(crate) fn wait_on(&self, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        let mut st = self.state();
        let word = st.at.load(Ordering::SeqCst);
        if word & FAILED_BIT == 0 && word >= value {
            return Ok(());
        }
        if st.events.try_wait(stream, value)? {
            return Ok(());
        }
        self.wait_on_word(&mut st, stream, value)
    }

    /// Wait-before-signal: on the word, which the signal of `value` will write.
    #[cold]
    #[inline(never)]
    fn wait_on_word(&self, st: &mut State, stream: &Arc<CudaStream>, value: u64) -> Result<()> {
        self.ops.waits.fetch_add(1, Ordering::Relaxed);
        self.word.wait_on(stream, value)?;
        st.word_waits.add(value);
        Ok(())
    }

    /// The word: the higher of the stored word and the highest completed point, or the failed
    /// word.
    pub(crate) fn load(&self) -> Result<u64> {
        let word = self.word.load();
        if word & FAILED_BIT != 0 {
            return Ok(word);
        }
        let mut st = self.state();
        if let Some(w) = st.events.points.failed() {
            return Ok(w);
        }
        if word > st.events.points.reached() {
            st.events.reach(word);
        }
        st.events.poll().inspect_err(|e| self.word.note_failure(e))
    }

    /// The word (for [`super::CudaSemaphore::peek`], which reads it without this struct).
    pub(crate) fn at(&self) -> &'static AtomicU64 {
        self.word.at()
    }

    pub(crate) fn store(&self, value: u64) -> Result<()> {
        let mut st = self.state();
        let r = self.word.store(value);
        st.events.reach(value);
        st.word_waits.stored(value);
        r
    }

    pub(crate) fn fail(&self, last_value: u64) {
        let mut st = self.state();
        let word = failed_word(last_value);
        st.events.points.fail(word);
        st.word_waits.clear();
        self.word.fail(last_value);
    }

    pub(crate) fn failure(&self) -> Option<Error> {
        self.word.failure()
    }

    pub(crate) fn check(&self) -> Result<()> {
        self.word.health()?;
        self.load().map(drop)
    }
}
