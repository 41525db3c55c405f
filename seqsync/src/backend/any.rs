//! A backend chosen at run time: CUDA when a driver and a GPU are present, else host.

use super::host::{
    HostAsyncPool, HostBackend, HostEvent, HostRawMemory, HostSemaphore, HostStream,
};
use super::{
    Backend, EventOptions, Interrupt, Mechanism, MemoryBackend, MemoryUsage, Semaphore,
    SemaphoreWaker, SyncOutcome,
};
use crate::error::{Error, Result};

#[cfg(feature = "cuda")]
use super::cuda::{CudaAsyncPool, CudaBackend, CudaEvent, CudaSemaphore, DeviceBuffer};
#[cfg(feature = "cuda")]
use cudarc::driver::CudaStream;
#[cfg(feature = "cuda")]
use std::sync::Arc;

/// Which backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// CUDA if a driver and a GPU are present, else host.
    Auto,
    /// The host backend (worker threads).
    Host,
    /// The CUDA backend; [`Error::NoDevice`] without a GPU.
    Cuda,
}

impl std::str::FromStr for BackendKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(BackendKind::Auto),
            "host" => Ok(BackendKind::Host),
            "cuda" => Ok(BackendKind::Cuda),
            other => Err(Error::invalid(
                "backend",
                format!("unknown backend '{other}': expected auto, host or cuda"),
            )),
        }
    }
}

/// Either backend, behind one type: rings and streams of an `AnyBackend` work the same on
/// both.
///
/// ```
/// use seqsync::{AnyBackend, BackendKind};
/// let backend = AnyBackend::new(BackendKind::Host)?;
/// assert_eq!(backend.kind(), BackendKind::Host);
/// let _stream = backend.new_stream("s")?;
/// # Ok::<(), seqsync::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyBackend {
    /// The host backend.
    Host(HostBackend),
    /// The CUDA backend.
    #[cfg(feature = "cuda")]
    Cuda(CudaBackend),
}

/// A stream of an [`AnyBackend`].
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyStream {
    /// A host stream.
    Host(HostStream),
    /// A CUDA stream.
    #[cfg(feature = "cuda")]
    Cuda(Arc<CudaStream>),
}

/// An event of an [`AnyBackend`].
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyEvent {
    /// A host event.
    Host(HostEvent),
    /// A CUDA event.
    #[cfg(feature = "cuda")]
    Cuda(CudaEvent),
}

/// A semaphore word of an [`AnyBackend`].
#[derive(Debug)]
pub enum AnySemaphore {
    /// A host semaphore word.
    Host(HostSemaphore),
    /// A CUDA semaphore word.
    #[cfg(feature = "cuda")]
    Cuda(CudaSemaphore),
}

impl Semaphore for AnySemaphore {
    fn load(&self) -> Result<u64> {
        match self {
            AnySemaphore::Host(s) => s.load(),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.load(),
        }
    }
    fn peek(&self) -> Option<u64> {
        match self {
            AnySemaphore::Host(s) => s.peek(),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.peek(),
        }
    }
    fn store(&self, value: u64) -> Result<()> {
        match self {
            AnySemaphore::Host(s) => s.store(value),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.store(value),
        }
    }
    fn fail(&self, last_value: u64) {
        match self {
            AnySemaphore::Host(s) => s.fail(last_value),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.fail(last_value),
        }
    }
    fn on_stream_failure(&self, hook: crate::backend::semaphore::StreamFailureHook) {
        match self {
            AnySemaphore::Host(s) => s.on_stream_failure(hook),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.on_stream_failure(hook),
        }
    }
    fn failure(&self) -> Option<Error> {
        match self {
            AnySemaphore::Host(s) => s.failure(),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.failure(),
        }
    }
    fn check(&self) -> Result<()> {
        match self {
            AnySemaphore::Host(s) => s.check(),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.check(),
        }
    }
    fn notifies(&self) -> bool {
        match self {
            AnySemaphore::Host(s) => s.notifies(),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.notifies(),
        }
    }
    fn mechanism(&self) -> Mechanism {
        match self {
            AnySemaphore::Host(s) => s.mechanism(),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.mechanism(),
        }
    }
    fn holds_commands_for(&self, value: u64) -> bool {
        match self {
            AnySemaphore::Host(s) => s.holds_commands_for(value),
            #[cfg(feature = "cuda")]
            AnySemaphore::Cuda(s) => s.holds_commands_for(value),
        }
    }
}

