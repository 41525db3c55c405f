//! The CUDA backend, on cudarc: streams are `cudarc` streams (created here or borrowed from
//! other code), events are raw `CUevent`s created with timing disabled.
//!
//! It may use: the [`Backend`] trait, the error type and cudarc. Every CUDA
//! `unsafe` block of seqsync is in this folder.
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
//! let (s1, s2) = (gpu.new_stream()?, gpu.new_stream()?);
//! let ring = EventRingbuf::new(&gpu, "copy", 1, 4)?;
//! ring.record(&s1, 0, Blocking::No)?;
//! ring.wait(&s2, 0, Blocking::No)?; // s2's later work runs after s1's work so far
//! # Ok::<(), seqsync::Error>(())
//! ```

mod command;
mod graph_exec;
mod memory;
mod mempool;
mod semaphore;

pub use command::{CudaKernel, KernelParam};
pub use graph_exec::CudaGraphExec;
pub use memory::{DeviceBuffer, PinnedBuffer};
pub use mempool::{stream_id, CudaAsyncPool};
pub use semaphore::{CudaSemaphore, TimelineMechanism};

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::{sys, DriverError};
pub use cudarc::driver::{CudaContext, CudaFunction, CudaStream};

use super::{Backend, EventOptions, Interrupt, SemaphoreWaker, SyncOutcome};
use crate::error::{panic_message, BackendError, Error, Result};

/// How long an interruptible synchronize spins on `cuEventQuery` before it starts sleeping.
/// Short waits finish inside it with a spinning wait's latency.
const SYNC_SPIN: Duration = Duration::from_micros(100);
/// How long an interruptible synchronize sleeps between queries after the spin phase (with
/// the thread's timer slack lowered to 1 µs meanwhile, so the sleep is that long and not the
/// default 50 µs more). It bounds the extra wake-up latency of a long wait, and keeps its CPU
/// use to a small fraction of a core.
const SYNC_POLL: Duration = Duration::from_micros(20);

/// How long before the expected end of a wait (see [`Interrupt::expected_wait`]) an
/// interruptible synchronize stops sleeping and spins. The expectation is a moving average of
/// earlier waits, which include their own wake-up latency, so it runs late by about that much;
/// 200 µs covers it at a cost of 0.2 % of a core during a 100 ms wait.
const SYNC_SPIN_AHEAD: Duration = Duration::from_micros(200);

/// Lowers the calling thread's timer slack while it lives (Linux), restoring it on drop.
struct TightTimerSlack(Option<libc::c_ulong>);

impl TightTimerSlack {
    fn new() -> Self {
        // SAFETY: PR_GET_TIMERSLACK takes no pointer arguments and only reads this thread's
        // setting; it returns the slack in nanoseconds, or -1 on error.
        let old = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        if old <= 0 {
            return TightTimerSlack(None);
        }
        // SAFETY: PR_SET_TIMERSLACK with a plain integer changes only this thread's slack.
        let ok =
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) } == 0;
        TightTimerSlack(ok.then_some(old as libc::c_ulong))
    }
}

impl Drop for TightTimerSlack {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            // SAFETY: as in `new`: restores this thread's own previous setting.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, old, 0, 0, 0) };
        }
    }
}

/// Is a CUDA driver library loadable here? Never panics.
pub fn driver_present() -> bool {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by its usual names
    // and reports whether that worked; it has no preconditions.
    unsafe { sys::is_culib_present() }
}

/// The CUDA backend: one device's primary context.
#[derive(Clone, Debug)]
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    /// Panics caught in host functions ([`Backend::launch_host`]), by the raw stream they ran
    /// on, until that stream's next [`Backend::synchronize_stream`] reports them.
    host_panics: Arc<Mutex<Vec<(usize, String)>>>,
    deferred: Arc<Deferred>,
    timelines: Arc<semaphore::TimelineSupport>,
}

/// Errors that cleanup in a `Drop` could not return, kept until
/// [`CudaBackend::take_deferred_errors`] hands them out (at most [`Deferred::KEEP`]; the count of
/// the others is kept).
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    errors: Mutex<(Vec<Error>, usize)>,
}

impl Deferred {
    const KEEP: usize = 32;

    /// Keep the error of `op`, if it failed.
    pub(crate) fn note(&self, op: &'static str, r: std::result::Result<(), DriverError>) {
        if let Err(e) = r {
            self.push_error(driver_error(op, e));
        }
    }

    pub(crate) fn push_error(&self, e: Error) {
        let mut g = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if g.0.len() < Self::KEEP {
            g.0.push(e);
        } else {
            g.1 += 1;
        }
    }

