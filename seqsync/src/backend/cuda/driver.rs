//! The CUDA driver layer: every raw driver call the crate makes, once, with its name, one error
//! mapping and the context retry. No `sys::cu*` call appears outside this file.
//!
//! Each function below is the driver entry point it names, unchanged: it returns a [`Call`]
//! (the call's name and its `CUresult`), which [`Call::check`] turns into seqsync's error,
//! naming the call. [`with_context`] retries a call once after binding its context, for calls on
//! handles that carry their context but find none usable on the calling thread.
//!
//! # Safety
//!
//! One contract for every function here: it is the driver call of its name, so the caller
//! upholds that call's documented preconditions. Handles are live (created and not yet
//! destroyed) and of one context; out-pointers are valid for writes; memory ranges are live
//! allocations of at least the given size for as long as the call, or the stream work it
//! enqueues, uses them; callbacks have the driver's signature and make no CUDA call. Each call
//! site's `// SAFETY:` comment says why these hold there.

use std::ffi::{c_uint, c_void};

use cudarc::driver::{sys, CudaContext, DriverError};

use crate::error::{BackendError, Error, Result};

/// Is a CUDA driver library loadable here? Never panics.
pub fn driver_present() -> bool {
    // SAFETY: `is_culib_present` only tries to dlopen the driver library by its usual names
    // and reports whether that worked; it has no preconditions.
    unsafe { sys::is_culib_present() }
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

/// The raw driver call `op`'s result as seqsync's.
#[inline]
pub(super) fn check(op: &'static str, r: sys::CUresult) -> Result<()> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        r => Err(call_failed(op, r)),
    }
}

#[cold]
#[inline(never)]
fn call_failed(op: &'static str, r: sys::CUresult) -> Error {
    driver_error(op, r.result().expect_err("not a success code"))
}

/// What one driver call returned, with the call's name.
#[must_use = "a driver call's result is checked or noted"]
#[derive(Debug, Clone, Copy)]
pub(super) struct Call {
    op: &'static str,
    code: sys::CUresult,
}

impl Call {
    /// `Ok` on success, else seqsync's error naming the call.
    #[inline]
    pub(super) fn check(self) -> Result<()> {
        check(self.op, self.code)
    }

    /// The driver's code, for calls whose other results mean something (`NOT_READY`).
    #[inline]
    pub(super) fn code(self) -> sys::CUresult {
        self.code
    }

    /// The call's name (`cuEventRecord`).
    pub(super) fn op(self) -> &'static str {
        self.op
    }

    /// As cudarc's result, for the error slots of `Drop`s ([`super::deferred`]).
    pub(super) fn result(self) -> std::result::Result<(), DriverError> {
        self.code.result()
    }
}

/// Run `call`; should the driver find no usable context on this thread
/// (`CUDA_ERROR_INVALID_CONTEXT`, e.g. other code left none current), make `ctx` current and
/// call once more. For calls on handles that name their context.
#[inline]
pub(super) fn with_context(ctx: &CudaContext, call: impl Fn() -> Call) -> Result<()> {
    let first = call();
    match first.code {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        _ => retry_or_fail(ctx, first, &call),
    }
}

/// [`with_context`] off its fast path (out of line, so that the callers' hot code stays short).
#[cold]
#[inline(never)]
fn retry_or_fail(ctx: &CudaContext, first: Call, call: &dyn Fn() -> Call) -> Result<()> {
    if first.code == sys::CUresult::CUDA_ERROR_INVALID_CONTEXT {
        super::context::make_current(ctx)?;
        return call().check();
    }
    first.check()
}

/// One wrapper per driver call: `name => sys function as "the name errors give" (arguments)`.
macro_rules! driver_calls {
    ($($name:ident => $cu:ident as $op:literal ($($arg:ident: $ty:ty),* $(,)?);)*) => {$(
        #[doc = concat!("`", $op, "`: see the module's safety contract.")]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        pub(super) unsafe fn $name($($arg: $ty),*) -> Call {
            Call {
                op: $op,
                // SAFETY: forwarded as is: the caller upholds this call's contract.
                code: unsafe { sys::$cu($($arg),*) },
            }
        }
    )*};
}

