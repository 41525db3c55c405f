//! [`SharedBuffer`]: memory one process allocates and other processes of the same user map,
//! found by name like a ring.
//!
//! Where the bytes live is the backend's answer ([`Backend::ipc_memory_export`]): on CUDA,
//! device memory of the creator (`cuMemAlloc`), which other processes open by its IPC memory
//! handle, kept in the segment; on the host backend, the segment itself (its bytes after the
//! header), which every process maps.
//!
//! The driver's rules are kept here rather than left to the user:
//!
//! - memory is never seen before it exists: the allocation is complete before the segment is
//!   handed to anyone (`cuMemAlloc` is synchronous);
//! - an importer unmaps only after its own device work is done (its mapping's drop waits for
//!   its context), and then gives its peer entry back;
//! - the creator frees only once no living process maps it: [`SharedBuffer::free`] waits for
//!   that (or says [`Error::StillImported`] and frees nothing), and a drop that cannot wait
//!   long enough leaves the memory allocated rather than free it under an importer. A buffer
//!   being freed refuses new importers (its segment is marked, its name is withdrawn first).
//!
//! A dead importer maps nothing any more (the kernel and the driver unmap a dead process's
//! memory): it does not hold up a free.
//!
//! It may use: `backend` (the memory and its handle) and the segment, rendezvous and peers of
//! this layer.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::peers::{self, Role, CHECK_EVERY};
use super::rendezvous::{self, Server};
use super::segment::{Kind, Segment, Sizes, MAX_BUFFER_BYTES};
use super::shared_ring::check_name;
use super::wake::{self, Channel};
use crate::backend::{Backend, IpcExport, IpcMemory};
use crate::error::{Error, Result};

/// How long a drop of the creator's handle waits for importers to unmap before it leaves the
/// memory allocated instead.
const DROP_WAIT: Duration = Duration::from_secs(5);

/// Memory shared by processes of one user on this host: made by
/// [`create`](SharedBuffer::create) in one process, mapped by [`open`](SharedBuffer::open) in
/// others; [`ptr`](SharedBuffer::ptr) is its address for this process's backend (copies and
/// kernels), [`at`](SharedBuffer::at) an address inside it, checked.
///
/// Order the work on it as any other memory: with a [`SharedRing`](super::SharedRing) or a
/// [`SharedTimeline`](super::SharedTimeline) between the processes. The buffer keeps the
/// driver's rules of who may free and unmap when (see [`free`](SharedBuffer::free)).
///
/// Dropping a handle blocks: on CUDA it waits for this process's work on the device before it
/// unmaps or frees (a stream held for good by a wait nobody releases would hold the drop too),
/// and the creator's waits up to 5 s for importers to unmap (then leaves the memory allocated
/// rather than free it under them).
///
/// ```
/// use seqsync::ipc::SharedBuffer;
/// use seqsync::HostBackend;
/// use std::time::Duration;
///
/// let host = HostBackend::new();
/// let out = SharedBuffer::create(&host, "doc-out", 4096)?;
/// let seen = SharedBuffer::open(&host, "doc-out")?; // in another process, usually
/// assert_eq!(seen.len(), 4096);
/// // Addresses are checked against the buffer's size.
/// assert!(seen.at(4000, 64).is_ok());
/// assert!(matches!(seen.at(4096, 1), Err(seqsync::Error::InvalidArgument { .. })));
/// // The creator frees it only once no other process maps it.
/// assert_eq!(out.importers(), 1);
/// drop(seen);
/// out.free(Duration::from_secs(1))?;
/// # Ok::<(), seqsync::Error>(())
/// ```
pub struct SharedBuffer<B: Backend> {
    name: String,
    // Dropped in this order: the memory (unmapped or freed), then the peer entry, then the
    // segment; a creator's server first of all.
    server: Option<Server>,
    memory: Option<IpcMemory>,
    peer: usize,
    seg: Segment,
    ptr: u64,
    len: usize,
    backend: B,
}

