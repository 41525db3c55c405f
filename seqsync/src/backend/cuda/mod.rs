//! The CUDA backend, on cudarc: streams are `cudarc` streams (created here or borrowed from
//! other code), events are raw `CUevent`s created with timing disabled.
//!
//! It may use: the [`Backend`] trait, the error type, the
//! wait strategy (`wait_strategy.rs`), the crate's short-section `lock` and cudarc. Every CUDA `unsafe` block of seqsync is in
//! this folder.
//!
//! This file is the backend itself ([`CudaBackend`] and its [`Backend`] impl); beside it:
//! `driver.rs` (is a driver present, its errors), `context.rs` (which context a raw call runs
//! in), `event.rs` ([`CudaEvent`]), `deferred.rs` (errors a `Drop` could not return),
//! `host_fn.rs` (host work on a stream), `memory.rs` (device and pinned buffers), `open_waits.rs`
//! (stream waits that may wait on the host, and the frees held back meanwhile), `mempool.rs`
//! (the driver's stream-ordered allocator), `stream_id.rs` (a stream's id), `command.rs` (kernels), `graph_exec.rs` (CUDA
//! graphs) and `semaphore/` (timelines).
//!
//! cudarc is loaded at run time: with no driver, or no GPU, [`CudaBackend::new`] returns
//! [`Error::NoDevice`] instead of panicking. cudarc's own per-buffer event tracking is turned
//! off: seqsync does the ordering.
//!
//! The hot calls (`record`, `wait`, `query`) go straight to the driver's `sys` functions, so a
//! ring adds only its own bookkeeping to the raw call.
//!
//! # Beside other CUDA code
//!
//! Other code on the same thread (cudarc calls for another context, another library) may make
//! any context current between two seqsync calls. seqsync never trusts a cached "my context is
//! current": a call on a stream handle that names its context (every stream `cuStreamCreate`
//! made) needs no current context, and a call on one of the handles that name none — the
//! legacy default stream (`NULL` or `CU_STREAM_LEGACY`) and the per-thread default stream —
//! first makes the stream's own context current (a `cuCtxGetCurrent`, and a
//! `cuCtxSetCurrent` only when it differs). Recording an event on a stream of another context
//! is [`Error::InvalidArgument`].
//!
//! Cleanup that fails in a `Drop` (destroying an event, freeing a buffer) cannot return its
//! error. seqsync keeps such errors apart, in [`CudaBackend::take_deferred_errors`], and never
//! reports them as the failure of a later, unrelated call: errors that cudarc's own `Drop`s
//! (or other code) left in the context's error slot are moved there too before seqsync calls
//! into cudarc.
//!
//! ```no_run
//! use seqsync::{backend::cuda::CudaBackend, Blocking, EventRingbuf};
//! let gpu = CudaBackend::new(0)?;
//! let (s1, s2) = (gpu.new_stream("s1")?, gpu.new_stream("s2")?);
//! let ring = EventRingbuf::new(&gpu, "copy", 1, 4)?;
//! ring.record(&s1, 0, Blocking::No)?;
//! ring.wait(&s2, 0, Blocking::No)?; // s2's later work runs after s1's work so far
//! # Ok::<(), seqsync::Error>(())
//! ```

pub(crate) mod command;
mod context;
mod deferred;
pub(crate) mod driver;
pub(crate) mod event;
pub(crate) mod graph_exec;
mod host_fn;
mod ipc_memory;
mod ipc_pool;
mod mapped_host;
mod memory;
pub(crate) mod mempool;
mod open_wait;
mod open_waits;
pub(crate) mod semaphore;
mod stream_id;
mod stream_reserve;

pub use command::{CudaKernel, KernelParam};
pub use memory::{DeviceBuffer, PinnedBuffer};
pub use open_wait::OpenWait;
pub use semaphore::TimelineMechanism;

pub(crate) use context::{bind_for, make_current};
pub(crate) use deferred::Deferred;
use driver::with_context;
pub(crate) use driver::{driver_error, driver_present};
use event::foreign_stream;
pub(crate) use event::CudaEvent;
use host_fn::{HostFn, HostPanics};
pub(crate) use mempool::CudaAsyncPool;
pub(crate) use semaphore::CudaSemaphore;
pub(crate) use stream_id::stream_id;