    /// Move an error that cudarc (or other code) left in `ctx`'s error slot here, so that the
    /// next cudarc call does not report it as its own failure.
    pub(crate) fn drain(&self, ctx: &CudaContext) {
        self.note("a deferred cudarc cleanup", ctx.check_err());
    }
}

/// Is `stream` one of the handles that name no context (`NULL`/`CU_STREAM_LEGACY`: the legacy
/// default stream, `CU_STREAM_PER_THREAD`)? The driver resolves those through the calling
/// thread's current context.
fn names_no_context(stream: sys::CUstream) -> bool {
    let h = stream as usize;
    h == 0 || h == 0x1 || h == 0x2
}

/// Make `ctx` current on the calling thread unless it already is. Raw driver calls, so that
/// an error some `Drop` left in cudarc's error slot is not reported as this call's failure.
pub(crate) fn make_current(ctx: &CudaContext) -> Result<()> {
    let mut current: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: `current` is a valid out-pointer; the call only reads this thread's binding.
    check("cuCtxGetCurrent", unsafe {
        sys::cuCtxGetCurrent(&mut current)
    })?;
    if current != ctx.cu_ctx() {
        // SAFETY: `ctx.cu_ctx()` is a live context, kept alive by the `CudaContext` we borrow.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(ctx.cu_ctx())
        })?;
    }
    Ok(())
}

/// Before enqueueing work on `stream` with a raw driver call: if its handle names no context,
/// make the stream's own context current, so the work lands on that context's default stream
/// whatever other code made current meanwhile. A no-op for every other stream.
#[inline]
pub(crate) fn bind_for(stream: &CudaStream) -> Result<()> {
    if names_no_context(stream.cu_stream()) {
        make_current(stream.context())
    } else {
        Ok(())
    }
}

/// A host function's closure, as `cuLaunchHostFunc` carries it: a thin pointer to a boxed
/// fat `Box<dyn FnOnce>`.
type HostFn = Box<dyn FnOnce() + Send + 'static>;

/// The `CUhostFn` of [`Backend::launch_host`]: takes back the box leaked at launch, runs the
/// closure once, catches its panic (unwinding into the driver is undefined behaviour) and
/// frees the box.
unsafe extern "C" fn host_fn_trampoline(user_data: *mut std::ffi::c_void) {
    // SAFETY: `user_data` is the pointer `launch_host` made with `Box::into_raw` of a
    // `Box<HostFn>`, and the driver calls this exactly once per successful launch, so the box
    // is taken back exactly once.
    let f: Box<HostFn> = unsafe { Box::from_raw(user_data.cast::<HostFn>()) };
    // The closure catches its own panic (see `launch_host`); this is a last guard so that
    // nothing unwinds out of an `extern "C"` function.
    let _ = catch_unwind(AssertUnwindSafe(move || (*f)()));
}

/// A cudarc driver error as an [`Error::Backend`] naming the driver call `op` (for cudarc calls
/// of your own, e.g. kernel launches).
pub fn driver_error(op: &'static str, e: DriverError) -> Error {
    Error::Backend(BackendError {
        backend: "cuda",
        op,
        code: Some(e.0 as i64),
        message: e.to_string(),
    })
}

fn check(op: &'static str, r: sys::CUresult) -> Result<()> {
    r.result().map_err(|e| driver_error(op, e))
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
        Ok(CudaBackend {
            ctx,
            host_panics: Arc::default(),
            deferred: deferred.clone(),
            timelines: Arc::new(semaphore::TimelineSupport::new(
                TimelineMechanism::from_env(),
                &deferred,
            )),
        })
    }

    /// This backend with timelines made by `mechanism` (timelines made before keep theirs).
    /// [`CudaBackend::new`] takes it from `SEQSYNC_TIMELINE_MECHANISM` (`auto` by default).
    pub fn with_timeline_mechanism(mut self, mechanism: TimelineMechanism) -> Self {
        self.timelines = Arc::new(semaphore::TimelineSupport::new(mechanism, &self.deferred));
        self
    }

    /// The timeline mechanism this backend was asked for (what a timeline got:
    /// [`crate::timeline::Timeline::mechanism`]).
    pub fn timeline_mechanism(&self) -> TimelineMechanism {
        self.timelines.choice()
    }

    /// Timeline operations held on the host until the signal they wait for is enqueued (the
    /// events mechanism's deferral; always 0 with stream memory operations).
    pub fn deferred_timeline_ops(&self) -> usize {
        self.timelines.deferred_held()
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
        let mut g = self
            .deferred
            .errors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (mut errors, lost) = std::mem::take(&mut *g);
        if lost > 0 {
            errors.push(Error::Backend(BackendError::new(
                "cuda",
                "a deferred cleanup",
                format!("{lost} more deferred cleanup errors were not kept"),
            )));
        }
        errors
    }

    /// The device's name, e.g. `"NVIDIA H200"`.
    pub fn device_name(&self) -> Result<String> {
        self.deferred.drain(&self.ctx);
        self.ctx
            .name()
            .map_err(|e| driver_error("cuDeviceGetName", e))
    }

    /// A new non-blocking stream.
    pub fn new_stream(&self) -> Result<Arc<CudaStream>> {
        self.deferred.drain(&self.ctx);
        self.ctx
            .new_stream()
            .map_err(|e| driver_error("cuStreamCreate", e))
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
        check("cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime(&mut ms, start.raw, end.raw)
        })?;
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

