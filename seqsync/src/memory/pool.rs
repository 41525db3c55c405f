//! [`Pool`]: seqsync's stream-ordered allocator.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use super::point::{Clocks, Settled, Until};
use super::size_class::{class_size, largest_class_within};
use super::{AllocFlags, Allocation, Block, Point, PoolConfig, PoolStats, StreamAllocator, Wait};
use crate::backend::MemoryBackend;
use crate::error::{Error, Result};
use crate::timeline::{MarkState, StreamMark};

/// A stream-ordered pool: [`alloc`](Self::alloc) and [`free`](Self::free) are enqueued on
/// streams with wait lists, return at once, and never block the host.
///
/// An allocation of size class `c` requested on stream `S` is served, in this order:
///
/// 1. **reuse**: a freed block of class `c` whose free `S` is already ordered after: freed on
///    `S` itself (stream order; no event, no wait), or freed on a stream whose later point `S`
///    waited on through this pool (a wait list entry, [`Pool::wait`], or transitively through
///    other points). Zero synchronization. A block allocated on another stream is held back
///    by a timeline wait enqueued on the freeing stream before the free until that wait is
///    reached: a failure could still release it early, with the block's last user at work
///    (then the block is leaked, never reused).
/// 2. **fresh**: never-used space, from the class's slab or a new slab, while the pool holds
///    at most [`PoolConfig::max_bytes`].
/// 3. **wait**, only with [`AllocFlags::allow_wait`]: the oldest freed block of class `c`,
///    after a stream wait on its free enqueued on `S`; never one freed behind a timeline wait
///    on its freeing stream not reached yet, whatever stream allocated it (the inserted wait
///    would sit behind that one, maybe for a value `S` itself signals later).
/// 4. otherwise [`Error::Exhausted`].
///
/// It never synchronizes the host ([`PoolStats::host_syncs`] stays 0), not even when it
/// drops: a slab with a block still allocated, or freed by a free that has not completed yet
/// (or failed), is leaked then, never freed under its users; the others go back at once.
///
/// ```
/// use seqsync::memory::{Pool, PoolConfig, Wait};
/// use seqsync::HostBackend;
///
/// let host = HostBackend::new();
/// let (copy, compute) = (host.new_stream("copy")?, host.new_stream("compute")?);
/// let pool = Pool::new(&host, "batches", PoolConfig::default())?;
///
/// let a = pool.alloc(&copy, 4096, &[])?; // usable by `copy`'s later work at once
/// pool.free(&copy, a.block, &[])?;
/// let b = pool.alloc(&copy, 4096, &[])?; // same stream: the same block, no wait
/// assert_eq!(b.block.addr(), a.block.addr());
///
/// // Another stream gets the block only once it is ordered after the free:
/// pool.free(&copy, b.block, &[])?;
/// let c = pool.alloc(&compute, 4096, &[])?;
/// assert_ne!(c.block.addr(), a.block.addr()); // not ordered: fresh memory
/// let freed = pool.free(&copy, c.block, &[])?;
/// let d = pool.alloc(&compute, 4096, &[Wait::Point(&freed)])?; // waits on the last free...
/// assert_eq!(d.block.addr(), c.block.addr()); // ...so the block freed there is reused
/// let s = pool.stats();
/// assert_eq!((s.reuse, s.fresh, s.waits, s.host_syncs), (2, 2, 0, 0));
/// # Ok::<(), seqsync::Error>(())
/// ```
pub struct Pool<B: MemoryBackend> {
    backend: B,
    name: String,
    config: PoolConfig,
    state: Mutex<State<B>>,
}

struct State<B: MemoryBackend> {
    clocks: Clocks<B>,
    slabs: Vec<Option<Slab<B>>>,
    classes: HashMap<usize, Class<B>>,
    live: HashMap<u64, Live>,
    /// Freed blocks whose free waited on timeline values not reached yet (see [`Until`]),
    /// oldest first: still counted live in their slab until they settle.
    quarantine: Vec<Quarantined<B>>,
    /// Blocks whose free's timeline failed: never handed out again (for
    /// [`Error::DoubleFree`]).
    leaked: HashSet<u64>,
    stats: PoolStats,
    release_threshold: usize,
}

