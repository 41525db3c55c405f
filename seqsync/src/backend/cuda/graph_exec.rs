//! CUDA graphs: a command graph built once with `cuGraphAdd*Node` (kernel, memcpy, memset and
//! host nodes; the edges given), instantiated once, and replayed with `cuGraphLaunch`; kernel
//! parameters change between replays with `cuGraphExecKernelNodeSetParams`.
//!
//! **Host nodes outlive the graph's last launch.** The driver calls a host node's closure
//! through a pointer, possibly after the [`CudaGraphExec`] that made it was dropped (a replay
//! still in flight). So the closures are not owned by the exec but by a CUDA *user object*
//! that the graph holds (`cuUserObjectCreate`, `cuGraphRetainUserObject`, which
//! instantiation passes on to the exec): the driver releases it only once the graph and the
//! exec are destroyed and every launch that uses them has completed. Its destructor runs on
//! a driver thread, where no CUDA call is allowed (a closure's drop may make one), so it only
//! moves the closures to a list that the next graph call of any thread drops.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use super::driver;
use cudarc::driver::sys;

use super::command::{param_pointers, CudaKernel};
use super::open_waits::{self, Held, Memory};
use super::{bind_for, make_current, with_context, CudaBackend, CudaContext};
use crate::backend::command::{check_range, Command, HostFn};
use crate::backend::replay::GraphBackend;
use crate::error::{panic_message, Error, Result};

/// An instantiated CUDA graph (and the graph it came from), destroyed on drop.
pub struct CudaGraphExec {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    /// The node of each command.
    nodes: Vec<sys::CUgraphNode>,
    ctx: Arc<CudaContext>,
}

/// Host nodes' closures: the driver holds pointers to them, so each is boxed (its address must
/// not move when the vector grows).
#[allow(clippy::vec_box)]
type HostFns = Vec<Box<HostFn>>;

/// Closures of graphs the driver is done with, to be dropped outside the driver's thread.
static RELEASED: Mutex<Vec<HostFns>> = Mutex::new(Vec::new());

/// Drop the closures the driver released (on a thread that may make CUDA calls).
fn drop_released() {
    let released = std::mem::take(&mut *RELEASED.lock().unwrap_or_else(|e| e.into_inner()));
    drop(released);
}

/// The user object's destructor: takes back the closures' box (made with `Box::into_raw` in
/// [`keep_alive_with_graph`]) and hands them to [`RELEASED`]. Makes no CUDA call.
unsafe extern "C" fn release_host_fns(ptr: *mut c_void) {
    // SAFETY: `ptr` is the `Box<HostFns>` leaked by `keep_alive_with_graph` for this user
    // object, whose destructor the driver calls exactly once.
    let fns: Box<HostFns> = unsafe { Box::from_raw(ptr.cast::<HostFns>()) };
    let r = catch_unwind(AssertUnwindSafe(|| {
        RELEASED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(*fns);
    }));
    // Nothing may unwind into the driver; a failed push leaks the closures.
    drop(r);
}

/// Give `fns` to a user object owned by `graph`, so that they live until the driver is done
/// with every launch of it (see the module docs).
fn keep_alive_with_graph(graph: sys::CUgraph, fns: HostFns) -> Result<()> {
    let ptr = Box::into_raw(Box::new(fns));
    let mut object: sys::CUuserObject = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; `ptr` stays valid until the destructor takes it back;
    // `release_host_fns` has the `CUhostFn` signature and makes no CUDA call.
    let r = unsafe {
        driver::user_object_create(
            &mut object,
            ptr.cast(),
            Some(release_host_fns),
            1,
            sys::CUuserObject_flags_enum::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32,
        )
    };
    if r.code() != sys::CUresult::CUDA_SUCCESS {
        // SAFETY: no user object was made, so the box is still ours, taken back once here.
        drop(unsafe { Box::from_raw(ptr) });
        return r.check();
    }
    // SAFETY: `graph` and `object` are live; the one reference made above moves to the graph.
    let r = unsafe {
        driver::graph_retain_user_object(
            graph,
            object,
            1,
            sys::CUuserObjectRetain_flags_enum::CU_GRAPH_USER_OBJECT_MOVE as u32,
        )
    };
    if r.code() != sys::CUresult::CUDA_SUCCESS {
        // SAFETY: the reference is still ours: releasing it runs the destructor (the graph
        // never saw the object, and no node of it has run).
        let _ = unsafe { driver::user_object_release(object, 1) };
        return r.check();
    }
    Ok(())
}

// SAFETY: the graph and its instantiation are driver handles usable from any thread (launch and
// update are serialized by `&mut`/`&` through this owner); the host closures are `Send + Sync`.
unsafe impl Send for CudaGraphExec {}

impl std::fmt::Debug for CudaGraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaGraphExec")
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