impl AnyBackend {
    /// Open the backend `kind` names; `Auto` picks CUDA (device 0) when a GPU is present.
    ///
    /// # Errors
    /// [`Error::NoDevice`] for `BackendKind::Cuda` without a GPU (or built without the `cuda`
    /// feature).
    pub fn new(kind: BackendKind) -> Result<Self> {
        match kind {
            BackendKind::Host => Ok(AnyBackend::Host(HostBackend::new())),
            #[cfg(feature = "cuda")]
            BackendKind::Cuda => CudaBackend::new(0).map(AnyBackend::Cuda),
            #[cfg(not(feature = "cuda"))]
            BackendKind::Cuda => Err(Error::NoDevice(
                "seqsync was built without the `cuda` feature".into(),
            )),
            BackendKind::Auto => Self::auto(),
        }
    }

    /// CUDA (device 0) when a driver and a GPU are present, else host.
    pub fn auto() -> Result<Self> {
        #[cfg(feature = "cuda")]
        if let Ok(gpu) = CudaBackend::new(0) {
            return Ok(AnyBackend::Cuda(gpu));
        }
        Ok(AnyBackend::Host(HostBackend::new()))
    }

    /// Which backend this is (never `Auto`).
    pub fn kind(&self) -> BackendKind {
        match self {
            AnyBackend::Host(_) => BackendKind::Host,
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(_) => BackendKind::Cuda,
        }
    }

    /// A new stream (`name` labels host streams' threads).
    pub fn new_stream(&self, name: &str) -> Result<AnyStream> {
        match self {
            AnyBackend::Host(h) => h.new_stream(name).map(AnyStream::Host),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(c) => c.new_stream(name).map(AnyStream::Cuda),
        }
    }
}

fn mismatch(what: &str) -> Error {
    Error::invalid(
        "backend",
        format!("{what} belongs to a different backend than the call"),
    )
}

impl Backend for AnyBackend {
    type Stream = AnyStream;
    type Event = AnyEvent;