struct Slab<B: MemoryBackend> {
    memory: B::RawMemory,
    /// The first block's address (aligned).
    base: u64,
    bytes: usize,
    class: usize,
    /// Bytes handed out at least once, from `base`.
    carved: usize,
    /// Blocks of this slab allocated now.
    live: usize,
}

/// A size class: its freed blocks (oldest first) and the slab it carves from.
struct Class<B: MemoryBackend> {
    free: VecDeque<Freed<B>>,
    carving: Option<usize>,
}

struct Freed<B: MemoryBackend> {
    addr: u64,
    slab: usize,
    /// The point after which the block is free.
    death: Point<B>,
    /// Freed on the stream that allocated it (`Some`, with that stream's mark at the
    /// allocation, if it had one), or on another (`None`).
    born: Option<Option<StreamMark>>,
}

/// A freed block held back until its free's timeline values are reached.
struct Quarantined<B: MemoryBackend> {
    freed: Freed<B>,
    class: usize,
    until: Until<B>,
}

#[derive(Clone)]
struct Live {
    slab: usize,
    class: usize,
    /// Its [`Block::generation`].
    generation: u64,
    /// The allocating stream's id and its mark then, if a timeline wait on it could still be
    /// released by a failure: a failure before the allocation concerns no use of the block.
    born: (u64, Option<StreamMark>),
}

