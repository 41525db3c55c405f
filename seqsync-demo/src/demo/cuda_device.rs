//! The demo on the CUDA backend: pinned host buffers, device ring buffers, NVRTC kernels.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use seqsync::cudarc::driver::{sys, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use super::device::{Device, Layout, Mark, Reference};
use super::workload::{self, HEADER};
use seqsync::backend::cuda::{CudaBackend, CudaKernel, DeviceBuffer, KernelParam, PinnedBuffer};
use seqsync::backend::{Backend, CopyOp, EventOptions};
use seqsync::internal::backend::cuda::CudaEvent;
use seqsync::internal::backend::Command;
use seqsync::{Error, Result};

pub(crate) struct CudaDevice {
    backend: CudaBackend,
    layout: Layout,
    hin: Vec<Arc<PinnedBuffer>>,
    hout: Vec<Arc<PinnedBuffer>>,
    d_in: Vec<Arc<DeviceBuffer>>,
    x: Vec<Arc<DeviceBuffer>>,
    y: Vec<Arc<DeviceBuffer>>,
    out: Vec<Arc<DeviceBuffer>>,
    f: CudaFunction,
    g: CudaFunction,
    h: CudaFunction,
    launch: LaunchConfig,
    reference: Reference,
    /// `--trace`: timing events recorded on the streams, and the first one (the origin).
    marks: Mutex<Vec<(Mark, CudaEvent)>>,
    origin: Mutex<Option<(CudaEvent, Instant)>>,
}

fn launch_error(e: seqsync::cudarc::driver::DriverError) -> Error {
    seqsync::internal::backend::cuda::driver_error("cuLaunchKernel", e)
}

