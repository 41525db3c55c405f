//! [`SharedPool`]: a stream-ordered pool one process allocates from and other processes of
//! the same user import allocations of, found by name like a ring.
//!
//! Where the memory lives is the backend's answer ([`Backend::ipc_pool_create`]): on CUDA, a
//! driver pool of the exporter made with POSIX file descriptor handles, whose descriptor
//! the exporter's server hands to importers over the name's Unix socket (`SCM_RIGHTS`, with
//! the segment), each allocation exported by its `cuMemPoolExportPointer` data, kept in the
//! segment; on the host backend, the segment itself (its bytes after the table), every
//! allocation a range of it.
//!
//! The segment holds a table of [`MAX_EXPORTS`] entries, one per exported allocation: its
//! state, a generation (so that an id of a freed allocation names nothing), the importing
//! processes (a bit per peer entry), its range (host) and export data (CUDA).
//!
//! The driver's rules are kept here rather than left to the user:
//!
//! - imported memory is not touched before its allocation completed in the exporter:
//!   [`SharedPool::alloc`] publishes an allocation only once it is complete (the backend
//!   waits for it), and an importer can name only published ones;
//! - it is freed in every importer before the exporter frees it: [`SharedPool::free`] waits
//!   until no living process holds an import ([`ImportedAllocation`] frees its import when
//!   dropped, after its own device work), or says [`Error::StillImported`] and frees nothing;
//!   an allocation being freed refuses new imports (the exporter's mark and the importer's
//!   bit are both sequentially consistent: one of them sees the other).
//!
//! A dead importer holds nothing (the driver releases a dead process's imports): its bit does
//! not hold up a free. An importer outlives a dead exporter: the driver keeps memory alive
//! while any process holds it.
//!
//! It may use: `backend` (the pool and its allocations) and the segment, rendezvous, peers and
//! wake of this layer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::peers::{self, Role, CHECK_EVERY};
use super::rendezvous::{self, Server};
use super::segment::{Kind, Segment, Sizes, MAX_BUFFER_BYTES};
use super::shared_ring::check_name;
use super::wake::{self, Channel};
use crate::backend::{Backend, IpcMemory, IpcPool, IpcPoolExport, IpcPoolPointer};
use crate::error::{Error, Result};

/// Allocations one pool exports at once.
pub const MAX_EXPORTS: usize = 256;

/// One exported allocation, in the segment's table.
#[repr(C)]
struct Entry {
    /// [`FREE`], [`PUBLISHED`] or [`FREEING`].
    state: AtomicU32,
    _pad: AtomicU32,
    /// Bumped each time the entry is published: an id names one publication.
    generation: AtomicU64,
    /// Bit `p`: the process of peer entry `p` holds an import of it.
    importers: AtomicU64,
    /// Host pool: the allocation's offset in the pool's bytes.
    offset: AtomicU64,
    /// Its size in bytes.
    len: AtomicU64,
    _reserved: [AtomicU64; 3],
    /// CUDA: its `cuMemPoolExportPointer` data.
    pointer: [AtomicU8; 64],
}

const FREE: u32 = 0;
const PUBLISHED: u32 = 1;
const FREEING: u32 = 2;

/// Bytes of the table at the start of a pool's segment data.
pub(crate) const TABLE_BYTES: usize = MAX_EXPORTS * std::mem::size_of::<Entry>();

/// Where host allocations start: every one is aligned to this.
const ALIGN: usize = 256;

/// How long a drop of the exporter's handle waits for importers of each allocation still
/// exported before it leaves that memory allocated instead.
const DROP_WAIT: Duration = Duration::from_secs(5);

/// Which allocation of a pool: its table entry and publication. Hand it to an importer (as
/// [`to_u64`](Self::to_u64), through a ring's payload, a file, a message); an id of an
/// allocation since freed names nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExportId {
    index: u32,
    generation: u64,
}

impl ExportId {
    /// The id as one number (for a message to another process).
    pub fn to_u64(self) -> u64 {
        (self.generation << 8) | self.index as u64
    }

