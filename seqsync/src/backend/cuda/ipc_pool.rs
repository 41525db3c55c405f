//! A stream-ordered pool shared with other processes ([`Backend::ipc_pool_create`] and the
//! calls after it): `cuMemPoolCreate` with POSIX file descriptor handles and
//! `cuMemPoolExportToShareableHandle` in the exporter, `cuMemPoolImportFromShareableHandle`
//! in an importer; per allocation `cuMemAllocFromPoolAsync` + `cuMemPoolExportPointer` there,
//! `cuMemPoolImportPointer` here.
//!
//! The driver's rules, kept here: an allocation is exported only once it is complete (its
//! stream is synchronized after the allocation), so no importer can touch memory before it
//! exists; an importer frees its import (`cuMemFree`) and the exporter its allocation only
//! after their own work on the device is done (the drops wait for the context); the
//! exporter frees only once every importer has freed, which the ipc layer enforces
//! (`ipc::shared_pool`) before it drops the exporter's [`IpcMemory`].
//!
//! [`Backend::ipc_pool_create`]: crate::backend::Backend::ipc_pool_create

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaStream};

use super::deferred::Deferred;
use super::driver;
use super::ipc_memory::Allocation;
use super::make_current;
use crate::backend::{IpcMemory, IpcPool, IpcPoolExport, IpcPoolPointer};
use crate::error::Result;

/// A pool handle of this process (the exporter's pool or an importer's import): destroyed on
/// drop (the driver keeps the memory of allocations not yet freed).
struct Pool {
    raw: sys::CUmemoryPool,
    ctx: Arc<CudaContext>,
    deferred: Arc<Deferred>,
}

// SAFETY: a CUmemoryPool is an opaque driver handle; the driver's pool calls are thread-safe
// and the context it belongs to is kept alive by `ctx`.
unsafe impl Send for Pool {}
// SAFETY: as above: every use goes through the thread-safe driver.
unsafe impl Sync for Pool {}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = make_current(&self.ctx);
        // SAFETY: `raw` came from cuMemPoolCreate or cuMemPoolImportFromShareableHandle in this
        // context and is destroyed once, here.
        let r = unsafe { driver::mem_pool_destroy(self.raw) };
        self.deferred.note(r.op(), r.result());
    }
}

fn pool_of(pool: &IpcPool) -> sys::CUmemoryPool {
    pool.raw as usize as sys::CUmemoryPool
}

pub(super) fn create(ctx: &Arc<CudaContext>, deferred: &Arc<Deferred>) -> Result<IpcPoolExport> {
    make_current(ctx)?;
    // SAFETY: CUmemPoolProps is a plain C struct for which all-zero is the documented "unset"
    // value of every field; the fields that matter are set below.
    let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ctx.ordinal() as i32;
    let mut raw: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `props` is initialized and `raw` a valid out-pointer; on success we own the pool.
    unsafe { driver::mem_pool_create(&mut raw, &props) }.check()?;
    let pool = Pool {
        raw,
        ctx: ctx.clone(),
        deferred: deferred.clone(),
    };
    let mut fd: std::ffi::c_int = -1;
    // SAFETY: the pool was made with POSIX file descriptor handles; for that type the handle
    // is an int, written to `fd`, which lives for the call.
    unsafe {
        driver::mem_pool_export_to_shareable_handle(
            (&mut fd as *mut std::ffi::c_int).cast(),
            raw,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    }
    .check()?; // on error the pool is destroyed
    if fd < 0 {
        return Err(crate::error::Error::Backend(
            crate::error::BackendError::new(
                "cuda",
                "cuMemPoolExportToShareableHandle",
                "the driver returned no file descriptor",
            ),
        ));
    }
    // SAFETY: the driver made `fd` for us and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(IpcPoolExport::Device(
        IpcPool {
            raw: raw as usize as u64,
            _owner: Box::new(pool),
        },
        fd,
    ))
}