driver_calls! {
    // Contexts and devices.
    ctx_get_current => cuCtxGetCurrent as "cuCtxGetCurrent" (out: *mut sys::CUcontext);
    ctx_set_current => cuCtxSetCurrent as "cuCtxSetCurrent" (ctx: sys::CUcontext);
    device_get_attribute => cuDeviceGetAttribute as "cuDeviceGetAttribute"
        (out: *mut i32, attr: sys::CUdevice_attribute, dev: sys::CUdevice);

    // Events.
    event_create => cuEventCreate as "cuEventCreate" (out: *mut sys::CUevent, flags: c_uint);
    event_destroy => cuEventDestroy_v2 as "cuEventDestroy" (event: sys::CUevent);
    event_record => cuEventRecord as "cuEventRecord" (event: sys::CUevent, stream: sys::CUstream);
    event_query => cuEventQuery as "cuEventQuery" (event: sys::CUevent);
    event_synchronize => cuEventSynchronize as "cuEventSynchronize" (event: sys::CUevent);
    event_elapsed_time => cuEventElapsedTime as "cuEventElapsedTime"
        (ms: *mut f32, start: sys::CUevent, end: sys::CUevent);
    ipc_get_event_handle => cuIpcGetEventHandle as "cuIpcGetEventHandle"
        (out: *mut sys::CUipcEventHandle, event: sys::CUevent);
    ipc_open_event_handle => cuIpcOpenEventHandle as "cuIpcOpenEventHandle"
        (out: *mut sys::CUevent, handle: sys::CUipcEventHandle);
    ipc_get_mem_handle => cuIpcGetMemHandle as "cuIpcGetMemHandle"
        (out: *mut sys::CUipcMemHandle, ptr: sys::CUdeviceptr);
    ipc_open_mem_handle => cuIpcOpenMemHandle_v2 as "cuIpcOpenMemHandle"
        (out: *mut sys::CUdeviceptr, handle: sys::CUipcMemHandle, flags: c_uint);
    ipc_close_mem_handle => cuIpcCloseMemHandle as "cuIpcCloseMemHandle" (ptr: sys::CUdeviceptr);
    ctx_synchronize => cuCtxSynchronize as "cuCtxSynchronize" ();

    // Streams.
    stream_wait_event => cuStreamWaitEvent as "cuStreamWaitEvent"
        (stream: sys::CUstream, event: sys::CUevent, flags: c_uint);
    stream_query => cuStreamQuery as "cuStreamQuery" (stream: sys::CUstream);
    stream_get_ctx => cuStreamGetCtx as "cuStreamGetCtx"
        (stream: sys::CUstream, out: *mut sys::CUcontext);
    stream_synchronize => cuStreamSynchronize as "cuStreamSynchronize" (stream: sys::CUstream);
    stream_write_value64 => cuStreamWriteValue64_v2 as "cuStreamWriteValue64"
        (stream: sys::CUstream, addr: sys::CUdeviceptr, value: u64, flags: c_uint);
    stream_wait_value64 => cuStreamWaitValue64_v2 as "cuStreamWaitValue64"
        (stream: sys::CUstream, addr: sys::CUdeviceptr, value: u64, flags: c_uint);
    launch_host_func => cuLaunchHostFunc as "cuLaunchHostFunc"
        (stream: sys::CUstream, f: sys::CUhostFn, data: *mut c_void);
    launch_kernel => cuLaunchKernel as "cuLaunchKernel" (
        f: sys::CUfunction,
        grid_x: c_uint, grid_y: c_uint, grid_z: c_uint,
        block_x: c_uint, block_y: c_uint, block_z: c_uint,
        shared_bytes: c_uint,
        stream: sys::CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    );

    // Memory.
    mem_alloc => cuMemAlloc_v2 as "cuMemAlloc" (out: *mut sys::CUdeviceptr, bytes: usize);
    mem_free => cuMemFree_v2 as "cuMemFree" (ptr: sys::CUdeviceptr);
    mem_host_alloc => cuMemHostAlloc as "cuMemHostAlloc"
        (out: *mut *mut c_void, bytes: usize, flags: c_uint);
    mem_free_host => cuMemFreeHost as "cuMemFreeHost" (ptr: *mut c_void);
    mem_host_get_device_pointer => cuMemHostGetDevicePointer_v2 as "cuMemHostGetDevicePointer"
        (out: *mut sys::CUdeviceptr, host: *mut c_void, flags: c_uint);
    mem_host_register => cuMemHostRegister_v2 as "cuMemHostRegister"
        (ptr: *mut c_void, bytes: usize, flags: c_uint);
    mem_host_unregister => cuMemHostUnregister as "cuMemHostUnregister" (ptr: *mut c_void);
    memcpy_async => cuMemcpyAsync as "cuMemcpyAsync"
        (dst: sys::CUdeviceptr, src: sys::CUdeviceptr, bytes: usize, stream: sys::CUstream);
    memcpy_htod => cuMemcpyHtoD_v2 as "cuMemcpyHtoD"
        (dst: sys::CUdeviceptr, src: *const c_void, bytes: usize);
    memcpy_htod_async => cuMemcpyHtoDAsync_v2 as "cuMemcpyHtoDAsync"
        (dst: sys::CUdeviceptr, src: *const c_void, bytes: usize, stream: sys::CUstream);
    memcpy_dtoh => cuMemcpyDtoH_v2 as "cuMemcpyDtoH"
        (dst: *mut c_void, src: sys::CUdeviceptr, bytes: usize);
    memcpy_dtoh_async => cuMemcpyDtoHAsync_v2 as "cuMemcpyDtoHAsync"
        (dst: *mut c_void, src: sys::CUdeviceptr, bytes: usize, stream: sys::CUstream);
    memset_d32 => cuMemsetD32_v2 as "cuMemsetD32" (dst: sys::CUdeviceptr, value: c_uint, n: usize);
    memset_d32_async => cuMemsetD32Async as "cuMemsetD32Async"
        (dst: sys::CUdeviceptr, value: c_uint, n: usize, stream: sys::CUstream);

    // Stream-ordered memory pools.
    mem_pool_create => cuMemPoolCreate as "cuMemPoolCreate"
        (out: *mut sys::CUmemoryPool, props: *const sys::CUmemPoolProps);
    mem_pool_destroy => cuMemPoolDestroy as "cuMemPoolDestroy" (pool: sys::CUmemoryPool);
    mem_pool_set_attribute => cuMemPoolSetAttribute as "cuMemPoolSetAttribute"
        (pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute, value: *mut c_void);
    mem_pool_get_attribute => cuMemPoolGetAttribute as "cuMemPoolGetAttribute"
        (pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute, value: *mut c_void);
    mem_pool_trim_to => cuMemPoolTrimTo as "cuMemPoolTrimTo" (pool: sys::CUmemoryPool, keep: usize);
    mem_alloc_from_pool_async => cuMemAllocFromPoolAsync as "cuMemAllocFromPoolAsync" (
        out: *mut sys::CUdeviceptr,
        bytes: usize,
        pool: sys::CUmemoryPool,
        stream: sys::CUstream,
    );
    mem_free_async => cuMemFreeAsync as "cuMemFreeAsync"
        (ptr: sys::CUdeviceptr, stream: sys::CUstream);
    mem_pool_export_to_shareable_handle => cuMemPoolExportToShareableHandle
        as "cuMemPoolExportToShareableHandle" (
        out: *mut c_void,
        pool: sys::CUmemoryPool,
        kind: sys::CUmemAllocationHandleType,
        flags: std::ffi::c_ulonglong,
    );
    mem_pool_import_from_shareable_handle => cuMemPoolImportFromShareableHandle
        as "cuMemPoolImportFromShareableHandle" (
        out: *mut sys::CUmemoryPool,
        handle: *mut c_void,
        kind: sys::CUmemAllocationHandleType,
        flags: std::ffi::c_ulonglong,
    );
    mem_pool_export_pointer => cuMemPoolExportPointer as "cuMemPoolExportPointer"
        (out: *mut sys::CUmemPoolPtrExportData, ptr: sys::CUdeviceptr);
    mem_pool_import_pointer => cuMemPoolImportPointer as "cuMemPoolImportPointer" (
        out: *mut sys::CUdeviceptr,
        pool: sys::CUmemoryPool,
        data: *mut sys::CUmemPoolPtrExportData,
    );
    mem_get_address_range => cuMemGetAddressRange_v2 as "cuMemGetAddressRange"
        (base: *mut sys::CUdeviceptr, size: *mut usize, ptr: sys::CUdeviceptr);
    mem_pool_get_access => cuMemPoolGetAccess as "cuMemPoolGetAccess" (
        out: *mut sys::CUmemAccess_flags,
        pool: sys::CUmemoryPool,
        location: *mut sys::CUmemLocation,
    );
    mem_pool_set_access => cuMemPoolSetAccess as "cuMemPoolSetAccess"
        (pool: sys::CUmemoryPool, map: *const sys::CUmemAccessDesc, count: usize);

    // Graphs.
    graph_create => cuGraphCreate as "cuGraphCreate" (out: *mut sys::CUgraph, flags: c_uint);
    graph_destroy => cuGraphDestroy as "cuGraphDestroy" (graph: sys::CUgraph);
    graph_add_empty_node => cuGraphAddEmptyNode as "cuGraphAddEmptyNode" (
        out: *mut sys::CUgraphNode,
        graph: sys::CUgraph,
        deps: *const sys::CUgraphNode,
        ndeps: usize,
    );
    graph_add_kernel_node => cuGraphAddKernelNode_v2 as "cuGraphAddKernelNode" (
        out: *mut sys::CUgraphNode,
        graph: sys::CUgraph,
        deps: *const sys::CUgraphNode,
        ndeps: usize,
        params: *const sys::CUDA_KERNEL_NODE_PARAMS,
    );
    graph_add_memcpy_node => cuGraphAddMemcpyNode as "cuGraphAddMemcpyNode" (
        out: *mut sys::CUgraphNode,
        graph: sys::CUgraph,
        deps: *const sys::CUgraphNode,
        ndeps: usize,
        params: *const sys::CUDA_MEMCPY3D,
        ctx: sys::CUcontext,
    );
    graph_add_memset_node => cuGraphAddMemsetNode as "cuGraphAddMemsetNode" (
        out: *mut sys::CUgraphNode,
        graph: sys::CUgraph,
        deps: *const sys::CUgraphNode,
        ndeps: usize,
        params: *const sys::CUDA_MEMSET_NODE_PARAMS,
        ctx: sys::CUcontext,
    );
    graph_add_host_node => cuGraphAddHostNode as "cuGraphAddHostNode" (
        out: *mut sys::CUgraphNode,
        graph: sys::CUgraph,
        deps: *const sys::CUgraphNode,
        ndeps: usize,
        params: *const sys::CUDA_HOST_NODE_PARAMS,
    );
    graph_instantiate => cuGraphInstantiateWithFlags as "cuGraphInstantiate"
        (out: *mut sys::CUgraphExec, graph: sys::CUgraph, flags: u64);
    graph_exec_destroy => cuGraphExecDestroy as "cuGraphExecDestroy" (exec: sys::CUgraphExec);
    graph_launch => cuGraphLaunch as "cuGraphLaunch"
        (exec: sys::CUgraphExec, stream: sys::CUstream);
    graph_upload => cuGraphUpload as "cuGraphUpload"
        (exec: sys::CUgraphExec, stream: sys::CUstream);
    graph_exec_kernel_node_set_params => cuGraphExecKernelNodeSetParams_v2
        as "cuGraphExecKernelNodeSetParams" (
        exec: sys::CUgraphExec,
        node: sys::CUgraphNode,
        params: *const sys::CUDA_KERNEL_NODE_PARAMS,
    );
    user_object_create => cuUserObjectCreate as "cuUserObjectCreate" (
        out: *mut sys::CUuserObject,
        data: *mut c_void,
        destroy: sys::CUhostFn,
        refs: c_uint,
        flags: c_uint,
    );
    user_object_release => cuUserObjectRelease as "cuUserObjectRelease"
        (object: sys::CUuserObject, count: c_uint);
    graph_retain_user_object => cuGraphRetainUserObject as "cuGraphRetainUserObject"
        (graph: sys::CUgraph, object: sys::CUuserObject, count: c_uint, flags: c_uint);
}