/// A CUDA event owned by seqsync (a raw `CUevent`; destroyed on drop).
#[derive(Debug)]
pub struct CudaEvent {
    raw: sys::CUevent,
    ctx: Arc<CudaContext>,
    deferred: Arc<Deferred>,
}

// SAFETY: a CUevent is an opaque driver handle that the CUDA driver API allows to be used from
// any host thread (record, wait, query and synchronize are thread-safe driver calls); the
// wrapper holds no other state, and the context it belongs to is kept alive by `ctx`.
unsafe impl Send for CudaEvent {}
// SAFETY: as above: every operation on the handle goes through the thread-safe driver.
unsafe impl Sync for CudaEvent {}

impl CudaEvent {
    /// The raw handle, for driver calls of your own. It stays owned by this `CudaEvent`.
    pub fn cu_event(&self) -> sys::CUevent {
        self.raw
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by cuEventCreate in `ctx`, which `self.ctx` keeps alive, and
        // is destroyed exactly once, here. Destroying an event with pending work is allowed:
        // the driver releases it once the work completes.
        let r = unsafe { sys::cuEventDestroy_v2(self.raw) };
        // Drop never fails: keep the error apart (never another call's failure).
        self.deferred.note("cuEventDestroy", r.result());
    }
}

/// Run the raw driver call `call`; a call on handles that name their context needs no current
/// context, but should the driver still find none usable (`CUDA_ERROR_INVALID_CONTEXT`, e.g.
/// other code left none current on this thread), make `ctx` current and call once more.
#[inline]
fn with_context(
    ctx: &CudaContext,
    op: &'static str,
    call: impl Fn() -> sys::CUresult,
) -> Result<()> {
    let r = call();
    if r == sys::CUresult::CUDA_ERROR_INVALID_CONTEXT {
        make_current(ctx)?;
        return check(op, call());
    }
    check(op, r)
}

#[cold]
fn foreign_stream(event: &CudaEvent, stream: &CudaStream) -> Error {
    Error::InvalidArgument {
        ring: "cuda backend".into(),
        message: format!(
            "cannot record an event of context {:p} on a stream of context {:p}",
            event.ctx.cu_ctx(),
            stream.context().cu_ctx()
        ),
    }
}

impl Backend for CudaBackend {
    type Stream = Arc<CudaStream>;
    type Event = CudaEvent;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn new_stream(&self, _name: &str) -> Result<Arc<CudaStream>> {
        CudaBackend::new_stream(self)
    }