impl Drop for CudaGraphExec {
    fn drop(&mut self) {
        // Destroyed now, or once no stream waits on the host (`cuGraphExecDestroy` waits for
        // the device): see `open_waits`. A launched graph still running may be destroyed: the
        // driver finishes its launches first, and the host nodes' closures are owned by the
        // graph's user object, which the driver releases only after that (see the module docs).
        open_waits::free(Held {
            memory: Memory::Graph(self.exec, self.graph),
            bytes: 0,
            ctx: self.ctx.clone(),
            deferred: None,
        });
        drop_released();
    }
}

/// The `CUhostFn` of host nodes: runs the closure `user_data` points to, every replay, and
/// never lets a panic unwind into the driver.
unsafe extern "C" fn graph_host_trampoline(user_data: *mut c_void) {
    // SAFETY: `user_data` points to a `HostFn` in a `Box` owned by the user object of the graph
    // that holds this node, which the driver releases only after the last launch of the graph
    // (and of its exec) has completed, so after this call.
    let f: &HostFn = unsafe { &*user_data.cast::<HostFn>() };
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| f())) {
        eprintln!(
            "seqsync: a CUDA graph host node panicked: {}",
            panic_message(&*p)
        );
        // A payload whose own drop panics must not unwind into the driver either.
        crate::error::drop_panic_payload(p);
    }
}