    fn name(&self) -> &'static str {
        match self {
            AnyBackend::Host(h) => h.name(),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(c) => c.name(),
        }
    }

    fn new_stream(&self, name: &str) -> Result<AnyStream> {
        AnyBackend::new_stream(self, name)
    }

    fn launch_host(&self, stream: &AnyStream, f: Box<dyn FnOnce() + Send + 'static>) -> Result<()> {
        match (self, stream) {
            (AnyBackend::Host(b), AnyStream::Host(s)) => b.launch_host(s, f),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyStream::Cuda(s)) => b.launch_host(s, f),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream")),
        }
    }

    fn launch_host_wait(
        &self,
        stream: &AnyStream,
        f: Box<dyn FnOnce() + Send + 'static>,
    ) -> Result<()> {
        match (self, stream) {
            (AnyBackend::Host(b), AnyStream::Host(s)) => b.launch_host_wait(s, f),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyStream::Cuda(s)) => b.launch_host_wait(s, f),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream")),
        }
    }

    fn launch_host_always(
        &self,
        stream: &AnyStream,
        f: Box<dyn FnOnce(Option<std::sync::Arc<str>>) + Send + 'static>,
    ) -> Result<()> {
        match (self, stream) {
            (AnyBackend::Host(b), AnyStream::Host(s)) => b.launch_host_always(s, f),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyStream::Cuda(s)) => b.launch_host_always(s, f),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream")),
        }
    }

    fn host_work_may_block(&self) -> bool {
        match self {
            AnyBackend::Host(b) => b.host_work_may_block(),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b.host_work_may_block(),
        }
    }

    fn ipc_event_create(&self) -> Result<(AnyEvent, super::IpcEventHandle)> {
        match self {
            AnyBackend::Host(b) => b.ipc_event_create().map(|(e, h)| (AnyEvent::Host(e), h)),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b.ipc_event_create().map(|(e, h)| (AnyEvent::Cuda(e), h)),
        }
    }

    fn addresses_host_memory(&self) -> bool {
        match self {
            AnyBackend::Host(b) => b.addresses_host_memory(),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b.addresses_host_memory(),
        }
    }

    fn ipc_memory_export(&self, bytes: usize) -> Result<super::IpcExport> {
        match self {
            AnyBackend::Host(b) => b.ipc_memory_export(bytes),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b.ipc_memory_export(bytes),
        }
    }

    fn ipc_memory_open(
        &self,
        handle: &super::IpcMemoryHandle,
        len: usize,
    ) -> Result<super::IpcMemory> {
        match self {
            AnyBackend::Host(b) => b.ipc_memory_open(handle, len),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b.ipc_memory_open(handle, len),
        }
    }

    fn ipc_pool_create(&self) -> Result<super::IpcPoolExport> {
        match self {
            AnyBackend::Host(b) => b.ipc_pool_create(),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b.ipc_pool_create(),
        }
    }

    unsafe fn ipc_pool_import(&self, fd: std::os::fd::OwnedFd) -> Result<super::IpcPool> {
        match self {
            // SAFETY: forwarded with the caller's promise.
            AnyBackend::Host(b) => unsafe { b.ipc_pool_import(fd) },
            #[cfg(feature = "cuda")]
            // SAFETY: forwarded with the caller's promise.
            AnyBackend::Cuda(b) => unsafe { b.ipc_pool_import(fd) },
        }
    }

    fn ipc_pool_alloc(
        &self,
        pool: &super::IpcPool,
        stream: &AnyStream,
        bytes: usize,
    ) -> Result<(super::IpcMemory, super::IpcPoolPointer)> {
        match (self, stream) {
            (AnyBackend::Host(b), AnyStream::Host(s)) => b.ipc_pool_alloc(pool, s, bytes),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyStream::Cuda(s)) => b.ipc_pool_alloc(pool, s, bytes),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream")),
        }
    }

    unsafe fn ipc_pool_import_pointer(
        &self,
        pool: &super::IpcPool,
        data: &super::IpcPoolPointer,
        len: usize,
    ) -> Result<super::IpcMemory> {
        match self {
            // SAFETY: forwarded with the caller's promise.
            AnyBackend::Host(b) => unsafe { b.ipc_pool_import_pointer(pool, data, len) },
            #[cfg(feature = "cuda")]
            // SAFETY: forwarded with the caller's promise.
            AnyBackend::Cuda(b) => unsafe { b.ipc_pool_import_pointer(pool, data, len) },
        }
    }

    unsafe fn map_host(&self, ptr: *mut u8, len: usize) -> Result<super::MappedHost> {
        match self {
            // SAFETY: forwarded with the caller's promise.
            AnyBackend::Host(b) => unsafe { b.map_host(ptr, len) },
            #[cfg(feature = "cuda")]
            // SAFETY: forwarded with the caller's promise.
            AnyBackend::Cuda(b) => unsafe { b.map_host(ptr, len) },
        }
    }

    fn write_mapped_on(
        &self,
        stream: &AnyStream,
        map: &super::MappedHost,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        match (self, stream) {
            (AnyBackend::Host(b), AnyStream::Host(s)) => b.write_mapped_on(s, map, offset, value),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyStream::Cuda(s)) => b.write_mapped_on(s, map, offset, value),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream")),
        }
    }

    fn wait_mapped_on(
        &self,
        stream: &AnyStream,
        map: &super::MappedHost,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        match (self, stream) {
            (AnyBackend::Host(b), AnyStream::Host(s)) => b.wait_mapped_on(s, map, offset, value),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyStream::Cuda(s)) => b.wait_mapped_on(s, map, offset, value),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream")),
        }
    }

    fn ipc_event_open(&self, handle: &super::IpcEventHandle) -> Result<AnyEvent> {
        match self {
            AnyBackend::Host(b) => b.ipc_event_open(handle).map(AnyEvent::Host),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b.ipc_event_open(handle).map(AnyEvent::Cuda),
        }
    }

    fn synchronize_stream(&self, stream: &AnyStream) -> Result<()> {
        match (self, stream) {
            (AnyBackend::Host(b), AnyStream::Host(s)) => b.synchronize_stream(s),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyStream::Cuda(s)) => b.synchronize_stream(s),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream")),
        }
    }

    fn create_event(&self, options: EventOptions) -> Result<AnyEvent> {
        match self {
            AnyBackend::Host(h) => h.create_event(options).map(AnyEvent::Host),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(c) => c.create_event(options).map(AnyEvent::Cuda),
        }
    }

    fn record(&self, event: &AnyEvent, stream: &AnyStream) -> Result<()> {
        match (self, event, stream) {
            (AnyBackend::Host(b), AnyEvent::Host(e), AnyStream::Host(s)) => b.record(e, s),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyEvent::Cuda(e), AnyStream::Cuda(s)) => b.record(e, s),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream or event")),
        }
    }

    fn wait(&self, stream: &AnyStream, event: &AnyEvent) -> Result<()> {
        match (self, event, stream) {
            (AnyBackend::Host(b), AnyEvent::Host(e), AnyStream::Host(s)) => b.wait(s, e),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyEvent::Cuda(e), AnyStream::Cuda(s)) => b.wait(s, e),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream or event")),
        }
    }

    fn synchronize(&self, event: &AnyEvent) -> Result<()> {
        match (self, event) {
            (AnyBackend::Host(b), AnyEvent::Host(e)) => b.synchronize(e),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyEvent::Cuda(e)) => b.synchronize(e),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the event")),
        }
    }

    fn synchronize_interruptible(
        &self,
        event: &AnyEvent,
        interrupt: &dyn Interrupt,
    ) -> Result<SyncOutcome> {
        match (self, event) {
            (AnyBackend::Host(b), AnyEvent::Host(e)) => b.synchronize_interruptible(e, interrupt),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyEvent::Cuda(e)) => b.synchronize_interruptible(e, interrupt),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the event")),
        }
    }

    fn query(&self, event: &AnyEvent) -> Result<bool> {
        match (self, event) {
            (AnyBackend::Host(b), AnyEvent::Host(e)) => b.query(e),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyEvent::Cuda(e)) => b.query(e),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the event")),
        }
    }

    type Semaphore = AnySemaphore;

    fn stream_id(&self, stream: &AnyStream) -> u64 {
        // The id depends on the stream only, so a stream of the other backend still gets its
        // own (the call that uses it then fails on the mismatch).
        match stream {
            AnyStream::Host(s) => s.shared.id,
            #[cfg(feature = "cuda")]
            AnyStream::Cuda(s) => super::cuda::stream_id(s),
        }
    }

    fn create_semaphore(&self, initial: u64, waker: SemaphoreWaker) -> Result<AnySemaphore> {
        match self {
            AnyBackend::Host(b) => b.create_semaphore(initial, waker).map(AnySemaphore::Host),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b.create_semaphore(initial, waker).map(AnySemaphore::Cuda),
        }
    }

    fn signal_on(&self, stream: &AnyStream, sem: &AnySemaphore, value: u64) -> Result<()> {
        match (self, stream, sem) {
            (AnyBackend::Host(b), AnyStream::Host(s), AnySemaphore::Host(m)) => {
                b.signal_on(s, m, value)
            }
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyStream::Cuda(s), AnySemaphore::Cuda(m)) => {
                b.signal_on(s, m, value)
            }
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream or timeline")),
        }
    }

    fn check_stream(&self, stream: &AnyStream) -> Result<()> {
        match (self, stream) {
            (AnyBackend::Host(_), AnyStream::Host(_)) => Ok(()),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(_), AnyStream::Cuda(_)) => Ok(()),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream")),
        }
    }

    fn wait_on(&self, stream: &AnyStream, sem: &AnySemaphore, value: u64) -> Result<()> {
        match (self, stream, sem) {
            (AnyBackend::Host(b), AnyStream::Host(s), AnySemaphore::Host(m)) => {
                b.wait_on(s, m, value)
            }
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyStream::Cuda(s), AnySemaphore::Cuda(m)) => {
                b.wait_on(s, m, value)
            }
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the stream or timeline")),
        }
    }
}

