//! Stream waits that may be waiting on the host, and the frees (and stream creations:
//! [`while_quiet`]) that must not run while one is.
//!
//! A stream memory wait (`cuStreamWaitValue64`) for a value its word does not hold yet blocks
//! its stream on the GPU until the word gets there, and the value may come from a host store
//! that has not happened yet (wait-before-signal). While such a wait blocks, some driver calls
//! wait for the whole device to drain, on whatever thread makes them, and hold a driver lock
//! meanwhile that blocks other threads' calls too (`cuLaunchKernel`, `cuEventCreate`): measured
//! on the H200 (BENCHMARKS.md §5, "calls that wait for the device"): `cuMemFree`,
//! `cuMemFreeHost`, `cuMemHostUnregister`, `cuCtxSynchronize`, and `cuStreamCreate` past a few
//! dozen streams (on the H100); the allocations, event calls, `cuMemFreeAsync` and
//! `cuStreamSynchronize` of another stream do not. Should the
//! thread that will store the value be blocked there, or in any driver call behind that lock,
//! the process hangs.
//!
//! So seqsync never frees its buffers while one of its word waits may be open:
//!
//! - every word wait for a value whose write is not enqueued yet (a wait before its signal:
//!   only a host store or a later signal can release it) is enqueued under the shared side of
//!   a process-wide gate and, if its word is below its value, listed as *open*; a wait whose
//!   write is on its way is neither (`memops`: it is released without the host, or after a
//!   listed wait upstream of that write, which keeps the frees back itself);
//! - a buffer's free takes the exclusive side (no wait can be enqueued meanwhile), drops the
//!   open waits whose words got there, and frees only if none is left; otherwise the buffer is
//!   *held*;
//! - held buffers are freed at the next free, host store or allocation that finds no open
//!   wait. They are never handed to a new owner meanwhile: the owner that dropped one may have
//!   left work on it running (a free with `cuMemFree` waits for that work; a reuse would not);
//! - while more than [`HELD_LIMIT`] bytes are held, an allocation is refused with a named
//!   error instead of growing memory without bound (a program that always has a wait before
//!   its signal open, and drops and allocates buffers, reaches it).
//!
//! Work of other code in the process that calls these functions itself is not covered: the
//! timeline docs say so (`crate::timeline`, "# Mechanisms").

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::driver;
use cudarc::driver::{sys, CudaContext};

use super::{make_current, Deferred};
use crate::error::{BackendError, Error, Result};

/// Shared: enqueueing a word wait. Exclusive: a free that must find no open wait.
static GATE: RwLock<()> = RwLock::new(());
static STATE: Mutex<State> = Mutex::new(State {
    open: Vec::new(),
    prune_at: PRUNE_FIRST,
    held: Vec::new(),
});
/// How many buffers are held (read without the lock on the host-store path).
static HELD: AtomicUsize = AtomicUsize::new(0);
/// Their bytes.
static HELD_BYTES: AtomicUsize = AtomicUsize::new(0);

/// The most bytes of dropped buffers held back before allocations are refused.
pub(crate) const HELD_LIMIT: usize = 1 << 30;

/// Open waits are pruned (those whose words got there dropped) once the list reaches this
/// length, then at twice what was left: the list stays within twice the waits really open.
const PRUNE_FIRST: usize = 64;

struct State {
    /// (word address, value) of word waits that may still block their stream.
    open: Vec<(usize, u64)>,
    prune_at: usize,
    held: Vec<Held>,
}

/// Device memory (`cuMemAlloc`) or pinned host memory (`cuMemHostAlloc`) to free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Memory {
    Device(sys::CUdeviceptr),
    Pinned(*mut std::ffi::c_void),
    /// An instantiated CUDA graph and its graph: `cuGraphExecDestroy` waits for the device
    /// too (seen on the H200: a test hung in it behind a stream waiting for a host signal).
    Graph(sys::CUgraphExec, sys::CUgraph),
}