    /// The id [`to_u64`](Self::to_u64) made. Any number is accepted: a wrong one names no
    /// allocation, which [`SharedPool::import`] says.
    pub fn from_u64(v: u64) -> ExportId {
        ExportId {
            index: (v & 0xff) as u32,
            generation: v >> 8,
        }
    }
}

/// An allocation of the exporter's: its id (for importers) and its address here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolAllocation {
    /// What importers name it by.
    pub id: ExportId,
    /// Its address for this process's backend (a device pointer on CUDA).
    pub ptr: u64,
    /// Its size in bytes.
    pub len: usize,
}

/// The exporter's side: its allocator (host) and the memory it must free (CUDA).
struct Exporter {
    /// Serves the name (the segment, the driver pool's descriptor) until taken.
    server: Option<Server>,
    /// Host pool: used ranges, offset -> length.
    used: BTreeMap<usize, usize>,
    /// Bytes allocated now.
    bytes: usize,
    /// Per table entry in use: what this process published there (the segment's copy is
    /// never trusted back), and its memory (CUDA).
    live: HashMap<u32, Live>,
    /// The next publication's generation: from a random start (an id of another pool, or
    /// of an earlier pool of the name, names nothing here), below 2^56 (an id is 64 bits).
    next_generation: u64,
}

/// Generations stay below this: [`ExportId::to_u64`] keeps 56 bits of one.
const GENERATIONS: u64 = 1 << 56;

/// A random first generation for a new pool.
fn first_generation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(peers::me());
    h.finish() % (GENERATIONS / 2) + 1
}

/// Names of device pools open in this process (an exporter's, or an importer's): the driver
/// may hand one process the same pool and pointers twice, which two owners would free twice.
static DEVICE_POOLS: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Claim `name` for this process's only handle on its device pool.
fn claim_device_pool(name: &str) -> Result<()> {
    let mut g = DEVICE_POOLS.lock().unwrap_or_else(|p| p.into_inner());
    if !g.get_or_insert_with(HashSet::new).insert(name.to_owned()) {
        return Err(Error::invalid(
            name,
            "this process holds a handle on this device pool already (one per process: the \
             driver shares one import per process)",
        ));
    }
    Ok(())
}

fn release_device_pool(name: &str) {
    let mut g = DEVICE_POOLS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(set) = g.as_mut() {
        set.remove(name);
    }
}

/// An allocation the exporter published: its generation, size and offset (host), and its
/// memory (CUDA).
struct Live {
    generation: u64,
    bytes: usize,
    offset: usize,
    ptr: u64,
    memory: Option<IpcMemory>,
}

/// A stream-ordered pool shared by processes of one user on this host: allocations made by
/// [`create`](SharedPool::create)'s process ([`alloc`](SharedPool::alloc)), imported by
/// processes that [`open`](SharedPool::open) it ([`import`](SharedPool::import)).
///
/// Dropping the exporter's handle frees every allocation still exported, waiting up to 5 s
/// in all for their importers (memory still imported then stays allocated until this process
/// ends); [`free`](SharedPool::free) holds the exporter's lock while it waits, so `alloc`
/// on other threads waits too.
///
/// Order the work on an allocation as on any memory: with a
/// [`SharedRing`](super::SharedRing) or a [`SharedTimeline`](super::SharedTimeline) between
/// the processes. The pool keeps the driver's rules of when an allocation may be seen and
/// who frees first (see the module's docs, [`alloc`](SharedPool::alloc) and
/// [`free`](SharedPool::free)).
///
/// ```
/// use seqsync::ipc::{ExportId, SharedPool};
/// use seqsync::backend::Backend;
/// use seqsync::{Error, HostBackend};
/// use std::time::Duration;
///
/// let host = HostBackend::new();
/// let stream = host.new_stream("s")?;
/// let pool = SharedPool::create(&host, "doc-pool", 1 << 20)?;
/// let a = pool.alloc(&stream, 4096)?;
///
/// // In another process, usually: the id travels as a number.
/// let seen = SharedPool::open(&host, "doc-pool")?;
/// let imported = seen.import(ExportId::from_u64(a.id.to_u64()))?;
/// assert_eq!(imported.len(), 4096);
///
/// // The exporter frees only once no importer holds it.
/// let err = pool.free(&a, &stream, Duration::from_millis(10)).unwrap_err();
/// assert!(matches!(err, Error::StillImported { importers: 1, .. }));
/// drop(imported);
/// pool.free(&a, &stream, Duration::from_secs(1))?;
/// // A freed allocation's id names nothing.
/// assert!(seen.import(a.id).is_err());
/// # Ok::<(), seqsync::Error>(())
/// ```
pub struct SharedPool<B: Backend> {
    name: String,
    // Dropped in this order: the exporter's state (its server, its allocations), the pool,
    // the peer entry (in `drop`), then the segment.
    exporter: Option<Mutex<Exporter>>,
    pool: Option<IpcPool>,
    /// An importer's imports alive now, by table entry.
    imported: Mutex<HashMap<u32, u64>>,
    peer: usize,
    seg: Segment,
    /// Host pool: its bytes' address here and length (0 for a device pool).
    base: u64,
    capacity: usize,
    backend: B,
}

