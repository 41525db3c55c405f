//! The shared segment of a [`SharedRing`](super::SharedRing) or a
//! [`SharedTimeline`](super::SharedTimeline): an anonymous memory file (`memfd`, mode 0600,
//! sealed against resizing) mapped by every process that uses it, its layout, and the checks
//! `open` makes before trusting a segment another process handed it.
//!
//! Every field is an atomic, so a peer writing while this process reads is defined behaviour,
//! and any bit pattern is a valid value. The kind and the sizes (`nconsumers`, `max_size`) are
//! read once, at open, checked, and kept in this process: nothing read from the segment later
//! is used as a pointer, a length or an index; a slot's index is always `seq mod max_size`
//! computed here. A timeline's segment has no slots: its value is in the header.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

use memmap2::MmapRaw;
use rustix::fs::{MemfdFlags, Mode, SealFlags};

use super::Mechanism;
use crate::error::{Error, Result};

/// The first eight bytes of every segment.
const MAGIC: u64 = u64::from_le_bytes(*b"SEQSYNC\x01");
/// The layout's version: a segment of another version is refused.
pub(crate) const LAYOUT_VERSION: u32 = 4;
/// Processes a segment has room for (a ring's: one producer, the rest consumers).
pub(crate) const MAX_PEERS: usize = 16;
/// Bytes of a ring's or timeline's name.
pub(crate) const NAME_MAX: usize = 64;
/// Bytes of a stop (or failure) reason kept in the segment (longer ones are cut at a character
/// boundary).
pub(crate) const REASON_MAX: usize = 256;
/// The largest `max_size` of a shared ring: a segment is 16 bytes a slot, so 2^16 slots make
/// 1 MiB, plenty for rings whose size is a handful of batches.
pub(crate) const MAX_SLOTS: usize = 1 << 16;

/// Fixed part of the segment. The first block is written once by the creator before the
/// segment is handed to anyone; the rest is the ring's live state.
#[repr(C)]
pub(crate) struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    header_size: AtomicU32,
    total_size: AtomicU64,
    nconsumers: AtomicU32,
    max_size: AtomicU32,
    creator_pid: AtomicU32,
    creator_uid: AtomicU32,
    name_len: AtomicU32,
    kind: AtomicU32,
    /// How the ring orders streams ([`Mechanism`]'s code): with IPC events, an event handle
    /// per slot follows the slots.
    mechanism: AtomicU32,
    _pad: AtomicU32,
    name: [AtomicU8; NAME_MAX],
    /// Bumped on every change of the ring's slots, sequence or state (and a stop); the futex
    /// word of the waits for them.
    pub(crate) changes: AtomicU32,
    /// How many calls sleep on `changes` (a change wakes them only when there are any).
    pub(crate) sleepers: AtomicU32,
    /// Bumped when a seq's work completes (and on a stop): the futex word of the waits for a
    /// completion, apart so that a record or a release wakes none of them.
    pub(crate) done_changes: AtomicU32,
    /// How many calls sleep on `done_changes`.
    pub(crate) done_sleepers: AtomicU32,
    /// 0 running, 1 a stop's reason being written, 2 stopped.
    stop_state: AtomicU32,
    reason_len: AtomicU32,
    reason: [AtomicU8; REASON_MAX],
    /// The next seq the producer records.
    pub(crate) next_seq: AtomicI64,
    /// 1 once the producer closed the ring (no seq after `next_seq - 1` will come).
    pub(crate) producer_closed: AtomicU32,
    /// The process that stopped the ring or failed the timeline (0: none yet).
    pub(crate) stopped_by: AtomicU32,
    /// A timeline's value (a ring's is 0).
    pub(crate) value: AtomicU64,
    /// The highest value a timeline was signalled or had a signal enqueued for.
    pub(crate) enqueued: AtomicU64,
    /// A timeline failed by a dead peer: `1 << 63 | role << 32 | pid` (0: not so).
    lost_peer: AtomicU64,
    /// A buffer's size in bytes (a ring's or timeline's is 0).
    pub(crate) buffer_bytes: AtomicU64,
    /// 1: a buffer's bytes are in this segment, after the header (host memory); 0: in the
    /// creator's device memory, opened by `mem_handle`.
    buffer_in_segment: AtomicU32,
    _pad2: AtomicU32,
    /// A device buffer's IPC memory handle.
    mem_handle: [AtomicU8; HANDLE_BYTES],
    pub(crate) peers: [Peer; MAX_PEERS],
}

