//! The demo on the CUDA backend: pinned host buffers, device ring buffers, NVRTC kernels.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use seqsync::cudarc::driver::{sys, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use super::copy_by::CopyBy;
use super::device::{Device, Layout, Mark, Reference};
use super::resident_words::{device_word_count, ResidentWords};
use super::workload::{self, HEADER};
use seqsync::backend::cuda::{CudaBackend, CudaKernel, DeviceBuffer, KernelParam, PinnedBuffer};
use seqsync::backend::{Backend, CopyOp, EventOptions};
use seqsync::internal::backend::cuda::CudaEvent;
use seqsync::internal::backend::Command;
use seqsync::{Error, Result};

/// Every buffer is one allocation of its slots (`n` u32s each, slot `i` at `i * n`), so that
/// consecutive slots are one span for a copy or a kernel.
pub(crate) struct CudaDevice {
    backend: CudaBackend,
    layout: Layout,
    hin: Arc<PinnedBuffer>,
    hout: Arc<PinnedBuffer>,
    /// `hin` and `hout` as command memory (for copies by command), made once: a view per copy
    /// would cost the hand-written engine an allocation on every copy.
    hin_mem: Arc<DeviceBuffer>,
    hout_mem: Arc<DeviceBuffer>,
    d_in: Arc<DeviceBuffer>,
    x: Arc<DeviceBuffer>,
    y: Arc<DeviceBuffer>,
    out: Arc<DeviceBuffer>,
    f: CudaFunction,
    g: CudaFunction,
    h: CudaFunction,
    /// The copy kernel of [`CopyBy::Kernel`].
    copy: CudaFunction,
    /// The resident engine's kernel, and the one that zeroes its device words.
    resident: CudaFunction,
    resident_reset: CudaFunction,
    /// Multiprocessors: the resident kernel's blocks.
    sms: u32,
    /// The device reads and writes pinned host memory at its host address (copy kernels, the
    /// resident kernel).
    unified: bool,
    /// The launch shape of one batch's kernels.
    launch: LaunchConfig,
    /// Most blocks a kernel gets (8 per SM): the kernels are grid-stride loops, so more
    /// elements than threads is correct, only slower.
    max_blocks: u32,
    reference: Reference,
    /// `--trace`: timing events recorded on the streams, and the first one (the origin).
    marks: Mutex<Vec<(Mark, CudaEvent)>>,
    origin: Mutex<Option<(CudaEvent, Instant)>>,
}

/// Threads a block.
const BLOCK: u32 = 256;