use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};

use super::{Backend, EventOptions, Interrupt, SemaphoreWaker, SyncOutcome};
use crate::error::{BackendError, Error, Result};

/// The CUDA backend: one device's primary context.
#[derive(Clone, Debug)]
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    /// Panics caught in host functions ([`Backend::launch_host`]), by the raw stream they ran
    /// on, until that stream's next [`Backend::synchronize_stream`] reports them.
    host_panics: Arc<HostPanics>,
    deferred: Arc<Deferred>,
    timelines: Arc<semaphore::TimelineSupport>,
    /// Streams made ahead for `new_stream` calls while a stream waits for a host store.
    streams: Arc<stream_reserve::StreamReserve>,
}

impl CudaBackend {
    /// Open device `ordinal`'s primary context and turn cudarc's event tracking off.
    ///
    /// # Errors
    /// [`Error::NoDevice`] when no driver library is found, the driver finds no GPU, or
    /// `ordinal` is out of range.
    pub fn new(ordinal: usize) -> Result<Self> {
        if !driver_present() {
            return Err(Error::NoDevice(
                "the CUDA driver library (libcuda.so) is not installed".into(),
            ));
        }
        let count = CudaContext::device_count()
            .map_err(|e| Error::NoDevice(format!("the CUDA driver reports: {e}")))?;
        if count <= 0 {
            return Err(Error::NoDevice("the CUDA driver finds no GPU".into()));
        }
        if ordinal >= count as usize {
            return Err(Error::NoDevice(format!(
                "device {ordinal} asked for, but only {count} GPU(s) present"
            )));
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| Error::NoDevice(format!("cannot open device {ordinal}: {e}")))?;
        // SAFETY: called once, before any stream or buffer of this backend exists; seqsync
        // orders all work itself with events, which is exactly what turning tracking off asks.
        unsafe { ctx.disable_event_tracking() };
        let deferred: Arc<Deferred> = Arc::default();
        let streams = stream_reserve::StreamReserve::of_context(&ctx);
        Ok(CudaBackend {
            ctx,
            host_panics: Arc::default(),
            deferred: deferred.clone(),
            timelines: Arc::new(semaphore::TimelineSupport::new(
                TimelineMechanism::from_env(),
                &deferred,
            )),
            streams,
        })
    }

    /// This backend with timelines made by `mechanism` (timelines made before keep theirs).
    /// [`CudaBackend::new`] takes it from `SEQSYNC_TIMELINE_MECHANISM` (`auto` by default).
    pub fn with_timeline_mechanism(mut self, mechanism: TimelineMechanism) -> Self {
        self.timelines = Arc::new(self.timelines.with_choice(mechanism, &self.deferred));
        self
    }

    /// This backend keeping `n` streams made ahead of its own, for the streams asked for
    /// while a stream wait for a value nothing has written yet is open (by default the
    /// backends of one device share a reserve of 256, made at the first stream made with no
    /// such wait open while none of them was alive).
    ///
    /// While such a wait is open, the driver's `cuStreamCreate` may wait for the device to
    /// drain, which waits for the host: a thread that makes a stream before it signals would
    /// hang. So [`new_stream`](Self::new_stream) makes streams only while no wait of
    /// seqsync's is open, and then tops up a reserve of `n`; while one is open it hands out
    /// one of those, else makes one as soon as the waits have closed (they may be another
    /// thread's), else, after a second, returns [`Error::NoStreamWhileWaitsOpen`]. `n`
    /// bounds the streams a program may take while such waits stay open (a new stream per
    /// batch with each batch's wait enqueued before its signal). The reserve is made at the
    /// first `new_stream` with no such wait open, and grows back two streams per later one
    /// (a whole refill at once could wait for the device to drain); this backend's clones
    /// share it.
    ///
    /// ```no_run
    /// # fn main() -> seqsync::Result<()> {
    /// use seqsync::backend::cuda::CudaBackend;
    /// use seqsync::timeline::Timeline;
    /// use seqsync::Error;
    ///
    /// let gpu = CudaBackend::new(0)?.with_streams_made_ahead(1);
    /// let t = Timeline::new(&gpu, "t", 0)?;
    /// let first = gpu.new_stream("first")?; // no wait open: made now
    /// t.wait_on(&first, 1)?; // a wait before its signal: open until t reaches 1
    /// let second = gpu.new_stream("second")?; // the one made ahead
    /// let third = gpu.new_stream("third");
    /// assert!(matches!(third, Err(Error::NoStreamWhileWaitsOpen { made_ahead: 1, .. })));
    /// t.signal(1)?;
    /// let third = gpu.new_stream("third")?; // the wait is past: made now
    /// # drop((second, third)); Ok(()) }
    /// ```
    pub fn with_streams_made_ahead(mut self, n: usize) -> Self {
        self.streams = Arc::new(stream_reserve::StreamReserve::new(n));
        self
    }