impl<B: Backend> std::fmt::Debug for SharedPool<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPool")
            .field("name", &self.name)
            .field("capacity", &self.capacity)
            .field("exporter", &self.is_exporter())
            .finish()
    }
}

impl<B: Backend> SharedPool<B> {
    /// A pool named `name` from which this process allocates at most `capacity` bytes at once
    /// for other processes to import.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, a name a living process has created already,
    /// a capacity of 0 or above 1 TiB, or a backend with no such pool; the backend's errors.
    pub fn create(backend: &B, name: &str, capacity: usize) -> Result<Self> {
        check_name(name)?;
        if capacity == 0 || (capacity as u64).saturating_add(TABLE_BYTES as u64) > MAX_BUFFER_BYTES
        {
            return Err(Error::invalid(
                name,
                format!("a shared pool of {capacity} bytes: 1 byte to 1 TiB"),
            ));
        }
        let (in_segment, pool, pool_fd) = match backend.ipc_pool_create()? {
            IpcPoolExport::InSegment => (capacity, None, None),
            IpcPoolExport::Device(pool, fd) => {
                claim_device_pool(name)?;
                (0, Some(pool), Some(fd))
            }
        };
        let device = pool.is_some();
        let unclaim = || {
            if device {
                release_device_pool(name);
            }
        };
        let data = TABLE_BYTES + in_segment;
        let sizes = Sizes {
            data,
            buffer_len: data,
            ..Sizes::default()
        };
        let made = (|| {
            let seg = Segment::create(name, Kind::Pool, sizes)?;
            let fd = seg
                .fd()
                .try_clone_to_owned()
                .map_err(|e| Error::invalid(name, format!("dup its segment: {e}")))?;
            let peer = peers::register(seg.header(), name, Role::Creator)?;
            let fds = std::iter::once(fd).chain(pool_fd).collect();
            match Server::start_all(Kind::Pool, name, fds) {
                Ok(s) => Ok((seg, peer, s)),
                Err(e) => {
                    peers::unregister(seg.header(), peer);
                    Err(e)
                }
            }
        })();
        let (seg, peer, server) = made.inspect_err(|_| unclaim())?;
        let exporter = Exporter {
            server: Some(server),
            used: BTreeMap::new(),
            bytes: 0,
            live: HashMap::new(),
            next_generation: first_generation(),
        };
        Ok(Self::made(
            backend,
            name,
            seg,
            pool,
            peer,
            Some(exporter),
            capacity,
        ))
    }

