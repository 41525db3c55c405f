//! What the demo pipeline needs beyond a [`Backend`]: its buffers, copies and kernels.
//!
//! The pipeline code (`pipeline.rs`, `baseline.rs`) is written once against [`Device`]; the
//! host and CUDA implementations differ only in how a copy or a kernel is launched.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::copy_by::CopyBy;
use super::poll::poll;
use super::resident_words::ResidentWords;
use super::workload::{self, HEADER};
use seqsync::backend::{Backend, MemoryBackend};
use seqsync::internal::backend::{Command, GraphBackend};
use seqsync::Result;

/// A stream of device `D`.
pub(crate) type Stream<D> = <<D as Device>::B as Backend>::Stream;

/// Sizes of everything the demo allocates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// Elements per batch.
    pub n: usize,
    pub nin: usize,
    pub nx: usize,
    pub ny: usize,
    pub nout: usize,
    /// Host input buffers = body patterns (the hand-written engines: a prime above every lag,
    /// so a stage a lag off reads another body too; the graph engines: one per slot, S, so
    /// there a slot read a whole ring late differs from the right one in its header only).
    pub npatterns: usize,
    /// Host output buffers.
    pub nhout: usize,
    /// Kernel rounds per element.
    pub intensity: u32,
    /// Body elements checked per batch (all when the body is no larger).
    pub verify_samples: usize,
    /// How graph nodes copy between host and device ([`Device::op_copy_in`],
    /// [`Device::op_copy_out`]).
    pub copy_by: CopyBy,
}

/// Consecutive body elements a sampled check compares at each place it looks: 64 bytes, one
/// cache line where the body is line-aligned. What a check costs the host is the lines it
/// reads from a batch just written, not the elements it compares.
pub(crate) const CHECK_RUN: usize = 16;

/// Where a sampled check looks: the body's `lines` (runs of [`CHECK_RUN`] elements from its
/// start) split into `runs` equal parts, one checked run in each, at a per-pattern line inside
/// the part; the last run is shorter where the samples are not a multiple of [`CHECK_RUN`].
#[derive(Debug, Clone, Copy)]
struct CheckRuns {
    lines: usize,
    runs: usize,
}

impl CheckRuns {
    /// The body element where pattern `p`'s run `r` starts.
    fn start(&self, p: usize, r: usize) -> usize {
        let part = self.lines / self.runs;
        (r * self.lines / self.runs + (p * 7919) % part) * CHECK_RUN
    }
}

impl Layout {
    /// Body elements checked per batch: [`verify_samples`](Self::verify_samples), or the whole
    /// body when that is 0 or the body no larger.
    fn check_samples(&self) -> usize {
        let body = self.n.saturating_sub(HEADER);
        if self.verify_samples == 0 {
            body
        } else {
            body.min(self.verify_samples)
        }
    }

    /// The lines of the body (runs of [`CHECK_RUN`] elements from its start) and the checked
    /// runs among them, at least two lines apart on average; `None` where the check compares
    /// the whole body (every element asked for, or runs that would lie closer than that).
    fn check_runs(&self) -> Option<CheckRuns> {
        let (body, samples) = (self.n.saturating_sub(HEADER), self.check_samples());
        let (lines, runs) = (body / CHECK_RUN, samples.div_ceil(CHECK_RUN).max(1));
        (samples < body && lines / runs >= 2).then_some(CheckRuns { lines, runs })
    }

    /// Does the check read every 64-byte line of a batch's output? Then a check costs a whole
    /// batch of memory reads on the host; a sampled one reads one run in every two lines or
    /// more (a run straddles two lines where the body is not line-aligned).
    pub(crate) fn check_reads_every_line(&self) -> bool {
        self.check_runs().is_none()
    }

    /// `slots` slots in every buffer (host input and output batches included) of `n` u32s,
    /// `intensity` rounds, every element checked, copies by the automatic choice (tests).
    #[cfg(test)]
    pub(crate) fn uniform(n: usize, slots: usize, intensity: u32) -> Layout {
        Layout {
            n,
            nin: slots,
            nx: slots,
            ny: slots,
            nout: slots,
            npatterns: slots,
            nhout: slots,
            intensity,
            verify_samples: 0,
            copy_by: Default::default(),
        }
    }

    /// Does a resident kernel over `slots` slots fit these buffers (at least one slot, and
    /// every buffer that many)?
    pub(crate) fn fits_resident(&self, slots: usize) -> Result<()> {
        let buffers = [
            self.nin,
            self.nx,
            self.ny,
            self.nout,
            self.npatterns,
            self.nhout,
        ];
        if slots == 0 || buffers.iter().any(|&n| n < slots) {
            return Err(crate::invalid(
                "demo",
                format!("the resident kernel's {slots} slots do not fit this device's buffers"),
            ));
        }
        Ok(())
    }