impl<B: Backend> std::fmt::Debug for SharedBuffer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBuffer")
            .field("name", &self.name)
            .field("len", &self.len)
            .field("creator", &self.is_creator())
            .finish()
    }
}

impl<B: Backend> SharedBuffer<B> {
    /// Allocate `bytes` of memory other processes can map, named `name`, in this process.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, a name a living process has created
    /// already, 0 bytes or more than 1 TiB, or a backend with no such memory; the backend's
    /// errors.
    pub fn create(backend: &B, name: &str, bytes: usize) -> Result<Self> {
        check_name(name)?;
        if bytes == 0 || bytes as u64 > MAX_BUFFER_BYTES {
            return Err(Error::invalid(
                name,
                format!("a shared buffer of {bytes} bytes: 1 byte to 1 TiB"),
            ));
        }
        let (seg, memory) = match backend.ipc_memory_export(bytes)? {
            IpcExport::InSegment => {
                let sizes = Sizes {
                    data: bytes,
                    buffer_len: bytes,
                    ..Sizes::default()
                };
                (Segment::create(name, Kind::Buffer, sizes)?, None)
            }
            IpcExport::Device(memory, handle) => {
                let sizes = Sizes {
                    buffer_len: bytes,
                    ..Sizes::default()
                };
                let seg = Segment::create(name, Kind::Buffer, sizes)?;
                seg.set_mem_handle(bytes as u64, &handle);
                (seg, Some(memory))
            }
        };
        let fd = seg
            .fd()
            .try_clone_to_owned()
            .map_err(|e| Error::invalid(name, format!("dup its segment: {e}")))?;
        let peer = peers::register(seg.header(), name, Role::Creator)?;
        let server = match Server::start(Kind::Buffer, name, fd) {
            Ok(s) => s,
            Err(e) => {
                peers::unregister(seg.header(), peer);
                return Err(e);
            }
        };
        Ok(Self::made(backend, name, seg, memory, peer, Some(server)))
    }

    /// Map buffer `name`, made by another process (or this one) of the same user.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when no living process has created it, when its creator is
    /// freeing it, or when its memory is of a kind this backend cannot address (a host
    /// buffer on CUDA, a device buffer on the host backend); [`Error::BadSegment`] for a
    /// segment this build cannot trust; the driver's errors.
    pub fn open(backend: &B, name: &str) -> Result<Self> {
        check_name(name)?;
        let fd = rendezvous::fetch(Kind::Buffer, name)?;
        let seg = Segment::open(name, Kind::Buffer, fd)?;
        // A dead importer holds nothing: its entry may be taken over.
        let peer = peers::register_over_dead(seg.header(), name, Role::Opener, |_| {})?;
        // SeqCst with `free`'s: either it counts this entry, or this sees its mark.
        if seg.header().stop_state() != 0 {
            peers::unregister(seg.header(), peer);
            return Err(Error::invalid(name, "its creator is freeing it"));
        }
        let in_segment = seg.data().is_some();
        let memory = match (in_segment, backend.addresses_host_memory()) {
            (true, true) => None,
            (false, false) => {
                match backend.ipc_memory_open(&seg.mem_handle(), seg.sizes.buffer_len) {
                    Ok(m) => Some(m),
                    Err(e) => {
                        peers::unregister(seg.header(), peer);
                        return Err(e);
                    }
                }
            }
            (in_segment, _) => {
                peers::unregister(seg.header(), peer);
                return Err(Error::invalid(
                    name,
                    format!(
                        "its memory is {} memory, which backend '{}' cannot address",
                        if in_segment { "host" } else { "device" },
                        backend.name()
                    ),
                ));
            }
        };
        Ok(Self::made(backend, name, seg, memory, peer, None))
    }