    /// The timeline mechanism this backend was asked for (what a timeline got:
    /// [`crate::timeline::Timeline::mechanism`]).
    pub fn timeline_mechanism(&self) -> TimelineMechanism {
        self.timelines.choice()
    }

    /// CUDA events of seqsync's alive in the process now (every backend's: timelines' points,
    /// rings, pools, events of yours made through [`Backend::create_event`]). It stays bounded
    /// over a long run however many values its timelines signal.
    pub fn live_events(&self) -> usize {
        event::live()
    }

    /// `(writes, waits)`: stream memory operations on timeline words that the `hybrid`
    /// mechanism enqueued so far (only waits enqueued before their signal need them).
    pub fn timeline_word_ops(&self) -> (u64, u64) {
        self.timelines.word_ops()
    }

    /// Declare work of yours that waits on the device for a host store seqsync does not make
    /// (a resident kernel polling host memory): until the returned [`OpenWait`] is released or
    /// dropped, seqsync holds back the frees of its buffers, as it does while its own stream
    /// waits for a host signal may block (a free then would wait for the device to drain,
    /// and with the driver lock held the thread that was to make the store could hang behind
    /// it). Take it before launching the work; release it once the work no longer needs the
    /// host (its last input arrived, or you told it to stop).
    ///
    /// ```no_run
    /// # fn main() -> seqsync::Result<()> {
    /// use seqsync::backend::cuda::CudaBackend;
    /// let gpu = CudaBackend::new(0)?;
    /// let wait = gpu.open_wait();
    /// // ... launch a kernel that spins on a pinned word until the host stores to it ...
    /// // ... store its last input ...
    /// wait.release();
    /// # Ok(()) }
    /// ```
    pub fn open_wait(&self) -> OpenWait {
        OpenWait::new()
    }

    /// Do 64-bit stream memory operations (`cuStreamWriteValue64`, `cuStreamWaitValue64`) work
    /// on this device? Probed once per backend, as the timelines probe them (a write, a wait
    /// for it and a second write on a fresh stream, within a second): for work of yours that
    /// enqueues them itself.
    ///
    /// # Errors
    /// [`Error::Backend`] saying why not (the device attribute, the driver's refusal, or a wait
    /// that did not end); [`Error::NoStreamWhileWaitsOpen`] if not probed yet and no stream can
    /// be had for the probe now (a later call probes).
    ///
    /// ```no_run
    /// # fn main() -> seqsync::Result<()> {
    /// use seqsync::backend::cuda::CudaBackend;
    /// let gpu = CudaBackend::new(0)?;
    /// gpu.stream_memory_ops()?; // before enqueuing waits and writes on words of your own
    /// # Ok(()) }
    /// ```
    pub fn stream_memory_ops(&self) -> Result<()> {
        self.timelines.probe_or_fail(&self.ctx, &self.streams)
    }

    /// True when a driver and at least one GPU are present.
    pub fn is_available() -> bool {
        driver_present() && CudaContext::device_count().map(|n| n > 0).unwrap_or(false)
    }

