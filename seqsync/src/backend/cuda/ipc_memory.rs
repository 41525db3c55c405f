//! Device memory shared with other processes ([`Backend::ipc_memory_export`] /
//! [`Backend::ipc_memory_open`]): `cuMemAlloc` + `cuIpcGetMemHandle` in the exporter,
//! `cuIpcOpenMemHandle` in an importer.
//!
//! The driver's rules, kept here: an allocation made by `cuMemAlloc` is complete when the call
//! returns (so an importer never sees memory before it exists); an importer closes its mapping
//! (`cuIpcCloseMemHandle`) and the exporter frees (`cuMemFree`) only after their own work on
//! the device is done (the drops wait for the context); the exporter frees only once every
//! importer has closed, which the ipc layer enforces (`ipc::shared_buffer`) before it drops
//! the exporter's [`IpcMemory`].
//!
//! [`Backend::ipc_memory_export`]: crate::backend::Backend::ipc_memory_export
//! [`Backend::ipc_memory_open`]: crate::backend::Backend::ipc_memory_open

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext};

use super::deferred::Deferred;
use super::driver;
use super::make_current;
use crate::backend::{IpcExport, IpcMemory, IpcMemoryHandle};
use crate::error::Result;

/// Device memory of this process's that `cuMemFree` frees: the exporter's `cuMemAlloc`
/// allocation here, a shared pool's allocation or import (`ipc_pool`). Freed on drop, once
/// this process's device work is done.
pub(super) struct Allocation {
    pub(super) ptr: sys::CUdeviceptr,
    pub(super) ctx: Arc<CudaContext>,
    pub(super) deferred: Arc<Deferred>,
}

/// An importer's mapping: closed on drop, once this process's device work is done.
struct Mapping {
    ptr: sys::CUdeviceptr,
    ctx: Arc<CudaContext>,
    deferred: Arc<Deferred>,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let _ = make_current(&self.ctx);
        // SAFETY: the context is current; waiting for it takes no pointer.
        let r = unsafe { driver::ctx_synchronize() };
        self.deferred.note(r.op(), r.result());
        // SAFETY: `ptr` came from `cuMemAlloc`, `cuMemAllocFromPoolAsync` or
        // `cuMemPoolImportPointer` in this context and is freed once, here, after this
        // process's device work (above); the ipc layer drops an exporter's memory only once
        // no importer maps or holds it.
        let r = unsafe { driver::mem_free(self.ptr) };
        self.deferred.note(r.op(), r.result());
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let _ = make_current(&self.ctx);
        // SAFETY: the context is current; waiting for it takes no pointer.
        let r = unsafe { driver::ctx_synchronize() };
        self.deferred.note(r.op(), r.result());
        // SAFETY: `ptr` came from `cuIpcOpenMemHandle` in this context and is closed once, here,
        // after this process's device work (above).
        let r = unsafe { driver::ipc_close_mem_handle(self.ptr) };
        self.deferred.note(r.op(), r.result());
    }
}

pub(super) fn export(
    ctx: &Arc<CudaContext>,
    deferred: &Arc<Deferred>,
    bytes: usize,
) -> Result<IpcExport> {
    make_current(ctx)?;
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: `ctx` is current; `ptr` is a valid out-pointer.
    unsafe { driver::mem_alloc(&mut ptr, bytes.max(1)) }.check()?;
    let alloc = Allocation {
        ptr,
        ctx: ctx.clone(),
        deferred: deferred.clone(),
    };
    let mut handle = sys::CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: `ptr` is the base of a live `cuMemAlloc` allocation of this context; `handle` is
    // a valid out-pointer of the handle's type.
    unsafe { driver::ipc_get_mem_handle(&mut handle, ptr) }.check()?; // on error, freed
    Ok(IpcExport::Device(
        IpcMemory {
            ptr,
            _owner: Box::new(alloc),
        },
        handle.reserved.map(|b| b as u8),
    ))
}

pub(super) fn open(
    ctx: &Arc<CudaContext>,
    deferred: &Arc<Deferred>,
    handle: &IpcMemoryHandle,
    len: usize,
) -> Result<IpcMemory> {
    make_current(ctx)?;
    let handle = sys::CUipcMemHandle {
        reserved: handle.map(|b| b as std::ffi::c_char),
    };
    let mut ptr: sys::CUdeviceptr = 0;
    let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
    // SAFETY: `ctx` is current, `ptr` a valid out-pointer; the handle is passed by value and
    // only read by the driver, which refuses one that names no live allocation.
    unsafe { driver::ipc_open_mem_handle(&mut ptr, handle, flags) }.check()?;
    let memory = IpcMemory {
        ptr,
        _owner: Box::new(Mapping {
            ptr,
            ctx: ctx.clone(),
            deferred: deferred.clone(),
        }),
    };
    // The size the exporter claims (read from the shared segment, which any process of the
    // user can write) is checked against what the driver mapped, as for pool imports: work
    // sized from it must not run past the allocation.
    let (mut base, mut size): (sys::CUdeviceptr, usize) = (0, 0);
    // SAFETY: `ptr` is a live mapping in this context (current); both out-pointers are valid.
    unsafe { driver::mem_get_address_range(&mut base, &mut size, ptr) }.check()?; // unmapped on error
    if (ptr as u128) + (len as u128) > (base as u128) + (size as u128) {
        return Err(crate::error::Error::invalid(
            "cuda",
            format!("an IPC allocation of {size} bytes is claimed to hold {len}"),
        ));
    }
    Ok(memory)
}
