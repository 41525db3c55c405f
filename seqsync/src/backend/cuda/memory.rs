//! Raw device and pinned host buffers, for pipelines whose ordering seqsync (not cudarc's
//! tracking) guarantees: copies and kernels on them are enqueued by pointer.

use std::sync::Arc;

use super::driver;
use cudarc::driver::{sys, CudaContext, CudaStream};

use super::open_waits::{self, Held, Memory};
use super::{bind_for, CudaBackend, Deferred};
use crate::error::Result;

/// Device memory of `len` `u32`s (`cuMemAlloc`), freed on drop (held back while a stream waits
/// for a timeline value nothing has written yet, and freed once none does: see
/// `backend/cuda/open_waits.rs`).
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: Arc<CudaContext>,
    deferred: Arc<Deferred>,
    /// Set for a view of pinned host memory ([`PinnedBuffer::as_memory`]): it owns the memory,
    /// and nothing is freed here.
    pinned: Option<Arc<PinnedBuffer>>,
}

/// Page-locked host memory of `len` `u32`s (`cuMemHostAlloc`, not write-combined, so host
/// reads are fast), freed on drop (held back as [`DeviceBuffer`]'s memory is).
#[derive(Debug)]
pub struct PinnedBuffer {
    ptr: *mut u32,
    len: usize,
    ctx: Arc<CudaContext>,
    deferred: Arc<Deferred>,
}

// SAFETY: the buffer is plain page-locked memory owned by this value; moving the owner to
// another thread is fine. Access to its contents goes through the `unsafe` methods below, whose
// callers order it against asynchronous copies.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared references only hand out the raw pointer or, through `unsafe` methods, slices
// whose callers guarantee no conflicting access (see `as_slice`/`as_mut_slice`).
unsafe impl Sync for PinnedBuffer {}

/// The bytes of `len` `u32`s (at least one), or a named error where they pass the address
/// space (a wrapped size would allocate less than the buffer says it holds).
fn words_to_bytes(what: &str, len: usize) -> Result<usize> {
    len.max(1).checked_mul(4).ok_or_else(|| {
        crate::Error::invalid(
            what,
            format!("{len} u32s are more bytes than the address space"),
        )
    })
}

impl CudaBackend {
    /// Allocate `len` `u32`s of device memory (contents undefined).
    pub fn alloc_device(&self, len: usize) -> Result<DeviceBuffer> {
        self.bind()?;
        let bytes = words_to_bytes("alloc_device", len)?;
        open_waits::admit_allocation("cuMemAlloc", bytes)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the context is current; a valid out-pointer; the size is non-zero (at least
        // one element).
        unsafe { driver::mem_alloc(&mut ptr, bytes) }.check()?;
        Ok(DeviceBuffer {
            ptr,
            len,
            ctx: self.ctx.clone(),
            deferred: self.deferred().clone(),
            pinned: None,
        })
    }

    /// Allocate `len` `u32`s of pinned host memory, zeroed.
    pub fn alloc_pinned(&self, len: usize) -> Result<PinnedBuffer> {
        self.bind()?;
        let bytes = words_to_bytes("alloc_pinned", len)?;
        open_waits::admit_allocation("cuMemHostAlloc", bytes)?;
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: the context is current; a valid out-pointer; flags 0 asks for plain cached
        // page-locked memory.
        unsafe { driver::mem_host_alloc(&mut host, bytes, 0) }.check()?;
        let ptr = host as *mut u32;
        // SAFETY: `ptr` points to `len` freshly allocated u32s that nothing else references.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(PinnedBuffer {
            ptr,
            len,
            ctx: self.ctx.clone(),
            deferred: self.deferred().clone(),
        })
    }
}

impl DeviceBuffer {
    /// The device address, to pass to kernels.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// Length in `u32`s.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Enqueue a copy of all of `src` into this buffer on `stream`.
    ///
    /// # Safety
    /// Until the copy has completed on `stream`, both buffers must stay alive, nothing may
    /// write `src`, and nothing may access this buffer in a conflicting way; the caller orders
    /// that with events (a ring).
    pub unsafe fn copy_from_pinned_async(
        &self,
        src: &PinnedBuffer,
        stream: &CudaStream,
    ) -> Result<()> {
        assert_eq!(
            src.len, self.len,
            "copy between buffers of different lengths"
        );
        bind_for(stream)?;
        // SAFETY: both ranges are live allocations of `len * 4` bytes (kept alive by their
        // owners, which the caller keeps until the copy completes), and the caller orders all
        // other access to them against the copy.
        unsafe {
            driver::memcpy_htod_async(
                self.ptr,
                src.ptr as *const _,
                self.len * 4,
                stream.cu_stream(),
            )
        }
        .check()
    }