    /// Open pool `name`, made by another process (or this one) of the same user, to import
    /// its allocations.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when no living process has created it, or when its memory is
    /// of a kind this backend cannot address (a host pool on CUDA, a device pool on the host
    /// backend); [`Error::BadSegment`] for a segment this build cannot trust; the driver's
    /// errors.
    pub fn open(backend: &B, name: &str) -> Result<Self> {
        check_name(name)?;
        let mut fds = rendezvous::fetch_all(Kind::Pool, name)?.into_iter();
        let seg_fd = fds.next().ok_or_else(|| Error::BadSegment {
            ring: name.to_owned(),
            message: "its creator sent no memory file".into(),
        })?;
        let pool_fd = fds.next();
        let seg = Segment::open(name, Kind::Pool, seg_fd)?;
        let in_segment = seg.sizes.data - TABLE_BYTES;
        let pool = match (in_segment > 0, backend.addresses_host_memory(), pool_fd) {
            (true, true, None) => None,
            (false, false, Some(fd)) => {
                if seg.created_here() {
                    return Err(Error::invalid(
                        name,
                        "its exporter's process uses its allocations directly (import them in \
                         other processes)",
                    ));
                }
                claim_device_pool(name)?;
                // SAFETY: the name's one import in this process (claimed just now).
                match unsafe { backend.ipc_pool_import(fd) } {
                    Ok(p) => Some(p),
                    Err(e) => {
                        release_device_pool(name);
                        return Err(e);
                    }
                }
            }
            (false, false, None) | (true, true, Some(_)) => {
                return Err(Error::BadSegment {
                    ring: name.to_owned(),
                    message: "its creator sent the wrong files for its kind of pool".into(),
                })
            }
            (in_segment, _, _) => {
                return Err(Error::invalid(
                    name,
                    format!(
                        "its memory is {} memory, which backend '{}' cannot address",
                        if in_segment { "host" } else { "device" },
                        backend.name()
                    ),
                ))
            }
        };
        // A dead importer holds nothing (the driver released its imports): its entry may be
        // taken over, once its importer bits are cleared (else frees would wait for this
        // process).
        let forget = |i: usize| {
            for e in table_of(&seg) {
                e.importers.fetch_and(!(1u64 << i), Ordering::SeqCst);
            }
        };
        let peer = match peers::register_over_dead(seg.header(), name, Role::Opener, forget) {
            Ok(p) => p,
            Err(e) => {
                if pool.is_some() {
                    release_device_pool(name);
                }
                return Err(e);
            }
        };
        Ok(Self::made(backend, name, seg, pool, peer, None, in_segment))
    }

    fn made(
        backend: &B,
        name: &str,
        seg: Segment,
        pool: Option<IpcPool>,
        peer: usize,
        exporter: Option<Exporter>,
        capacity: usize,
    ) -> Self {
        let (at, len) = seg.data().expect("a pool's segment holds its table");
        let in_segment = len - TABLE_BYTES;
        let base = if in_segment > 0 {
            at as u64 + TABLE_BYTES as u64
        } else {
            0
        };
        SharedPool {
            name: name.to_owned(),
            exporter: exporter.map(Mutex::new),
            pool,
            imported: Mutex::new(HashMap::new()),
            peer,
            seg,
            base,
            capacity,
            backend: backend.clone(),
        }
    }

    /// The table, at the start of the segment's data.
    fn entries(&self) -> &[Entry] {
        table_of(&self.seg)
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Did this process create it (and so allocates and frees)?
    pub fn is_exporter(&self) -> bool {
        self.exporter.is_some()
    }

    /// The exporter's capacity; in an importer, the host pool's bytes (0 for a device pool).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn exporter(&self) -> Result<std::sync::MutexGuard<'_, Exporter>> {
        match &self.exporter {
            Some(e) => Ok(e.lock().unwrap_or_else(|p| p.into_inner())),
            None => Err(Error::invalid(
                &self.name,
                "only its exporter (the process that created it) allocates and frees",
            )),
        }
    }