    fn made(
        backend: &B,
        name: &str,
        seg: Segment,
        memory: Option<IpcMemory>,
        peer: usize,
        server: Option<Server>,
    ) -> Self {
        // The length checked at open (or made here), never read from the segment again.
        let len = seg.sizes.buffer_len;
        let ptr = match (&memory, seg.data()) {
            (Some(m), _) => m.ptr,
            (None, Some((p, _))) => p as u64,
            (None, None) => unreachable!("a buffer is in its segment or in device memory"),
        };
        SharedBuffer {
            name: name.to_owned(),
            server,
            memory,
            peer,
            seg,
            ptr,
            len,
            backend: backend.clone(),
        }
    }

    /// The buffer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: a shared buffer has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Did this process create it (and so frees it)?
    pub fn is_creator(&self) -> bool {
        self.server.is_some()
    }

    /// Its address for this process's backend: a device pointer on CUDA, a host address on
    /// the host backend. Valid while this handle lives.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The address of `len` bytes at `offset` in it (the allocation's base plus an offset).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when they do not lie inside the buffer.
    pub fn at(&self, offset: usize, len: usize) -> Result<u64> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.ptr.wrapping_add(offset as u64)),
            _ => Err(Error::invalid(
                &self.name,
                format!(
                    "bytes {offset}..+{len} outside the buffer's {} bytes",
                    self.len
                ),
            )),
        }
    }

    /// How many living processes other than its creator map it now.
    pub fn importers(&self) -> usize {
        living_importers(&self.seg, self.peer)
    }

    /// Free it (the creator), once no other process maps it: waits up to `timeout` for
    /// importers to drop their handles (a dead importer maps nothing). New importers are
    /// refused from the call on.
    ///
    /// # Errors
    /// [`Error::StillImported`] if some still map it after `timeout`: nothing is freed, and the
    /// memory stays allocated until this process ends (it cannot be freed under them).
    /// [`Error::InvalidArgument`] from an importer's handle (it unmaps when dropped).
    pub fn free(mut self, timeout: Duration) -> Result<()> {
        if !self.is_creator() {
            return Err(Error::invalid(
                &self.name,
                "only its creator frees it (an importer unmaps it when dropped)",
            ));
        }
        self.free_within(timeout)
    }

    fn free_within(&mut self, timeout: Duration) -> Result<()> {
        let h = self.seg.header();
        // No new importer from here on: the name is withdrawn, and one that fetched the
        // segment before sees the mark after it registers.
        self.server = None;
        if h.begin_stop() {
            h.finish_stop("freed by its creator", peers::me());
        }
        // `None`: no limit (a timeout past what an Instant holds).
        let deadline = wake::deadline(timeout);
        loop {
            let left = living_importers(&self.seg, self.peer);
            if left == 0 {
                self.memory = None; // freed (after this process's work on it)
                return Ok(());
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                // Never freed under an importer: kept until this process ends.
                std::mem::forget(self.memory.take());
                return Err(Error::StillImported {
                    buffer: self.name.clone(),
                    importers: left,
                });
            }
            let wait = deadline.map_or(CHECK_EVERY, |d| CHECK_EVERY.min(d - now));
            wake::sleep_for(h, wait);
        }
    }
}

impl<B: Backend> Drop for SharedBuffer<B> {
    fn drop(&mut self) {
        if self.is_creator() {
            let _ = self.free_within(DROP_WAIT);
        } else {
            // Unmapped first (after this process's device work), then the entry is given
            // back, so a creator that counts no importer frees memory nobody maps.
            self.memory = None;
        }
        peers::unregister(self.seg.header(), self.peer);
        wake::wake(self.seg.header(), Channel::State, true);
        let _ = &self.backend;
    }
}

/// Processes other than entry `mine` registered in the segment and still alive.
fn living_importers(seg: &Segment, mine: usize) -> usize {
    seg.header()
        .peers
        .iter()
        .enumerate()
        .filter(|(i, p)| *i != mine && p.state.load(Ordering::SeqCst) == 2)
        .filter(|(_, p)| peers::alive(p))
        .count()
}
