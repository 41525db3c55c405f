//! The seed's pipeline across two processes (`seqsync demo --processes 2`): copy in and the
//! kernels f, g, h in the *producer* process, copy out and process_data in the *consumer*
//! process, the `out` ring buffer in memory both map ([`SharedBuffer`]).
//!
//! It may use: seqsync's public API (rings, shared rings and buffers, the `Backend` trait) and
//! the demo's [`Device`]; the caller starts the consumer process (the CLI runs itself again).
//!
//! The rings that cross the boundary are shared rings, the others stay in the producer:
//!
//! | ring | producer (stream) | consumers | size |
//! |---|---|---|---|
//! | `h2g`, `f`, `g`, `h` | as in the one-process pipeline, all in the producer process | | |
//! | `NAME-out` (shared, made by the producer) | h (s_h), after writing `out[s % nout]` | the consumer's copy out (s_g2h, lag 0) | nout: the slots of `out` |
//! | `NAME-copied` (shared, made by the consumer) | the copy out (s_g2h) | h at lag nout (the slot it overwrites), process_data (lag 0) | nout |
//!
//! `h` overwrites `out[s % nout]` only once the copy out of `s - nout` is done (`copied`), and
//! the copy out of `s` starts only once h of `s` is (`out`). With `--drop-wait
//! copy-out-waits-h` the consumer leaves its wait out and only keeps pace with the producer's
//! records (`synchronize_with_producer`): its copies then read `out` before h wrote it, and
//! verification fails (the negative control).

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::device::{Device, HostDevice, Layout};
use super::dispatch::resolve;
use super::pipeline::{Checker, InputPool};
use super::{DemoConfig, DroppedWait, Engine, Variant};
use seqsync::backend::host::{Chaos, HostBackend};
use seqsync::backend::{Backend, BackendKind};
use seqsync::ipc::{SharedBuffer, SharedRing};
use seqsync::{Blocking, EventRingbuf, Result};

/// What the consumer process prints on its last line (JSON), for the producer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConsumerReport {
    /// Batches whose output matched the CPU reference.
    pub verified: i64,
    /// Batches whose output did not match.
    pub wrong: i64,
    /// Batches that never arrived.
    pub missing: i64,
    /// The consumer's wall time, from ready to its last batch.
    pub wall_s: f64,
}

/// The two-process run, as the producer reports it.
#[derive(Debug, Clone, Serialize)]
pub struct TwoProcessReport {
    /// `host` or `cuda`.
    pub backend: &'static str,
    /// The device's name.
    pub device: String,
    /// Batches pushed through.
    pub batches: i64,
    /// Bytes per batch.
    pub batch_bytes: usize,
    /// Slots of `out` (the shared buffer).
    pub nout: usize,
    /// The consumer process's id.
    pub consumer_pid: u32,
    /// What the consumer's process_data saw.
    pub consumer: ConsumerReport,
    /// The producer's wall time, from its first batch to the consumer's report.
    pub wall_s: f64,
    /// Batch bytes through the whole pipeline per second, in GB/s (1e9).
    pub gbps: f64,
    /// The wait the consumer left out (test only).
    pub drop_wait: Option<DroppedWait>,
    /// How the shared rings order the streams.
    pub mechanism: String,
}

impl TwoProcessReport {
    /// Did every batch arrive once and match?
    pub fn all_verified(&self) -> bool {
        self.consumer.verified == self.batches
            && self.consumer.wrong == 0
            && self.consumer.missing == 0
    }
}

/// What the consumer prints once it has opened everything and made its ring.
pub const READY: &str = "SEQSYNC-CONSUMER-READY";

/// The names a run's shared objects get, from a run name.
fn names(run: &str) -> (String, String) {
    (format!("{run}-out"), format!("{run}-copied"))
}

fn check_config(config: &DemoConfig) -> Result<()> {
    let bad = |m: &str| Err(crate::invalid("demo", m.to_owned()));
    if config.engine != Engine::HandWritten || config.variant != Variant::Seed {
        return bad("--processes 2 runs the hand-written engine, variant seed");
    }
    if config.trace || config.spec.is_some() || config.rate.is_some() {
        return bad("--processes 2 takes no --trace, no --rate and no spec");
    }
    match config.drop_wait {
        None | Some(DroppedWait::CopyOutWaitsH) => Ok(()),
        Some(_) => bad("--processes 2 drops only copy-out-waits-h (the consumer's wait)"),
    }
}