impl Header {
    /// Claim the stop (or failure): `true` for the one caller, in any process, that gets to
    /// write its reason with [`finish_stop`](Self::finish_stop).
    pub(crate) fn begin_stop(&self) -> bool {
        // SeqCst: against a peer's registration (a buffer's opener registers, then looks).
        self.stop_state
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Write the reason (its first [`REASON_MAX`] bytes, cut at a character boundary) and the
    /// process, then publish the stop.
    pub(crate) fn finish_stop(&self, reason: &str, pid: u32) {
        let mut end = reason.len().min(REASON_MAX);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        for (b, c) in self.reason.iter().zip(reason[..end].bytes()) {
            b.store(c, Ordering::Relaxed);
        }
        self.reason_len.store(end as u32, Ordering::Relaxed);
        self.stopped_by.store(pid, Ordering::Relaxed);
        self.stop_state.store(2, Ordering::Release);
    }

    /// 0 running, 2 stopped, 1 stopped by a process that died writing why (a reason being
    /// written takes nanoseconds: this waits that out first).
    pub(crate) fn stop_state(&self) -> u32 {
        let mut state = self.stop_state.load(Ordering::SeqCst);
        for _ in 0..1000 {
            if state != 1 {
                break;
            }
            std::thread::yield_now();
            state = self.stop_state.load(Ordering::Acquire);
        }
        state
    }

    /// Record that the stop is a dead peer's (before [`finish_stop`](Self::finish_stop)), so
    /// that every process reports [`Error::PeerLost`] for it.
    pub(crate) fn set_lost_peer(&self, pid: u32, role: u32) {
        self.lost_peer.store(
            LOST | u64::from(role & 0xff) << 32 | u64::from(pid),
            Ordering::Relaxed,
        );
    }

    /// The dead peer a stop is for (pid, role code), if it is one's.
    pub(crate) fn lost_peer(&self) -> Option<(u32, u32)> {
        let v = self.lost_peer.load(Ordering::Relaxed);
        (v & LOST != 0).then_some((v as u32, ((v >> 32) & 0xff) as u32))
    }

    /// The reason a stopped segment keeps.
    pub(crate) fn reason(&self) -> String {
        let len = (self.reason_len.load(Ordering::Relaxed) as usize).min(REASON_MAX);
        let bytes: Vec<u8> = self.reason[..len]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// `lost_peer`'s flag: set, the stop is a dead peer's, whose pid and role it holds.
const LOST: u64 = 1 << 63;

/// One process of the ring, for the liveness check.
#[repr(C)]
pub(crate) struct Peer {
    /// 0 free, 1 being claimed, 2 in use.
    pub(crate) state: AtomicU32,
    pub(crate) pid: AtomicU32,
    /// 0 producer, 1 consumer.
    pub(crate) role: AtomicU32,
    /// A timeline's: 1 while this process can still signal it (a handle or a pending stream
    /// signal), so that a wait nobody can release is found even when other processes wait.
    pub(crate) may_signal: AtomicU32,
    /// The process's start time (clock ticks after boot), so a reused pid is not mistaken
    /// for the process that registered.
    pub(crate) start: AtomicU64,
    /// A timeline's word for this process's streams (the device waits on it): the value, or
    /// `2^63` once this process has marked the timeline failed. Every process raises every
    /// entry's word when a signal lands; only the owner releases its own, after spreading the
    /// failure to its own streams (see `shared_timeline`).
    pub(crate) gpu: AtomicU64,
}

/// One seq's place in the ring.
#[repr(C)]
pub(crate) struct Slot {
    /// The seq's lap and its consumers' counts (see `shared_ring.rs`).
    pub(crate) word: AtomicU64,
    /// The latest seq of this slot whose work completed (-1: none yet).
    pub(crate) done: AtomicI64,
    /// With stream memory operations: `seq + 1` of the latest seq of this slot whose work
    /// completed, written by the producer's stream (0: none yet; [`RELEASED`]: the ring
    /// stopped, every stream wait on it let go).
    pub(crate) gpu: AtomicU64,
}

/// What a stopped ring's `gpu` words hold: above every `seq + 1` a wait asks for, compared as
/// `CU_STREAM_WAIT_VALUE_GEQ` does (the difference, signed).
pub(crate) const RELEASED: u64 = i64::MAX as u64;

/// What a segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Ring = 1,
    Timeline = 2,
    Buffer = 3,
    Pool = 4,
}

impl Kind {
    /// The noun in names and messages.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Kind::Ring => "ring",
            Kind::Timeline => "timeline",
            Kind::Buffer => "buffer",
            Kind::Pool => "pool",
        }
    }
}