    /// The context, for cudarc calls of your own (allocations, modules, copies).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// Errors that cleanup in a `Drop` could not return (destroying one of seqsync's events,
    /// freeing a [`DeviceBuffer`] or [`PinnedBuffer`], and errors cudarc's own `Drop`s left in
    /// the context), oldest first, and forget them. No other call reports them: a failed
    /// cleanup never shows up as a later, unrelated call's failure.
    ///
    /// At most 32 are kept; when more were dropped, the last entry says how many.
    pub fn take_deferred_errors(&self) -> Vec<Error> {
        self.deferred.drain(&self.ctx);
        self.deferred.take()
    }

    /// The device's name, e.g. `"NVIDIA H200"`.
    pub fn device_name(&self) -> Result<String> {
        self.deferred.drain(&self.ctx);
        self.ctx
            .name()
            .map_err(|e| driver_error("cuDeviceGetName", e))
    }

    /// A new non-blocking stream: [`Backend::new_stream`], callable without the trait in scope.
    /// CUDA streams have no name; `name` is for the other backends' sake (host streams name
    /// their worker threads with it).
    ///
    /// While a stream wait for a value nothing has written yet is open, the stream is one made
    /// ahead, else one made once the waits have closed (this call waits a second at most for
    /// that), else [`Error::NoStreamWhileWaitsOpen`] (see
    /// [`with_streams_made_ahead`](Self::with_streams_made_ahead)).
    pub fn new_stream(&self, _name: &str) -> Result<Arc<CudaStream>> {
        self.deferred.drain(&self.ctx);
        self.streams.take(&self.ctx)
    }

    /// A stream made elsewhere (by PyTorch, CuPy, `cuda.core` or your own `cuStreamCreate`),
    /// borrowed: seqsync records, waits and signals on it like on its own streams, and never
    /// destroys it. `handle` is the `CUstream` as an integer; 0 is the legacy default stream
    /// and 2 the per-thread default stream.
    ///
    /// # Safety
    /// `handle` is 0, 2 or a live stream handle, and stays live for as long as the returned
    /// stream, or work seqsync enqueued on it, is used (the framework's stream object must
    /// outlive it).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the stream belongs to another context than this
    /// backend's (another device, or a context that is not the device's primary one); a
    /// driver error if `cuStreamGetCtx` refuses the handle.
    pub unsafe fn borrow_stream(&self, handle: usize) -> Result<Arc<CudaStream>> {
        self.bind()?;
        let raw = handle as sys::CUstream;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the caller guarantees `raw` is a live stream (or 0 / the per-thread handle,
        // which resolve through the current context, made this backend's just above); `ctx`
        // is valid for the write.
        unsafe { driver::stream_get_ctx(raw, &mut ctx) }.check()?;
        if ctx != self.ctx.cu_ctx() {
            return Err(Error::invalid(
                "stream",
                format!(
                    "stream {handle:#x} belongs to another CUDA context than device {}'s \
                     primary context (another device, or a context of its own)",
                    self.ctx.ordinal()
                ),
            ));
        }
        // SAFETY: the caller guarantees the handle outlives the returned stream's use; a
        // borrowed stream is never destroyed by cudarc (`owned: false`).
        Ok(unsafe { self.ctx.wrap_borrowed_stream(raw) })
    }

    /// Make this backend's context current on the calling thread unless it already is.
    pub(crate) fn bind(&self) -> Result<()> {
        make_current(&self.ctx)
    }

    pub(crate) fn deferred(&self) -> &Arc<Deferred> {
        &self.deferred
    }

    /// Elapsed milliseconds between two completed events created with
    /// [`EventOptions::timing`].
    pub fn elapsed_ms(&self, start: &CudaEvent, end: &CudaEvent) -> Result<f32> {
        let mut ms = 0f32;
        // SAFETY: both events are live handles of this context (they hold the context alive);
        // `ms` is a valid out-pointer for the duration of the call.
        unsafe { driver::event_elapsed_time(&mut ms, start.raw, end.raw) }.check()?;
        Ok(ms)
    }

    /// Compile CUDA C `source` with NVRTC (at run time) and load the kernels `names` from it.
    ///
    /// # Errors
    /// [`Error::Backend`] when NVRTC is missing, the source does not compile (the message
    /// holds the compiler log), or a kernel is not found.
    pub fn load_kernels(&self, source: &str, names: &[&str]) -> Result<Vec<CudaFunction>> {
        // SAFETY: `is_culib_present` only tries to dlopen libnvrtc; no preconditions.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(Error::Backend(BackendError::new(
                "cuda",
                "nvrtcCompileProgram",
                "the NVRTC library (libnvrtc.so) is not installed",
            )));
        }
        let ptx = cudarc::nvrtc::compile_ptx(source).map_err(|e| {
            Error::Backend(BackendError::new(
                "cuda",
                "nvrtcCompileProgram",
                format!("{e:?}"),
            ))
        })?;
        self.deferred.drain(&self.ctx);
        let module = self
            .ctx
            .load_module(ptx)
            .map_err(|e| driver_error("cuModuleLoadData", e))?;
        names
            .iter()
            .map(|n| {
                module
                    .load_function(n)
                    .map_err(|e| driver_error("cuModuleGetFunction", e))
            })
            .collect()
    }

    /// Block until everything on `stream` has run.
    pub fn stream_synchronize(&self, stream: &CudaStream) -> Result<()> {
        self.deferred.drain(stream.context());
        stream
            .synchronize()
            .map_err(|e| driver_error("cuStreamSynchronize", e))
    }
}

