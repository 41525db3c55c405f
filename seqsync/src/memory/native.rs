//! [`NativePool`]: the backend's own stream-ordered allocator behind the [`Pool`] API.
//!
//! [`Pool`]: super::Pool

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use super::point::{Clocks, Settled, Until};
use super::{AllocFlags, Allocation, Block, Point, PoolStats, StreamAllocator, Wait};
use crate::backend::MemoryBackend;
use crate::error::{Error, Result};
use crate::timeline::{MarkState, StreamMark};

/// The backend's stream-ordered pool (on CUDA `cuMemAllocFromPoolAsync` / `cuMemFreeAsync` on
/// a pool created with only event-dependency reuse enabled: peer-suites §5) behind the same
/// interface as [`Pool`](super::Pool): wait lists, ready and free points, checked frees. The
/// baseline seqsync's own pool is measured against.
///
/// Reuse is the driver's business here, so [`PoolStats::reuse`], `fresh`, `waits` and
/// `exhausted` stay 0; the byte counts come from the driver.
///
/// ```
/// use seqsync::memory::{NativePool, Wait};
/// use seqsync::HostBackend;
///
/// let host = HostBackend::new();
/// let s = host.new_stream("s")?;
/// let pool = NativePool::new(&host, "native", u64::MAX)?;
/// let a = pool.alloc(&s, 1024, &[])?;
/// let freed = pool.free(&s, a.block, &[])?;
/// assert!(matches!(pool.free(&s, a.block, &[]), Err(seqsync::Error::DoubleFree { .. })));
/// s.synchronize()?;
/// assert_eq!(pool.stats().used_current, 0);
/// # Ok::<(), seqsync::Error>(())
/// ```
pub struct NativePool<B: MemoryBackend> {
    backend: B,
    name: String,
    pool: B::AsyncPool,
    state: Mutex<State<B>>,
}

struct State<B: MemoryBackend> {
    clocks: Clocks<B>,
    /// Live blocks by address: size, [`Block::generation`], the stream they were allocated
    /// on, and its mark then (if a timeline wait on it could still be released by a
    /// failure: a failure before the allocation concerns no use of the block).
    live: HashMap<u64, (usize, u64, u64, Option<StreamMark>)>,
    /// Allocations made (the last one's generation).
    generations: u64,
    /// Freed addresses not handed out again since (for [`Error::DoubleFree`]).
    freed: HashSet<u64>,
    /// Frees held back until the timeline values they waited on are reached (see [`Until`]):
    /// the driver's free is enqueued only then, once their point has completed too.
    quarantine: Vec<(u64, Point<B>, Until<B>)>,
    allocs: u64,
    frees: u64,
    leaked: u64,
}

impl<B: MemoryBackend> std::fmt::Debug for NativePool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativePool")
            .field("name", &self.name)
            .finish()
    }
}