/// Device memory of an [`AnyBackend`].
#[derive(Debug)]
pub enum AnyRawMemory {
    /// Host memory.
    Host(HostRawMemory),
    /// CUDA device memory.
    #[cfg(feature = "cuda")]
    Cuda(DeviceBuffer),
}

/// The stream-ordered pool of an [`AnyBackend`].
#[derive(Debug)]
pub enum AnyAsyncPool {
    /// The host backend's pool.
    Host(HostAsyncPool),
    /// A CUDA driver pool.
    #[cfg(feature = "cuda")]
    Cuda(CudaAsyncPool),
}

impl MemoryBackend for AnyBackend {
    type RawMemory = AnyRawMemory;
    type AsyncPool = AnyAsyncPool;

    fn alloc_memory(&self, bytes: usize) -> Result<AnyRawMemory> {
        match self {
            AnyBackend::Host(b) => b.alloc_memory(bytes).map(AnyRawMemory::Host),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b.alloc_memory(bytes).map(AnyRawMemory::Cuda),
        }
    }

    fn memory_addr(&self, memory: &AnyRawMemory) -> u64 {
        match memory {
            AnyRawMemory::Host(m) => m.addr(),
            #[cfg(feature = "cuda")]
            AnyRawMemory::Cuda(m) => m.device_ptr(),
        }
    }