impl<B: MemoryBackend> std::fmt::Debug for Pool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl<B: MemoryBackend> Pool<B> {
    /// A pool named `name` (errors name it) on `backend`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the alignment is not a power of two, a size is 0, or
    /// `max_bytes` holds no block (it is below the alignment).
    pub fn new(backend: &B, name: &str, config: PoolConfig) -> Result<Self> {
        let bad = |m: String| Err(Error::invalid(name, m));
        if !config.alignment.is_power_of_two() {
            return bad(format!(
                "alignment {} is not a power of two",
                config.alignment
            ));
        }
        if config.slab_bytes == 0 || config.max_bytes == 0 || config.max_alloc == 0 {
            return bad(format!(
                "slab_bytes {}, max_bytes {} and max_alloc {} must be > 0",
                config.slab_bytes, config.max_bytes, config.max_alloc
            ));
        }
        if largest_class_within(config.max_bytes, config.alignment) == 0 {
            return bad(format!(
                "max_bytes {} holds no block of alignment {}",
                config.max_bytes, config.alignment
            ));
        }
        Ok(Pool {
            backend: backend.clone(),
            name: name.to_owned(),
            config,
            state: Mutex::new(State {
                clocks: Clocks::new(),
                slabs: Vec::new(),
                classes: HashMap::new(),
                live: HashMap::new(),
                quarantine: Vec::new(),
                leaked: HashSet::new(),
                stats: PoolStats::default(),
                release_threshold: config.release_threshold,
            }),
        })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration it was made with.
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        // Every critical section leaves the state consistent before any call that can panic.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The largest allocation this pool serves: [`PoolConfig::max_alloc`], and no more than
    /// the largest size class that fits in [`PoolConfig::max_bytes`] (a request takes its
    /// class: with `max_bytes` 1000 and alignment 256, 768).
    pub fn max_alloc(&self) -> usize {
        let fits = largest_class_within(self.config.max_bytes, self.config.alignment);
        self.config.max_alloc.min(fits)
    }

    /// Allocate `size` bytes for work on `stream`, after `waits`, with no inserted wait and
    /// no ready event: [`alloc_with`](Self::alloc_with) with default [`AllocFlags`].
    pub fn alloc(
        &self,
        stream: &B::Stream,
        size: usize,
        waits: &[Wait<'_, B>],
    ) -> Result<Allocation<B>> {
        self.alloc_with(stream, size, waits, AllocFlags::default())
    }

    /// Allocate `size` bytes for work on `stream`: pick a block by the rules above (as if
    /// `waits` were enqueued), then enqueue `waits` on it. Returns at once.
    ///
    /// # Errors
    /// Every refusal enqueues nothing, the waits included:
    /// - [`Error::AllocSize`]: `size` is 0 or above [`max_alloc`](Self::max_alloc).
    /// - [`Error::Exhausted`]: nothing can serve it (see the type's docs).
    /// - [`Error::InvalidArgument`]: a new slab for it would pass the address space (its
    ///   block and the alignment).
    /// - the backend's, when a new slab cannot be allocated (out of memory).
    /// - a wait's error: its producer failed (checked before anything is enqueued), or the
    ///   backend refused the wait.
    ///
    /// A driver error part-way (a wait or the `signal` record the backend fails to enqueue
    /// after the checks passed) is no refusal: the waits enqueued before it stay, and the
    /// block goes back to the pool.
    pub fn alloc_with(
        &self,
        stream: &B::Stream,
        size: usize,
        waits: &[Wait<'_, B>],
        flags: AllocFlags,
    ) -> Result<Allocation<B>> {
        if size == 0 || size > self.max_alloc() {
            return Err(Error::AllocSize {
                pool: self.name.clone(),
                size,
                max: self.max_alloc(),
            });
        }
        // A size whose class does not fit in a usize cannot be served either.
        let class = class_size(size, self.config.alignment).ok_or_else(|| Error::AllocSize {
            pool: self.name.clone(),
            size,
            max: self.max_alloc(),
        })?;
        Clocks::check_waits(&self.backend, stream, waits)?;
        let sid = self.backend.stream_id(stream);
        let mut guard = self.lock();
        let st = &mut *guard;
        settle_quarantine(st);
        forget_gone_streams(st);
        // Decide first, with what the stream would be ordered after once `waits` are
        // enqueued; enqueue them only once the call cannot be refused (a refusal enqueues
        // nothing: a wait nobody will now satisfy would park the stream for good).
        let would_follow = st.clocks.frontier_with(sid, waits);
        let entry = st.classes.entry(class).or_insert_with(|| Class {
            free: VecDeque::new(),
            carving: None,
        });
        // 1. Reuse: the most recently freed block the requester is ordered after and not held
        // back (`held_back`); one a failure has released (`released_by_failure`) is never
        // handed out.
        let dominated = loop {
            let i = entry.free.iter().rposition(|f| {
                st.clocks.ordered_after_in(&would_follow, sid, &f.death) && !held_back(f)
            });
            match i {
                Some(i) if released_by_failure(&entry.free[i]) => {
                    let f = entry.free.remove(i).expect("index from rposition");
                    leak(&mut st.slabs, &mut st.stats, &mut st.leaked, f);
                }
                found => break found,
            }
        };
        // `old`: the freed entry a reused block came from, to put back if the call fails.
        let (addr, slab, old) = if let Some(i) = dominated {
            let f = entry.free.remove(i).expect("index from rposition");
            if let Err(e) = st.clocks.enqueue_waits(&self.backend, stream, sid, waits) {
                st.classes
                    .get_mut(&class)
                    .expect("class entry made above")
                    .free
                    .insert(i, f);
                return Err(e);
            }
            st.stats.reuse += 1;
            (f.addr, f.slab, Some(f))
        } else {
            let stale = entry.free.len();
            // 2. Fresh space.
            if let Some((addr, slab)) = self.carve(st, class)? {
                if let Err(e) = st.clocks.enqueue_waits(&self.backend, stream, sid, waits) {
                    if let Some(s) = st.slabs[slab].as_mut() {
                        // It was the last block carved, under this same lock.
                        s.carved -= class;
                    }
                    return Err(e);
                }
                if stale > 0 {
                    st.stats.reuse_miss += 1;
                }
                st.stats.fresh += 1;
                (addr, slab, None)
            } else if let Some(f) = flags
                .allow_wait
                .then(|| self.oldest_healthy_free(st, class))
                .flatten()
            {
                // 3. An inserted wait on the oldest free of the class that can still complete,
                // after the caller's waits.
                let enqueued = st
                    .clocks
                    .enqueue_waits(&self.backend, stream, sid, waits)
                    .and_then(|()| self.backend.wait(stream, f.death.event()));
                if let Err(e) = enqueued {
                    st.classes
                        .get_mut(&class)
                        .expect("class entry made above")
                        .free
                        .push_front(f);
                    return Err(e);
                }
                if stale > 0 {
                    st.stats.reuse_miss += 1;
                }
                st.clocks.learn(sid, &f.death);
                st.stats.waits += 1;
                (f.addr, f.slab, Some(f))
            } else {
                let stale = st.classes.get(&class).map_or(0, |c| c.free.len());
                if stale > 0 {
                    st.stats.reuse_miss += 1;
                }
                st.stats.exhausted += 1;
                return Err(Error::Exhausted {
                    pool: self.name.clone(),
                    requested: size,
                    reserved: st.stats.reserved_current,
                    max: self.config.max_bytes,
                    stale,
                    hint: if stale > 0 {
                        "; wait on a free's point first, or allow an inserted wait"
                    } else {
                        "; free blocks, or raise max_bytes"
                    },
                });
            }
        };
        let ready = if flags.signal {
            match st.clocks.record(&self.backend, stream, sid) {
                Ok(p) => Some(p),
                Err(e) => {
                    // Nothing handed out: the block goes back where it came from.
                    match old {
                        Some(f) => st
                            .classes
                            .get_mut(&class)
                            .expect("class entry made above")
                            .free
                            .push_back(f),
                        None => {
                            if let Some(s) = st.slabs[slab].as_mut() {
                                // It was the last block carved, under this same lock.
                                s.carved -= class;
                            }
                        }
                    }
                    return Err(e);
                }
            }
        } else {
            None
        };
        st.stats.allocs += 1;
        // Generations count allocations: never 0 (a raw block's), never repeated.
        let generation = st.stats.allocs;
        let born = (sid, crate::timeline::stream_mark(&self.backend, stream));
        st.live.insert(
            addr,
            Live {
                slab,
                class,
                generation,
                born,
            },
        );
        if let Some(s) = st.slabs[slab].as_mut() {
            s.live += 1;
        }
        let stats = &mut st.stats;
        stats.used_current += class;
        stats.used_high = stats.used_high.max(stats.used_current);
        let block = Block {
            addr,
            size,
            capacity: class,
            generation,
        };
        Ok(Allocation { block, ready })
    }

    /// The oldest freed block of `class` whose free can still complete, taken out of the free
    /// list; on the way, the blocks whose free failed (a stream of its wait list failed after
    /// the free was accepted: the free never happens) are leaked and counted, as a failed
    /// timeline's are, rather than given to a stream whose inserted wait would then fail.
    #[cold]
    fn oldest_healthy_free(&self, st: &mut State<B>, class: usize) -> Option<Freed<B>> {
        let entry = st.classes.get_mut(&class)?;
        let mut i = 0;
        while i < entry.free.len() {
            let f = &entry.free[i];
            if self.backend.query(f.death.event()).is_err() || released_by_failure(f) {
                let f = entry.free.remove(i).expect("index in range");
                leak(&mut st.slabs, &mut st.stats, &mut st.leaked, f);
            } else if waits_pending(f) {
                // A timeline wait on its free's stream is not reached yet, whoever allocated
                // the block: a wait inserted on the requester's stream would sit behind it,
                // maybe for a value the requester itself signals later (a deadlock), and a
                // failure could still release it early. Not yet.
                i += 1;
            } else {
                return entry.free.remove(i);
            }
        }
        None
    }

    /// Never-used space of `class`: from the class's slab, or from a new slab if the pool may
    /// grow. `Ok(None)`: the pool is at its maximum.
    fn carve(&self, st: &mut State<B>, class: usize) -> Result<Option<(u64, usize)>> {
        let entry = st
            .classes
            .get_mut(&class)
            .expect("class entry made by alloc");
        if let Some(i) = entry.carving {
            if let Some(s) = st.slabs[i].as_mut() {
                if s.carved + class <= s.bytes {
                    let addr = s.base + s.carved as u64;
                    s.carved += class;
                    return Ok(Some((addr, i)));
                }
            }
        }
        // A new slab: a whole slab of blocks, or one block if that is all that fits.
        let room = self.config.max_bytes - st.stats.reserved_current;
        let want = if class >= self.config.slab_bytes {
            class
        } else {
            self.config.slab_bytes / class * class
        };
        let bytes = if want <= room {
            want
        } else if class <= room {
            class
        } else {
            return Ok(None);
        };
        let extra = if self.config.alignment > 256 {
            self.config.alignment
        } else {
            0
        };
        let Some(total) = bytes.checked_add(extra) else {
            // No free block or room to wait for makes this one possible: say so, not
            // "exhausted".
            return Err(Error::invalid(
                &self.name,
                format!(
                    "a slab of {bytes} bytes at alignment {} needs {bytes} + {extra} bytes, \
                     more than the address space",
                    self.config.alignment
                ),
            ));
        };
        let memory = self.backend.alloc_memory(total)?;
        let base = self
            .backend
            .memory_addr(&memory)
            .next_multiple_of(self.config.alignment as u64);
        let slab = Slab {
            memory,
            base,
            bytes,
            class,
            carved: class,
            live: 0,
        };
        let i = match st.slabs.iter().position(Option::is_none) {
            Some(i) => {
                st.slabs[i] = Some(slab);
                i
            }
            None => {
                st.slabs.push(Some(slab));
                st.slabs.len() - 1
            }
        };
        st.classes
            .get_mut(&class)
            .expect("class entry made by alloc")
            .carving = Some(i);
        let stats = &mut st.stats;
        stats.slab_allocs += 1;
        stats.slabs += 1;
        stats.reserved_current += bytes;
        stats.reserved_high = stats.reserved_high.max(stats.reserved_current);
        Ok(Some((base, i)))
    }

    /// Free `block` once `stream` gets here, after `waits`. Returns the point after which it
    /// is free: a later allocation on `stream` may reuse it at once; one on another stream
    /// once that stream is ordered after this point.
    ///
    /// **A failed wait never frees.** A [`Wait::Timeline`] whose value is not reached when
    /// `free` is called holds the block back (*quarantined*, [`PoolStats::quarantined`]) until
    /// the host sees the value reached: a failure releases the stream's wait whatever the
    /// value, so only the value itself proves the work it stands for is done. The same holds
    /// for a [`Wait::Point`] whose stream waited on a timeline before the point (the last
    /// reader's point, the reader having waited for its writer's timeline, say): the block is
    /// held back until those waits are reached. If a timeline fails first, the block is never
    /// handed out again ([`PoolStats::leaked`]; its slab stays reserved and is leaked when the
    /// pool drops, rather than freed under a writer or reader that the same failure
    /// released). Timeline waits enqueued on `stream` before the free outside the wait list (a
    /// reader's stream that waited for its writer's timeline) are seen only if a failure
    /// released them before the block would be handed out again (it is leaked then); a
    /// failure after that, and a plain [`Wait::Event`], tell the pool nothing: name such
    /// waits in the list.
    ///
    /// # Errors
    /// - [`Error::DoubleFree`]: the block was freed already.
    /// - [`Error::ForeignMemory`]: this pool never handed it out.
    /// - a wait's error (its producer failed, or the backend refused it): the block stays
    ///   allocated and usable, and can be freed again.
    pub fn free(
        &self,
        stream: &B::Stream,
        block: Block,
        waits: &[Wait<'_, B>],
    ) -> Result<Point<B>> {
        let sid = self.backend.stream_id(stream);
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(live) = st
            .live
            .get(&block.addr)
            .filter(|l| block.is_generation(l.generation))
            .cloned()
        else {
            // Not live, or live again under another allocation: this block was freed.
            return Err(self.not_live(st, block.addr));
        };
        Clocks::check_waits(&self.backend, stream, waits)?;
        forget_gone_streams(st);
        st.clocks.enqueue_waits(&self.backend, stream, sid, waits)?;
        let death = st.clocks.record(&self.backend, stream, sid)?;
        st.live.remove(&block.addr);
        let freed = Freed {
            addr: block.addr,
            slab: live.slab,
            death: death.clone(),
            born: (live.born.0 == sid).then_some(live.born.1),
        };
        match Until::of(waits) {
            // Its slab keeps counting it live until it settles.
            Some(until) => {
                st.quarantine.push(Quarantined {
                    freed,
                    class: live.class,
                    until,
                });
                st.stats.quarantined += 1;
            }
            None => {
                if let Some(s) = st.slabs[live.slab].as_mut() {
                    s.live -= 1;
                }
                st.classes
                    .get_mut(&live.class)
                    .expect("a live block's class exists")
                    .free
                    .push_back(freed);
            }
        }
        st.stats.frees += 1;
        st.stats.used_current -= live.class;
        if st.stats.reserved_current > st.release_threshold {
            let target = st.release_threshold;
            // The block is freed whatever happens here: giving slabs back is housekeeping,
            // and a failure of it is not this free's (trim_to reports it).
            let _ = self.release_idle(st, target);
        }
        Ok(death)
    }

    fn not_live(&self, st: &State<B>, addr: u64) -> Error {
        let freed = st
            .classes
            .values()
            .any(|c| c.free.iter().any(|f| f.addr == addr))
            || st.quarantine.iter().any(|q| q.freed.addr == addr)
            || st.leaked.contains(&addr)
            // Handed out again since: a block of an earlier allocation there.
            || st.live.contains_key(&addr);
        if freed {
            Error::DoubleFree {
                pool: self.name.clone(),
                addr,
            }
        } else {
            Error::ForeignMemory {
                pool: self.name.clone(),
                addr,
            }
        }
    }

    /// Give back wholly free slabs whose frees have all completed (asked without waiting),
    /// until the pool holds at most `target` bytes. Returns the bytes given back.
    fn release_idle(&self, st: &mut State<B>, target: usize) -> Result<usize> {
        settle_quarantine(st);
        let mut released = 0;
        for i in 0..st.slabs.len() {
            if st.stats.reserved_current <= target {
                break;
            }
            let Some(slab) = st.slabs[i].as_ref() else {
                continue;
            };
            if slab.live > 0 {
                continue;
            }
            let class = st.classes.get(&slab.class).expect("a slab's class exists");
            let mut done = true;
            for f in class.free.iter().filter(|f| f.slab == i) {
                // A free on a stream that failed never completes, and one passed early (a
                // failure released a wait before it) may still have a writer: its slab stays.
                if !self.backend.query(f.death.event()).unwrap_or(false) || released_by_failure(f) {
                    done = false;
                    break;
                }
            }
            if !done {
                continue;
            }
            let slab = st.slabs[i].take().expect("checked above");
            let class = st.classes.get_mut(&slab.class).expect("checked above");
            class.free.retain(|f| f.slab != i);
            if class.carving == Some(i) {
                class.carving = None;
            }
            st.stats.reserved_current -= slab.bytes;
            st.stats.slabs -= 1;
            st.stats.slab_releases += 1;
            released += slab.bytes;
            drop(slab.memory);
        }
        Ok(released)
    }

    /// Give back wholly free slabs whose frees have completed, until the pool holds at most
    /// `keep` bytes or nothing more can go without waiting. Never blocks. Returns the bytes
    /// given back.
    pub fn trim_to(&self, keep: usize) -> Result<usize> {
        let mut st = self.lock();
        self.release_idle(&mut st, keep)
    }

    /// From now on, release wholly free, completed slabs after a free while the pool holds
    /// more than `bytes`.
    pub fn set_release_threshold(&self, bytes: usize) {
        self.lock().release_threshold = bytes;
    }

    /// Make `stream`'s later work wait for `point`; the pool learns that `stream` is ordered
    /// after it (and after everything it is ordered after).
    pub fn wait(&self, stream: &B::Stream, point: &Point<B>) -> Result<()> {
        let sid = self.backend.stream_id(stream);
        let mut st = self.lock();
        forget_gone_streams(&mut st);
        st.clocks
            .enqueue_waits(&self.backend, stream, sid, &[Wait::Point(point)])
    }

    /// Record a point at the current end of `stream`, for other calls' wait lists (e.g. the
    /// last reader of a block records one, and the block's free waits on it).
    pub fn record(&self, stream: &B::Stream) -> Result<Point<B>> {
        let sid = self.backend.stream_id(stream);
        let mut st = self.lock();
        forget_gone_streams(&mut st);
        st.clocks.record(&self.backend, stream, sid)
    }

    /// The statistics.
    pub fn stats(&self) -> PoolStats {
        self.lock().stats
    }

    /// Reset the high-water marks to the current values.
    pub fn reset_high(&self) {
        let mut st = self.lock();
        st.stats.reserved_high = st.stats.reserved_current;
        st.stats.used_high = st.stats.used_current;
    }
}

/// Is freed block `f` held back from reuse: allocated on another stream (its users crossed
/// streams, and the free may be ordered after them by nothing but a timeline wait) and freed
/// behind a timeline wait not reached yet (`waits_pending`: a failure could still release it
/// early, with the block's last user at work)? A block allocated on the freeing stream is not
/// (only `released_by_failure` counts there): its users are that stream's own work, unless
/// handed to others by waits of theirs, which the same rule would then hold for every block
/// of a pipeline that waits before its signals.
fn held_back<B: MemoryBackend>(f: &Freed<B>) -> bool {
    f.born.is_none() && waits_pending(f)
}

/// Is a timeline wait enqueued on the free's stream before the free not reached yet (a
/// failure has not released it either)? Whatever stream allocated the block.
fn waits_pending<B: MemoryBackend>(f: &Freed<B>) -> bool {
    f.death
        .mark()
        .is_some_and(|m| m.state() == MarkState::Pending)
}

/// Did a failure release a timeline wait enqueued on the free's stream before the free (one
/// outside its wait list: a reader's stream that waited for its writer's timeline, say)? The
/// free's point may then have been passed while that writer still runs: the block is never
/// handed out again. A failure that comes after the block was handed out is not seen: name
/// such waits in the free's list (they quarantine it until reached).
fn released_by_failure<B: MemoryBackend>(f: &Freed<B>) -> bool {
    f.death.mark().is_some_and(|m| {
        m.state_since(f.born.as_ref().and_then(Option::as_ref)) == MarkState::Failed
    })
}

/// Give up on freed block `f` for good: its slab counts it live again (never given back under
/// whoever may still use it), and it is counted leaked.
fn leak<B: MemoryBackend>(
    slabs: &mut [Option<Slab<B>>],
    stats: &mut PoolStats,
    leaked: &mut HashSet<u64>,
    f: Freed<B>,
) {
    if let Some(s) = slabs[f.slab].as_mut() {
        s.live += 1;
    }
    stats.leaked += 1;
    leaked.insert(f.addr);
}

/// Let the clocks forget the streams gone, but for those a free or quarantined block's point
/// stands on (see [`Clocks::forget_gone`]).
fn forget_gone_streams<B: MemoryBackend>(st: &mut State<B>) {
    let (classes, quarantine) = (&st.classes, &st.quarantine);
    st.clocks.forget_gone(|| {
        classes
            .values()
            .flat_map(|c| c.free.iter())
            .chain(quarantine.iter().map(|q| &q.freed))
            .map(|f| f.death.stream_id())
            .collect()
    });
}

/// Hand the quarantined blocks whose timeline values are all reached back to their classes
/// (oldest first, as they were freed), and give up on those whose timeline failed.
fn settle_quarantine<B: MemoryBackend>(st: &mut State<B>) {
    if st.quarantine.is_empty() {
        return;
    }
    let mut i = 0;
    while i < st.quarantine.len() {
        let settled = st.quarantine[i].until.settle();
        if settled == Settled::Pending {
            i += 1;
            continue;
        }
        let q = st.quarantine.remove(i);
        st.stats.quarantined -= 1;
        if settled == Settled::Failed {
            st.stats.leaked += 1;
            st.leaked.insert(q.freed.addr);
            continue;
        }
        if let Some(s) = st.slabs[q.freed.slab].as_mut() {
            s.live -= 1;
        }
        st.classes
            .get_mut(&q.class)
            .expect("a freed block's class exists")
            .free
            .push_back(q.freed);
    }
}

impl<B: MemoryBackend> StreamAllocator<B> for Pool<B> {
    fn alloc_with(
        &self,
        stream: &B::Stream,
        size: usize,
        waits: &[Wait<'_, B>],
        flags: AllocFlags,
    ) -> Result<Allocation<B>> {
        Pool::alloc_with(self, stream, size, waits, flags)
    }
    fn free(&self, stream: &B::Stream, block: Block, waits: &[Wait<'_, B>]) -> Result<Point<B>> {
        Pool::free(self, stream, block, waits)
    }
    fn record(&self, stream: &B::Stream) -> Result<Point<B>> {
        Pool::record(self, stream)
    }
    fn wait(&self, stream: &B::Stream, point: &Point<B>) -> Result<()> {
        Pool::wait(self, stream, point)
    }
    fn stats(&self) -> PoolStats {
        Pool::stats(self)
    }
    fn trim_to(&self, keep: usize) -> Result<usize> {
        Pool::trim_to(self, keep)
    }
}

impl<B: MemoryBackend> Drop for Pool<B> {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        // A block still quarantined keeps its slab (counted live): leaked below.
        settle_quarantine(st);
        // A free still pending on some stream (or one that failed) may have readers before it:
        // its slab is leaked rather than freed under them. Never a host wait here: a stream
        // may be held by a timeline value that only this thread would signal.
        let mut pending = vec![false; st.slabs.len()];
        for class in st.classes.values() {
            for f in &class.free {
                if !matches!(self.backend.query(f.death.event()), Ok(true))
                    || released_by_failure(f)
                {
                    pending[f.slab] = true;
                }
            }
        }
        for (i, slab) in st.slabs.iter_mut().enumerate() {
            if let Some(slab) = slab.take() {
                if slab.live > 0 || pending[i] {
                    // Still in use (never freed, or its free not reached): leak it.
                    std::mem::forget(slab.memory);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{AnyBackend, BackendKind};

    /// A new stream for every block, each allocation waiting on the last free (on a stream
    /// gone since): every block is reused, and the clocks hold a few streams whatever the
    /// number of iterations (they held one entry per stream ever seen, each following all
    /// the streams before it: memory quadratic in the iterations).
    #[test]
    fn the_clocks_forget_streams_gone_and_keep_reusing_across_them() {
        // The backend picked at run time (the host one here): this layer names none.
        let host = AnyBackend::new(BackendKind::Host).unwrap();
        let pool = Pool::new(&host, "p", PoolConfig::default()).unwrap();
        let mut last: Option<Point<AnyBackend>> = None;
        for i in 0..300 {
            let s = host.new_stream("s").unwrap();
            let waits: Vec<Wait<'_, AnyBackend>> = last.iter().map(Wait::Point).collect();
            let x = pool.alloc(&s, 256, &waits).unwrap().block;
            drop(waits);
            last = Some(pool.free(&s, x, &[]).unwrap());
            drop(s);
            let (streams, longest) = pool.lock().clocks.size();
            assert!(
                streams <= 3 && longest <= 3,
                "iteration {i}: {streams} streams, a frontier of {longest}"
            );
        }
        let st = pool.stats();
        assert_eq!((st.fresh, st.reuse), (1, 299), "{st:?}");
    }
}