    /// Allocate `bytes` in `stream`'s order and export it: when this returns, the allocation
    /// is complete (the backend waited for it: on CUDA `stream` was synchronized), so an
    /// importer that names it can use it at once.
    ///
    /// # Errors
    /// [`Error::Exhausted`] beyond the pool's capacity (host: no free range that large);
    /// [`Error::InvalidArgument`] for 0 bytes, from an importer, or with
    /// [`MAX_EXPORTS`] allocations exported already; the backend's errors.
    pub fn alloc(&self, stream: &B::Stream, bytes: usize) -> Result<PoolAllocation> {
        let mut ex = self.exporter()?;
        if bytes == 0 {
            return Err(Error::invalid(&self.name, "an allocation of 0 bytes"));
        }
        let exhausted = |ex: &Exporter| Error::Exhausted {
            pool: self.name.clone(),
            requested: bytes,
            reserved: ex.bytes,
            max: self.capacity,
            stale: 0,
            hint: "",
        };
        if bytes > self.capacity - ex.bytes {
            return Err(exhausted(&ex));
        }
        let entries = self.entries();
        let index = (0..MAX_EXPORTS as u32)
            .find(|i| !ex.live.contains_key(i))
            .ok_or_else(|| {
                Error::invalid(
                    &self.name,
                    format!("{MAX_EXPORTS} allocations are exported already (free one first)"),
                )
            })?;
        let (offset, ptr, memory, pointer) = match &self.pool {
            None => {
                let offset =
                    first_fit(&ex.used, bytes, self.capacity).ok_or_else(|| exhausted(&ex))?;
                (offset, self.base + offset as u64, None, [0u8; 64])
            }
            Some(pool) => {
                let (memory, pointer) = self.backend.ipc_pool_alloc(pool, stream, bytes)?;
                (0, memory.ptr, Some(memory), pointer)
            }
        };
        let e = &entries[index as usize];
        e.offset.store(offset as u64, Ordering::Relaxed);
        e.len.store(bytes as u64, Ordering::Relaxed);
        for (b, v) in e.pointer.iter().zip(pointer) {
            b.store(v, Ordering::Relaxed);
        }
        // The importer bits are left alone: every holder clears its own, and a refused import
        // its bit at once; a bit set now is an import racing this publication, which it sees.
        let generation = ex.next_generation;
        ex.next_generation = (generation + 1) % GENERATIONS;
        e.generation.store(generation, Ordering::SeqCst);
        // Last, with release: an importer that sees it published sees everything above.
        e.state.store(PUBLISHED, Ordering::SeqCst);
        if self.pool.is_none() {
            ex.used.insert(offset, bytes);
        }
        ex.bytes += bytes;
        ex.live.insert(
            index,
            Live {
                generation,
                bytes,
                offset,
                ptr,
                memory,
            },
        );
        Ok(PoolAllocation {
            id: ExportId { index, generation },
            ptr,
            len: bytes,
        })
    }

    /// Free `alloc` (the exporter), once no other process holds an import of it: waits up to
    /// `timeout` for importers to drop theirs (a dead importer holds none), after `stream`,
    /// the stream of this process's last work on it, has run. New imports are refused from
    /// the call on.
    ///
    /// # Errors
    /// [`Error::StillImported`] if some still hold it after `timeout`: nothing is freed and
    /// it may be imported again; [`Error::InvalidArgument`] for an allocation not (or no
    /// longer) exported by this pool, or from an importer; the backend's errors.
    pub fn free(
        &self,
        alloc: &PoolAllocation,
        stream: &B::Stream,
        timeout: Duration,
    ) -> Result<()> {
        let mut ex = self.exporter()?;
        match ex.live.get(&alloc.id.index) {
            Some(l) if l.ptr == alloc.ptr && l.bytes == alloc.len => {}
            _ => {
                return Err(Error::invalid(
                    &self.name,
                    format!(
                        "allocation {} is not exported by this pool now",
                        alloc.id.to_u64()
                    ),
                ))
            }
        }
        self.free_locked(&mut ex, alloc.id, Some(stream), timeout)
    }

    fn free_locked(
        &self,
        ex: &mut Exporter,
        id: ExportId,
        stream: Option<&B::Stream>,
        timeout: Duration,
    ) -> Result<()> {
        let not_ours = || {
            Error::invalid(
                &self.name,
                format!(
                    "allocation {} is not exported by this pool now",
                    id.to_u64()
                ),
            )
        };
        if ex.live.get(&id.index).map(|l| l.generation) != Some(id.generation) {
            return Err(not_ours());
        }
        let e = &self.entries()[id.index as usize];
        if let Some(s) = stream {
            self.backend.synchronize_stream(s)?;
        }
        // No new import from here on (SeqCst with the importer's bit, then its check).
        e.state.store(FREEING, Ordering::SeqCst);
        if let Err(left) = self.await_importers(&[e], wake::deadline(timeout)) {
            e.state.store(PUBLISHED, Ordering::SeqCst);
            return Err(Error::StillImported {
                buffer: format!("{} allocation {}", self.name, id.to_u64()),
                importers: left,
            });
        }
        self.release_freed(ex, id.index);
        Ok(())
    }