    fn create_async_pool(&self, release_threshold: u64) -> Result<AnyAsyncPool> {
        match self {
            AnyBackend::Host(b) => b
                .create_async_pool(release_threshold)
                .map(AnyAsyncPool::Host),
            #[cfg(feature = "cuda")]
            AnyBackend::Cuda(b) => b
                .create_async_pool(release_threshold)
                .map(AnyAsyncPool::Cuda),
        }
    }

    fn alloc_async(&self, pool: &AnyAsyncPool, stream: &AnyStream, bytes: usize) -> Result<u64> {
        match (self, pool, stream) {
            (AnyBackend::Host(b), AnyAsyncPool::Host(p), AnyStream::Host(s)) => {
                b.alloc_async(p, s, bytes)
            }
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyAsyncPool::Cuda(p), AnyStream::Cuda(s)) => {
                b.alloc_async(p, s, bytes)
            }
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the pool or stream")),
        }
    }

    fn free_async(&self, pool: &AnyAsyncPool, stream: &AnyStream, addr: u64) -> Result<()> {
        match (self, pool, stream) {
            (AnyBackend::Host(b), AnyAsyncPool::Host(p), AnyStream::Host(s)) => {
                b.free_async(p, s, addr)
            }
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyAsyncPool::Cuda(p), AnyStream::Cuda(s)) => {
                b.free_async(p, s, addr)
            }
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the pool or stream")),
        }
    }

    fn trim_async_pool(&self, pool: &AnyAsyncPool, keep: usize) -> Result<()> {
        match (self, pool) {
            (AnyBackend::Host(b), AnyAsyncPool::Host(p)) => b.trim_async_pool(p, keep),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyAsyncPool::Cuda(p)) => b.trim_async_pool(p, keep),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the pool")),
        }
    }

    fn async_pool_usage(&self, pool: &AnyAsyncPool) -> Result<MemoryUsage> {
        match (self, pool) {
            (AnyBackend::Host(b), AnyAsyncPool::Host(p)) => b.async_pool_usage(p),
            #[cfg(feature = "cuda")]
            (AnyBackend::Cuda(b), AnyAsyncPool::Cuda(p)) => b.async_pool_usage(p),
            #[allow(unreachable_patterns)]
            _ => Err(mismatch("the pool")),
        }
    }
}