impl Backend for CudaBackend {
    type Stream = Arc<CudaStream>;
    type Event = CudaEvent;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn new_stream(&self, name: &str) -> Result<Arc<CudaStream>> {
        CudaBackend::new_stream(self, name)
    }

    fn launch_host(&self, stream: &Arc<CudaStream>, f: HostFn) -> Result<()> {
        self.host_panics.launch(stream, f)
    }

    fn synchronize_stream(&self, stream: &Arc<CudaStream>) -> Result<()> {
        self.stream_synchronize(stream)?;
        self.host_panics.take(stream)
    }

    fn ipc_event_create(&self) -> Result<(CudaEvent, crate::backend::IpcEventHandle)> {
        CudaEvent::create_ipc(&self.ctx, &self.deferred)
    }

    fn ipc_event_open(&self, handle: &crate::backend::IpcEventHandle) -> Result<CudaEvent> {
        CudaEvent::open_ipc(&self.ctx, &self.deferred, handle)
    }

    fn ipc_memory_export(&self, bytes: usize) -> Result<crate::backend::IpcExport> {
        ipc_memory::export(&self.ctx, &self.deferred, bytes)
    }

    fn ipc_memory_open(
        &self,
        handle: &crate::backend::IpcMemoryHandle,
        len: usize,
    ) -> Result<crate::backend::IpcMemory> {
        ipc_memory::open(&self.ctx, &self.deferred, handle, len)
    }

    fn ipc_pool_create(&self) -> Result<crate::backend::IpcPoolExport> {
        ipc_pool::create(&self.ctx, &self.deferred)
    }

    unsafe fn ipc_pool_import(&self, fd: std::os::fd::OwnedFd) -> Result<crate::backend::IpcPool> {
        ipc_pool::import(&self.ctx, &self.deferred, fd)
    }

    fn ipc_pool_alloc(
        &self,
        pool: &crate::backend::IpcPool,
        stream: &Arc<CudaStream>,
        bytes: usize,
    ) -> Result<(crate::backend::IpcMemory, crate::backend::IpcPoolPointer)> {
        ipc_pool::alloc(&self.ctx, &self.deferred, pool, stream, bytes)
    }

    unsafe fn ipc_pool_import_pointer(
        &self,
        pool: &crate::backend::IpcPool,
        data: &crate::backend::IpcPoolPointer,
        len: usize,
    ) -> Result<crate::backend::IpcMemory> {
        ipc_pool::import_pointer(&self.ctx, &self.deferred, pool, data, len)
    }

    unsafe fn map_host(&self, ptr: *mut u8, len: usize) -> Result<crate::backend::MappedHost> {
        // SAFETY: the caller's promise, forwarded.
        unsafe { mapped_host::map(&self.ctx, &self.deferred, ptr, len) }
    }