/// The launch shape of a kernel over `elements` u32s: a thread an element, in blocks of
/// [`BLOCK`], at most `max_blocks` blocks.
fn launch_config(elements: usize, max_blocks: u32) -> LaunchConfig {
    let blocks = elements
        .div_ceil(BLOCK as usize)
        .clamp(1, max_blocks.max(1) as usize) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A kernel that reads and writes the pinned host buffers in place, on a device that cannot.
fn no_unified_addressing(what: &str) -> Error {
    crate::invalid(
        "demo",
        format!(
            "{what} needs a device with unified addressing (the host buffers' addresses read \
             and written by kernels)"
        ),
    )
}

/// Elements of a batch one block of the resident kernel takes at once (a multiple of four, for
/// the kernel's 16-byte loads): 4096 (16 KiB) for batches up to 64 KiB (`n` u32s), 8192 up to
/// 256 KiB, 16384 above. Smaller tiles spread a batch over more multiprocessors (a shorter
/// batch at a rate); larger ones cost less per byte, and below these sizes the shorter batch
/// cost more than it gained (BENCHMARKS.md §13, runs U and V: 2048 at 64 KiB, 4096 at 128 KiB).
/// Saturated, the cap of [`resident_readers`] keeps the smaller tiles' extra blocks from costing
/// throughput.
fn resident_tile(n: usize) -> u64 {
    if n <= 16384 {
        4096
    } else if n <= 65536 {
        8192
    } else {
        16384
    }
}

/// Tiles of the resident kernel that read at once, at most, where it reads the host's slots in
/// place (`--copy kernel`): 24 for batches under 256 KiB (`n` u32s), 32 from there. Each
/// reading block has up to 16 KiB of host reads in flight; saturated, more blocks reading cost
/// the link throughput instead of adding it (BENCHMARKS.md §13, run U). A batch alone meets the
/// cap only above 2 MiB (more than 32 tiles). 0 (no cap) where the kernel reads device memory
/// (`--copy memcpy`), which takes far more reads in flight.
fn resident_readers(n: usize, copies: CopyBy) -> u64 {
    if copies == CopyBy::Memcpy {
        0
    } else if n < 65536 {
        24
    } else {
        32
    }
}

/// A test switch that only the host backend takes (there a left-out ordering shows as a wrong
/// batch, where on a GPU it could read memory being written).
fn host_only_switch(what: &str) -> Error {
    crate::invalid(
        "demo",
        format!("leaving out {what} is a test switch for the host backend"),
    )
}

/// `cuStreamWriteValue64` of `value` to the word at byte `offset` of `words` (pinned, at its
/// host address: the caller checked unified addressing), after everything enqueued on `s`
/// before it (the default memory barrier). The context is current (the caller bound it).
fn stream_write_word(
    s: &Arc<CudaStream>,
    words: &ResidentWords,
    offset: usize,
    value: u64,
) -> Result<()> {
    let at = words.address() + offset as u64;
    // SAFETY: `at` is an 8-aligned u64 inside the words' pinned allocation (`offsets`), which
    // the caller keeps alive until `s` is synchronized; flags 0: with a memory barrier.
    unsafe { sys::cuStreamWriteValue64_v2(s.cu_stream(), at, value, 0) }
        .result()
        .map_err(|e| seqsync::internal::backend::cuda::driver_error("cuStreamWriteValue64", e))
}

/// `cuStreamWaitValue64` (`GEQ`): what is enqueued on `s` after it runs once the word at byte
/// `offset` of `words` is at least `value`.
fn stream_wait_word(
    s: &Arc<CudaStream>,
    words: &ResidentWords,
    offset: usize,
    value: u64,
) -> Result<()> {
    let at = words.address() + offset as u64;
    let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
    // SAFETY: as in `stream_write_word`; the wait only reads the word.
    unsafe { sys::cuStreamWaitValue64_v2(s.cu_stream(), at, value, geq) }
        .result()
        .map_err(|e| seqsync::internal::backend::cuda::driver_error("cuStreamWaitValue64", e))
}

fn launch_error(e: seqsync::cudarc::driver::DriverError) -> Error {
    seqsync::internal::backend::cuda::driver_error("cuLaunchKernel", e)
}

impl CudaDevice {
    pub(crate) fn new(backend: CudaBackend, layout: Layout) -> Result<Self> {
        let n = layout.n;
        let alloc = |count: usize| backend.alloc_device(count.max(1) * n).map(Arc::new);
        let hin = backend.alloc_pinned(layout.npatterns.max(1) * n)?;
        // SAFETY: freshly allocated; no copy can involve it yet.
        let s = unsafe { hin.as_mut_slice() };
        for (p, pattern) in s.chunks_mut(n.max(1)).enumerate() {
            for (i, v) in pattern.iter_mut().enumerate() {
                *v = workload::pattern_elem(p, i);
            }
        }
        let hin = Arc::new(hin);
        let hout = Arc::new(backend.alloc_pinned(layout.nhout.max(1) * n)?);
        let k = backend.load_kernels(
            workload::CUDA_SOURCE,
            &[
                "f_kernel",
                "g_kernel",
                "h_kernel",
                "copy_kernel",
                "resident_kernel",
                "resident_reset",
            ],
        )?;
        let sms = backend
            .context()
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| {
                seqsync::internal::backend::cuda::driver_error("cuDeviceGetAttribute", e)
            })?;
        let max_blocks = (sms.max(1) as u32).saturating_mul(8);
        let unified = backend
            .context()
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
            .map_err(|e| {
                seqsync::internal::backend::cuda::driver_error("cuDeviceGetAttribute", e)
            })?
            != 0;
        if layout.copy_by == CopyBy::Kernel && !unified {
            return Err(no_unified_addressing("--copy kernel"));
        }
        Ok(CudaDevice {
            d_in: alloc(layout.nin)?,
            x: alloc(layout.nx)?,
            y: alloc(layout.ny)?,
            out: alloc(layout.nout)?,
            hin_mem: hin.as_memory(),
            hout_mem: hout.as_memory(),
            hin,
            hout,
            f: k[0].clone(),
            g: k[1].clone(),
            h: k[2].clone(),
            copy: k[3].clone(),
            resident: k[4].clone(),
            resident_reset: k[5].clone(),
            sms: sms.max(1) as u32,
            unified,
            launch: launch_config(n, max_blocks),
            max_blocks,
            reference: Reference::new(layout),
            backend,
            layout,
            marks: Mutex::default(),
            origin: Mutex::default(),
        })
    }
}