    /// The slot of batch `seq` (not negative) of a resident kernel over `slots` slots that
    /// [fit](Self::fits_resident) these buffers.
    pub(crate) fn resident_slot(&self, slots: usize, seq: i64) -> Result<usize> {
        self.fits_resident(slots)?;
        if seq < 0 {
            return Err(crate::invalid(
                "demo",
                format!("batch {seq} of a resident kernel: batches count from 0"),
            ));
        }
        Ok(seq as usize % slots)
    }

    /// `(nin, nx, ny, nout, npatterns)` as seq lags: how far behind a slot's previous user is.
    pub(crate) fn lags(&self) -> (i64, i64, i64, i64, i64) {
        let lag = |n: usize| n as i64;
        (
            lag(self.nin),
            lag(self.nx),
            lag(self.ny),
            lag(self.nout),
            lag(self.npatterns),
        )
    }
}

/// Reference values at the checked positions, per body pattern.
pub(crate) struct Reference {
    /// The expected output at each checked position, per pattern: the whole body, or run
    /// after run of [`CHECK_RUN`] values, run `r` at body element `runs.start(p, r)` (computed,
    /// not stored: the check reads the output and these values only).
    per_pattern: Vec<Vec<u32>>,
    /// Where the check looks ([`Layout::check_runs`]; `None`: the whole body).
    runs: Option<CheckRuns>,
    layout: Layout,
}

impl Reference {
    pub(crate) fn new(layout: Layout) -> Self {
        let body = layout.n.saturating_sub(HEADER);
        let runs = layout.check_runs();
        let per_pattern = (0..layout.npatterns)
            .map(|p| {
                // Any seq with this pattern has the same body: use seq = p.
                let at = |i: usize| {
                    workload::reference_elem(
                        p as i64,
                        HEADER + i,
                        layout.npatterns,
                        layout.intensity,
                    )
                };
                match runs {
                    None => (0..body).map(at).collect(),
                    Some(runs) => (0..layout.check_samples())
                        .map(|k| at(runs.start(p, k / CHECK_RUN) + k % CHECK_RUN))
                        .collect(),
                }
            })
            .collect();
        Reference {
            per_pattern,
            runs,
            layout,
        }
    }

    /// Does `out` hold the output of `seq`? Checks its length, the whole header and the
    /// checked body.
    pub(crate) fn check(&self, out: &[u32], seq: i64) -> bool {
        let l = &self.layout;
        if out.len() != l.n
            || !(0..HEADER.min(l.n))
                .all(|i| out[i] == workload::reference_elem(seq, i, l.npatterns, l.intensity))
        {
            return false;
        }
        let p = seq as usize % l.npatterns;
        let values = &self.per_pattern[p];
        let body = out.get(HEADER..).unwrap_or_default();
        // Slice comparisons: vectorized memory compares, several times faster than an
        // element loop (which held a small batch's check).
        match self.runs {
            None => body == &values[..],
            Some(runs) => values.chunks(CHECK_RUN).enumerate().all(|(r, want)| {
                let at = runs.start(p, r);
                body.get(at..at + want.len()) == Some(want)
            }),
        }
    }
}

/// A timestamped point in a stream or a host thread, for `--trace`.
#[derive(Debug, Clone)]
pub(crate) struct Mark {
    pub lane: &'static str,
    pub label: &'static str,
    pub seq: i64,
    pub begin: bool,
    /// Microseconds since the run's start.
    pub t_us: f64,
}