    fn launch_host(&self, stream: &Arc<CudaStream>, f: HostFn) -> Result<()> {
        // Not a hot call: make the stream's own context current, whatever other code did.
        make_current(stream.context())?;
        let key = stream.cu_stream() as usize;
        let panics = self.host_panics.clone();
        let guarded: HostFn = Box::new(move || {
            if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
                let message = format!("host function panicked: {}", panic_message(&*p));
                panics
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((key, message));
            }
        });
        let user_data = Box::into_raw(Box::new(guarded));
        // SAFETY: `stream` is a live stream of this context (the Arc keeps it alive for the
        // call); the trampoline has the `CUhostFn` signature and makes no CUDA call; on success
        // the driver passes `user_data` to it exactly once, and it frees the box.
        let r = unsafe {
            sys::cuLaunchHostFunc(
                stream.cu_stream(),
                Some(host_fn_trampoline),
                user_data.cast(),
            )
        };
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: the launch failed, so the driver will never call the trampoline: the box
            // is still ours, taken back exactly once here.
            drop(unsafe { Box::from_raw(user_data) });
        }
        check("cuLaunchHostFunc", r)
    }

    fn synchronize_stream(&self, stream: &Arc<CudaStream>) -> Result<()> {
        self.stream_synchronize(stream)?;
        let key = stream.cu_stream() as usize;
        let mut panics = self.host_panics.lock().unwrap_or_else(|e| e.into_inner());
        match panics.iter().position(|(k, _)| *k == key) {
            Some(i) => {
                let (_, message) = panics.remove(i);
                panics.retain(|(k, _)| *k != key);
                Err(Error::Backend(BackendError::new(
                    "cuda",
                    "cuLaunchHostFunc",
                    message,
                )))
            }
            None => Ok(()),
        }
    }

    fn create_event(&self, options: EventOptions) -> Result<CudaEvent> {
        // An event belongs to the context current at its creation: make ours current, whatever
        // other code made current on this thread.
        self.bind()?;
        let mut flags = 0u32;
        if !options.timing {
            flags |= sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        }
        if options.blocking_sync {
            flags |= sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        }
        let mut raw: sys::CUevent = std::ptr::null_mut();
        // SAFETY: the context is current on this thread (bind above) and `raw` is a valid
        // out-pointer; on success the driver hands us ownership of a new event.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut raw, flags)
        })?;
        Ok(CudaEvent {
            raw,
            ctx: self.ctx.clone(),
            deferred: self.deferred.clone(),
        })
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
        with_context(stream.context(), "cuEventRecord", || unsafe {
            sys::cuEventRecord(event.raw, stream.cu_stream())
        })
    }

    #[inline]
    fn wait(&self, stream: &Arc<CudaStream>, event: &CudaEvent) -> Result<()> {
        // A stream may wait for an event of another context; a handle that names no context
        // must resolve to the stream's own context, not whatever is current.
        bind_for(stream)?;
        // SAFETY: both handles are live for the duration of the call (see `record`); flags 0
        // is the only documented value.
        with_context(stream.context(), "cuStreamWaitEvent", || unsafe {
            sys::cuStreamWaitEvent(stream.cu_stream(), event.raw, 0)
        })
    }

    fn synchronize(&self, event: &CudaEvent) -> Result<()> {
        // SAFETY: `event.raw` is a live event handle (it names its context, so none need be
        // current); the call only blocks.
        with_context(&event.ctx, "cuEventSynchronize", || unsafe {
            sys::cuEventSynchronize(event.raw)
        })
    }

    fn synchronize_interruptible(
        &self,
        event: &CudaEvent,
        interrupt: &dyn Interrupt,
    ) -> Result<SyncOutcome> {
        let start = Instant::now();
        let mut slack = None;
        // Spin from shortly before the expected end until well past it; sleep otherwise.
        let window = interrupt
            .expected_wait()
            .map(|e| (e.saturating_sub(SYNC_SPIN_AHEAD), e * 2 + SYNC_SPIN));
        loop {
            if self.query(event)? {
                return Ok(SyncOutcome::Complete);
            }
            let elapsed = start.elapsed();
            let expected_soon = window.is_some_and(|(from, to)| elapsed >= from && elapsed < to);
            if elapsed < SYNC_SPIN || expected_soon {
                if interrupt.interrupted() {
                    return Ok(SyncOutcome::Interrupted);
                }
                std::hint::spin_loop();
            } else {
                slack.get_or_insert_with(TightTimerSlack::new);
                if interrupt.sleep(SYNC_POLL) {
                    return Ok(SyncOutcome::Interrupted);
                }
            }
        }
    }

    #[inline]
    fn query(&self, event: &CudaEvent) -> Result<bool> {
        // SAFETY: `event.raw` is a live event handle; cuEventQuery only reads its state.
        let mut r = unsafe { sys::cuEventQuery(event.raw) };
        if r == sys::CUresult::CUDA_ERROR_INVALID_CONTEXT {
            make_current(&event.ctx)?;
            // SAFETY: as above.
            r = unsafe { sys::cuEventQuery(event.raw) };
        }
        match r {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => check("cuEventQuery", other).map(|()| false),
        }
    }

    type Semaphore = CudaSemaphore;

    fn stream_id(&self, stream: &Arc<CudaStream>) -> u64 {
        mempool::stream_id(stream)
    }

    fn create_semaphore(&self, initial: u64, _waker: SemaphoreWaker) -> Result<CudaSemaphore> {
        self.timelines.create(&self.ctx, initial)
    }

    fn signal_on(&self, stream: &Arc<CudaStream>, sem: &CudaSemaphore, value: u64) -> Result<()> {
        self.bind()?;
        sem.signal_on(stream, value)
    }

    fn wait_on(&self, stream: &Arc<CudaStream>, sem: &CudaSemaphore, value: u64) -> Result<()> {
        self.bind()?;
        sem.wait_on(stream, value)
    }
}