/// A buffer whose free waits for the open waits to close.
pub(crate) struct Held {
    pub(crate) memory: Memory,
    pub(crate) bytes: usize,
    pub(crate) ctx: Arc<CudaContext>,
    /// Where its free's error goes (`None`: nowhere, a graph's destroy).
    pub(crate) deferred: Option<Arc<Deferred>>,
}

// SAFETY: a held buffer is memory nothing uses any more (its owner dropped it after its last
// use, as the buffers' contracts ask); only its address moves between threads, to be freed or
// handed to one new owner.
unsafe impl Send for Held {}

impl Held {
    fn free_now(self) {
        if let Err(e) = make_current(&self.ctx) {
            if let Some(d) = &self.deferred {
                d.push_error(e);
            }
        }
        let note = |op: &'static str, r| {
            if let Some(d) = &self.deferred {
                d.note(op, r);
            }
        };
        match self.memory {
            Memory::Device(ptr) => {
                // SAFETY: `ptr` came from cuMemAlloc in `ctx` (kept alive by `self.ctx`) and
                // is freed once: its owner gave it up, and it left the held list.
                let r = unsafe { driver::mem_free(ptr) };
                note(r.op(), r.result());
            }
            Memory::Pinned(ptr) => {
                // SAFETY: as above, for memory from cuMemHostAlloc.
                let r = unsafe { driver::mem_free_host(ptr) };
                note(r.op(), r.result());
            }
            Memory::Graph(exec, graph) => {
                // SAFETY: both handles were created in `ctx` by their `CudaGraphExec`, which
                // gave them up; each is destroyed once, here. A launch still running may be
                // destroyed: the driver finishes it first.
                unsafe {
                    if !exec.is_null() {
                        let r = driver::graph_exec_destroy(exec);
                        note(r.op(), r.result());
                    }
                    if !graph.is_null() {
                        let r = driver::graph_destroy(graph);
                        note(r.op(), r.result());
                    }
                }
            }
        }
    }
}

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `word >= value` as the stream wait (`GEQ`) reads it: cyclic, so a failed word
/// (`2^63 | c`) releases the values above `c`.
fn reached(word: u64, value: u64) -> bool {
    word.wrapping_sub(value) as i64 >= 0
}

impl State {
    fn prune(&mut self) {
        self.open.retain(|&(at, v)| {
            // SAFETY: `at` is the address of a word a live MemOpsWord owns (the word takes its
            // entries out, `forget`, before its slot goes back to the pool, and slots are
            // pinned memory that is never freed), or of a live OpenWait's word (which takes
            // its entry out before it is freed).
            let word = unsafe { &*(at as *const AtomicU64) }.load(Ordering::SeqCst);
            !reached(word, v)
        });
        self.prune_at = (self.open.len() * 2).max(PRUNE_FIRST);
    }

    /// With the gate held exclusively: the held buffers to free now, if no wait is open.
    fn take_held_if_quiet(&mut self) -> Option<Vec<Held>> {
        self.prune();
        if !self.open.is_empty() {
            return None;
        }
        HELD.store(0, Ordering::SeqCst);
        HELD_BYTES.store(0, Ordering::SeqCst);
        Some(std::mem::take(&mut self.held))
    }
}

/// Enqueue a word wait (`enqueue`) for `value` on `word`, listing it as open unless the word
/// is there already.
pub(crate) fn enqueue_wait(
    word: &'static AtomicU64,
    value: u64,
    enqueue: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let _shared = GATE.read().unwrap_or_else(|e| e.into_inner());
    enqueue()?;
    if !reached(word.load(Ordering::SeqCst), value) {
        let mut st = state();
        st.open.push((word as *const AtomicU64 as usize, value));
        if st.open.len() >= st.prune_at {
            st.prune();
        }
    }
    Ok(())
}