/// The demo's buffers, copies and kernels on one backend.
pub(crate) trait Device: Send + Sync + 'static {
    type B: MemoryBackend + GraphBackend;

    fn backend(&self) -> &Self::B;
    fn layout(&self) -> &Layout;
    /// A new device on the same backend (a clone of it: chaos included) with buffers for
    /// `layout`.
    fn with_layout(&self, layout: Layout) -> Result<Self>
    where
        Self: Sized;

    /// The copies worth measuring both ways for a bound: every [`CopyBy`] where they are
    /// different work (CUDA), else only `layout().copy_by` (the host backend, where both are
    /// the same copy).
    fn distinct_copies(&self) -> Vec<CopyBy> {
        vec![self.layout().copy_by]
    }

    /// get_data: write seq's header into host input buffer `seq % npatterns` (its body
    /// pattern is already there). The caller guarantees no copy from it is in flight.
    fn fill_input(&self, seq: i64);
    /// Copy host input buffer `hin` into slot `slot` of `in`.
    fn copy_in(&self, s: &Stream<Self>, hin: usize, slot: usize) -> Result<()>;
    /// f: `in[slot_in]` → `x[slot_x]`.
    fn launch_f(&self, s: &Stream<Self>, slot_in: usize, slot_x: usize) -> Result<()>;
    /// g: `in[slot_in]` → `y[slot_y]`.
    fn launch_g(&self, s: &Stream<Self>, slot_in: usize, slot_y: usize) -> Result<()>;
    /// h: `x[slot_x]`, `y[slot_y]` → `out[slot_out]`.
    fn launch_h(
        &self,
        s: &Stream<Self>,
        slot_x: usize,
        slot_y: usize,
        slot_out: usize,
    ) -> Result<()>;
    /// Copy `out[slot]` into host output buffer `hout`.
    fn copy_out(&self, s: &Stream<Self>, slot: usize, hout: usize) -> Result<()>;
    /// h into memory outside the device's buffers (a buffer shared with another process):
    /// `x[slot_x]`, `y[slot_y]` → the `layout().n` u32s at `out`.
    fn launch_h_to(&self, s: &Stream<Self>, slot_x: usize, slot_y: usize, out: u64) -> Result<()>;
    /// process_data: does host output buffer `hout` hold seq's result? The caller guarantees
    /// the copy into it has completed.
    fn check_output(&self, hout: usize, seq: i64) -> bool;
    /// Zero every host output buffer (so that a check after it sees only what was copied in
    /// since).
    ///
    /// # Safety
    /// No copy into a host output buffer is in flight or enqueued, and no other thread reads
    /// them meanwhile (on CUDA they are pinned memory the device writes).
    unsafe fn clear_outputs(&self);

    // The same operations on device buffers given by address ([`Variant::Pool`]: per-batch
    // buffers from a stream-ordered pool, each of `layout().n` u32s).
    //
    // [`Variant::Pool`]: super::Variant::Pool

    /// Copy host input buffer `hin` into the buffer at `dst`.
    fn copy_in_to(&self, s: &Stream<Self>, hin: usize, dst: u64) -> Result<()>;
    /// f: `src` → `dst`.
    fn launch_f_at(&self, s: &Stream<Self>, src: u64, dst: u64) -> Result<()>;
    /// g: `src` → `dst`.
    fn launch_g_at(&self, s: &Stream<Self>, src: u64, dst: u64) -> Result<()>;
    /// h: `x`, `y` → `out`.
    fn launch_h_at(&self, s: &Stream<Self>, x: u64, y: u64, out: u64) -> Result<()>;
    /// Copy the buffer at `src` into host output buffer `hout`.
    fn copy_out_from(&self, s: &Stream<Self>, src: u64, hout: usize) -> Result<()>;

    /// The graph engines' commands: the same copies and kernels as
    /// [`copy_in`](Self::copy_in) .. [`copy_out`](Self::copy_out), as command-graph ops of
    /// fixed slots, each over a span of `count` consecutive slots from the ones given (one
    /// copy or one kernel for all of them on CUDA, whose buffers hold their slots in one
    /// allocation). The spans must be in range of their buffers.
    fn op_copy_in(&self, hin: usize, slot: usize, count: usize) -> Command<Self::B>;
    /// f as an op.
    fn op_f(&self, slot_in: usize, slot_x: usize, count: usize) -> Command<Self::B>;
    /// g as an op.
    fn op_g(&self, slot_in: usize, slot_y: usize, count: usize) -> Command<Self::B>;
    /// h as an op.
    fn op_h(&self, slot_x: usize, slot_y: usize, slot_out: usize, count: usize)
        -> Command<Self::B>;
    /// The g2h copy as an op.
    fn op_copy_out(&self, slot: usize, hout: usize, count: usize) -> Command<Self::B>;

    /// The resident engine's shared words for a kernel over `slots` slots (zeroed).
    fn resident_words(&self, slots: usize) -> Result<ResidentWords>;
    /// Launch the resident kernel on `s` for batches `0..batches`: batch `seq` is read once
    /// `words.arrived() > seq`, computed (f, g, h) and written, then `words.done(seq % slots)`
    /// is `seq + 1`; it ends after the last batch or on `words.stop()`. Returns once launched.
    /// With `copies` [`CopyBy::Kernel`] it reads host input `seq % slots` and writes host
    /// output `seq % slots` in place; with [`CopyBy::Memcpy`] it reads and writes the device's
    /// input and output slot `seq % slots`, which [`resident_copy_in`](Self::resident_copy_in)
    /// and [`resident_copy_out`](Self::resident_copy_out) copy by the copy engines.
    /// `arrival_wait` false (a test switch, host backend only) leaves the wait for the arrival
    /// out.
    ///
    /// The caller keeps `words` alive until `s` was synchronized, fills batch `seq` in only
    /// once the batch `slots` before it was checked, and reads an output only once its done
    /// (in place) or copied (copy engines) word says so.
    fn launch_resident(
        &self,
        s: &Stream<Self>,
        words: &Arc<ResidentWords>,
        batches: i64,
        arrival_wait: bool,
        copies: CopyBy,
    ) -> Result<()>;
    /// For a resident kernel launched with [`CopyBy::Memcpy`]: enqueue on `s` the copy of host
    /// input `seq % slots` into the device's input slot, then (with `signal`) a wait until
    /// `arrived >= seq` (the batch before arrived, perhaps by another stream) and the write
    /// `arrived = seq + 1` after both. `signal` false (a test switch, host backend only) leaves
    /// the wait and write out: the caller stores the arrival itself, not ordered after the copy.
    ///
    /// The caller keeps `words` alive until `s` was synchronized, and the host input slot
    /// unchanged until then or until the batch was processed.
    fn resident_copy_in(
        &self,
        s: &Stream<Self>,
        words: &Arc<ResidentWords>,
        seq: i64,
        signal: bool,
    ) -> Result<()>;
    /// For a resident kernel launched with [`CopyBy::Memcpy`]: enqueue on `s` (with `wait`) a
    /// wait until `words.done(seq % slots) > seq`, then the copy of the device's output slot
    /// into host output `seq % slots`, then the write `copied = seq + 1` after it. `wait`
    /// false (a test switch, host backend only) leaves the wait out.
    ///
    /// The caller keeps `words` alive until `s` was synchronized; once the kernel ended,
    /// [`ResidentWords::release_done`] releases waits for batches it never finished.
    fn resident_copy_out(
        &self,
        s: &Stream<Self>,
        words: &Arc<ResidentWords>,
        seq: i64,
        wait: bool,
    ) -> Result<()>;

    /// With chaos on (host), sleep a random time.
    fn chaos_pause(&self) {}

    /// Enqueue a trace mark on `s` (only called with `--trace`).
    fn mark(
        &self,
        s: &Stream<Self>,
        lane: &'static str,
        label: &'static str,
        seq: i64,
        begin: bool,
    ) -> Result<()>;
    /// The marks so far, in microseconds since `t0` (after every stream is synchronized).
    fn take_marks(&self, t0: Instant) -> Result<Vec<Mark>>;
}