    /// Wait until no living process holds an import of any of `entries` (each marked
    /// [`FREEING`]), or until `deadline` (`None`: no limit): `Err` with how many still hold
    /// one.
    fn await_importers(
        &self,
        entries: &[&Entry],
        deadline: Option<Instant>,
    ) -> std::result::Result<(), usize> {
        let h = self.seg.header();
        loop {
            let left: usize = entries.iter().map(|e| self.clear_dead_importers(e)).sum();
            if left == 0 {
                return Ok(());
            }
            let now = Instant::now();
            let wait = match deadline {
                Some(d) if now >= d => return Err(left),
                Some(d) => CHECK_EVERY.min(d - now),
                None => CHECK_EVERY,
            };
            wake::sleep_for(h, wait);
        }
    }

    /// Free entry `index`'s memory (its importers are gone) and give the entry back.
    fn release_freed(&self, ex: &mut Exporter, index: u32) {
        let e = &self.entries()[index as usize];
        let live = ex.live.remove(&index).expect("a live entry");
        drop(live.memory); // freed, after this process's device work on it
        if self.pool.is_none() {
            ex.used.remove(&live.offset);
        }
        ex.bytes -= live.bytes;
        e.state.store(FREE, Ordering::SeqCst);
    }

    /// Processes other than this one that hold an import of `e` and may still live (an
    /// entry in use whose process `/proc` does not show dead, or one being reused).
    fn living_importers(&self, e: &Entry) -> usize {
        self.importers_of(e, false)
    }

    /// As [`living_importers`](Self::living_importers), clearing the bits of processes that
    /// are gone: only while `e` is being freed (no new import can set a bit that stays).
    fn clear_dead_importers(&self, e: &Entry) -> usize {
        self.importers_of(e, true)
    }

    fn importers_of(&self, e: &Entry, clear_dead: bool) -> usize {
        let bits = e.importers.load(Ordering::SeqCst);
        let peers = &self.seg.header().peers;
        let mut living = 0;
        for (i, p) in peers.iter().enumerate() {
            if bits & (1 << i) == 0 || i == self.peer {
                continue;
            }
            let gone = p.state.load(Ordering::SeqCst) == 0 || !peers::alive(p);
            if !gone {
                living += 1;
            } else if clear_dead {
                e.importers.fetch_and(!(1 << i), Ordering::SeqCst);
            }
        }
        living
    }

    /// How many living processes hold an import of `alloc` now.
    pub fn importers(&self, alloc: &PoolAllocation) -> usize {
        match self.entries().get(alloc.id.index as usize) {
            Some(e) if e.generation.load(Ordering::Relaxed) == alloc.id.generation => {
                self.living_importers(e)
            }
            _ => 0,
        }
    }