/// List work of the caller's that waits on the device for a host store seqsync does not make
/// (a kernel polling host memory) as an open wait, until `word` holds 1 (set by
/// [`crate::backend::cuda::OpenWait::release`]). `word` must stay alive until [`forget`] took it
/// out.
pub(crate) fn list_open(word: &AtomicU64) {
    let _shared = GATE.read().unwrap_or_else(|e| e.into_inner());
    let mut st = state();
    st.open.push((word as *const AtomicU64 as usize, 1));
    if st.open.len() >= st.prune_at {
        st.prune();
    }
}

/// The word at `word` is going away: its waits are no longer listed (they are past, or its
/// timeline failed and the failed word released them).
pub(crate) fn forget(word: &AtomicU64) {
    let at = word as *const AtomicU64 as usize;
    state().open.retain(|&(a, _)| a != at);
}

/// Run `f` with no word wait open and none enqueued meanwhile (the gate's exclusive side, as a
/// free): for a driver call that may wait for the device to drain. `Err(open)`, how many waits
/// are open, without running `f` otherwise. `f` must not enqueue a word wait.
pub(crate) fn while_quiet<R>(f: impl FnOnce() -> R) -> std::result::Result<R, usize> {
    let _exclusive = GATE.write().unwrap_or_else(|e| e.into_inner());
    let open = {
        let mut st = state();
        st.prune();
        st.open.len()
    };
    if open > 0 {
        return Err(open);
    }
    Ok(f())
}

/// Free `buffer` now if no word wait is open, else hold it until none is.
pub(crate) fn free(buffer: Held) {
    let _exclusive = GATE.write().unwrap_or_else(|e| e.into_inner());
    let mut st = state();
    match st.take_held_if_quiet() {
        Some(held) => {
            drop(st);
            for h in held {
                h.free_now();
            }
            buffer.free_now();
        }
        None => {
            HELD_BYTES.fetch_add(buffer.bytes, Ordering::SeqCst);
            st.held.push(buffer);
            HELD.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// After a host store: free the held buffers if no wait is open any more. Never blocks on the
/// gate (a store must not wait for a free).
pub(crate) fn settle() {
    if HELD.load(Ordering::SeqCst) == 0 {
        return;
    }
    settle_slow();
}

#[cold]
#[inline(never)]
fn settle_slow() {
    let Ok(_exclusive) = GATE.try_write() else {
        return;
    };
    let held = state().take_held_if_quiet();
    for h in held.into_iter().flatten() {
        h.free_now();
    }
}

/// Before an allocation: free the held buffers if no wait is open any more (never blocking),
/// and refuse the allocation while more than [`HELD_LIMIT`] bytes stay held.
///
/// # Errors
/// [`Error::Backend`] naming the limit.
pub(crate) fn admit_allocation(op: &'static str, bytes: usize) -> Result<()> {
    if HELD.load(Ordering::SeqCst) == 0 {
        return Ok(());
    }
    settle_slow();
    let held = HELD_BYTES.load(Ordering::SeqCst);
    if held > HELD_LIMIT {
        return Err(Error::Backend(BackendError::new(
            "cuda",
            op,
            format!(
                "{held} bytes of dropped buffers are held back (limit {HELD_LIMIT}) because \
                 stream waits for values nothing has written yet are open (freeing now could \
                 hang the process); refusing {bytes} more bytes until those waits are past"
            ),
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{forget, list_open, reached, while_quiet};
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn while_quiet_runs_only_with_no_wait_open() {
        static WORD: AtomicU64 = AtomicU64::new(0);
        list_open(&WORD);
        let mut ran = false;
        assert!(matches!(while_quiet(|| ran = true), Err(n) if n >= 1));
        assert!(!ran, "ran with a wait open");
        // The word got there: the wait is past (pruned), nothing else is open.
        WORD.store(1, Ordering::SeqCst);
        assert_eq!(while_quiet(|| 7), Ok(7));
        forget(&WORD);
    }

    #[test]
    fn reached_reads_the_word_as_the_stream_wait_does() {
        assert!(reached(5, 5));
        assert!(reached(6, 5));
        assert!(!reached(4, 5));
        // A failed word (bit 63 set) releases the values above its count.
        assert!(reached((1 << 63) | 3, 10));
    }
}