// ---- host ---------------------------------------------------------------------------------

use seqsync::backend::host::{HostBackend, HostStream};
use seqsync::internal::backend::host::HostKernel;

type Buf = Mutex<Vec<u32>>;

struct HostBuffers {
    hin: Vec<Buf>,
    hout: Vec<Buf>,
    d_in: Vec<Buf>,
    x: Vec<Buf>,
    y: Vec<Buf>,
    out: Vec<Buf>,
}

/// The demo on the host backend: "device" buffers are host vectors, copies and kernels are
/// closures on host streams.
pub(crate) struct HostDevice {
    backend: HostBackend,
    layout: Layout,
    bufs: Arc<HostBuffers>,
    reference: Reference,
    marks: Arc<Mutex<Vec<(Mark, Instant)>>>,
}

/// `n` u32s of host "device" memory at `addr`, for reading.
///
/// # Safety
/// `addr` must point to `n` live, initialized u32s that nothing writes meanwhile.
unsafe fn at<'a>(addr: u64, n: usize) -> &'a [u32] {
    // SAFETY: the caller's guarantee.
    unsafe { std::slice::from_raw_parts(addr as *const u32, n) }
}

/// `n` u32s of host "device" memory at `addr`, for writing.
///
/// # Safety
/// `addr` must point to `n` live, initialized u32s that nothing else reads or writes meanwhile.
unsafe fn at_mut<'a>(addr: u64, n: usize) -> &'a mut [u32] {
    // SAFETY: the caller's guarantee.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u32, n) }
}

fn lock(b: &Buf) -> std::sync::MutexGuard<'_, Vec<u32>> {
    b.lock().unwrap_or_else(|e| e.into_inner())
}

impl HostDevice {
    pub(crate) fn new(backend: HostBackend, layout: Layout) -> Self {
        let n = layout.n;
        let bufs = |count: usize| {
            (0..count)
                .map(|_| Mutex::new(vec![0u32; n]))
                .collect::<Vec<_>>()
        };
        let hin = (0..layout.npatterns)
            .map(|p| Mutex::new((0..n).map(|i| workload::pattern_elem(p, i)).collect()))
            .collect();
        HostDevice {
            backend,
            layout,
            bufs: Arc::new(HostBuffers {
                hin,
                hout: bufs(layout.nhout),
                d_in: bufs(layout.nin),
                x: bufs(layout.nx),
                y: bufs(layout.ny),
                out: bufs(layout.nout),
            }),
            reference: Reference::new(layout),
            marks: Arc::default(),
        }
    }

