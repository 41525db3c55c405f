//! The CUDA backend's commands: raw kernel launches (`cuLaunchKernel`), device-to-device copies
//! (`cuMemcpyDtoDAsync`), 32-bit fills (`cuMemsetD32Async`); host functions are
//! [`Backend::launch_host`](crate::backend::Backend::launch_host).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use super::driver;

use super::{bind_for, make_current, with_context, CudaBackend, CudaFunction, DeviceBuffer};
use crate::backend::command::{check_disjoint, check_range, CommandBackend, CopyOp, FillOp};
use crate::error::Result;

/// One kernel parameter, by value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelParam {
    /// `unsigned int`.
    U32(u32),
    /// `int`.
    I32(i32),
    /// `unsigned long long`.
    U64(u64),
    /// `float`.
    F32(f32),
    /// A device pointer (`T*`).
    Ptr(u64),
}

impl KernelParam {
    /// The value's bytes, little-endian, in an 8-byte slot (the driver reads the parameter's
    /// own size from the slot's start).
    fn slot(self) -> u64 {
        match self {
            KernelParam::U32(v) => v as u64,
            KernelParam::I32(v) => v as u32 as u64,
            KernelParam::U64(v) | KernelParam::Ptr(v) => v,
            KernelParam::F32(v) => v.to_bits() as u64,
        }
    }
}

/// A kernel launch: the function, its launch shape and its parameters (by value, copied at
/// every launch, so a command's parameters can change between submissions).
#[derive(Debug, Clone)]
pub struct CudaKernel {
    /// The function (from [`CudaBackend::load_kernels`]).
    pub function: CudaFunction,
    /// Grid dimensions.
    pub grid: (u32, u32, u32),
    /// Block dimensions.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory bytes.
    pub shared_mem_bytes: u32,
    /// The parameters, in order.
    pub params: Vec<KernelParam>,
}

impl CudaKernel {
    /// One block of one thread.
    pub fn single(function: CudaFunction, params: Vec<KernelParam>) -> Self {
        CudaKernel {
            function,
            grid: (1, 1, 1),
            block: (1, 1, 1),
            shared_mem_bytes: 0,
            params,
        }
    }

    /// The parameter slots; `pointers` must be built from them and used while they live.
    pub(crate) fn slots(&self) -> Vec<u64> {
        self.params.iter().map(|p| p.slot()).collect()
    }
}

/// Pointers to each slot, as `cuLaunchKernel` and kernel nodes take them.
pub(crate) fn param_pointers(slots: &mut [u64]) -> Vec<*mut c_void> {
    slots.iter_mut().map(|s| (s as *mut u64).cast()).collect()
}

const SPIN_SOURCE: &str = r#"
extern "C" __global__ void seqsync_spin_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"#;

impl CudaBackend {
    /// The spinning kernel of [`CommandBackend::spin_kernel`], compiled once per context.
    fn spin_function(&self) -> Result<CudaFunction> {
        static SPIN: OnceLock<Mutex<HashMap<usize, CudaFunction>>> = OnceLock::new();
        let key = self.ctx.cu_ctx() as usize;
        let cache = SPIN.get_or_init(Default::default);
        if let Some(f) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(f.clone());
        }
        let f = self
            .load_kernels(SPIN_SOURCE, &["seqsync_spin_ns"])?
            .remove(0);
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, f.clone());
        Ok(f)
    }
}

impl CommandBackend for CudaBackend {
    type Kernel = CudaKernel;
    type Memory = Arc<DeviceBuffer>;

    fn launch_kernel(&self, stream: &Self::Stream, k: &CudaKernel) -> Result<()> {
        bind_for(stream)?;
        let mut slots = k.slots();
        let mut ptrs = param_pointers(&mut slots);
        let params = ptrs.as_mut_ptr();
        // SAFETY: the function and the stream are live handles (kept alive by their owners for
        // the call); `ptrs` has one pointer per kernel parameter, each to an 8-byte slot that
        // lives until the call returns (the driver copies the values at launch); the caller
        // gives the parameters the kernel's types, and orders the memory they point to.
        with_context(stream.context(), || unsafe {
            driver::launch_kernel(
                k.function.cu_function(),
                k.grid.0,
                k.grid.1,
                k.grid.2,
                k.block.0,
                k.block.1,
                k.block.2,
                k.shared_mem_bytes,
                stream.cu_stream(),
                params,
                std::ptr::null_mut(),
            )
        })
    }