impl<B: MemoryBackend> NativePool<B> {
    /// A native pool that keeps up to `release_threshold` bytes reserved across
    /// synchronizations (`u64::MAX`: keep everything).
    pub fn new(backend: &B, name: &str, release_threshold: u64) -> Result<Self> {
        Ok(NativePool {
            backend: backend.clone(),
            name: name.to_owned(),
            pool: backend.create_async_pool(release_threshold)?,
            state: Mutex::new(State {
                clocks: Clocks::new(),
                live: HashMap::new(),
                generations: 0,
                freed: HashSet::new(),
                quarantine: Vec::new(),
                allocs: 0,
                frees: 0,
                leaked: 0,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The backend's pool, for calls of your own.
    pub fn raw(&self) -> &B::AsyncPool {
        &self.pool
    }

    /// [`alloc_with`](Self::alloc_with) with default flags.
    pub fn alloc(
        &self,
        stream: &B::Stream,
        size: usize,
        waits: &[Wait<'_, B>],
    ) -> Result<Allocation<B>> {
        self.alloc_with(stream, size, waits, AllocFlags::default())
    }

    /// `waits` enqueued on `stream` and the driver's allocation (the allocation first where a
    /// wait is on a timeline, so that a refused one enqueues nothing). `flags.allow_wait` has
    /// no effect (the driver's pool was created without internal dependencies).
    ///
    /// # Errors
    /// [`Error::AllocSize`] for 0 bytes; a wait's error; the backend's (e.g. out of memory:
    /// with a timeline wait in `waits`, nothing is enqueued).
    pub fn alloc_with(
        &self,
        stream: &B::Stream,
        size: usize,
        waits: &[Wait<'_, B>],
        flags: AllocFlags,
    ) -> Result<Allocation<B>> {
        if size == 0 {
            return Err(Error::AllocSize {
                pool: self.name.clone(),
                size,
                max: usize::MAX,
            });
        }
        Clocks::check_waits(&self.backend, stream, waits)?;
        let sid = self.backend.stream_id(stream);
        let mut st = self.lock();
        self.settle_quarantine(&mut st, stream);
        // The waits first where they can only delay the stream (events and points, recorded
        // already): the driver then reuses memory freed behind them (its pool follows event
        // dependencies). A timeline wait might never be satisfied once the allocation is
        // refused (out of memory): with one, the driver's allocation comes first, and a
        // refusal enqueues nothing (the memory is ready in stream order before anything
        // enqueued after the waits either way).
        let timeline_waits = waits.iter().any(|w| matches!(w, Wait::Timeline(..)));
        let addr = if timeline_waits {
            let addr = self.backend.alloc_async(&self.pool, stream, size)?;
            if let Err(e) = st.clocks.enqueue_waits(&self.backend, stream, sid, waits) {
                // The wait's error is the one to report; a failed free leaks the block.
                let _ = self.backend.free_async(&self.pool, stream, addr);
                return Err(e);
            }
            addr
        } else {
            st.clocks.enqueue_waits(&self.backend, stream, sid, waits)?;
            self.backend.alloc_async(&self.pool, stream, size)?
        };
        let ready = if flags.signal {
            match st.clocks.record(&self.backend, stream, sid) {
                Ok(p) => Some(p),
                Err(e) => {
                    // Give the memory back in stream order; nothing is handed out.
                    self.backend.free_async(&self.pool, stream, addr)?;
                    return Err(e);
                }
            }
        } else {
            None
        };
        st.generations += 1;
        let generation = st.generations;
        let born = crate::timeline::stream_mark(&self.backend, stream);
        st.live.insert(addr, (size, generation, sid, born));
        st.freed.remove(&addr);
        st.allocs += 1;
        Ok(Allocation {
            block: Block {
                addr,
                size,
                capacity: size,
                generation,
            },
            ready,
        })
    }

    /// Enqueue `waits` on `stream`, then the driver's free; returns the point after which the
    /// memory is free. As with [`Pool::free`](super::Pool::free), a failed wait never frees:
    /// with a [`Wait::Timeline`] not reached yet, the driver's free is enqueued only once the
    /// host sees the value reached and the returned point completed (at a later call of this
    /// pool, on that call's stream); if the timeline fails first, the block is leaked. A
    /// timeline wait still pending on `stream` (enqueued before the free) holds it back alike:
    /// a failure could release it early, with the block's last user at work.
    ///
    /// # Errors
    /// [`Error::DoubleFree`], [`Error::ForeignMemory`]; a wait's error (the block stays
    /// allocated).
    pub fn free(
        &self,
        stream: &B::Stream,
        block: Block,
        waits: &[Wait<'_, B>],
    ) -> Result<Point<B>> {
        let sid = self.backend.stream_id(stream);
        let mut st = self.lock();
        let live = st.live.get(&block.addr);
        if !live.is_some_and(|&(_, g, ..)| block.is_generation(g)) {
            // Freed, or handed out again since (a block of an earlier allocation there).
            return Err(if live.is_some() || st.freed.contains(&block.addr) {
                Error::DoubleFree {
                    pool: self.name.clone(),
                    addr: block.addr,
                }
            } else {
                Error::ForeignMemory {
                    pool: self.name.clone(),
                    addr: block.addr,
                }
            });
        }
        Clocks::check_waits(&self.backend, stream, waits)?;
        self.settle_quarantine(&mut st, stream);
        st.clocks.enqueue_waits(&self.backend, stream, sid, waits)?;
        // The driver reuses a freed block in its stream's order at once: for a block allocated
        // on another stream, a timeline wait on this one not reached yet (or released by a
        // failure) holds the free back too (see `Until::with_stream_waits`).
        let (elsewhere, born) = match st.live.get(&block.addr) {
            Some((_, _, at, born)) => (*at != sid, born.clone()),
            None => (false, None),
        };
        let now = crate::timeline::stream_mark(&self.backend, stream);
        if !elsewhere
            && now
                .as_ref()
                .is_some_and(|m| m.state_since(born.as_ref()) == MarkState::Failed)
        {
            // A failure released a wait of this stream enqueued since the allocation: the
            // free's place may come while a user the wait stood for still runs. Never handed
            // out again (leaked, counted).
            let point = st.clocks.record(&self.backend, stream, sid)?;
            st.live.remove(&block.addr);
            st.freed.insert(block.addr);
            st.frees += 1;
            st.leaked += 1;
            return Ok(point);
        }
        let mark = if elsewhere { now } else { None };
        if let Some(until) = Until::with_stream_waits(Until::of(waits), mark) {
            // Not freed until the values are reached: the point is the proof it needs then.
            let point = st.clocks.record(&self.backend, stream, sid)?;
            st.live.remove(&block.addr);
            st.freed.insert(block.addr);
            st.frees += 1;
            st.quarantine.push((block.addr, point.clone(), until));
            return Ok(point);
        }
        self.backend.free_async(&self.pool, stream, block.addr)?;
        st.live.remove(&block.addr);
        st.freed.insert(block.addr);
        st.frees += 1;
        // The memory is already freed in stream order; a failing record only loses the point.
        st.clocks.record(&self.backend, stream, sid)
    }

    /// Enqueue on `stream` the driver's free of each quarantined block whose timeline values
    /// are reached and whose point has completed (nothing uses it any more, so any stream
    /// will do); give up on those whose timeline failed (leaked, counted).
    fn settle_quarantine(&self, st: &mut State<B>, stream: &B::Stream) {
        let mut i = 0;
        while i < st.quarantine.len() {
            let (addr, point, until) = &mut st.quarantine[i];
            let done = match until.settle() {
                Settled::Pending => false,
                Settled::Failed => {
                    st.leaked += 1;
                    true
                }
                Settled::Reached => match self.backend.query(point.event()) {
                    Ok(true) => {
                        // A driver error leaves the block allocated: leaked, not reused.
                        if self.backend.free_async(&self.pool, stream, *addr).is_err() {
                            st.leaked += 1;
                        }
                        true
                    }
                    Ok(false) => false,
                    Err(_) => {
                        st.leaked += 1;
                        true
                    }
                },
            };
            if done {
                st.quarantine.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Record a point at the current end of `stream`.
    pub fn record(&self, stream: &B::Stream) -> Result<Point<B>> {
        let sid = self.backend.stream_id(stream);
        self.lock().clocks.record(&self.backend, stream, sid)
    }

    /// Make `stream`'s later work wait for `point`.
    pub fn wait(&self, stream: &B::Stream, point: &Point<B>) -> Result<()> {
        let sid = self.backend.stream_id(stream);
        self.lock()
            .clocks
            .enqueue_waits(&self.backend, stream, sid, &[Wait::Point(point)])
    }

    /// Byte counts from the driver (zeros if it cannot say), and the call counts.
    pub fn stats(&self) -> PoolStats {
        let usage = self
            .backend
            .async_pool_usage(&self.pool)
            .unwrap_or_default();
        let st = self.lock();
        PoolStats {
            reserved_current: usage.reserved_current as usize,
            reserved_high: usage.reserved_high as usize,
            used_current: usage.used_current as usize,
            used_high: usage.used_high as usize,
            allocs: st.allocs,
            frees: st.frees,
            quarantined: st.quarantine.len() as u64,
            leaked: st.leaked,
            ..PoolStats::default()
        }
    }

    /// Ask the driver to release memory down to `keep` bytes; returns the bytes released.
    pub fn trim_to(&self, keep: usize) -> Result<usize> {
        let before = self.backend.async_pool_usage(&self.pool)?.reserved_current;
        self.backend.trim_async_pool(&self.pool, keep)?;
        let after = self.backend.async_pool_usage(&self.pool)?.reserved_current;
        Ok(before.saturating_sub(after) as usize)
    }
}

impl<B: MemoryBackend> StreamAllocator<B> for NativePool<B> {
    fn alloc_with(
        &self,
        stream: &B::Stream,
        size: usize,
        waits: &[Wait<'_, B>],
        flags: AllocFlags,
    ) -> Result<Allocation<B>> {
        NativePool::alloc_with(self, stream, size, waits, flags)
    }
    fn free(&self, stream: &B::Stream, block: Block, waits: &[Wait<'_, B>]) -> Result<Point<B>> {
        NativePool::free(self, stream, block, waits)
    }
    fn record(&self, stream: &B::Stream) -> Result<Point<B>> {
        NativePool::record(self, stream)
    }
    fn wait(&self, stream: &B::Stream, point: &Point<B>) -> Result<()> {
        NativePool::wait(self, stream, point)
    }
    fn stats(&self) -> PoolStats {
        NativePool::stats(self)
    }
    fn trim_to(&self, keep: usize) -> Result<usize> {
        NativePool::trim_to(self, keep)
    }
}