    fn write_mapped_on(
        &self,
        stream: &Arc<CudaStream>,
        map: &crate::backend::MappedHost,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        bind_for(stream)?;
        mapped_host::write_on(&self.ctx, stream, map, offset, value)
    }

    fn wait_mapped_on(
        &self,
        stream: &Arc<CudaStream>,
        map: &crate::backend::MappedHost,
        offset: usize,
        value: u64,
    ) -> Result<()> {
        bind_for(stream)?;
        mapped_host::wait_on(&self.ctx, stream, map, offset, value)
    }

    fn create_event(&self, options: EventOptions) -> Result<CudaEvent> {
        let mut flags = 0u32;
        if !options.timing {
            flags |= sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        }
        if options.blocking_sync {
            flags |= sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        }
        CudaEvent::create(&self.ctx, &self.deferred, flags)
    }

    #[inline]
    fn record(&self, event: &CudaEvent, stream: &Arc<CudaStream>) -> Result<()> {
        if stream.context().cu_ctx() != event.ctx.cu_ctx() {
            return Err(foreign_stream(event, stream));
        }
        bind_for(stream)?;
        // SAFETY: `event.raw` is live (owned by `event`) and `stream` is a live stream handle
        // (kept alive by the Arc) of the same context, checked above; a handle that names no
        // context resolves through the current context, made the stream's own by `bind_for`.
        with_context(stream.context(), || unsafe {
            driver::event_record(event.raw, stream.cu_stream())
        })
    }

    #[inline]
    fn wait(&self, stream: &Arc<CudaStream>, event: &CudaEvent) -> Result<()> {
        // A stream may wait for an event of another context; a handle that names no context
        // must resolve to the stream's own context, not whatever is current.
        bind_for(stream)?;
        event::stream_wait(stream, event)
    }

    fn synchronize(&self, event: &CudaEvent) -> Result<()> {
        // SAFETY: `event.raw` is a live event handle (it names its context, so none need be
        // current); the call only blocks.
        with_context(&event.ctx, || unsafe {
            driver::event_synchronize(event.raw)
        })
    }

    fn synchronize_interruptible(
        &self,
        event: &CudaEvent,
        interrupt: &dyn Interrupt,
    ) -> Result<SyncOutcome> {
        // Nothing tells the host that an event completed: poll it by the crate's wait strategy
        // (spin, sleep with a learnt expected end, spin around it; see `wait_strategy`).
        super::synchronize_by_polling(|| self.query(event), interrupt)
    }

    #[inline]
    fn query(&self, event: &CudaEvent) -> Result<bool> {
        // SAFETY: `event.raw` is a live event handle; cuEventQuery only reads its state.
        let mut r = unsafe { driver::event_query(event.raw) };
        if r.code() == sys::CUresult::CUDA_ERROR_INVALID_CONTEXT {
            make_current(&event.ctx)?;
            // SAFETY: as above.
            r = unsafe { driver::event_query(event.raw) };
        }
        match r.code() {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            _ => r.check().map(|()| false),
        }
    }

    type Semaphore = CudaSemaphore;

    fn stream_id(&self, stream: &Arc<CudaStream>) -> u64 {
        stream_id::stream_id(stream)
    }

    fn create_semaphore(&self, initial: u64, _waker: SemaphoreWaker) -> Result<CudaSemaphore> {
        self.timelines.create(&self.ctx, &self.streams, initial)
    }

    /// As [`record`](Backend::record): no context need be current for a stream whose handle
    /// names its context (the semaphore's driver calls bind and retry if the driver disagrees);
    /// a handle that names none binds its own first.
    #[inline]
    fn signal_on(&self, stream: &Arc<CudaStream>, sem: &CudaSemaphore, value: u64) -> Result<()> {
        bind_for(stream)?;
        sem.signal_on(stream, value)
    }

    #[inline]
    fn wait_on(&self, stream: &Arc<CudaStream>, sem: &CudaSemaphore, value: u64) -> Result<()> {
        bind_for(stream)?;
        sem.wait_on(stream, value)
    }
}