    fn check_copy(&self, op: &CopyOp<Self::Memory>) -> Result<()> {
        check_copy(op)
    }

    fn check_fill(&self, op: &FillOp<Self::Memory>) -> Result<()> {
        check_range("fill", op.offset, op.words, op.dst.len())
    }

    fn copy(&self, stream: &Self::Stream, op: &CopyOp<Self::Memory>) -> Result<()> {
        self.check_copy(op)?;
        bind_for(stream)?;
        // SAFETY: both ranges lie inside live allocations (checked above; the Arcs keep them
        // alive for the call, and the graph that holds the op keeps them until it completes).
        // Unified addresses (device memory or a pinned view): the driver picks the direction.
        with_context(stream.context(), || unsafe {
            driver::memcpy_async(
                op.dst.device_ptr() + op.dst_offset as u64 * 4,
                op.src.device_ptr() + op.src_offset as u64 * 4,
                op.words * 4,
                stream.cu_stream(),
            )
        })
    }

    fn fill(&self, stream: &Self::Stream, op: &FillOp<Self::Memory>) -> Result<()> {
        self.check_fill(op)?;
        bind_for(stream)?;
        // SAFETY: the range lies inside a live allocation (checked above), 4-byte aligned.
        with_context(stream.context(), || unsafe {
            driver::memset_d32_async(
                op.dst.device_ptr() + op.offset as u64 * 4,
                op.value,
                op.words,
                stream.cu_stream(),
            )
        })
    }

    fn alloc_words(&self, words: usize) -> Result<Arc<DeviceBuffer>> {
        let b = self.alloc_device(words)?;
        make_current(&self.ctx)?;
        // SAFETY: `b` is a live allocation of at least `max(words, 1)` u32s in this context,
        // which is current.
        unsafe { driver::memset_d32(b.device_ptr(), 0, words) }.check()?;
        legacy_stream_synchronize()?;
        Ok(Arc::new(b))
    }

    fn read_words(&self, memory: &Arc<DeviceBuffer>) -> Result<Vec<u32>> {
        let mut out = vec![0u32; memory.len()];
        make_current(&self.ctx)?;
        // SAFETY: `out` has room for `len` u32s and the device range is the whole live buffer.
        unsafe {
            driver::memcpy_dtoh(
                out.as_mut_ptr().cast(),
                memory.device_ptr(),
                memory.len() * 4,
            )
        }
        .check()?;
        Ok(out)
    }

    fn write_words(&self, memory: &Arc<DeviceBuffer>, data: &[u32]) -> Result<()> {
        check_range("write", 0, data.len(), memory.len())?;
        make_current(&self.ctx)?;
        // SAFETY: `data` is `data.len()` readable u32s; the device range is inside the buffer.
        unsafe { driver::memcpy_htod(memory.device_ptr(), data.as_ptr().cast(), data.len() * 4) }
            .check()?;
        legacy_stream_synchronize()
    }

    fn spin_kernel(&self, us: u64) -> Result<CudaKernel> {
        Ok(CudaKernel::single(
            self.spin_function()?,
            vec![KernelParam::U64(us * 1000)],
        ))
    }
}

/// Wait for the legacy default stream. A "synchronous" `cuMemsetD32` of device memory, and the
/// DMA of a `cuMemcpyHtoD` from pageable memory, may still be running on it when the call
/// returns, and nothing orders it with seqsync's (non-blocking) streams: without this, kernels
/// enqueued next could run before the memory holds what the call wrote (seen on the H200 with
/// four tests at once: `same_results_through_every_lowering` read zeros). It waits for nothing
/// else: the legacy stream does not wait for non-blocking streams.
fn legacy_stream_synchronize() -> Result<()> {
    // SAFETY: the null stream handle names the current context's legacy default stream (the
    // caller made the context current).
    unsafe { driver::stream_synchronize(std::ptr::null_mut()) }.check()
}

/// A copy's ranges inside their memory, and apart from each other (`cuMemcpyAsync` and a graph's
/// copy node give no defined result for overlapping ranges).
pub(super) fn check_copy(op: &CopyOp<Arc<DeviceBuffer>>) -> Result<()> {
    check_range("copy source", op.src_offset, op.words, op.src.len())?;
    check_range("copy destination", op.dst_offset, op.words, op.dst.len())?;
    check_disjoint(
        op.src.device_ptr() + op.src_offset as u64 * 4,
        op.dst.device_ptr() + op.dst_offset as u64 * 4,
        op.words,
        4,
    )
}
