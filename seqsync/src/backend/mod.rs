//! Backends: a *stream* (an in-order queue of work) and an *event* (a point in a stream).
//!
//! It may use: nothing else of seqsync but the error type, the host
//! wait strategy (`wait_strategy.rs`) and the crate's short-section `lock`: it is the
//! bottom layer.
//!
//! | backend | stream | event |
//! |---|---|---|
//! | [`host`] | a worker thread running closures in order | a position in that order |
//! | [`cuda`] | a CUDA stream (cudarc) | a CUDA event, timing disabled |
//! | [`AnyBackend`] | either, picked at run time ([`AnyBackend::auto`]) | either |
//!
//! Every backend offers the same operations. Streams: create one by name, enqueue host work on
//! it ([`Backend::launch_host`]), block until it drains ([`Backend::synchronize_stream`]).
//! Events, which are all [`crate::EventRingbuf`] needs: record an event at the current end of a
//! stream, make a stream wait for an event, block the host until an event completes
//! (interruptibly), and query an event. A re-record never changes a wait enqueued earlier
//! (CUDA's rule, which the host backend keeps too): a wait snapshots the point the event stood
//! for when the wait was made.
//!
//! ```
//! use seqsync::backend::Backend;
//! use seqsync::{AnyBackend, BackendKind};
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//!
//! fn count_to_three<B: Backend>(backend: &B) -> seqsync::Result<u32> {
//!     let stream = backend.new_stream("counter")?;
//!     let n = Arc::new(AtomicU32::new(0));
//!     for _ in 0..3 {
//!         let n = n.clone();
//!         backend.launch_host(&stream, Box::new(move || { n.fetch_add(1, Ordering::SeqCst); }))?;
//!     }
//!     backend.synchronize_stream(&stream)?;
//!     Ok(n.load(Ordering::SeqCst))
//! }
//! assert_eq!(count_to_three(&AnyBackend::new(BackendKind::Host)?)?, 3);
//! # Ok::<(), seqsync::Error>(())
//! ```
//!
//! For [timelines](crate::timeline) a backend also offers a [`Semaphore`] word that the host
//! and streams write and wait on ([`Backend::signal_on`], [`Backend::wait_on`]).

use crate::error::Result;

pub(crate) mod any;
pub(crate) mod command;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod host;
pub(crate) mod interrupt;
pub(crate) mod memory;
pub(crate) mod replay;
pub(crate) mod semaphore;

pub use any::{AnyBackend, AnyStream, BackendKind};
pub use command::{CommandBackend, CopyOp, FillOp};
pub use memory::MemoryBackend;

pub(crate) use interrupt::{synchronize_by_polling, Interrupt, NeverInterrupt, SyncOutcome};
pub(crate) use memory::{
    next_stream_id, on_stream_gone, stream_gone, streams_gone_now, streams_gone_since, GoneSince,
    MemoryUsage,
};
pub(crate) use semaphore::{Mechanism, Semaphore, SemaphoreWaker};

/// Host memory mapped for a backend's streams ([`Backend::map_host`]): what the backend made
/// of it (its device address, on CUDA), released on drop.
pub struct MappedHost {
    /// The backend's own registration (`Any`: each backend downcasts its own).
    pub(crate) inner: Box<dyn std::any::Any + Send + Sync>,
    /// Bytes mapped.
    pub(crate) len: usize,
}

impl std::fmt::Debug for MappedHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedHost")
            .field("len", &self.len)
            .finish()
    }
}

impl MappedHost {
    /// Offset `offset` of an 8-byte word inside the mapping, checked.
    pub(crate) fn word_at(&self, offset: usize) -> Result<usize> {
        if !offset.is_multiple_of(8) || offset.checked_add(8).is_none_or(|end| end > self.len) {
            return Err(crate::error::Error::invalid(
                "mapped host memory",
                format!(
                    "word offset {offset} outside {} bytes or not 8-aligned",
                    self.len
                ),
            ));
        }
        Ok(offset)
    }
}

/// The bytes that let another process open an event ([`Backend::ipc_event_open`]).
pub type IpcEventHandle = [u8; 64];

/// The bytes that let another process map device memory ([`Backend::ipc_memory_open`]).
pub type IpcMemoryHandle = [u8; 64];