pub(super) fn import(
    ctx: &Arc<CudaContext>,
    deferred: &Arc<Deferred>,
    fd: OwnedFd,
) -> Result<IpcPool> {
    make_current(ctx)?;
    let raw_fd = fd.into_raw_fd();
    let mut raw: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: for POSIX file descriptor handles the handle is the fd itself, passed as a
    // pointer-sized value; `raw` is a valid out-pointer.
    let r = unsafe {
        driver::mem_pool_import_from_shareable_handle(
            &mut raw,
            raw_fd as isize as *mut std::ffi::c_void,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    };
    // SAFETY: `raw_fd` is ours (from `fd`); the driver keeps what it needs of the pool, so the
    // descriptor is closed here whatever the result.
    drop(unsafe { OwnedFd::from_raw_fd(raw_fd) });
    r.check()?;
    let pool = Pool {
        raw,
        ctx: ctx.clone(),
        deferred: deferred.clone(),
    };
    // This context's device reads and writes the imported memory: give it access if the
    // import did not (the CUDA IPC samples do the same).
    // SAFETY: CUmemLocation is a plain C struct; both fields are set.
    let mut location: sys::CUmemLocation = unsafe { std::mem::zeroed() };
    location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    location.id = ctx.ordinal() as i32;
    let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
    // SAFETY: `raw` is the live imported pool; `flags` and `location` are valid for the call.
    unsafe { driver::mem_pool_get_access(&mut flags, raw, &mut location) }.check()?;
    if flags != sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE {
        let desc = sys::CUmemAccessDesc {
            location,
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: one valid access descriptor for the live pool.
        unsafe { driver::mem_pool_set_access(raw, &desc, 1) }.check()?;
    }
    Ok(IpcPool {
        raw: raw as usize as u64,
        _owner: Box::new(pool),
    })
}

pub(super) fn alloc(
    ctx: &Arc<CudaContext>,
    deferred: &Arc<Deferred>,
    pool: &IpcPool,
    stream: &CudaStream,
    bytes: usize,
) -> Result<(IpcMemory, IpcPoolPointer)> {
    make_current(ctx)?;
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: the pool is this process's live exportable pool (the ipc layer passes only the
    // pool it created here) and the stream is live; `ptr` is a valid out-pointer.
    unsafe {
        driver::mem_alloc_from_pool_async(&mut ptr, bytes.max(1), pool_of(pool), stream.cu_stream())
    }
    .check()?;
    let memory = Allocation {
        ptr,
        ctx: ctx.clone(),
        deferred: deferred.clone(),
    };
    // Complete before it is exported: an importer may use it as soon as it sees the data.
    // SAFETY: the stream is live.
    unsafe { driver::stream_synchronize(stream.cu_stream()) }.check()?; // on error, freed
    let mut data = sys::CUmemPoolPtrExportData { reserved: [0; 64] };
    // SAFETY: `ptr` is a live allocation of an exportable pool; `data` a valid out-pointer.
    unsafe { driver::mem_pool_export_pointer(&mut data, ptr) }.check()?;
    Ok((
        IpcMemory {
            ptr,
            _owner: Box::new(memory),
        },
        data.reserved,
    ))
}

pub(super) fn import_pointer(
    ctx: &Arc<CudaContext>,
    deferred: &Arc<Deferred>,
    pool: &IpcPool,
    data: &IpcPoolPointer,
    len: usize,
) -> Result<IpcMemory> {
    make_current(ctx)?;
    let mut data = sys::CUmemPoolPtrExportData { reserved: *data };
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: the pool is this process's live import; `data` holds export data the driver
    // checks (it refuses data naming no live allocation of the pool); `ptr` is an
    // out-pointer.
    unsafe { driver::mem_pool_import_pointer(&mut ptr, pool_of(pool), &mut data) }.check()?;
    let memory = IpcMemory {
        ptr,
        _owner: Box::new(Allocation {
            ptr,
            ctx: ctx.clone(),
            deferred: deferred.clone(),
        }),
    };
    // The size the exporter claims is checked against what the driver mapped: kernels sized
    // from it must not run past the allocation.
    let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    // SAFETY: `ptr` is a live import of this context; both out-pointers are valid.
    unsafe { driver::mem_get_address_range(&mut base, &mut size, ptr) }.check()?; // freed on error
    let end = (base as u128) + size as u128;
    if (ptr as u128) + (len as u128) > end {
        return Err(crate::error::Error::invalid(
            "cuda",
            format!("an imported pool allocation of {size} bytes is claimed to hold {len}"),
        ));
    }
    Ok(memory)
}