    /// Import allocation `id` of the pool (an importer): its address for this process's
    /// backend, valid until the import is dropped, which frees it here (after this process's
    /// device work on it) and lets the exporter free it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an id that names no allocation exported now (freed,
    /// being freed, never made), one this process imports already, or a call from the
    /// exporter; [`Error::BadSegment`] for a table entry that lies about its range; the
    /// driver's errors.
    pub fn import(&self, id: ExportId) -> Result<ImportedAllocation<'_, B>> {
        if self.is_exporter() {
            return Err(Error::invalid(
                &self.name,
                "its exporter uses its own allocations (import them in other processes)",
            ));
        }
        let not_exported = || {
            Error::invalid(
                &self.name,
                format!(
                    "allocation {} is not exported now (freed, or never made)",
                    id.to_u64()
                ),
            )
        };
        let e = self
            .entries()
            .get(id.index as usize)
            .ok_or_else(not_exported)?;
        self.exporter_alive()?;
        let mut imported = self.imported.lock().unwrap_or_else(|p| p.into_inner());
        if imported.contains_key(&id.index) {
            return Err(Error::invalid(
                &self.name,
                format!(
                    "allocation {} is imported by this process already",
                    id.to_u64()
                ),
            ));
        }
        let bit = 1u64 << self.peer;
        e.importers.fetch_or(bit, Ordering::SeqCst);
        // After the bit (SeqCst): a free that began before this sees the bit or this sees its
        // mark.
        let published = e.state.load(Ordering::SeqCst) == PUBLISHED
            && e.generation.load(Ordering::SeqCst) == id.generation;
        let release = || {
            e.importers.fetch_and(!bit, Ordering::SeqCst);
            wake::wake(self.seg.header(), Channel::State, true);
        };
        if !published {
            release();
            return Err(not_exported());
        }
        let len = e.len.load(Ordering::Relaxed);
        let (ptr, memory) = match &self.pool {
            None => {
                let offset = e.offset.load(Ordering::Relaxed);
                match offset.checked_add(len) {
                    Some(end)
                        if len > 0
                            && end <= self.capacity as u64
                            && offset.is_multiple_of(ALIGN as u64) =>
                    {
                        (self.base + offset, None)
                    }
                    _ => {
                        release();
                        return Err(Error::BadSegment {
                            ring: self.name.clone(),
                            message: format!(
                                "allocation {} claims bytes {offset}..+{len} of a {}-byte pool",
                                id.to_u64(),
                                self.capacity
                            ),
                        });
                    }
                }
            }
            Some(pool) => {
                if len == 0 || len > MAX_BUFFER_BYTES {
                    release();
                    return Err(Error::BadSegment {
                        ring: self.name.clone(),
                        message: format!("allocation {} claims {len} bytes", id.to_u64()),
                    });
                }
                let data: IpcPoolPointer =
                    std::array::from_fn(|k| e.pointer[k].load(Ordering::Relaxed));
                // SAFETY: this process's only handle on the pool (`claim_device_pool`), and
                // this allocation is not imported here now (`imported`, held locked).
                match unsafe {
                    self.backend
                        .ipc_pool_import_pointer(pool, &data, len as usize)
                } {
                    Ok(m) => (m.ptr, Some(m)),
                    Err(err) => {
                        release();
                        return Err(err);
                    }
                }
            }
        };
        imported.insert(id.index, id.generation);
        Ok(ImportedAllocation {
            pool: self,
            id,
            memory,
            ptr,
            len: len as usize,
        })
    }
}

impl<B: Backend> SharedPool<B> {
    /// `Ok` while the exporter's process lives: a dead exporter's allocations are gone.
    fn exporter_alive(&self) -> Result<()> {
        let h = self.seg.header();
        let creator = h.peers.iter().find(|p| {
            p.state.load(Ordering::SeqCst) == 2
                && p.role.load(Ordering::Relaxed) == Role::Creator as u32
        });
        match creator {
            Some(p) if peers::alive(p) => Ok(()),
            Some(p) => Err(Error::PeerLost {
                ring: self.name.clone(),
                pid: p.pid.load(Ordering::Relaxed),
                role: "creating",
            }),
            None => Err(Error::invalid(
                &self.name,
                "its exporter has dropped it (its allocations are freed)",
            )),
        }
    }
}

/// The first offset (a multiple of [`ALIGN`]) where `bytes` fit among `used` ranges within
/// `capacity`.
fn first_fit(used: &BTreeMap<usize, usize>, bytes: usize, capacity: usize) -> Option<usize> {
    let mut at = 0usize;
    for (&offset, &len) in used {
        if offset >= at && offset - at >= bytes {
            return Some(at);
        }
        at = (offset + len).next_multiple_of(ALIGN);
    }
    (at <= capacity && capacity - at >= bytes).then_some(at)
}