    fn copy_in_fn(
        &self,
        hin: usize,
        slot: usize,
        count: usize,
    ) -> impl Fn() + Send + Sync + 'static {
        let b = self.bufs.clone();
        move || {
            for j in 0..count {
                lock(&b.d_in[slot + j]).copy_from_slice(&lock(&b.hin[hin + j]));
            }
        }
    }

    fn f_fn(
        &self,
        slot_in: usize,
        slot_x: usize,
        count: usize,
    ) -> impl Fn() + Send + Sync + 'static {
        let (b, k) = (self.bufs.clone(), self.layout.intensity);
        move || {
            for j in 0..count {
                let src = lock(&b.d_in[slot_in + j]);
                for (d, &v) in lock(&b.x[slot_x + j]).iter_mut().zip(src.iter()) {
                    *d = workload::f_elem(v, k);
                }
            }
        }
    }

    fn g_fn(
        &self,
        slot_in: usize,
        slot_y: usize,
        count: usize,
    ) -> impl Fn() + Send + Sync + 'static {
        let (b, k) = (self.bufs.clone(), self.layout.intensity);
        move || {
            for j in 0..count {
                let src = lock(&b.d_in[slot_in + j]);
                for (d, &v) in lock(&b.y[slot_y + j]).iter_mut().zip(src.iter()) {
                    *d = workload::g_elem(v, k);
                }
            }
        }
    }

    fn h_fn(
        &self,
        slot_x: usize,
        slot_y: usize,
        slot_out: usize,
        count: usize,
    ) -> impl Fn() + Send + Sync + 'static {
        let (b, k) = (self.bufs.clone(), self.layout.intensity);
        move || {
            for j in 0..count {
                let (x, y) = (lock(&b.x[slot_x + j]), lock(&b.y[slot_y + j]));
                for ((d, &xv), &yv) in lock(&b.out[slot_out + j])
                    .iter_mut()
                    .zip(x.iter())
                    .zip(y.iter())
                {
                    *d = workload::h_elem(xv, yv, k);
                }
            }
        }
    }

    fn copy_out_fn(
        &self,
        slot: usize,
        hout: usize,
        count: usize,
    ) -> impl Fn() + Send + Sync + 'static {
        let b = self.bufs.clone();
        move || {
            for j in 0..count {
                lock(&b.hout[hout + j]).copy_from_slice(&lock(&b.out[slot + j]));
            }
        }
    }
}

impl Device for HostDevice {
    type B = HostBackend;