impl CudaDevice {
    /// Make the context current: raw copies by address name no context.
    fn bind(&self) -> Result<()> {
        self.backend
            .context()
            .bind_to_thread()
            .map_err(|e| seqsync::internal::backend::cuda::driver_error("cuCtxSetCurrent", e))
    }

    /// A kernel node of `function` on `params` over `elements` u32s, in the launch shape of
    /// that many elements ([`launch_config`]).
    fn kernel(
        &self,
        function: &CudaFunction,
        params: Vec<KernelParam>,
        elements: usize,
    ) -> Command<CudaBackend> {
        let launch = launch_config(elements, self.max_blocks);
        Command::Kernel(CudaKernel {
            function: function.clone(),
            grid: launch.grid_dim,
            block: launch.block_dim,
            shared_mem_bytes: launch.shared_mem_bytes,
            params,
        })
    }

    /// A copy of `count` slots from slot `from` of `src` to slot `to` of `dst`.
    fn copy(
        &self,
        (src, from): (Arc<DeviceBuffer>, usize),
        (dst, to): (Arc<DeviceBuffer>, usize),
        count: usize,
    ) -> Command<CudaBackend> {
        let n = self.layout.n;
        Command::Copy(CopyOp {
            src,
            src_offset: from * n,
            dst,
            dst_offset: to * n,
            words: count * n,
        })
    }

    /// A copy node of `count` batches from host input `hin` to slot `slot` of `in`.
    fn memcpy_in(&self, hin: usize, slot: usize, count: usize) -> Command<CudaBackend> {
        self.copy(
            (self.hin_mem.clone(), hin),
            (self.d_in.clone(), slot),
            count,
        )
    }

    /// A copy node of `count` batches from slot `slot` of `out` to host output `hout`.
    fn memcpy_out(&self, slot: usize, hout: usize, count: usize) -> Command<CudaBackend> {
        self.copy(
            (self.out.clone(), slot),
            (self.hout_mem.clone(), hout),
            count,
        )
    }

    /// The slot of batch `seq` for one of the resident kernel's copies on streams, after what
    /// both check: its ordering kept (`ordered`; leaving `what` out is a host test switch),
    /// unified addressing (they write and wait on the words at their host address), and this
    /// context current (for the raw stream memory operations).
    fn resident_copy_slot(
        &self,
        words: &ResidentWords,
        seq: i64,
        ordered: bool,
        what: &str,
    ) -> Result<usize> {
        let slot = self.layout.resident_slot(words.slots(), seq)?;
        if !ordered {
            return Err(host_only_switch(what));
        }
        if !self.unified {
            return Err(no_unified_addressing("--engine resident"));
        }
        self.bind()?;
        Ok(slot)
    }

    /// The device address of slot `slot` of `buf`, checked to have room for `count` slots.
    fn at(&self, buf: &DeviceBuffer, slot: usize, count: usize) -> u64 {
        let n = self.layout.n;
        assert!(
            (slot + count) * n <= buf.len(),
            "slots {slot}..{} of {} are out of range",
            slot + count,
            buf.len() / n.max(1)
        );
        buf.device_ptr() + (slot * n * 4) as u64
    }

    /// The address of slots `slot..slot + count` of pinned `buf`, checked to be in range: on
    /// a device with unified addressing, the device's address of them too.
    fn pinned_at(&self, buf: &PinnedBuffer, slot: usize, count: usize) -> u64 {
        let n = self.layout.n;
        assert!(
            (slot + count) * n <= buf.len(),
            "host slots {slot}..{} are out of range",
            slot + count
        );
        buf.as_ptr() as u64 + (slot * n * 4) as u64
    }