impl CudaDevice {
    pub(crate) fn new(backend: CudaBackend, layout: Layout) -> Result<Self> {
        let n = layout.n;
        let alloc = |count: usize| {
            (0..count)
                .map(|_| backend.alloc_device(n).map(Arc::new))
                .collect::<Result<Vec<_>>>()
        };
        let hin = (0..layout.npatterns)
            .map(|p| {
                let b = backend.alloc_pinned(n)?;
                // SAFETY: freshly allocated; no copy can involve it yet.
                let s = unsafe { b.as_mut_slice() };
                for (i, v) in s.iter_mut().enumerate() {
                    *v = workload::pattern_elem(p, i);
                }
                Ok(Arc::new(b))
            })
            .collect::<Result<Vec<_>>>()?;
        let hout = (0..layout.nhout)
            .map(|_| backend.alloc_pinned(n).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        let k =
            backend.load_kernels(workload::CUDA_SOURCE, &["f_kernel", "g_kernel", "h_kernel"])?;
        let sms = backend
            .context()
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| {
                seqsync::internal::backend::cuda::driver_error("cuDeviceGetAttribute", e)
            })?;
        let blocks = n.div_ceil(256).clamp(1, sms.max(1) as usize * 8) as u32;
        Ok(CudaDevice {
            d_in: alloc(layout.nin)?,
            x: alloc(layout.nx)?,
            y: alloc(layout.ny)?,
            out: alloc(layout.nout)?,
            hin,
            hout,
            f: k[0].clone(),
            g: k[1].clone(),
            h: k[2].clone(),
            launch: LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            },
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

    /// A kernel node of `function` on `params`, in the launch shape of the stream launches.
    fn kernel(&self, function: &CudaFunction, params: Vec<KernelParam>) -> Command<CudaBackend> {
        Command::Kernel(CudaKernel {
            function: function.clone(),
            grid: self.launch.grid_dim,
            block: self.launch.block_dim,
            shared_mem_bytes: self.launch.shared_mem_bytes,
            params,
        })
    }

    fn copy(&self, src: Arc<DeviceBuffer>, dst: Arc<DeviceBuffer>) -> Command<CudaBackend> {
        Command::Copy(CopyOp {
            src,
            src_offset: 0,
            dst,
            dst_offset: 0,
            words: self.layout.n,
        })
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
    fn fill_input(&self, seq: i64) {
        let b = &self.hin[seq as usize % self.layout.npatterns];
        // SAFETY: the pipeline calls get_data only once the previous copy out of this buffer has
        // completed (an event synchronize or a ring's synchronize), and only from one thread.
        let s = unsafe { b.as_mut_slice() };
        for (i, v) in s.iter_mut().take(HEADER).enumerate() {
            *v = workload::header_elem(seq, i);
        }
    }
    fn copy_in(&self, s: &Arc<CudaStream>, hin: usize, slot: usize) -> Result<()> {
        // SAFETY: the pipeline's rings order this copy after the last readers of `in[slot]`
        // and before its next readers, and keep the host buffer unchanged until it completes.
        unsafe { self.d_in[slot].copy_from_pinned_async(&self.hin[hin], s) }
    }
    fn launch_f(&self, s: &Arc<CudaStream>, slot_in: usize, slot_x: usize) -> Result<()> {
        let (src, dst) = (self.d_in[slot_in].device_ptr(), self.x[slot_x].device_ptr());
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
        let (src, dst) = (self.d_in[slot_in].device_ptr(), self.y[slot_y].device_ptr());
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
        let (x, y) = (self.x[slot_x].device_ptr(), self.y[slot_y].device_ptr());
        let out = self.out[slot_out].device_ptr();
        self.launch_h_at(s, x, y, out)
    }
    fn launch_h_to(
        &self,
        s: &Arc<CudaStream>,
        slot_x: usize,
        slot_y: usize,
        out: u64,
    ) -> Result<()> {
        let (x, y) = (self.x[slot_x].device_ptr(), self.y[slot_y].device_ptr());
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
        // SAFETY: the rings order this copy after h wrote `out[slot]` and before h rewrites it,
        // and the host reads `hout` only after synchronizing on the copy's event.
        unsafe { self.out[slot].copy_to_pinned_async(&self.hout[hout], s) }
    }
    fn copy_in_to(&self, s: &Arc<CudaStream>, hin: usize, dst: u64) -> Result<()> {
        let n = self.layout.n;
        self.bind()?;
        // SAFETY: only the pointer is taken; the pipeline keeps the host input buffer unchanged
        // until this copy completes (as for `copy_in`).
        let src = unsafe { self.hin[hin].as_slice() }.as_ptr();
        // SAFETY: `dst` is a live pool block of at least n u32s that the pipeline's points give
        // to this copy alone; `src` is n pinned u32s kept alive by `self`.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), n * 4, s.cu_stream()) }
            .result()
            .map_err(|e| seqsync::internal::backend::cuda::driver_error("cuMemcpyHtoDAsync", e))
    }
    fn copy_out_from(&self, s: &Arc<CudaStream>, src: u64, hout: usize) -> Result<()> {
        let n = self.layout.n;
        self.bind()?;
        // SAFETY: only the pointer is taken; the host reads `hout` only after synchronizing on
        // a point after this copy (as for `copy_out`).
        let dst = unsafe { self.hout[hout].as_mut_slice() }.as_mut_ptr();
        // SAFETY: `src` is a live pool block of at least n u32s written by h before this copy
        // (ordered by a point); `dst` is n pinned u32s kept alive by `self`.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, n * 4, s.cu_stream()) }
            .result()
            .map_err(|e| seqsync::internal::backend::cuda::driver_error("cuMemcpyDtoHAsync", e))
    }
    fn op_copy_in(&self, hin: usize, slot: usize) -> Command<CudaBackend> {
        self.copy(self.hin[hin].as_memory(), self.d_in[slot].clone())
    }
    fn op_f(&self, slot_in: usize, slot_x: usize) -> Command<CudaBackend> {
        let (src, dst) = (self.d_in[slot_in].device_ptr(), self.x[slot_x].device_ptr());
        let (n, k) = (self.layout.n as u64, self.layout.intensity);
        use KernelParam::{Ptr, U32, U64};
        self.kernel(&self.f, vec![Ptr(src), Ptr(dst), U64(n), U32(k)])
    }
    fn op_g(&self, slot_in: usize, slot_y: usize) -> Command<CudaBackend> {
        let (src, dst) = (self.d_in[slot_in].device_ptr(), self.y[slot_y].device_ptr());
        let (n, k) = (self.layout.n as u64, self.layout.intensity);
        use KernelParam::{Ptr, U32, U64};
        self.kernel(&self.g, vec![Ptr(src), Ptr(dst), U64(n), U32(k)])
    }
    fn op_h(&self, slot_x: usize, slot_y: usize, slot_out: usize) -> Command<CudaBackend> {
        let (x, y) = (self.x[slot_x].device_ptr(), self.y[slot_y].device_ptr());
        let out = self.out[slot_out].device_ptr();
        let (n, k) = (self.layout.n as u64, self.layout.intensity);
        use KernelParam::{Ptr, U32, U64};
        self.kernel(&self.h, vec![Ptr(x), Ptr(y), Ptr(out), U64(n), U32(k)])
    }
    fn op_copy_out(&self, slot: usize, hout: usize) -> Command<CudaBackend> {
        self.copy(self.out[slot].clone(), self.hout[hout].as_memory())
    }
    fn check_output(&self, hout: usize, seq: i64) -> bool {
        // SAFETY: the caller synchronized on the event recorded after the copy into `hout`,
        // and the next copy into it is launched only after this check returns.
        self.reference
            .check(unsafe { self.hout[hout].as_slice() }, seq)
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