    fn backend(&self) -> &HostBackend {
        &self.backend
    }
    fn layout(&self) -> &Layout {
        &self.layout
    }
    fn with_layout(&self, layout: Layout) -> Result<Self> {
        Ok(HostDevice::new(self.backend.clone(), layout))
    }
    fn fill_input(&self, seq: i64) {
        let mut b = lock(&self.bufs.hin[seq as usize % self.layout.npatterns]);
        for (i, v) in b.iter_mut().take(HEADER).enumerate() {
            *v = workload::header_elem(seq, i);
        }
    }
    fn copy_in(&self, s: &HostStream, hin: usize, slot: usize) -> Result<()> {
        s.launch(self.copy_in_fn(hin, slot, 1));
        Ok(())
    }
    fn launch_f(&self, s: &HostStream, slot_in: usize, slot_x: usize) -> Result<()> {
        s.launch(self.f_fn(slot_in, slot_x, 1));
        Ok(())
    }
    fn launch_g(&self, s: &HostStream, slot_in: usize, slot_y: usize) -> Result<()> {
        s.launch(self.g_fn(slot_in, slot_y, 1));
        Ok(())
    }
    fn launch_h(
        &self,
        s: &HostStream,
        slot_x: usize,
        slot_y: usize,
        slot_out: usize,
    ) -> Result<()> {
        s.launch(self.h_fn(slot_x, slot_y, slot_out, 1));
        Ok(())
    }
    fn launch_h_to(&self, s: &HostStream, slot_x: usize, slot_y: usize, out: u64) -> Result<()> {
        let (b, n, k) = (self.bufs.clone(), self.layout.n, self.layout.intensity);
        s.launch(move || {
            // SAFETY: `out` is n u32s of a live shared buffer that the two-process pipeline's
            // rings give to this kernel alone until it completes.
            let out = unsafe { at_mut(out, n) };
            let (x, y) = (lock(&b.x[slot_x]), lock(&b.y[slot_y]));
            for ((d, &xv), &yv) in out.iter_mut().zip(x.iter()).zip(y.iter()) {
                *d = workload::h_elem(xv, yv, k);
            }
        });
        Ok(())
    }
    fn copy_out(&self, s: &HostStream, slot: usize, hout: usize) -> Result<()> {
        s.launch(self.copy_out_fn(slot, hout, 1));
        Ok(())
    }
    fn op_copy_in(&self, hin: usize, slot: usize, count: usize) -> Command<HostBackend> {
        Command::Kernel(HostKernel::new(self.copy_in_fn(hin, slot, count)))
    }
    fn op_f(&self, slot_in: usize, slot_x: usize, count: usize) -> Command<HostBackend> {
        Command::Kernel(HostKernel::new(self.f_fn(slot_in, slot_x, count)))
    }
    fn op_g(&self, slot_in: usize, slot_y: usize, count: usize) -> Command<HostBackend> {
        Command::Kernel(HostKernel::new(self.g_fn(slot_in, slot_y, count)))
    }
    fn op_h(
        &self,
        slot_x: usize,
        slot_y: usize,
        slot_out: usize,
        count: usize,
    ) -> Command<HostBackend> {
        Command::Kernel(HostKernel::new(self.h_fn(slot_x, slot_y, slot_out, count)))
    }
    fn op_copy_out(&self, slot: usize, hout: usize, count: usize) -> Command<HostBackend> {
        Command::Kernel(HostKernel::new(self.copy_out_fn(slot, hout, count)))
    }
    fn check_output(&self, hout: usize, seq: i64) -> bool {
        self.reference.check(&lock(&self.bufs.hout[hout]), seq)
    }
    unsafe fn clear_outputs(&self) {
        for b in &self.bufs.hout {
            lock(b).fill(0);
        }
    }
    fn copy_in_to(&self, s: &HostStream, hin: usize, dst: u64) -> Result<()> {
        let (b, n) = (self.bufs.clone(), self.layout.n);
        s.launch(move || {
            // SAFETY: `dst` is a pool block of at least n u32s that the pipeline's points give
            // to this copy alone until it completes.
            let d = unsafe { at_mut(dst, n) };
            d.copy_from_slice(&lock(&b.hin[hin]));
        });
        Ok(())
    }
    fn launch_f_at(&self, s: &HostStream, src: u64, dst: u64) -> Result<()> {
        let (n, k) = (self.layout.n, self.layout.intensity);
        s.launch(move || {
            // SAFETY: pool blocks of n u32s; the points order this kernel after the writer of
            // `src` and give it `dst` alone.
            let (src, dst) = unsafe { (at(src, n), at_mut(dst, n)) };
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = workload::f_elem(v, k);
            }
        });
        Ok(())
    }
    fn launch_g_at(&self, s: &HostStream, src: u64, dst: u64) -> Result<()> {
        let (n, k) = (self.layout.n, self.layout.intensity);
        s.launch(move || {
            // SAFETY: as in launch_f_at.
            let (src, dst) = unsafe { (at(src, n), at_mut(dst, n)) };
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = workload::g_elem(v, k);
            }
        });
        Ok(())
    }
    fn launch_h_at(&self, s: &HostStream, x: u64, y: u64, out: u64) -> Result<()> {
        let (n, k) = (self.layout.n, self.layout.intensity);
        s.launch(move || {
            // SAFETY: as in launch_f_at, with two sources.
            let (x, y, out) = unsafe { (at(x, n), at(y, n), at_mut(out, n)) };
            for ((d, &xv), &yv) in out.iter_mut().zip(x).zip(y) {
                *d = workload::h_elem(xv, yv, k);
            }
        });
        Ok(())
    }
    fn copy_out_from(&self, s: &HostStream, src: u64, hout: usize) -> Result<()> {
        let (b, n) = (self.bufs.clone(), self.layout.n);
        s.launch(move || {
            // SAFETY: as in launch_f_at.
            let src = unsafe { at(src, n) };
            lock(&b.hout[hout]).copy_from_slice(src);
        });
        Ok(())
    }
    fn resident_words(&self, slots: usize) -> Result<ResidentWords> {
        Ok(ResidentWords::on_host(slots))
    }
    fn launch_resident(
        &self,
        s: &HostStream,
        words: &Arc<ResidentWords>,
        batches: i64,
        arrival_wait: bool,
        copies: CopyBy,
    ) -> Result<()> {
        let l = self.layout;
        let slots = words.slots();
        l.fits_resident(slots)?;
        let (w, b, k, backend) = (
            words.clone(),
            self.bufs.clone(),
            l.intensity,
            self.backend.clone(),
        );
        let in_place = copies == CopyBy::Kernel;
        // The host backend's resident kernel: one thread (the stream's) takes each batch in
        // turn, the whole batch a tile, through the same buffers as the other engines (the
        // host slots copied in and out here, or by the copy streams).
        s.launch(move || {
            for seq in 0..batches {
                let slot = seq as usize % slots;
                let ready = || !arrival_wait || w.arrived() > seq as u64;
                // A stop ends only the wait for a batch that has not arrived.
                if !poll(ready, || w.stopped()) {
                    return;
                }
                backend.chaos_pause();
                if in_place {
                    lock(&b.d_in[slot]).copy_from_slice(&lock(&b.hin[slot]));
                }
                for (x, &v) in lock(&b.x[slot]).iter_mut().zip(lock(&b.d_in[slot]).iter()) {
                    *x = workload::f_elem(v, k);
                }
                for (y, &v) in lock(&b.y[slot]).iter_mut().zip(lock(&b.d_in[slot]).iter()) {
                    *y = workload::g_elem(v, k);
                }
                {
                    let (x, y) = (lock(&b.x[slot]), lock(&b.y[slot]));
                    for ((o, &xv), &yv) in lock(&b.out[slot]).iter_mut().zip(x.iter()).zip(y.iter())
                    {
                        *o = workload::h_elem(xv, yv, k);
                    }
                }
                if in_place {
                    lock(&b.hout[slot]).copy_from_slice(&lock(&b.out[slot]));
                }
                w.set_done(slot, seq as u64 + 1);
            }
        });
        Ok(())
    }
    fn resident_copy_in(
        &self,
        s: &HostStream,
        words: &Arc<ResidentWords>,
        seq: i64,
        signal: bool,
    ) -> Result<()> {
        let slot = self.layout.resident_slot(words.slots(), seq)?;
        let (w, b, backend) = (words.clone(), self.bufs.clone(), self.backend.clone());
        s.launch(move || {
            backend.chaos_pause();
            lock(&b.d_in[slot]).copy_from_slice(&lock(&b.hin[slot]));
            if signal {
                // As a stream's wait on a word: the batch before arrives (its copy-in stream
                // has no wait for ever: by induction from batch 0).
                poll(|| w.arrived() >= seq as u64, || false);
                w.arrive(seq as u64 + 1);
            }
        });
        Ok(())
    }
    fn resident_copy_out(
        &self,
        s: &HostStream,
        words: &Arc<ResidentWords>,
        seq: i64,
        wait: bool,
    ) -> Result<()> {
        let slot = self.layout.resident_slot(words.slots(), seq)?;
        let (w, b, backend) = (words.clone(), self.bufs.clone(), self.backend.clone());
        s.launch(move || {
            // As a stream's wait on a word: until it holds (`release_done` ends it at the
            // latest).
            if wait {
                poll(|| w.done(slot) > seq as u64, || false);
            }
            backend.chaos_pause();
            lock(&b.hout[slot]).copy_from_slice(&lock(&b.out[slot]));
            w.set_copied(slot, seq as u64 + 1);
        });
        Ok(())
    }
    fn chaos_pause(&self) {
        self.backend.chaos_pause();
    }
    fn mark(
        &self,
        s: &HostStream,
        lane: &'static str,
        label: &'static str,
        seq: i64,
        begin: bool,
    ) -> Result<()> {
        let marks = self.marks.clone();
        s.launch(move || {
            let m = Mark {
                lane,
                label,
                seq,
                begin,
                t_us: 0.0,
            };
            marks
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((m, Instant::now()));
        });
        Ok(())
    }
    fn take_marks(&self, t0: Instant) -> Result<Vec<Mark>> {
        let marks = std::mem::take(&mut *self.marks.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(marks
            .into_iter()
            .map(|(mut m, t)| {
                m.t_us = t.saturating_duration_since(t0).as_secs_f64() * 1e6;
                m
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batch `seq`'s right output for `layout`.
    fn right_output(layout: &Layout, seq: i64) -> Vec<u32> {
        (0..layout.n)
            .map(|i| workload::reference_elem(seq, i, layout.npatterns, layout.intensity))
            .collect()
    }

    #[test]
    fn the_check_of_every_element_refuses_one_wrong_element_anywhere() {
        let layout = Layout::uniform(4096 + 3, 5, 2);
        let reference = Reference::new(layout);
        for seq in [0, 3, 7] {
            let right = right_output(&layout, seq);
            assert!(reference.check(&right, seq), "seq {seq} right");
            assert!(!reference.check(&right, seq + 5), "another batch's header");
            for at in [
                0,
                HEADER - 1,
                HEADER,
                HEADER + 1,
                layout.n / 2,
                layout.n - 1,
            ] {
                let mut wrong = right.clone();
                wrong[at] ^= 1;
                assert!(
                    !reference.check(&wrong, seq),
                    "seq {seq}, element {at} wrong"
                );
            }
            assert!(!reference.check(&right[..layout.n - 1], seq), "short");
        }
    }

    #[test]
    fn a_resident_kernel_over_more_slots_than_a_buffer_or_a_negative_batch_is_refused() {
        let mut layout = Layout::uniform(64, 4, 1);
        assert_eq!(layout.resident_slot(4, 9).unwrap(), 1);
        assert_eq!(
            layout.resident_slot(3, 9).unwrap(),
            0,
            "fewer slots than buffers fit"
        );
        layout.ny = 2;
        for slots in [0, 3] {
            let e = layout.resident_slot(slots, 1).unwrap_err().to_string();
            assert!(e.contains(&format!("{slots} slots do not fit")), "{e}");
        }
        let e = layout.resident_slot(2, -1).unwrap_err().to_string();
        assert!(e.contains("batches count from 0"), "{e}");
        let dev = HostDevice::new(HostBackend::new(), layout);
        let words = Arc::new(dev.resident_words(3).unwrap());
        let s = dev.backend().new_stream("s").unwrap();
        let e = dev
            .launch_resident(&s, &words, 1, true, CopyBy::Kernel)
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 slots do not fit"), "{e}");
    }

    #[test]
    fn the_sampled_check_looks_only_at_its_samples() {
        let mut layout = Layout::uniform(4096, 3, 1);
        layout.verify_samples = 16;
        let reference = Reference::new(layout);
        let right = right_output(&layout, 1);
        assert!(reference.check(&right, 1));
        let sampled = HEADER + layout.check_runs().expect("sampled").start(1, 0);
        for at in [sampled, sampled + CHECK_RUN - 1] {
            let mut wrong = right.clone();
            wrong[at] ^= 1;
            assert!(!reference.check(&wrong, 1), "sampled element {at} wrong");
        }
        let mut unsampled = right;
        unsampled[sampled + CHECK_RUN] ^= 1;
        assert!(reference.check(&unsampled, 1), "an element between samples");
    }

    /// The body elements (from its start) whose change the check of `seq` refuses.
    fn checked(layout: &Layout, seq: i64) -> Vec<usize> {
        let reference = Reference::new(*layout);
        let right = right_output(layout, seq);
        assert!(reference.check(&right, seq), "seq {seq} right");
        (HEADER..layout.n)
            .filter(|&at| {
                let mut wrong = right.clone();
                wrong[at] ^= 1;
                !reference.check(&wrong, seq)
            })
            .map(|at| at - HEADER)
            .collect()
    }

    #[test]
    fn the_sampled_check_compares_whole_lines_spread_over_the_body() {
        // 1024 body elements, 64 samples: 4 runs of 16, one in each quarter of the body.
        let mut layout = Layout::uniform(HEADER + 1024, 5, 1);
        layout.verify_samples = 64;
        assert!(!layout.check_reads_every_line());
        for seq in [0, 3] {
            let checked = checked(&layout, seq);
            assert_eq!(checked.len(), 64, "seq {seq}: {checked:?}");
            for (r, w) in checked.chunks(CHECK_RUN).enumerate() {
                assert!(
                    w.windows(2).all(|p| p[1] == p[0] + 1),
                    "run {r} consecutive"
                );
                assert_eq!(w[0] % CHECK_RUN, 0, "run {r} starts on a line");
                assert_eq!(w[0] / 256, r, "run {r} in quarter {r}: {w:?}");
            }
        }
        // The default samples read every line of 256 KiB and smaller batches no more; every
        // element checked reads them all.
        for bytes in [64 << 10, 256 << 10, 1 << 20] {
            layout = Layout::uniform(bytes / 4, 4, 1);
            layout.verify_samples = 4096;
            assert!(!layout.check_reads_every_line(), "{bytes}");
            layout.verify_samples = 0;
            assert!(layout.check_reads_every_line(), "{bytes}");
        }
    }

    #[test]
    fn the_sampled_check_leaves_no_part_of_the_body_unchecked() {
        // 255 lines, 16 runs: one run in each sixteenth of the lines, the last sixteenth (the
        // batch's end) included, for every pattern; 20 samples: a short last run.
        let mut layout = Layout::uniform(HEADER + 255 * CHECK_RUN, 7, 1);
        for samples in [256, 20] {
            layout.verify_samples = samples;
            for seq in 0..7 {
                let checked = checked(&layout, seq);
                assert_eq!(checked.len(), samples, "seq {seq}");
                let runs = samples.div_ceil(CHECK_RUN);
                for (r, w) in checked.chunks(CHECK_RUN).enumerate() {
                    let line = w[0] / CHECK_RUN;
                    assert!(
                        (r * 255 / runs..(r + 1) * 255 / runs).contains(&line),
                        "{samples} samples, seq {seq}: run {r} at line {line}"
                    );
                }
            }
        }
    }
}