    /// The host address of slot `slot` of `buf`, checked to be in range.
    fn host_at(&self, buf: &PinnedBuffer, slot: usize) -> *mut u32 {
        let n = self.layout.n;
        assert!(
            (slot + 1) * n <= buf.len(),
            "host slot {slot} is out of range"
        );
        // SAFETY: in range of the allocation (checked above).
        unsafe { buf.as_ptr().add(slot * n) }
    }

    /// f, g or h over `count` slots of its buffers, as a kernel node: its grid grows with the
    /// span (up to `max_blocks`), so a span of `count` batches runs as
    /// wide as one batch of `count` times the size.
    fn op_kernel(
        &self,
        function: &CudaFunction,
        ptrs: &[u64],
        count: usize,
    ) -> Command<CudaBackend> {
        let (elements, k) = (count * self.layout.n, self.layout.intensity);
        use KernelParam::{Ptr, U32, U64};
        let mut params: Vec<KernelParam> = ptrs.iter().map(|&p| Ptr(p)).collect();
        params.extend([U64(elements as u64), U32(k)]);
        self.kernel(function, params, elements)
    }
}

impl Device for CudaDevice {
    type B = CudaBackend;

    fn backend(&self) -> &CudaBackend {
        &self.backend
    }
    fn layout(&self) -> &Layout {
        &self.layout
    }
    fn with_layout(&self, layout: Layout) -> Result<Self> {
        CudaDevice::new(self.backend.clone(), layout)
    }
    fn distinct_copies(&self) -> Vec<CopyBy> {
        CopyBy::ALL.to_vec()
    }
    fn fill_input(&self, seq: i64) {
        let at = self.host_at(&self.hin, seq as usize % self.layout.npatterns);
        // SAFETY: the pipeline calls get_data only once the previous reader of this host input
        // slot is done with it (a copy in: an event or a ring's synchronize; the resident
        // engine: the batch a ring before was processed, hence read or copied in), and only
        // from one thread; the slot holds n >= HEADER u32s (Layout) and nothing else touches
        // it meanwhile.
        let s = unsafe { std::slice::from_raw_parts_mut(at, HEADER.min(self.layout.n)) };
        for (i, v) in s.iter_mut().take(HEADER).enumerate() {
            *v = workload::header_elem(seq, i);
        }
    }
    fn copy_in(&self, s: &Arc<CudaStream>, hin: usize, slot: usize) -> Result<()> {
        // The pipeline's rings order this copy after the last readers of `in[slot]` and before
        // its next readers, and keep the host slot unchanged until it completes.
        // By the copy engines whatever the graphs' copies ([`Layout::copy_by`] is for graph
        // nodes): the engines that call this, and the baselines, stay as they were measured.
        self.memcpy_in(hin, slot, 1).enqueue(&self.backend, s)
    }
    fn launch_f(&self, s: &Arc<CudaStream>, slot_in: usize, slot_x: usize) -> Result<()> {
        let (src, dst) = (self.at(&self.d_in, slot_in, 1), self.at(&self.x, slot_x, 1));
        self.launch_f_at(s, src, dst)
    }
    fn launch_f_at(&self, s: &Arc<CudaStream>, src: u64, dst: u64) -> Result<()> {
        let (n, k) = (self.layout.n as u64, self.layout.intensity);
        let mut b = s.launch_builder(&self.f);
        b.arg(&src).arg(&dst).arg(&n).arg(&k);
        // SAFETY: f_kernel(const unsigned*, unsigned*, u64, unsigned) reads and writes n u32s of
        // two live device buffers of n elements; the rings order it against other users.
        unsafe { b.launch(self.launch) }
            .map(|_| ())
            .map_err(launch_error)
    }
    fn launch_g(&self, s: &Arc<CudaStream>, slot_in: usize, slot_y: usize) -> Result<()> {
        let (src, dst) = (self.at(&self.d_in, slot_in, 1), self.at(&self.y, slot_y, 1));
        self.launch_g_at(s, src, dst)
    }
    fn launch_g_at(&self, s: &Arc<CudaStream>, src: u64, dst: u64) -> Result<()> {
        let (n, k) = (self.layout.n as u64, self.layout.intensity);
        let mut b = s.launch_builder(&self.g);
        b.arg(&src).arg(&dst).arg(&n).arg(&k);
        // SAFETY: as for f_kernel, with g_kernel's identical signature.
        unsafe { b.launch(self.launch) }
            .map(|_| ())
            .map_err(launch_error)
    }
    fn launch_h(
        &self,
        s: &Arc<CudaStream>,
        slot_x: usize,
        slot_y: usize,
        slot_out: usize,
    ) -> Result<()> {
        let (x, y) = (self.at(&self.x, slot_x, 1), self.at(&self.y, slot_y, 1));
        let out = self.at(&self.out, slot_out, 1);
        self.launch_h_at(s, x, y, out)
    }
    fn launch_h_to(
        &self,
        s: &Arc<CudaStream>,
        slot_x: usize,
        slot_y: usize,
        out: u64,
    ) -> Result<()> {
        let (x, y) = (self.at(&self.x, slot_x, 1), self.at(&self.y, slot_y, 1));
        self.launch_h_at(s, x, y, out)
    }
    fn launch_h_at(&self, s: &Arc<CudaStream>, x: u64, y: u64, out: u64) -> Result<()> {
        let (n, k) = (self.layout.n as u64, self.layout.intensity);
        let mut b = s.launch_builder(&self.h);
        b.arg(&x).arg(&y).arg(&out).arg(&n).arg(&k);
        // SAFETY: h_kernel(const unsigned*, const unsigned*, unsigned*, u64, unsigned) touches n
        // u32s of three live device buffers of n elements; the rings order it.
        unsafe { b.launch(self.launch) }
            .map(|_| ())
            .map_err(launch_error)
    }
    fn copy_out(&self, s: &Arc<CudaStream>, slot: usize, hout: usize) -> Result<()> {
        // The rings order this copy after h wrote `out[slot]` and before h rewrites it, and the
        // host reads slot `hout` only after synchronizing on the copy's event.
        // By the copy engines, as `copy_in`.
        self.memcpy_out(slot, hout, 1).enqueue(&self.backend, s)
    }
    fn copy_in_to(&self, s: &Arc<CudaStream>, hin: usize, dst: u64) -> Result<()> {
        let n = self.layout.n;
        self.bind()?;
        // The pipeline keeps the host input slot unchanged until this copy completes (as for
        // `copy_in`).
        let src = self.host_at(&self.hin, hin);
        // SAFETY: `dst` is a live pool block of at least n u32s that the pipeline's points give
        // to this copy alone; `src` is n pinned u32s kept alive by `self`.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), n * 4, s.cu_stream()) }
            .result()
            .map_err(|e| seqsync::internal::backend::cuda::driver_error("cuMemcpyHtoDAsync", e))
    }
    fn copy_out_from(&self, s: &Arc<CudaStream>, src: u64, hout: usize) -> Result<()> {
        let n = self.layout.n;
        self.bind()?;
        // The host reads slot `hout` only after synchronizing on a point after this copy (as
        // for `copy_out`).
        let dst = self.host_at(&self.hout, hout);
        // SAFETY: `src` is a live pool block of at least n u32s written by h before this copy
        // (ordered by a point); `dst` is n pinned u32s kept alive by `self`.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, n * 4, s.cu_stream()) }
            .result()
            .map_err(|e| seqsync::internal::backend::cuda::driver_error("cuMemcpyDtoHAsync", e))
    }
    fn op_copy_in(&self, hin: usize, slot: usize, count: usize) -> Command<CudaBackend> {
        if self.layout.copy_by == CopyBy::Kernel {
            let ptrs = [
                self.pinned_at(&self.hin, hin, count),
                self.at(&self.d_in, slot, count),
            ];
            return self.op_kernel(&self.copy, &ptrs, count);
        }
        self.memcpy_in(hin, slot, count)
    }
    fn op_f(&self, slot_in: usize, slot_x: usize, count: usize) -> Command<CudaBackend> {
        let ptrs = [
            self.at(&self.d_in, slot_in, count),
            self.at(&self.x, slot_x, count),
        ];
        self.op_kernel(&self.f, &ptrs, count)
    }
    fn op_g(&self, slot_in: usize, slot_y: usize, count: usize) -> Command<CudaBackend> {
        let ptrs = [
            self.at(&self.d_in, slot_in, count),
            self.at(&self.y, slot_y, count),
        ];
        self.op_kernel(&self.g, &ptrs, count)
    }
    fn op_h(
        &self,
        slot_x: usize,
        slot_y: usize,
        slot_out: usize,
        count: usize,
    ) -> Command<CudaBackend> {
        let ptrs = [
            self.at(&self.x, slot_x, count),
            self.at(&self.y, slot_y, count),
            self.at(&self.out, slot_out, count),
        ];
        self.op_kernel(&self.h, &ptrs, count)
    }
    fn op_copy_out(&self, slot: usize, hout: usize, count: usize) -> Command<CudaBackend> {
        if self.layout.copy_by == CopyBy::Kernel {
            let ptrs = [
                self.at(&self.out, slot, count),
                self.pinned_at(&self.hout, hout, count),
            ];
            return self.op_kernel(&self.copy, &ptrs, count);
        }
        self.memcpy_out(slot, hout, count)
    }
    fn resident_words(&self, slots: usize) -> Result<ResidentWords> {
        let len = ResidentWords::len_for(slots);
        // u64 words as pairs of u32s; pinned memory is page-aligned and zeroed.
        let host = self.backend.alloc_pinned(2 * len)?;
        let device = self.backend.alloc_device(2 * device_word_count(slots))?;
        let (ptr, device_words) = (host.as_ptr().cast::<u64>(), device.device_ptr());
        // SAFETY: `ptr` is 2 * len zeroed u32s (len u64s), page-aligned, owned by `host`, which
        // the words keep; the host touches them only through the words.
        Ok(unsafe { ResidentWords::from_raw(ptr, slots, device_words, Box::new((host, device))) })
    }
    fn launch_resident(
        &self,
        s: &Arc<CudaStream>,
        words: &Arc<ResidentWords>,
        batches: i64,
        arrival_wait: bool,
        copies: CopyBy,
    ) -> Result<()> {
        let l = &self.layout;
        let slots = words.slots();
        if !arrival_wait {
            return Err(host_only_switch("the resident kernel's wait for arrivals"));
        }
        if !self.unified {
            return Err(no_unified_addressing("--engine resident"));
        }
        if copies == CopyBy::Memcpy {
            // Its copy streams wait and write on the words: refused here, before anything is
            // enqueued, where stream memory operations do not work.
            self.backend.stream_memory_ops().map_err(|e| {
                crate::invalid(
                    "demo",
                    format!(
                        "--engine resident copying on streams (--copy memcpy) needs stream \
                         memory operations ({e}); --copy kernel copies in place"
                    ),
                )
            })?;
        }
        l.fits_resident(slots)?;
        if words.device_words() == 0 {
            return Err(crate::invalid(
                "demo",
                "the resident kernel's words have no device memory (host words)".to_string(),
            ));
        }
        // Where the kernel reads and writes: the host slots in place, or the device's, which
        // the copy streams fill and empty (resident_copy_in, resident_copy_out).
        let (hin, hout) = match copies {
            CopyBy::Kernel => (
                self.pinned_at(&self.hin, 0, slots),
                self.pinned_at(&self.hout, 0, slots),
            ),
            CopyBy::Memcpy => (self.at(&self.d_in, 0, slots), self.at(&self.out, 0, slots)),
        };
        let (n, k, tile) = (l.n as u64, l.intensity, resident_tile(l.n));
        let readers = resident_readers(l.n, copies);
        let (slots_u, batches_u) = (slots as u64, batches.max(0) as u64);
        let (ctl, dev_words) = (words.address(), words.device_words());
        let count = device_word_count(slots) as u64;
        // The kernel waits for host stores seqsync does not make: frees are held back until it
        // no longer may (a free would wait for the kernel, which may wait for the freeing
        // thread).
        words.hold_until_released(Box::new(self.backend.open_wait()), batches_u);
        let mut reset = s.launch_builder(&self.resident_reset);
        reset.arg(&dev_words).arg(&count);
        // SAFETY: resident_reset(u64*, u64) zeroes `count` u64s of the words' device memory,
        // which the words own (kept alive until the stream is synchronized: the caller); no
        // other kernel uses them (one resident kernel per set of words).
        unsafe { reset.launch(launch_config(count as usize, self.max_blocks)) }
            .map_err(launch_error)?;
        let mut b = s.launch_builder(&self.resident);
        b.arg(&hin)
            .arg(&hout)
            .arg(&n)
            .arg(&k)
            .arg(&slots_u)
            .arg(&batches_u)
            .arg(&tile)
            .arg(&ctl)
            .arg(&dev_words)
            .arg(&readers);
        let grid = LaunchConfig {
            grid_dim: (self.sms, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: resident_kernel(const u32*, u32*, u64, u32, u64, u64, u64, volatile u64*, u64*,
        // u64) reads inputs and writes outputs of `slots` slots of n u32s (pinned host slots,
        // in range: pinned_at; or device slots, in range: at), and the words (live until the
        // stream is synchronized: the caller). The caller's protocol keeps the host and the
        // copies off a slot while the kernel may use it: a batch's input is written (and
        // copied in) before its arrival is signalled and not again until the batch `slots`
        // later is due (after this one was checked, hence done and copied out), and its output
        // is read (or copied out) only after its done word.
        unsafe { b.launch(grid) }.map(|_| ()).map_err(launch_error)
    }
    fn resident_copy_in(
        &self,
        s: &Arc<CudaStream>,
        words: &Arc<ResidentWords>,
        seq: i64,
        signal: bool,
    ) -> Result<()> {
        let slot = self.resident_copy_slot(words, seq, signal, "the copy-in's arrival write")?;
        self.memcpy_in(slot, slot, 1).enqueue(&self.backend, s)?;
        let (arrived, _, _) = words.offsets(slot);
        // Arrivals in seq order (the batch before may be on another stream) ...
        if seq > 0 {
            stream_wait_word(s, words, arrived, seq as u64)?;
        }
        // ... and the copy before the arrival: a write with the default memory barrier.
        stream_write_word(s, words, arrived, seq as u64 + 1)
    }
    fn resident_copy_out(
        &self,
        s: &Arc<CudaStream>,
        words: &Arc<ResidentWords>,
        seq: i64,
        wait: bool,
    ) -> Result<()> {
        let slot =
            self.resident_copy_slot(words, seq, wait, "the copy-out's wait for the kernel")?;
        let (_, done, copied) = words.offsets(slot);
        stream_wait_word(s, words, done, seq as u64 + 1)?;
        self.memcpy_out(slot, slot, 1).enqueue(&self.backend, s)?;
        stream_write_word(s, words, copied, seq as u64 + 1)
    }
    fn check_output(&self, hout: usize, seq: i64) -> bool {
        let at = self.host_at(&self.hout, hout);
        // SAFETY: the copy into slot `hout` (n u32s in range) has completed: the caller
        // synchronized on the event recorded after it, or (the adaptive engine's process_data
        // threads) waited for a timeline that the thread which synchronized signalled after,
        // or (the resident engine's) saw the word written after it (`done` by the kernel in
        // place, `copied` by a copy-out stream); the next copy into it is launched only after
        // this check returns; copies into other slots do not touch these n u32s.
        self.reference.check(
            unsafe { std::slice::from_raw_parts(at, self.layout.n) },
            seq,
        )
    }
    unsafe fn clear_outputs(&self) {
        // SAFETY: no copy into the host output buffer is in flight or enqueued and nothing
        // reads it meanwhile (this function's contract).
        unsafe { self.hout.as_mut_slice() }.fill(0);
    }
    fn mark(
        &self,
        s: &Arc<CudaStream>,
        lane: &'static str,
        label: &'static str,
        seq: i64,
        begin: bool,
    ) -> Result<()> {
        let ev = self.backend.create_event(EventOptions {
            timing: true,
            blocking_sync: false,
        })?;
        self.backend.record(&ev, s)?;
        let mut origin = self.origin.lock().unwrap_or_else(|e| e.into_inner());
        if origin.is_none() {
            // The first mark is the origin: wait for it so its host time is known closely.
            let ev0 = self.backend.create_event(EventOptions {
                timing: true,
                blocking_sync: false,
            })?;
            self.backend.record(&ev0, s)?;
            self.backend.synchronize(&ev0)?;
            *origin = Some((ev0, Instant::now()));
        }
        let m = Mark {
            lane,
            label,
            seq,
            begin,
            t_us: 0.0,
        };
        self.marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((m, ev));
        Ok(())
    }
    fn take_marks(&self, t0: Instant) -> Result<Vec<Mark>> {
        let marks = std::mem::take(&mut *self.marks.lock().unwrap_or_else(|e| e.into_inner()));
        let origin = self.origin.lock().unwrap_or_else(|e| e.into_inner());
        let Some((ev0, host0)) = origin.as_ref() else {
            return Ok(Vec::new());
        };
        let base_us = host0.saturating_duration_since(t0).as_secs_f64() * 1e6;
        marks
            .into_iter()
            .map(|(mut m, ev)| {
                let ms = self.backend.elapsed_ms(ev0, &ev)?;
                m.t_us = base_us + ms as f64 * 1e3;
                Ok(m)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_gets_a_thread_an_element_up_to_its_most_blocks() {
        let blocks = |elements, max| launch_config(elements, max).grid_dim.0;
        // One 64 KiB batch: 16384 elements, 64 blocks of 256.
        assert_eq!(blocks(16 << 10, 1056), 64);
        // A span of 4 such batches runs as wide as one batch 4 times the size.
        assert_eq!(blocks(4 * (16 << 10), 1056), 256);
        // Not a multiple of a block: one more block; nothing: one block.
        assert_eq!(blocks(257, 1056), 2);
        assert_eq!(blocks(0, 1056), 1);
        // Capped (grid-stride loops cover the rest), and never zero.
        assert_eq!(blocks(usize::MAX, 1056), 1056);
        assert_eq!(blocks(1 << 20, 0), 1);
        assert_eq!(launch_config(1, 8).block_dim, (BLOCK, 1, 1));
    }

    #[test]
    fn the_resident_tile_grows_with_the_batch_from_16_to_64_kib() {
        // n in u32s: 4 KiB, 64 KiB, 96 KiB, 128 KiB, 256 KiB, 512 KiB, 1 MiB and 4 MiB batches.
        assert_eq!(resident_tile(1 << 10), 4096);
        assert_eq!(resident_tile(16 << 10), 4096);
        assert_eq!(resident_tile(24 << 10), 8192);
        assert_eq!(resident_tile(32 << 10), 8192);
        assert_eq!(resident_tile(64 << 10), 8192);
        assert_eq!(resident_tile(128 << 10), 16384);
        assert_eq!(resident_tile(256 << 10), 16384);
        assert_eq!(resident_tile(1 << 20), 16384);
        // A multiple of four elements everywhere (the kernel's 16-byte loads).
        for n in [1, 16383, 16385, 65537, 100_028, 1 << 30] {
            assert_eq!(resident_tile(n) % 4, 0, "{n}");
        }
    }

    #[test]
    fn the_resident_readers_cap_host_reads_and_never_device_ones() {
        // n in u32s: 64 KiB, 256 KiB, 1 MiB.
        assert_eq!(resident_readers(16 << 10, CopyBy::Kernel), 24);
        assert_eq!(resident_readers(64 << 10, CopyBy::Kernel), 32);
        assert_eq!(resident_readers(1 << 20, CopyBy::Kernel), 32);
        // Device memory takes far more reads in flight: no cap.
        assert_eq!(resident_readers(16 << 10, CopyBy::Memcpy), 0);
        assert_eq!(resident_readers(1 << 20, CopyBy::Memcpy), 0);
        // A batch alone of up to 2 MiB never waits for the cap (its tiles all read at once).
        for n in [16 << 10, 64 << 10, 256 << 10, 512 << 10] {
            let tiles = (n as u64).div_ceil(resident_tile(n));
            assert!(
                tiles <= resident_readers(n, CopyBy::Kernel),
                "{n}: {tiles} tiles"
            );
        }
    }
}