fn kernel_params(k: &CudaKernel, params: *mut *mut c_void) -> sys::CUDA_KERNEL_NODE_PARAMS {
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: k.function.cu_function(),
        gridDimX: k.grid.0,
        gridDimY: k.grid.1,
        gridDimZ: k.grid.2,
        blockDimX: k.block.0,
        blockDimY: k.block.1,
        blockDimZ: k.block.2,
        sharedMemBytes: k.shared_mem_bytes,
        kernelParams: params,
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

impl GraphBackend for CudaBackend {
    type GraphExec = CudaGraphExec;

    fn instantiate_graph(
        &self,
        ops: &[Command<Self>],
        deps: &[Vec<usize>],
        joins: &[Vec<usize>],
        order: &[usize],
    ) -> Result<CudaGraphExec> {
        make_current(&self.ctx)?;
        drop_released();
        let mut g = CudaGraphExec {
            graph: std::ptr::null_mut(),
            exec: std::ptr::null_mut(),
            nodes: vec![std::ptr::null_mut(); ops.len()],
            ctx: self.ctx.clone(),
        };
        // Until they go to the graph's user object (before any node can run): dropped with
        // the graph if the build fails half-way (no launch exists then).
        let mut host_fns: HostFns = Vec::new();
        // SAFETY: a valid out-pointer; flags must be 0.
        unsafe { driver::graph_create(&mut g.graph, 0) }.check()?;
        let ctx = self.ctx.cu_ctx();
        // Join nodes, added when first depended on (their ops come earlier in `order`).
        let mut join_nodes: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); joins.len()];
        let n = ops.len();
        for &i in order {
            let mut d = Vec::with_capacity(deps[i].len());
            for &p in &deps[i] {
                let Some(k) = p.checked_sub(n) else {
                    d.push(g.nodes[p]);
                    continue;
                };
                if join_nodes[k].is_null() {
                    let jd: Vec<sys::CUgraphNode> = joins[k].iter().map(|&q| g.nodes[q]).collect();
                    // SAFETY: `g.graph` is live; `jd` holds nodes of it added earlier (a
                    // join's ops are dependencies of a node later in `order`); a valid
                    // out-pointer.
                    unsafe {
                        driver::graph_add_empty_node(
                            &mut join_nodes[k],
                            g.graph,
                            jd.as_ptr(),
                            jd.len(),
                        )
                    }
                    .check()?;
                }
                d.push(join_nodes[k]);
            }
            let mut node: sys::CUgraphNode = std::ptr::null_mut();
            match &ops[i] {
                Command::Kernel(k) => {
                    let mut slots = k.slots();
                    let mut ptrs = param_pointers(&mut slots);
                    let p = kernel_params(k, ptrs.as_mut_ptr());
                    // SAFETY: `g.graph` is live; `d` holds nodes of it added earlier (`order`
                    // lists dependencies first); the parameter pointers point to slots alive
                    // for the call (the driver copies the values into the node).
                    unsafe {
                        driver::graph_add_kernel_node(&mut node, g.graph, d.as_ptr(), d.len(), &p)
                    }
                    .check()?;
                }
                Command::Copy(c) => {
                    super::command::check_copy(c)?;
                    // Every field spelled out: `mem::zeroed` is undefined behaviour here, since
                    // `CUmemorytype` has no variant 0 (it aborts at run time). Unified
                    // addresses: device memory, or pinned host memory viewed as command memory
                    // (`PinnedBuffer::as_memory`), copied on the copy engines.
                    let m = sys::CUDA_MEMCPY3D {
                        srcXInBytes: 0,
                        srcY: 0,
                        srcZ: 0,
                        srcLOD: 0,
                        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
                        srcHost: std::ptr::null(),
                        srcDevice: c.src.device_ptr() + c.src_offset as u64 * 4,
                        srcArray: std::ptr::null_mut(),
                        reserved0: std::ptr::null_mut(),
                        srcPitch: 0,
                        srcHeight: 0,
                        dstXInBytes: 0,
                        dstY: 0,
                        dstZ: 0,
                        dstLOD: 0,
                        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
                        dstHost: std::ptr::null_mut(),
                        dstDevice: c.dst.device_ptr() + c.dst_offset as u64 * 4,
                        dstArray: std::ptr::null_mut(),
                        reserved1: std::ptr::null_mut(),
                        dstPitch: 0,
                        dstHeight: 0,
                        WidthInBytes: c.words * 4,
                        Height: 1,
                        Depth: 1,
                    };
                    // SAFETY: as for kernel nodes; the ranges lie inside live allocations
                    // (checked above), which the graph's ops keep alive.
                    unsafe {
                        driver::graph_add_memcpy_node(
                            &mut node,
                            g.graph,
                            d.as_ptr(),
                            d.len(),
                            &m,
                            ctx,
                        )
                    }
                    .check()?;
                }
                Command::Fill(f) => {
                    check_range("fill", f.offset, f.words, f.dst.len())?;
                    let m = sys::CUDA_MEMSET_NODE_PARAMS {
                        dst: f.dst.device_ptr() + f.offset as u64 * 4,
                        pitch: 0,
                        value: f.value,
                        elementSize: 4,
                        width: f.words,
                        height: 1,
                    };
                    // SAFETY: as for copies.
                    unsafe {
                        driver::graph_add_memset_node(
                            &mut node,
                            g.graph,
                            d.as_ptr(),
                            d.len(),
                            &m,
                            ctx,
                        )
                    }
                    .check()?;
                }
                Command::Host(h) => {
                    let boxed: Box<HostFn> = Box::new(h.clone());
                    let p = sys::CUDA_HOST_NODE_PARAMS {
                        fn_: Some(graph_host_trampoline),
                        userData: (&*boxed as *const HostFn).cast_mut().cast(),
                    };
                    host_fns.push(boxed);
                    // SAFETY: as for kernel nodes; `userData` points into a box that moves to
                    // the graph's user object before the graph is instantiated (or is dropped
                    // with `g` if the build fails, before any launch), so it outlives every
                    // launch of the graph.
                    unsafe {
                        driver::graph_add_host_node(&mut node, g.graph, d.as_ptr(), d.len(), &p)
                    }
                    .check()?;
                }
            }
            g.nodes[i] = node;
        }
        if !host_fns.is_empty() {
            keep_alive_with_graph(g.graph, host_fns)?;
        }
        // SAFETY: `g.graph` is a complete, live graph; a valid out-pointer; flags 0.
        unsafe { driver::graph_instantiate(&mut g.exec, g.graph, 0) }.check()?;
        Ok(g)
    }

    fn launch_graph(&self, exec: &CudaGraphExec, stream: &Self::Stream) -> Result<()> {
        bind_for(stream)?;
        // SAFETY: `exec.exec` is a live instantiated graph of this context; `stream` is live.
        with_context(stream.context(), || unsafe {
            driver::graph_launch(exec.exec, stream.cu_stream())
        })
    }

    fn upload_graph(&self, exec: &CudaGraphExec, stream: &Self::Stream) -> Result<()> {
        bind_for(stream)?;
        // SAFETY: `exec.exec` is a live instantiated graph of this context; `stream` is live.
        with_context(stream.context(), || unsafe {
            driver::graph_upload(exec.exec, stream.cu_stream())
        })
    }

    fn update_graph_kernel(
        &self,
        exec: &mut CudaGraphExec,
        node: usize,
        kernel: &CudaKernel,
    ) -> Result<()> {
        let Some(&n) = exec.nodes.get(node) else {
            return Err(Error::invalid(
                "graph",
                format!(
                    "node {node} is not in a graph of {} nodes",
                    exec.nodes.len()
                ),
            ));
        };
        make_current(&self.ctx)?;
        let mut slots = kernel.slots();
        let mut ptrs = param_pointers(&mut slots);
        let p = kernel_params(kernel, ptrs.as_mut_ptr());
        // SAFETY: `exec.exec` and `n` are live handles of one graph; the parameter slots live
        // for the call (the driver copies them). A node of another kind or a different
        // function is rejected by the driver with an error.
        unsafe { driver::graph_exec_kernel_node_set_params(exec.exec, n, &p) }.check()
    }
}