/// The sizes a segment was made with, checked and kept by this process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    pub(crate) nconsumers: u32,
    pub(crate) max_size: usize,
    /// How the ring orders streams (a timeline's: host words).
    pub(crate) mechanism: Mechanism,
    /// A buffer's bytes kept in the segment (page-aligned, after the header; 0 for a device
    /// buffer, a ring, a timeline).
    pub(crate) data: usize,
    /// A buffer's size, checked at open (`data`, or the device allocation's).
    pub(crate) buffer_len: usize,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            nconsumers: 0,
            max_size: 0,
            mechanism: Mechanism::HostWord,
            data: 0,
            buffer_len: 0,
        }
    }
}

/// The largest shared buffer: 1 TiB (a bound on what a segment's header may claim).
pub(crate) const MAX_BUFFER_BYTES: u64 = 1 << 40;

/// Where a buffer's bytes start in its segment: the first page after the header.
fn data_offset() -> usize {
    std::mem::size_of::<Header>().next_multiple_of(PAGE)
}

/// The page size segments are laid out for (the data of a buffer starts on a page).
const PAGE: usize = 4096;

fn mechanism_code(m: Mechanism) -> u32 {
    match m {
        Mechanism::HostWord => 0,
        Mechanism::IpcEvent => 1,
        Mechanism::MemOps => 2,
    }
}

/// Bytes of one slot's event handle.
pub(crate) const HANDLE_BYTES: usize = 64;

fn slots_end(max_size: usize) -> usize {
    std::mem::size_of::<Header>() + max_size * std::mem::size_of::<Slot>()
}

fn total_size(sizes: Sizes) -> usize {
    let handles = if sizes.mechanism == Mechanism::IpcEvent {
        sizes.max_size * HANDLE_BYTES
    } else {
        0
    };
    if sizes.data > 0 {
        return data_offset() + sizes.data;
    }
    slots_end(sizes.max_size) + handles
}

/// A mapped segment.
pub(crate) struct Segment {
    map: MmapRaw,
    /// The memory file, kept to hand to processes that open the ring.
    fd: OwnedFd,
    pub(crate) sizes: Sizes,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("sizes", &self.sizes)
            .finish()
    }
}

fn io(ring: &str, what: &'static str, e: impl std::fmt::Display) -> Error {
    Error::Backend(crate::error::BackendError::new(
        "ipc",
        what,
        format!("ring '{ring}': {e}"),
    ))
}

fn bad(ring: &str, message: impl Into<String>) -> Error {
    Error::BadSegment {
        ring: ring.to_owned(),
        message: message.into(),
    }
}

