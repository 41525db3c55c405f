//! The CUDA backend's memory: `cuMemAlloc` memory and the driver's stream-ordered pool (`cuMemPoolCreate`, `cuMemAllocFromPoolAsync`, `cuMemFreeAsync`).
//!
//! See NVIDIA's [stream-ordered allocator](https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MALLOC__ASYNC.html).

use std::sync::Arc;

use super::driver;
use cudarc::driver::{sys, CudaContext, CudaStream};

use super::{driver_error, CudaBackend, DeviceBuffer};
use crate::backend::{MemoryBackend, MemoryUsage};
use crate::error::Result;

/// A pool of the driver's stream-ordered allocator, destroyed on drop (the driver releases it
/// once its outstanding allocations are freed).
#[derive(Debug)]
pub struct CudaAsyncPool {
    raw: sys::CUmemoryPool,
    ctx: Arc<CudaContext>,
}

// SAFETY: a CUmemoryPool is an opaque driver handle; the driver API's pool calls are
// thread-safe and the context it belongs to is kept alive by `ctx`.
unsafe impl Send for CudaAsyncPool {}
// SAFETY: as above: every use goes through the thread-safe driver.
unsafe impl Sync for CudaAsyncPool {}

impl CudaAsyncPool {
    /// The raw handle, for driver calls of your own.
    pub fn cu_pool(&self) -> sys::CUmemoryPool {
        self.raw
    }

    fn set(&self, attr: sys::CUmemPool_attribute, mut value: u64, as_int: bool) -> Result<()> {
        let mut int = value as i32;
        let ptr: *mut std::ffi::c_void = if as_int {
            (&mut int as *mut i32).cast()
        } else {
            (&mut value as *mut u64).cast()
        };
        // SAFETY: `raw` is a live pool; `ptr` points to an int (the reuse flags) or a cuuint64_t
        // (the threshold and the high marks), as the attribute's documentation requires, and
        // lives for the call.
        unsafe { driver::mem_pool_set_attribute(self.raw, attr, ptr) }.check()
    }

    fn get(&self, attr: sys::CUmemPool_attribute) -> Result<u64> {
        let mut value = 0u64;
        // SAFETY: `raw` is a live pool; the usage attributes are cuuint64_t, written to `value`.
        unsafe { driver::mem_pool_get_attribute(self.raw, attr, (&mut value as *mut u64).cast()) }
            .check()?;
        Ok(value)
    }
}

impl Drop for CudaAsyncPool {
    fn drop(&mut self) {
        self.ctx.record_err(self.ctx.bind_to_thread());
        // SAFETY: `raw` came from cuMemPoolCreate and is destroyed once; outstanding allocations
        // keep the driver's pool alive until they are freed (documented behaviour).
        let r = unsafe { driver::mem_pool_destroy(self.raw) };
        self.ctx.record_err(r.result());
    }
}

impl MemoryBackend for CudaBackend {
    type RawMemory = DeviceBuffer;
    type AsyncPool = CudaAsyncPool;

    fn alloc_memory(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.alloc_device(bytes.div_ceil(4))
    }

    fn memory_addr(&self, memory: &DeviceBuffer) -> u64 {
        memory.device_ptr()
    }

    fn create_async_pool(&self, release_threshold: u64) -> Result<CudaAsyncPool> {
        use sys::CUmemPool_attribute::*;
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        // SAFETY: CUmemPoolProps is a plain C struct for which all-zero is the documented
        // "unset" value of every field; the fields that matter are set below.
        let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = self.ctx.ordinal() as i32;
        let mut raw: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: `props` is fully initialized and `raw` is a valid out-pointer; on success we
        // own the new pool.
        unsafe { driver::mem_pool_create(&mut raw, &props) }.check()?;
        let pool = CudaAsyncPool {
            raw,
            ctx: self.ctx.clone(),
        };
        // peer-suites §5: keep only event-dependency reuse, so the driver never inserts a
        // hidden wait and reuse does not depend on timing.
        pool.set(CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, 1, true)?;
        pool.set(CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, 0, true)?;
        pool.set(CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, 0, true)?;
        pool.set(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, release_threshold, false)?;
        Ok(pool)
    }

    fn alloc_async(
        &self,
        pool: &CudaAsyncPool,
        stream: &Arc<CudaStream>,
        bytes: usize,
    ) -> Result<u64> {
        self.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the pool and the stream are live handles of this context; `ptr` is a valid
        // out-pointer.
        unsafe { driver::mem_alloc_from_pool_async(&mut ptr, bytes, pool.raw, stream.cu_stream()) }
            .check()?;
        Ok(ptr)
    }

    fn free_async(&self, _pool: &CudaAsyncPool, stream: &Arc<CudaStream>, addr: u64) -> Result<()> {
        self.bind()?;
        // SAFETY: `addr` is a live allocation of the pool (the caller, `NativePool`, frees only
        // addresses it allocated and has not freed); the stream is live.
        unsafe { driver::mem_free_async(addr, stream.cu_stream()) }.check()
    }

    fn trim_async_pool(&self, pool: &CudaAsyncPool, keep: usize) -> Result<()> {
        self.bind()?;
        // SAFETY: `raw` is a live pool; trimming never touches outstanding allocations.
        unsafe { driver::mem_pool_trim_to(pool.raw, keep) }.check()
    }

    fn async_pool_usage(&self, pool: &CudaAsyncPool) -> Result<MemoryUsage> {
        use sys::CUmemPool_attribute::*;
        Ok(MemoryUsage {
            reserved_current: pool.get(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            reserved_high: pool.get(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)?,
            used_current: pool.get(CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
            used_high: pool.get(CU_MEMPOOL_ATTR_USED_MEM_HIGH)?,
        })
    }
}