impl<B: Backend> Drop for SharedPool<B> {
    fn drop(&mut self) {
        let device = self.pool.is_some();
        if let Some(ex) = self.exporter.take() {
            let mut ex = ex.into_inner().unwrap_or_else(|p| p.into_inner());
            ex.server = None; // no new importer from here on
                              // Every allocation at once: marked, then one wait for all their importers.
            let indices: Vec<u32> = ex.live.keys().copied().collect();
            let entries: Vec<&Entry> = indices
                .iter()
                .map(|&i| &self.entries()[i as usize])
                .collect();
            for e in &entries {
                e.state.store(FREEING, Ordering::SeqCst);
            }
            let _ = self.await_importers(&entries, wake::deadline(DROP_WAIT));
            for &i in &indices {
                let e = &self.entries()[i as usize];
                if self.clear_dead_importers(e) == 0 {
                    self.release_freed(&mut ex, i);
                } else if let Some(live) = ex.live.remove(&i) {
                    // Never freed under an importer: kept until this process ends.
                    std::mem::forget(live.memory);
                }
            }
        }
        let forgotten = !self
            .imported
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        if forgotten {
            // An import was leaked (`mem::forget`): it holds memory the exporter must not
            // free, so this process keeps its peer entry (its bits count) and its pool until
            // it ends.
            std::mem::forget(self.pool.take());
            return;
        }
        self.pool = None;
        if device {
            release_device_pool(&self.name);
        }
        peers::unregister(self.seg.header(), self.peer);
        wake::wake(self.seg.header(), Channel::State, true);
    }
}

/// An allocation of a [`SharedPool`] imported by this process: its address here. Dropping it
/// frees the import (on CUDA after this process's device work: the drop waits for the
/// context), which the exporter's free waits for. On the host backend nothing tracks which
/// stream jobs use the address: synchronize them before the drop, as before reusing any
/// memory.
pub struct ImportedAllocation<'p, B: Backend> {
    pool: &'p SharedPool<B>,
    id: ExportId,
    memory: Option<IpcMemory>,
    ptr: u64,
    len: usize,
}

impl<B: Backend> std::fmt::Debug for ImportedAllocation<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedAllocation")
            .field("pool", &self.pool.name)
            .field("id", &self.id)
            .field("len", &self.len)
            .finish()
    }
}

impl<B: Backend> ImportedAllocation<'_, B> {
    /// Its address for this process's backend (a device pointer on CUDA, a host address on
    /// the host backend).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: an allocation has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Which allocation.
    pub fn id(&self) -> ExportId {
        self.id
    }
}

impl<B: Backend> Drop for ImportedAllocation<'_, B> {
    fn drop(&mut self) {
        // Freed here first (after this process's device work), then the bit is cleared, so an
        // exporter that sees no bit frees memory no importer holds.
        self.memory = None;
        let e = &self.pool.entries()[self.id.index as usize];
        e.importers
            .fetch_and(!(1u64 << self.pool.peer), Ordering::SeqCst);
        self.pool
            .imported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id.index);
        wake::wake(self.pool.seg.header(), Channel::State, true);
    }
}

/// The table of a pool's segment, at the start of its data.
fn table_of(seg: &Segment) -> &[Entry] {
    let (at, len) = seg.data().expect("a pool's segment holds its table");
    debug_assert!(len >= TABLE_BYTES);
    // SAFETY: the data starts on a page (aligned for `Entry`) and holds at least TABLE_BYTES
    // bytes (checked at open, made so at create); `Entry` is atomics only, valid for any bytes,
    // and every access to it is atomic; the mapping lives as long as `seg`.
    unsafe { std::slice::from_raw_parts(at.cast::<Entry>(), MAX_EXPORTS) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_takes_the_first_aligned_gap_that_holds_the_bytes() {
        let mut used = BTreeMap::new();
        assert_eq!(first_fit(&used, 100, 1000), Some(0));
        assert_eq!(first_fit(&used, 1001, 1000), None);
        used.insert(0, 100);
        assert_eq!(first_fit(&used, 100, 1000), Some(256));
        used.insert(256, 300);
        // 100..256 is free but the next aligned start is 256: after 556, at 768.
        assert_eq!(first_fit(&used, 100, 1000), Some(768));
        assert_eq!(first_fit(&used, 300, 1000), None);
        used.remove(&0);
        assert_eq!(first_fit(&used, 200, 1000), Some(0));
        assert_eq!(
            first_fit(&used, 257, 1000),
            None,
            "0..256 holds 256 at most"
        );
    }

    #[test]
    fn an_id_survives_its_trip_through_a_number() {
        let id = ExportId {
            index: 255,
            generation: 1 << 40,
        };
        assert_eq!(ExportId::from_u64(id.to_u64()), id);
    }
}