impl Segment {
    /// A new segment for `name`: a sealed memory file of mode 0600 with its header written.
    /// A timeline's has `max_size` 0 (no slots).
    pub(crate) fn create(name: &str, kind: Kind, sizes: Sizes) -> Result<Segment> {
        let fd = rustix::fs::memfd_create(
            format!("seqsync-{}-{name}", kind.noun()),
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(|e| io(name, "memfd_create", e))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600)).map_err(|e| io(name, "fchmod", e))?;
        let total = total_size(sizes);
        rustix::fs::ftruncate(&fd, total as u64).map_err(|e| io(name, "ftruncate", e))?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(|e| io(name, "seal the segment", e))?;
        let seg = Segment::map(name, fd, sizes)?;
        let h = seg.header();
        h.version.store(LAYOUT_VERSION, Ordering::Relaxed);
        h.kind.store(kind as u32, Ordering::Relaxed);
        h.mechanism
            .store(mechanism_code(sizes.mechanism), Ordering::Relaxed);
        h.header_size
            .store(std::mem::size_of::<Header>() as u32, Ordering::Relaxed);
        h.total_size.store(total as u64, Ordering::Relaxed);
        h.nconsumers.store(sizes.nconsumers, Ordering::Relaxed);
        h.max_size.store(sizes.max_size as u32, Ordering::Relaxed);
        h.buffer_in_segment
            .store((sizes.data > 0) as u32, Ordering::Relaxed);
        h.buffer_bytes.store(sizes.data as u64, Ordering::Relaxed);
        h.creator_pid.store(
            rustix::process::getpid().as_raw_nonzero().get() as u32,
            Ordering::Relaxed,
        );
        h.creator_uid
            .store(rustix::process::getuid().as_raw(), Ordering::Relaxed);
        h.name_len.store(name.len() as u32, Ordering::Relaxed);
        for (b, c) in h.name.iter().zip(name.bytes()) {
            b.store(c, Ordering::Relaxed);
        }
        for i in 0..sizes.max_size {
            seg.slot(i).done.store(-1, Ordering::Relaxed);
        }
        // Last, with release: a reader that sees the magic sees everything above.
        h.magic.store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// A segment of `kind` handed over by another process, checked before anything in it is
    /// used.
    pub(crate) fn open(name: &str, kind: Kind, fd: OwnedFd) -> Result<Segment> {
        let st = rustix::fs::fstat(&fd).map_err(|e| io(name, "fstat", e))?;
        let uid = rustix::process::getuid().as_raw();
        if st.st_uid != uid {
            return Err(bad(
                name,
                format!("owned by uid {}, not this user ({uid})", st.st_uid),
            ));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(bad(
                name,
                format!("mode {:o}: others may access it", st.st_mode & 0o777),
            ));
        }
        let seals =
            rustix::fs::fcntl_get_seals(&fd).map_err(|_| bad(name, "not a sealed memory file"))?;
        if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
            return Err(bad(
                name,
                "not sealed against resizing (it could shrink under us)",
            ));
        }
        let size = usize::try_from(st.st_size).unwrap_or(0);
        let hsize = std::mem::size_of::<Header>();
        if size < hsize {
            return Err(bad(
                name,
                format!("truncated: {size} bytes, the header alone is {hsize}"),
            ));
        }
        // Map the header only to read the sizes; map the whole once they are checked.
        let head = Segment::map(
            name,
            fd.try_clone().map_err(|e| io(name, "dup", e))?,
            Sizes::default(),
        )?;
        let h = head.header();
        if h.magic.load(Ordering::Acquire) != MAGIC {
            return Err(bad(name, "no seqsync magic"));
        }
        let version = h.version.load(Ordering::Relaxed);
        if version != LAYOUT_VERSION {
            return Err(bad(
                name,
                format!("layout version {version}, this build reads {LAYOUT_VERSION}"),
            ));
        }
        if h.header_size.load(Ordering::Relaxed) as usize != hsize {
            return Err(bad(name, "header of another size"));
        }
        let stored_kind = h.kind.load(Ordering::Relaxed);
        if stored_kind != kind as u32 {
            return Err(bad(
                name,
                format!("kind {stored_kind}: not a {} segment", kind.noun()),
            ));
        }
        let nconsumers = h.nconsumers.load(Ordering::Relaxed);
        let max_size = h.max_size.load(Ordering::Relaxed) as usize;
        if kind == Kind::Timeline && (max_size != 0 || nconsumers != 0) {
            return Err(bad(
                name,
                format!("a timeline's segment with max_size {max_size}, nconsumers {nconsumers}"),
            ));
        }
        if kind == Kind::Ring && (max_size == 0 || max_size > MAX_SLOTS) {
            return Err(bad(
                name,
                format!("max_size {max_size} outside 1..={MAX_SLOTS}"),
            ));
        }
        let buffer_bytes = h.buffer_bytes.load(Ordering::Relaxed);
        let in_segment = h.buffer_in_segment.load(Ordering::Relaxed);
        if kind == Kind::Buffer || kind == Kind::Pool {
            if max_size != 0 || nconsumers != 0 {
                return Err(bad(name, format!("a {}'s segment with slots", kind.noun())));
            }
            if buffer_bytes > MAX_BUFFER_BYTES || in_segment > 1 {
                return Err(bad(
                    name,
                    format!(
                        "a {} of {buffer_bytes} bytes (in segment: {in_segment})",
                        kind.noun()
                    ),
                ));
            }
            // A pool's table of exported allocations is always in its segment.
            if kind == Kind::Pool
                && (in_segment != 1 || (buffer_bytes as usize) < super::shared_pool::TABLE_BYTES)
            {
                return Err(bad(
                    name,
                    format!("a pool's segment of {buffer_bytes} bytes has no table of exports"),
                ));
            }
        } else if buffer_bytes != 0 || in_segment != 0 {
            return Err(bad(
                name,
                "a ring's or timeline's segment claims buffer bytes",
            ));
        }
        let data = if in_segment == 1 {
            buffer_bytes as usize
        } else {
            0
        };
        if nconsumers > super::shared_ring::MAX_CONSUMERS {
            return Err(bad(
                name,
                format!(
                    "nconsumers {nconsumers} above {}",
                    super::shared_ring::MAX_CONSUMERS
                ),
            ));
        }
        let mechanism = match h.mechanism.load(Ordering::Relaxed) {
            0 => Mechanism::HostWord,
            1 if kind == Kind::Ring => Mechanism::IpcEvent,
            2 if kind == Kind::Ring => Mechanism::MemOps,
            other => return Err(bad(name, format!("mechanism code {other}"))),
        };
        let sizes = Sizes {
            nconsumers,
            max_size,
            mechanism,
            data,
            buffer_len: buffer_bytes as usize,
        };
        let total = total_size(sizes);
        if h.total_size.load(Ordering::Relaxed) != total as u64 || size != total {
            return Err(bad(
                name,
                format!(
                    "{size} bytes, a {} of max_size {max_size} has {total}",
                    kind.noun()
                ),
            ));
        }
        if h.creator_uid.load(Ordering::Relaxed) != uid {
            return Err(bad(name, "made by another user"));
        }
        let len = (h.name_len.load(Ordering::Relaxed) as usize).min(NAME_MAX);
        let stored: Vec<u8> = h.name[..len]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        if stored != name.as_bytes() {
            return Err(bad(
                name,
                format!(
                    "it is {} '{}'",
                    kind.noun(),
                    String::from_utf8_lossy(&stored).escape_debug()
                ),
            ));
        }
        drop(head);
        Segment::map(name, fd, sizes)
    }

    fn map(name: &str, fd: OwnedFd, sizes: Sizes) -> Result<Segment> {
        let file = File::from(fd.try_clone().map_err(|e| io(name, "dup", e))?);
        let len = total_size(sizes);
        let map = memmap2::MmapOptions::new()
            .len(len)
            .map_raw(&file)
            .map_err(|e| io(name, "mmap", e))?;
        Ok(Segment { map, fd, sizes })
    }

    /// The mapping's address and length (page-aligned), to map it for a backend's streams.
    pub(crate) fn mapping(&self) -> (*mut u8, usize) {
        (self.map.as_mut_ptr(), self.map.len())
    }

    /// Byte offset of slot `i`'s `gpu` word in the mapping.
    pub(crate) fn gpu_offset(&self, i: usize) -> usize {
        assert!(i < self.sizes.max_size, "slot index out of range");
        std::mem::size_of::<Header>()
            + i * std::mem::size_of::<Slot>()
            + std::mem::offset_of!(Slot, gpu)
    }

    /// A buffer's bytes in the segment (host memory): their address and length.
    pub(crate) fn data(&self) -> Option<(*mut u8, usize)> {
        if self.sizes.data == 0 {
            return None;
        }
        // SAFETY: `data > 0` only for a mapping of `total_size(sizes) = data_offset() + data`
        // bytes, so the offset stays inside it.
        let at = unsafe { self.map.as_mut_ptr().add(data_offset()) };
        Some((at, self.sizes.data))
    }

    /// Write a device buffer's handle (the creator, before it hands the segment to anyone).
    pub(crate) fn set_mem_handle(&self, bytes: u64, handle: &[u8; HANDLE_BYTES]) {
        let h = self.header();
        h.buffer_bytes.store(bytes, Ordering::Relaxed);
        for (b, v) in h.mem_handle.iter().zip(handle) {
            b.store(*v, Ordering::Relaxed);
        }
    }

    /// A device buffer's handle, as the creator wrote it.
    pub(crate) fn mem_handle(&self) -> [u8; HANDLE_BYTES] {
        let h = self.header();
        std::array::from_fn(|k| h.mem_handle[k].load(Ordering::Relaxed))
    }

    /// Byte offset of peer entry `i`'s `gpu` word in the mapping.
    pub(crate) fn peer_gpu_offset(&self, i: usize) -> usize {
        assert!(i < MAX_PEERS, "peer index out of range");
        std::mem::offset_of!(Header, peers)
            + i * std::mem::size_of::<Peer>()
            + std::mem::offset_of!(Peer, gpu)
    }

    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub(crate) fn header(&self) -> &Header {
        // SAFETY: the mapping is at least `size_of::<Header>()` bytes (`map` maps
        // `total_size(max_size)` of a file checked or made that large and sealed against
        // shrinking), page-aligned (so aligned for `Header`), and lives as long as `self`.
        // `Header` is only atomics, valid for any bit pattern, and other processes change it
        // only through atomic operations on the same words.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    /// Slot `i`; `i < max_size` (callers compute it as `seq mod max_size`).
    pub(crate) fn slot(&self, i: usize) -> &Slot {
        assert!(i < self.sizes.max_size, "slot index out of range");
        // SAFETY: slots follow the header; slot `i < max_size` lies inside the mapping of
        // `total_size(max_size)` bytes; `Header`'s size is a multiple of 8 (its alignment),
        // so the slot is aligned. `Slot` is atomics only, as `Header` above.
        unsafe {
            &*(self
                .map
                .as_ptr()
                .add(std::mem::size_of::<Header>() + i * std::mem::size_of::<Slot>())
                as *const Slot)
        }
    }
}