/// The producer: make the shared buffer and ring, start the consumer (`spawn`, whose stdout
/// must be piped), run copy in and the kernels, and report with what the consumer saw.
///
/// # Errors
/// A bad config ([`Error::InvalidArgument`](seqsync::Error::InvalidArgument)); the rings' and backend's errors, among them
/// [`Error::PeerLost`](seqsync::Error::PeerLost) when the consumer dies.
pub fn run_producer(
    config: &DemoConfig,
    run: &str,
    spawn: &mut dyn FnMut() -> std::io::Result<Child>,
) -> Result<TwoProcessReport> {
    check_config(config)?;
    let (config, kind, layout, batch_bytes) = resolved(config)?;
    match kind {
        BackendKind::Cuda => cuda::producer(&config, layout, batch_bytes, run, spawn),
        _ => {
            let dev = HostDevice::new(host(&config), layout);
            producer(
                &dev,
                "host",
                "host".into(),
                &config,
                batch_bytes,
                run,
                spawn,
            )
        }
    }
}

/// The consumer (in the process the producer started): open what the producer made, make
/// the `copied` ring, call `ready`, then copy out and check every batch.
///
/// # Errors
/// As [`run_producer`]; [`Error::PeerLost`](seqsync::Error::PeerLost) when the producer dies.
pub fn run_consumer(
    config: &DemoConfig,
    run: &str,
    ready: &mut dyn FnMut(),
) -> Result<ConsumerReport> {
    check_config(config)?;
    let (config, kind, layout, _) = resolved(config)?;
    match kind {
        BackendKind::Cuda => cuda::consumer(&config, layout, run, ready),
        _ => consumer(&HostDevice::new(host(&config), layout), &config, run, ready),
    }
}

/// [`resolve`] with the dropped wait put back after: `validate` keeps `--drop-wait` to the
/// host backend because the one-process pipeline's dropped waits let the host read a batch
/// while its copy writes it; the consumer's dropped wait here is a device wait (its host reads
/// still come after its own synchronize), so it runs on CUDA too.
fn resolved(config: &DemoConfig) -> Result<(DemoConfig, BackendKind, Layout, usize)> {
    let (mut c, kind, layout, bytes) = resolve(&DemoConfig {
        drop_wait: None,
        ..config.clone()
    })?;
    c.drop_wait = config.drop_wait;
    Ok((c, kind, layout, bytes))
}