    /// Enqueue a copy of this buffer into `dst` on `stream`.
    ///
    /// # Safety
    /// As [`copy_from_pinned_async`](Self::copy_from_pinned_async): both buffers stay alive
    /// until the copy has completed, and the caller orders every other access to `dst` and to
    /// this buffer against the copy.
    pub unsafe fn copy_to_pinned_async(
        &self,
        dst: &PinnedBuffer,
        stream: &CudaStream,
    ) -> Result<()> {
        assert_eq!(
            dst.len, self.len,
            "copy between buffers of different lengths"
        );
        bind_for(stream)?;
        // SAFETY: as in `copy_from_pinned_async`.
        unsafe {
            driver::memcpy_dtoh_async(
                dst.ptr as *mut _,
                self.ptr,
                self.len * 4,
                stream.cu_stream(),
            )
        }
        .check()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.pinned.is_some() {
            // A view: the pinned buffer frees its memory when its last owner goes.
            return;
        }
        // The owner drops a buffer only after the work using it has completed (the copy
        // methods' safety contract asks for exactly that). The free waits while a word wait
        // may block a stream (`open_waits`); its errors are kept apart (see
        // `CudaBackend::take_deferred_errors`), never reported by another call.
        open_waits::free(Held {
            memory: Memory::Device(self.ptr),
            bytes: self.len.max(1) * 4,
            ctx: self.ctx.clone(),
            deferred: Some(self.deferred.clone()),
        });
    }
}

impl PinnedBuffer {
    /// This pinned host memory as command memory ([`CommandBackend::Memory`]), so that copies
    /// to and from it (stream copies, CUDA graph memcpy nodes, both by unified address) run as
    /// host<->device copies on the copy engines. Under unified addressing (every 64-bit
    /// platform CUDA 12 supports) memory from `cuMemHostAlloc` is accessible from the device at
    /// its host address. The view keeps the buffer alive.
    ///
    /// [`CommandBackend::Memory`]: crate::backend::CommandBackend::Memory
    pub fn as_memory(self: &Arc<Self>) -> Arc<DeviceBuffer> {
        Arc::new(DeviceBuffer {
            ptr: self.ptr as sys::CUdeviceptr,
            len: self.len,
            ctx: self.ctx.clone(),
            deferred: self.deferred.clone(),
            pinned: Some(self.clone()),
        })
    }

    /// Length in `u32`s.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of the first `u32`: for reading or writing one part of the buffer while
    /// copies use another (the caller upholds, for the part it touches, what
    /// [`as_slice`](Self::as_slice) and [`as_mut_slice`](Self::as_mut_slice) ask of the whole).
    pub fn as_ptr(&self) -> *mut u32 {
        self.ptr
    }

    /// The contents.
    ///
    /// # Safety
    /// No asynchronous copy into this buffer may be in flight, nor start, while the slice
    /// lives.
    pub unsafe fn as_slice(&self) -> &[u32] {
        // SAFETY: `ptr` is a live allocation of `len` initialized u32s; the caller guarantees
        // no concurrent write by the device.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The contents, for writing.
    ///
    /// # Safety
    /// No asynchronous copy from or into this buffer may be in flight, nor start, while the
    /// slice lives, and no other reference to the contents may exist.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u32] {
        // SAFETY: as in `as_slice`, plus the caller's guarantee of exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // The owner drops it only after every copy that used it has completed (the copy
        // methods' contract); the free waits while a word wait may block a stream.
        open_waits::free(Held {
            memory: Memory::Pinned(self.ptr as *mut _),
            bytes: self.len.max(1) * 4,
            ctx: self.ctx.clone(),
            deferred: Some(self.deferred.clone()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::words_to_bytes;

    #[test]
    fn a_length_past_the_address_space_is_a_named_error() {
        let e = words_to_bytes("alloc_pinned", usize::MAX / 4 + 1).unwrap_err();
        assert!(matches!(e, crate::Error::InvalidArgument { .. }), "{e}");
        assert_eq!(words_to_bytes("alloc_pinned", 0).unwrap(), 4);
        assert_eq!(words_to_bytes("alloc_pinned", 3).unwrap(), 12);
    }
}