impl Segment {
    /// Slot `i`'s event handle (`i < max_size`, in a segment of IPC events).
    fn handle_bytes(&self, i: usize) -> &[AtomicU8; HANDLE_BYTES] {
        assert!(
            self.sizes.mechanism == Mechanism::IpcEvent && i < self.sizes.max_size,
            "event handle index out of range"
        );
        // SAFETY: the handles follow the slots, `HANDLE_BYTES` each; handle `i < max_size` of
        // a segment with handles lies inside the mapping of `total_size(sizes)` bytes. Bytes
        // need no alignment; they are atomics, as `Header` above.
        unsafe {
            &*(self
                .map
                .as_ptr()
                .add(slots_end(self.sizes.max_size) + i * HANDLE_BYTES)
                as *const [AtomicU8; HANDLE_BYTES])
        }
    }

    /// Write slot `i`'s event handle (the creator, before it hands the segment to anyone).
    pub(crate) fn set_event_handle(&self, i: usize, handle: &[u8; HANDLE_BYTES]) {
        for (b, v) in self.handle_bytes(i).iter().zip(handle) {
            b.store(*v, Ordering::Relaxed);
        }
    }

    /// Whether this process created the segment.
    pub(crate) fn created_here(&self) -> bool {
        self.header().creator_pid.load(Ordering::Relaxed) == super::peers::me()
    }

