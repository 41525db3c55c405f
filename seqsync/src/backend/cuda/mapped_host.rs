//! Host memory mapped for streams ([`Backend::map_host`](crate::backend::Backend::map_host)):
//! `cuMemHostRegister` with `DEVICEMAP | PORTABLE`, its device address, and the stream memory
//! operations on its words.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::deferred::Deferred;
use super::driver::{self, with_context};
use super::make_current;
use crate::backend::MappedHost;
use crate::error::{Error, Result};

/// The registration: host and device addresses of the same bytes.
struct Registered {
    host: *mut c_void,
    dev: sys::CUdeviceptr,
    ctx: Arc<CudaContext>,
    deferred: Arc<Deferred>,
}

// SAFETY: the two addresses are plain numbers here (the memory behind them is only touched by
// the device, through stream operations, and by the host through atomics elsewhere); the
// registration may be released from any thread.
unsafe impl Send for Registered {}
// SAFETY: as above: shared references only read the addresses.
unsafe impl Sync for Registered {}

impl Drop for Registered {
    fn drop(&mut self) {
        let _ = make_current(&self.ctx);
        // SAFETY: `host` was registered by `map` in this context and is unregistered once,
        // here; the caller of `map` drops this only once no stream operation on it can run.
        let r = unsafe { driver::mem_host_unregister(self.host) };
        self.deferred.note(r.op(), r.result());
    }
}

/// Register `len` bytes at `host` in `ctx`.
///
/// # Safety
/// As [`Backend::map_host`](crate::backend::Backend::map_host).
pub(super) unsafe fn map(
    ctx: &Arc<CudaContext>,
    deferred: &Arc<Deferred>,
    host: *mut u8,
    len: usize,
) -> Result<MappedHost> {
    make_current(ctx)?;
    let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
    let host = host as *mut c_void;
    // SAFETY: the caller promises `host..host + len` is page-aligned mapped memory that
    // outlives the registration; `ctx` is current.
    unsafe { driver::mem_host_register(host, len, flags) }.check()?;
    let mut dev: sys::CUdeviceptr = 0;
    // SAFETY: `host` was registered just now with DEVICEMAP; `dev` is a valid out-pointer.
    let r = unsafe { driver::mem_host_get_device_pointer(&mut dev, host, 0) };
    let reg = Registered {
        host,
        dev,
        ctx: ctx.clone(),
        deferred: deferred.clone(),
    };
    r.check()?; // on error, `reg`'s drop unregisters
    Ok(MappedHost {
        inner: Box::new(reg),
        len,
    })
}

/// The device address of the word at `offset` of `map` (checked: inside it, 8-aligned, and
/// mapped by this context).
fn word_address(map: &MappedHost, ctx: &CudaContext, offset: usize) -> Result<sys::CUdeviceptr> {
    match map.inner.downcast_ref::<Registered>() {
        Some(r) if r.ctx.cu_ctx() == ctx.cu_ctx() => Ok(r.dev + map.word_at(offset)? as u64),
        _ => Err(Error::invalid(
            "cuda backend",
            "host memory mapped by another backend or context",
        )),
    }
}

/// `cuStreamWriteValue64` of `value` to the word at `offset`, after the work before it.
pub(super) fn write_on(
    ctx: &CudaContext,
    stream: &CudaStream,
    map: &MappedHost,
    offset: usize,
    value: u64,
) -> Result<()> {
    let at = word_address(map, ctx, offset)?;
    // SAFETY: `at` is an 8-aligned word inside the registered memory (checked above), which
    // the registration keeps mapped; flags 0: with a memory barrier (the write lands after
    // everything enqueued before it).
    with_context(stream.context(), || unsafe {
        driver::stream_write_value64(stream.cu_stream(), at, value, 0)
    })
}

/// `cuStreamWaitValue64` (`GEQ`) for `value` on the word at `offset`.
pub(super) fn wait_on(
    ctx: &CudaContext,
    stream: &CudaStream,
    map: &MappedHost,
    offset: usize,
    value: u64,
) -> Result<()> {
    let at = word_address(map, ctx, offset)?;
    let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
    // SAFETY: as in `write_on`.
    with_context(stream.context(), || unsafe {
        driver::stream_wait_value64(stream.cu_stream(), at, value, geq)
    })
}