/// Memory shared with other processes, as this process maps it: its address for this
/// backend's copies and kernels. Dropping it frees it (the exporter) or unmaps it (an
/// importer), as the backend requires.
pub struct IpcMemory {
    /// The backend's own allocation or mapping, held for its drop (which frees or unmaps).
    pub(crate) _owner: Box<dyn std::any::Any + Send + Sync>,
    /// The address this process's streams use.
    pub(crate) ptr: u64,
}

impl std::fmt::Debug for IpcMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpcMemory")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .finish()
    }
}

/// Where a backend puts memory it shares with other processes
/// ([`Backend::ipc_memory_export`]).
#[derive(Debug)]
pub enum IpcExport {
    /// In the shared segment itself: the backend's streams address host memory (the host
    /// backend).
    InSegment,
    /// Device memory of this process, and the handle other processes open it by.
    Device(IpcMemory, IpcMemoryHandle),
}

/// The bytes that let another process import one allocation of a shared pool
/// ([`Backend::ipc_pool_import_pointer`]; CUDA's `CUmemPoolPtrExportData`).
pub type IpcPoolPointer = [u8; 64];

/// A stream-ordered pool shared with other processes, as this process holds it (the
/// exporter's pool, or an importer's import of it). Dropping it destroys this process's
/// handle; the driver keeps the memory of allocations still imported or allocated.
pub struct IpcPool {
    /// The backend's own pool, held for its drop.
    pub(crate) _owner: Box<dyn std::any::Any + Send + Sync>,
    /// The backend's handle (CUDA: the `CUmemoryPool`).
    pub(crate) raw: u64,
}

impl std::fmt::Debug for IpcPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpcPool")
            .field("raw", &format_args!("{:#x}", self.raw))
            .finish()
    }
}

/// Where a backend keeps a pool it shares with other processes ([`Backend::ipc_pool_create`]).
#[derive(Debug)]
pub enum IpcPoolExport {
    /// In the shared segment itself: the backend's streams address host memory (the host
    /// backend).
    InSegment,
    /// A driver pool of this process, and the file descriptor other processes import it by.
    Device(IpcPool, std::os::fd::OwnedFd),
}

/// How an event is created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventOptions {
    /// Let a plain [`Backend::synchronize`] sleep in the driver instead of spinning
    /// (`CU_EVENT_BLOCKING_SYNC` on CUDA; the host backend always sleeps).
    pub blocking_sync: bool,
    /// Keep a timestamp (CUDA events are created with timing disabled unless this is set).
    pub timing: bool,
}