    /// Slot `i`'s event handle, as the creator wrote it.
    pub(crate) fn event_handle(&self, i: usize) -> [u8; HANDLE_BYTES] {
        let bytes = self.handle_bytes(i);
        std::array::from_fn(|k| bytes[k].load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes() -> Sizes {
        Sizes {
            nconsumers: 2,
            max_size: 4,
            mechanism: Mechanism::HostWord,
            data: 0,
            buffer_len: 0,
        }
    }

    fn reopen(seg: &Segment, name: &str) -> Result<Segment> {
        Segment::open(name, Kind::Ring, seg.fd().try_clone_to_owned().unwrap())
    }

    #[test]
    fn a_segment_is_mode_0600_sealed_and_reopens_with_its_sizes() {
        let seg = Segment::create("r", Kind::Ring, sizes()).unwrap();
        let st = rustix::fs::fstat(seg.fd()).unwrap();
        assert_eq!(st.st_mode & 0o777, 0o600);
        let again = reopen(&seg, "r").unwrap();
        assert_eq!((again.sizes.nconsumers, again.sizes.max_size), (2, 4));
        assert_eq!(again.slot(3).done.load(Ordering::Relaxed), -1);
    }

    #[test]
    fn open_refuses_a_segment_of_another_name() {
        let seg = Segment::create("r", Kind::Ring, sizes()).unwrap();
        let e = reopen(&seg, "other").unwrap_err();
        assert!(matches!(e, Error::BadSegment { .. }), "{e}");
        assert!(e.to_string().contains("it is ring 'r'"), "{e}");
    }

    #[test]
    fn open_refuses_a_foreign_or_garbage_file() {
        let fd = rustix::fs::memfd_create("x", MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600)).unwrap();
        rustix::fs::ftruncate(&fd, 1 << 16).unwrap();
        // Unsealed: refused before anything is read.
        let e = Segment::open("r", Kind::Ring, fd.try_clone().unwrap()).unwrap_err();
        assert!(e.to_string().contains("not sealed"), "{e}");
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW).unwrap();
        let e = Segment::open("r", Kind::Ring, fd).unwrap_err();
        assert!(e.to_string().contains("no seqsync magic"), "{e}");
    }