fn host(config: &DemoConfig) -> HostBackend {
    match config.chaos {
        Some(seed) => HostBackend::with_chaos(Chaos::new(seed)),
        None => HostBackend::new(),
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use crate::demo::cuda_device::CudaDevice;
    use seqsync::backend::cuda::CudaBackend;

    pub(super) fn producer(
        config: &DemoConfig,
        layout: Layout,
        batch_bytes: usize,
        run: &str,
        spawn: &mut dyn FnMut() -> std::io::Result<Child>,
    ) -> Result<TwoProcessReport> {
        let gpu = CudaBackend::new(0)?;
        let name = gpu.device_name()?;
        let dev = CudaDevice::new(gpu, layout)?;
        super::producer(&dev, "cuda", name, config, batch_bytes, run, spawn)
    }

    pub(super) fn consumer(
        config: &DemoConfig,
        layout: Layout,
        run: &str,
        ready: &mut dyn FnMut(),
    ) -> Result<ConsumerReport> {
        let dev = CudaDevice::new(CudaBackend::new(0)?, layout)?;
        super::consumer(&dev, config, run, ready)
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda {
    use super::*;

    pub(super) fn producer(
        _: &DemoConfig,
        _: Layout,
        _: usize,
        _: &str,
        _: &mut dyn FnMut() -> std::io::Result<Child>,
    ) -> Result<TwoProcessReport> {
        Err(seqsync::Error::NoDevice(
            "seqsync was built without the `cuda` feature".into(),
        ))
    }

    pub(super) fn consumer(
        _: &DemoConfig,
        _: Layout,
        _: &str,
        _: &mut dyn FnMut(),
    ) -> Result<ConsumerReport> {
        Err(seqsync::Error::NoDevice(
            "seqsync was built without the `cuda` feature".into(),
        ))
    }
}

/// A shared ring of the config's mechanism, else the one [`SharedRing::create`] picks.
fn shared_ring<B: Backend>(
    config: &DemoConfig,
    b: &B,
    name: &str,
    nconsumers: u32,
    size: usize,
) -> Result<SharedRing<B>> {
    match config.ipc_mechanism {
        Some(m) => SharedRing::create_with(b, name, nconsumers, size, m),
        None => SharedRing::create(b, name, nconsumers, size),
    }
}

/// Bytes of one batch of `out`, as an offset into the shared buffer.
fn slot_bytes(l: &Layout) -> usize {
    l.n * 4
}

fn producer<D: Device>(
    dev: &D,
    backend: &'static str,
    device: String,
    config: &DemoConfig,
    batch_bytes: usize,
    run: &str,
    spawn: &mut dyn FnMut() -> std::io::Result<Child>,
) -> Result<TwoProcessReport> {
    let l = *dev.layout();
    let b = dev.backend();
    let (out_name, copied_name) = names(run);
    let out = SharedBuffer::create(b, &out_name, l.nout * slot_bytes(&l))?;
    let skips = config.drop_wait == Some(DroppedWait::CopyOutWaitsH);
    let out_ring = shared_ring(config, b, &out_name, u32::from(!skips), l.nout)?;
    let mut child =
        spawn().map_err(|e| crate::invalid("demo", format!("cannot start the consumer: {e}")))?;
    let pid = child.id();
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(crate::invalid("demo", "the consumer's stdout is not piped"));
    };
    let mut lines = BufReader::new(stdout).lines();
    let ready = loop {
        match lines.next() {
            Some(Ok(line)) if line.trim_end().ends_with(READY) => break true,
            Some(Ok(_)) => continue,
            _ => break false,
        }
    };
    if !ready {
        let _ = child.wait();
        return Err(crate::invalid(
            "demo",
            "the consumer ended before it was ready",
        ));
    }
    let start = Instant::now();
    // Everything after the consumer started: an error stops the ring and ends the consumer.
    let body = || -> Result<()> {
        let copied = SharedRing::open(b, &copied_name)?;
        let streams = ["s_h2g", "s_f", "s_g", "s_h"].map(|n| b.new_stream(n));
        let [s_h2g, s_f, s_g, s_h] = streams;
        let (s_h2g, s_f, s_g, s_h) = (s_h2g?, s_f?, s_g?, s_h?);
        // The in-process rings, sized as in the one-process pipeline (`pipeline/mod.rs`); `h`
        // loses its third consumer (the copy out), which waits on the shared `out` ring instead.
        let r_h2g = EventRingbuf::new(b, "h2g", 2, 1)?;
        let r_f = EventRingbuf::new(b, "f", 2, l.nin)?;
        let r_g = EventRingbuf::new(b, "g", 2, l.nin)?;
        let r_h = EventRingbuf::new(b, "h", 2, l.nx.max(l.ny))?;
        let pool = InputPool::new(dev)?;
        let (nin, nx, ny, nout, np) = l.lags();
        let slot = |s: i64, n: i64| (s % n) as usize;
        for s in 0..config.batches {
            dev.chaos_pause();
            pool.wait_free(dev, s)?;
            dev.fill_input(s);
            r_f.wait(&s_h2g, s - nin, Blocking::No)?;
            r_g.wait(&s_h2g, s - nin, Blocking::No)?;
            dev.copy_in(&s_h2g, slot(s, np), slot(s, nin))?;
            r_h2g.record(&s_h2g, s, Blocking::No)?;
            pool.copy_enqueued(dev, &s_h2g, s)?;
            r_h2g.wait(&s_f, s, Blocking::No)?;
            r_h.wait(&s_f, s - nx, Blocking::No)?;
            dev.launch_f(&s_f, slot(s, nin), slot(s, nx))?;
            r_f.record(&s_f, s, Blocking::No)?;
            r_h2g.wait(&s_g, s, Blocking::No)?;
            r_h.wait(&s_g, s - ny, Blocking::No)?;
            dev.launch_g(&s_g, slot(s, nin), slot(s, ny))?;
            r_g.record(&s_g, s, Blocking::No)?;
            dev.chaos_pause();
            // h: out[s % nout] is free once the consumer's copy of s - nout is done.
            r_f.wait(&s_h, s, Blocking::No)?;
            r_g.wait(&s_h, s, Blocking::No)?;
            copied.wait(&s_h, s - nout, Blocking::Yes)?;
            let at = out.at(slot(s, nout) * slot_bytes(&l), slot_bytes(&l))?;
            dev.launch_h_to(&s_h, slot(s, nx), slot(s, ny), at)?;
            r_h.record(&s_h, s, Blocking::No)?;
            out_ring.record(&s_h, s, Blocking::Yes)?;
        }
        for st in [&s_h2g, &s_f, &s_g, &s_h] {
            b.synchronize_stream(st)?;
        }
        Ok(())
    };
    if let Err(e) = body() {
        out_ring.stop(&format!("the producer failed: {e}"));
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    let last = lines.map_while(|l| l.ok()).last().unwrap_or_default();
    let status = child
        .wait()
        .map_err(|e| crate::invalid("demo", format!("the consumer: {e}")))?;
    let wall = start.elapsed();
    let consumer: ConsumerReport = serde_json::from_str(&last).map_err(|_| {
        crate::invalid(
            "demo",
            format!("the consumer ({status}) reported no result (last line: {last:?})"),
        )
    })?;
    Ok(TwoProcessReport {
        backend,
        device,
        batches: config.batches,
        batch_bytes,
        nout: l.nout,
        consumer_pid: pid,
        consumer,
        wall_s: wall.as_secs_f64(),
        gbps: config.batches as f64 * batch_bytes as f64 / wall.as_secs_f64().max(1e-9) / 1e9,
        drop_wait: config.drop_wait,
        mechanism: out_ring.mechanism().name().into(),
    })
}

fn consumer<D: Device>(
    dev: &D,
    config: &DemoConfig,
    run: &str,
    ready: &mut dyn FnMut(),
) -> Result<ConsumerReport> {
    let l = *dev.layout();
    let b = dev.backend();
    let (out_name, copied_name) = names(run);
    let out = SharedBuffer::open(b, &out_name)?;
    if out.len() != l.nout * slot_bytes(&l) {
        return Err(crate::invalid(
            "demo",
            format!(
                "the shared `out` has {} bytes, this config's {} slots of {} need {}",
                out.len(),
                l.nout,
                slot_bytes(&l),
                l.nout * slot_bytes(&l)
            ),
        ));
    }
    let out_ring = SharedRing::open(b, &out_name)?;
    // Consumed by the producer's h (lag nout) and by process_data here (lag 0).
    let copied = shared_ring(config, b, &copied_name, 2, l.nout)?;
    let copied_here = SharedRing::open(b, &copied_name)?;
    let s_g2h = b.new_stream("s_g2h")?;
    let checker = Checker::new(config.batches);
    let skips = config.drop_wait == Some(DroppedWait::CopyOutWaitsH);
    let nout = l.nout as i64;
    ready();
    let start = Instant::now();
    let body = || -> Result<()> {
        for s in 0..config.batches {
            dev.chaos_pause();
            if skips {
                // The negative control: only as far as the producer's records, not their work.
                out_ring.synchronize_with_producer(s)?;
            } else {
                out_ring.wait(&s_g2h, s, Blocking::Yes)?;
            }
            let at = out.at((s % nout) as usize * slot_bytes(&l), slot_bytes(&l))?;
            dev.copy_out_from(&s_g2h, at, 0)?;
            copied.record(&s_g2h, s, Blocking::Yes)?;
            copied_here.synchronize(s, Blocking::Yes)?;
            checker.process(dev, 0, s);
            if let Some(p) = &config.progress {
                p(s + 1, config.batches);
            }
        }
        Ok(())
    };
    let r = body();
    if let Err(e) = &r {
        copied.stop(&format!("the consumer failed: {e}"));
    }
    r?;
    let wall = start.elapsed();
    let v = checker.finish();
    Ok(ConsumerReport {
        verified: v.matched,
        wrong: v.wrong,
        missing: v.missing,
        wall_s: wall.as_secs_f64(),
    })
}