/// A stream/event implementation. [`crate::EventRingbuf`] is generic over it.
///
/// Handles are cheap to clone (`Arc` inside). Every call may be made from any thread.
pub trait Backend: Clone + Send + Sync + 'static {
    /// An in-order queue of work.
    type Stream: Send + Sync;
    /// A point in a stream.
    type Event: Send + Sync;

    /// The backend's short name, `"host"` or `"cuda"`.
    fn name(&self) -> &'static str;

    /// Create a stream named `name` (the host backend names its worker thread after it; a
    /// CUDA stream is a new non-blocking stream, and the name is only for the caller).
    ///
    /// # Errors
    /// [`Error::Backend`](crate::Error::Backend) when the backend cannot create one.
    fn new_stream(&self, name: &str) -> Result<Self::Stream>;

    /// Enqueue host work on `stream`: `f` runs on a host thread once everything enqueued on
    /// `stream` before it has completed, and everything enqueued after it waits for it to
    /// return (host: a closure on the stream's worker; CUDA: `cuLaunchHostFunc`, so `f` must
    /// make no CUDA calls, nor drop the last handle of a CUDA object).
    ///
    /// A panic in `f` is caught: the host backend fails the stream (see
    /// [`HostStream`](host::HostStream)); on CUDA the next
    /// [`synchronize_stream`](Self::synchronize_stream) of that stream returns the panic as an
    /// error.
    ///
    /// # Errors
    /// [`Error::Backend`](crate::Error::Backend) when the work cannot be enqueued (then `f` is
    /// dropped without running).
    fn launch_host(
        &self,
        stream: &Self::Stream,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<()>;

    /// As [`launch_host`](Self::launch_host), but `f` also runs when the stream failed before
    /// it, and is told why (`Some(message)`), so work that must report to another party (a
    /// shared ring's record) is never skipped silently. The default runs `f(None)` through
    /// `launch_host` (a backend whose failed streams still run host work).
    ///
    /// # Errors
    /// As `launch_host`.
    fn launch_host_always(
        &self,
        stream: &Self::Stream,
        f: Box<dyn FnOnce(Option<std::sync::Arc<str>>) + Send + 'static>,
    ) -> Result<()> {
        self.launch_host(stream, Box::new(move || f(None)))
    }

    /// As [`launch_host`](Self::launch_host), for `f` that blocks until something outside the
    /// stream happens (a shared timeline's value): the host backend does not wait for it when
    /// the stream is dropped (see its streams' drop). The default is `launch_host`.
    ///
    /// # Errors
    /// As `launch_host`.
    fn launch_host_wait(
        &self,
        stream: &Self::Stream,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<()> {
        self.launch_host(stream, f)
    }

    /// Whether host work enqueued on one stream may block for long without holding up any
    /// other stream: true on the host backend (each stream has its own thread); false on CUDA
    /// (host functions of all streams share the driver's callback thread).
    fn host_work_may_block(&self) -> bool {
        false
    }

    /// Block the calling thread until everything enqueued on `stream` so far has completed.
    ///
    /// # Errors
    /// [`Error::Backend`](crate::Error::Backend) when that work failed (host: a closure
    /// panicked; CUDA: a driver error, or a host function panicked).
    fn synchronize_stream(&self, stream: &Self::Stream) -> Result<()>;

    /// An event that other processes can open, and its handle for them
    /// ([`ipc_event_open`](Self::ipc_event_open)): on CUDA an event made with
    /// `CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING` and its `cuIpcGetEventHandle`. The
    /// default refuses (a backend with no such event).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) where there is none;
    /// [`Error::Backend`](crate::Error::Backend) from the driver.
    fn ipc_event_create(&self) -> Result<(Self::Event, IpcEventHandle)> {
        Err(crate::error::Error::invalid(
            self.name(),
            "no events other processes can open on this backend",
        ))
    }

    /// Map `len` bytes of host memory at `ptr` for this backend's streams, which may then write
    /// and wait on 64-bit words in it ([`write_mapped_on`](Self::write_mapped_on),
    /// [`wait_mapped_on`](Self::wait_mapped_on)) while the host reads and writes them with
    /// atomics: on CUDA `cuMemHostRegister(DEVICEMAP | PORTABLE)`, so memory that several
    /// processes map (a shared segment) orders streams of each of them. The default refuses.
    ///
    /// # Safety
    /// `ptr..ptr + len` is page-aligned, mapped host memory that stays mapped while the result
    /// lives; the result is dropped only once no stream operation enqueued through it can
    /// still run (dropping it earlier waits for the device, on CUDA).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) where there is no such
    /// mapping; [`Error::Backend`](crate::Error::Backend) from the driver.
    unsafe fn map_host(&self, ptr: *mut u8, len: usize) -> Result<MappedHost> {
        let _ = (ptr, len);
        Err(crate::error::Error::invalid(
            self.name(),
            "no host memory mapped for streams on this backend",
        ))
    }

    /// Enqueue on `stream` a write of `value` to the word at byte `offset` of `map`, once the
    /// work enqueued before it is done.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an offset outside `map`
    /// or not 8-aligned, or a map of another backend; the driver's errors.
    fn write_mapped_on(
        &self,
        stream: &Self::Stream,
        map: &MappedHost,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        let _ = (stream, map, offset, value);
        Err(crate::error::Error::invalid(
            self.name(),
            "no host memory mapped for streams on this backend",
        ))
    }

    /// Enqueue on `stream` a wait: work enqueued after it runs once the word at byte `offset`
    /// of `map` is at least `value` (compared as `CU_STREAM_WAIT_VALUE_GEQ` does: the
    /// difference as a signed number).
    ///
    /// # Errors
    /// As [`write_mapped_on`](Self::write_mapped_on).
    fn wait_mapped_on(
        &self,
        stream: &Self::Stream,
        map: &MappedHost,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        let _ = (stream, map, offset, value);
        Err(crate::error::Error::invalid(
            self.name(),
            "no host memory mapped for streams on this backend",
        ))
    }

    /// Whether this backend's copies and kernels take host addresses (the host backend's
    /// streams are host threads): then memory shared in a segment is usable as is.
    fn addresses_host_memory(&self) -> bool {
        false
    }

    /// Allocate `bytes` of memory other processes of the user can map (CUDA: `cuMemAlloc`,
    /// complete when this returns, and `cuIpcGetMemHandle`), or say that the shared segment
    /// is such memory ([`IpcExport::InSegment`]). The default refuses.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) where there is no such
    /// memory; [`Error::Backend`](crate::Error::Backend) from the driver.
    fn ipc_memory_export(&self, bytes: usize) -> Result<IpcExport> {
        let _ = bytes;
        Err(crate::error::Error::invalid(
            self.name(),
            "no memory other processes can map on this backend",
        ))
    }

    /// Map the memory another process exported by `handle` (CUDA: `cuIpcOpenMemHandle`), which
    /// it says holds `len` bytes. Dropping the result waits for this process's work on the
    /// device, then unmaps it.
    ///
    /// # Errors
    /// As [`ipc_memory_export`](Self::ipc_memory_export); a handle that names no live
    /// allocation is the driver's error; an allocation smaller than `len` is
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) (nothing stays mapped): work
    /// sized from `len` must not run past it.
    fn ipc_memory_open(&self, handle: &IpcMemoryHandle, len: usize) -> Result<IpcMemory> {
        let _ = (handle, len);
        Err(crate::error::Error::invalid(
            self.name(),
            "no memory other processes can map on this backend",
        ))
    }

    /// A stream-ordered pool other processes of the user can import (CUDA: `cuMemPoolCreate`
    /// with POSIX file descriptor handles, and `cuMemPoolExportToShareableHandle`), or say
    /// that the shared segment is such memory ([`IpcPoolExport::InSegment`]: the default for
    /// a backend whose streams address host memory; otherwise the default refuses).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) where there is no such pool;
    /// [`Error::Backend`](crate::Error::Backend) from the driver.
    fn ipc_pool_create(&self) -> Result<IpcPoolExport> {
        if self.addresses_host_memory() {
            return Ok(IpcPoolExport::InSegment);
        }
        Err(crate::error::Error::invalid(
            self.name(),
            "no pool other processes can import on this backend",
        ))
    }

    /// Import the pool another process exported by `fd` (CUDA:
    /// `cuMemPoolImportFromShareableHandle`, and read-write access for this context's
    /// device). An imported pool makes no allocations of its own.
    ///
    /// # Safety
    /// This process holds no other import of the same pool (the driver may return the same
    /// handle twice, which two owners would destroy twice); [`SharedPool`](crate::ipc::SharedPool)
    /// keeps one per process.
    ///
    /// # Errors
    /// As [`ipc_pool_create`](Self::ipc_pool_create); an `fd` that names no pool is the
    /// driver's error.
    unsafe fn ipc_pool_import(&self, fd: std::os::fd::OwnedFd) -> Result<IpcPool> {
        let _ = fd;
        Err(crate::error::Error::invalid(
            self.name(),
            "no pool other processes can import on this backend",
        ))
    }

    /// Allocate `bytes` from `pool` (this process's, from [`ipc_pool_create`](Self::ipc_pool_create))
    /// in `stream`'s order, wait until the allocation is complete (so that no importer can
    /// see it before it exists), and export it (`cuMemPoolExportPointer`). Dropping the
    /// memory waits for this process's work on the device, then frees it.
    ///
    /// # Errors
    /// As [`ipc_pool_create`](Self::ipc_pool_create); the driver's (out of memory).
    fn ipc_pool_alloc(
        &self,
        pool: &IpcPool,
        stream: &Self::Stream,
        bytes: usize,
    ) -> Result<(IpcMemory, IpcPoolPointer)> {
        let _ = (pool, stream, bytes);
        Err(crate::error::Error::invalid(
            self.name(),
            "no pool other processes can import on this backend",
        ))
    }

    /// Import one allocation of an imported `pool` from its export data
    /// (`cuMemPoolImportPointer`), of at least `len` bytes (checked against the allocation
    /// the driver maps). Dropping the memory waits for this process's work on the device,
    /// then frees this process's import (`cuMemFree`), which the exporter's free must follow:
    /// the ipc layer keeps that order.
    ///
    /// # Safety
    /// `pool` came from [`ipc_pool_import`](Self::ipc_pool_import), and this process holds no
    /// other import of the same allocation (two owners would free it twice).
    ///
    /// # Errors
    /// As [`ipc_pool_import`](Self::ipc_pool_import); data that names no live allocation is
    /// the driver's error; an allocation smaller than `len` is
    /// [`Error::BadSegment`](crate::Error::BadSegment)-like
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) (nothing is kept).
    unsafe fn ipc_pool_import_pointer(
        &self,
        pool: &IpcPool,
        data: &IpcPoolPointer,
        len: usize,
    ) -> Result<IpcMemory> {
        let _ = (pool, data, len);
        Err(crate::error::Error::invalid(
            self.name(),
            "no pool other processes can import on this backend",
        ))
    }

    /// The event another process made with [`ipc_event_create`](Self::ipc_event_create), from
    /// its handle (`cuIpcOpenEventHandle`): record it there, wait on it and query it here.
    ///
    /// # Errors
    /// As `ipc_event_create`; a handle that names no live event is the driver's error.
    fn ipc_event_open(&self, handle: &IpcEventHandle) -> Result<Self::Event> {
        let _ = handle;
        Err(crate::error::Error::invalid(
            self.name(),
            "no events other processes can open on this backend",
        ))
    }

    /// Create an event. A never-recorded event counts as complete.
    fn create_event(&self, options: EventOptions) -> Result<Self::Event>;

    /// Make `event` stand for the current end of `stream`.
    fn record(&self, event: &Self::Event, stream: &Self::Stream) -> Result<()>;

    /// The calling host thread has itself done the work that `event`'s slot now stands for,
    /// with no stream ([`EventRingbuf::record_host`](crate::EventRingbuf::record_host)): the
    /// ring's slot word publishes it and the event is left as it is, so a backend that runs
    /// work does nothing here (the default). A backend that tracks ordering (the hazard
    /// checker's [`ValidatingBackend`](crate::hazard::ValidatingBackend)) orders a later wait or
    /// synchronize on `event` after the thread's work so far.
    #[inline]
    fn record_host(&self, event: &Self::Event) {
        let _ = event;
    }

    /// Make all work enqueued on `stream` from now on wait for `event` as recorded now.
    fn wait(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;

    /// Block the calling thread until `event` completes.
    fn synchronize(&self, event: &Self::Event) -> Result<()>;

    /// Block the calling thread until `event` completes or `interrupt` fires.
    fn synchronize_interruptible(
        &self,
        event: &Self::Event,
        interrupt: &dyn Interrupt,
    ) -> Result<SyncOutcome>;

    /// Has `event` completed? Never blocks.
    fn query(&self, event: &Self::Event) -> Result<bool>;

    /// A 64-bit semaphore word, what a [`crate::timeline::Timeline`] is made of.
    type Semaphore: Semaphore;

    /// A number that identifies `stream` among all streams of all backends for as long as the
    /// process runs: never reused by another stream, even after `stream` is dropped (timelines
    /// and pools keep per-stream bookkeeping under it).
    fn stream_id(&self, stream: &Self::Stream) -> u64;

    /// Create a semaphore word holding `initial` (`<= MAX_VALUE`). The backend calls `waker`
    /// after each stream write of the word, if it [notifies](Semaphore::notifies).
    fn create_semaphore(&self, initial: u64, waker: SemaphoreWaker) -> Result<Self::Semaphore>;

    /// Enqueue on `stream`: the word becomes `value` when the stream gets there (the caller
    /// checked that `value` exceeds everything signalled or enqueued before). If the stream
    /// failed before that point, the backend fails the word instead.
    fn signal_on(&self, stream: &Self::Stream, sem: &Self::Semaphore, value: u64) -> Result<()>;

    /// Enqueue on `stream`: work enqueued afterwards runs only once the word is `>= value`, or
    /// failed, even if no signal of `value` has been enqueued yet (wait-before-signal).
    fn wait_on(&self, stream: &Self::Stream, sem: &Self::Semaphore, value: u64) -> Result<()>;

    /// Can this backend enqueue on `stream` at all? A backend over several kinds of device
    /// ([`AnyBackend`]) refuses a stream of another kind here, so that a
    /// timeline refuses the call before it changes anything. Always `Ok` for one kind (the
    /// default).
    #[inline(always)]
    fn check_stream(&self, stream: &Self::Stream) -> Result<()> {
        let _ = stream;
        Ok(())
    }
}