    #[test]
    fn open_refuses_a_segment_of_the_other_kind() {
        let seg = Segment::create("r", Kind::Ring, sizes()).unwrap();
        let e =
            Segment::open("r", Kind::Timeline, seg.fd().try_clone_to_owned().unwrap()).unwrap_err();
        assert!(e.to_string().contains("not a timeline segment"), "{e}");
        let t = Segment::create("t", Kind::Timeline, Sizes::default()).unwrap();
        assert!(Segment::open("t", Kind::Timeline, t.fd().try_clone_to_owned().unwrap()).is_ok());
        // A timeline's segment claiming slots is refused, never mapped past its end.
        t.header().max_size.store(4, Ordering::Relaxed);
        let e =
            Segment::open("t", Kind::Timeline, t.fd().try_clone_to_owned().unwrap()).unwrap_err();
        assert!(
            e.to_string()
                .contains("a timeline's segment with max_size 4"),
            "{e}"
        );
    }

    #[test]
    fn open_refuses_an_unknown_mechanism_and_a_timeline_claiming_a_device_one() {
        let seg = Segment::create("r", Kind::Ring, sizes()).unwrap();
        seg.header().mechanism.store(9, Ordering::Relaxed);
        let e = reopen(&seg, "r").unwrap_err();
        assert!(e.to_string().contains("mechanism code 9"), "{e}");
        let t = Segment::create("t", Kind::Timeline, Sizes::default()).unwrap();
        t.header().mechanism.store(2, Ordering::Relaxed);
        let e =
            Segment::open("t", Kind::Timeline, t.fd().try_clone_to_owned().unwrap()).unwrap_err();
        assert!(e.to_string().contains("mechanism code 2"), "{e}");
    }

    #[test]
    fn open_refuses_a_truncated_file_and_an_open_mode() {
        let fd = rustix::fs::memfd_create("x", MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600)).unwrap();
        rustix::fs::ftruncate(&fd, 64).unwrap();
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW).unwrap();
        let e = Segment::open("r", Kind::Ring, fd.try_clone().unwrap()).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o644)).unwrap();
        let e = Segment::open("r", Kind::Ring, fd).unwrap_err();
        assert!(e.to_string().contains("others may access it"), "{e}");
    }

    #[test]
    fn open_refuses_sizes_that_do_not_match_the_file() {
        let seg = Segment::create("r", Kind::Ring, sizes()).unwrap();
        // A peer claims a larger ring than the file holds: refused, never mapped past the end.
        seg.header().max_size.store(1000, Ordering::Relaxed);
        let e = reopen(&seg, "r").unwrap_err();
        assert!(e.to_string().contains("a ring of max_size 1000"), "{e}");
        seg.header().max_size.store(0, Ordering::Relaxed);
        assert!(reopen(&seg, "r")
            .unwrap_err()
            .to_string()
            .contains("outside"));
        seg.header().max_size.store(4, Ordering::Relaxed);
        seg.header().version.store(7, Ordering::Relaxed);
        assert!(reopen(&seg, "r")
            .unwrap_err()
            .to_string()
            .contains("layout version 7"));
        seg.header()
            .version
            .store(LAYOUT_VERSION, Ordering::Relaxed);
        seg.header().nconsumers.store(u32::MAX, Ordering::Relaxed);
        assert!(reopen(&seg, "r")
            .unwrap_err()
            .to_string()
            .contains("nconsumers"));
    }
}
