//! Benchmarks of the ring against the raw backend calls, measured in the same run
//! (`seqsync bench`). These machines are noisy: every figure is a median over many rounds,
//! and rounds of the ring and of the raw call alternate so that both see the same noise.
//!
//! It may use: seqsync's public API only; `run_host` and `run_cuda` are the only code that
//! names a concrete backend.

pub mod graph;
pub mod handoff;
pub mod ipc;
pub mod null_backend;
pub mod pool;
pub mod timeline;

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use seqsync::backend::{Backend, EventOptions};
use seqsync::Result;
use seqsync::{Blocking, EventRingbuf};

/// One comparison: nanoseconds per operation, ring and raw, and their ratio.
#[derive(Debug, Clone, Serialize)]
pub struct OpRow {
    /// What was measured.
    pub name: String,
    /// The ring's median nanoseconds per operation.
    pub ring_ns: f64,
    /// The raw backend call's median nanoseconds per operation.
    pub raw_ns: f64,
    /// `ring_ns / raw_ns`.
    pub ratio: f64,
}

/// A host synchronize on a wait of known length.
#[derive(Debug, Clone, Serialize)]
pub struct SyncRow {
    /// "short" or "long", with the wait's length.
    pub wait: String,
    /// How the host waited.
    pub method: String,
    /// Median time from launching the wait's work to the synchronize returning, minus the
    /// work's own length: launch cost plus wake-up latency.
    pub excess_us: f64,
    /// CPU time the waiting thread used, per wait.
    pub cpu_ms: f64,
    /// The wait's length in milliseconds.
    pub wait_ms: f64,
}

/// Everything `seqsync bench` measures.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// "host" or "cuda".
    pub backend: String,
    /// The device's name.
    pub device: String,
    /// Per-operation costs.
    pub ops: Vec<OpRow>,
    /// Host synchronize latency and CPU use.
    pub sync: Vec<SyncRow>,
}

/// How much to measure.
#[derive(Debug, Clone, Copy)]
pub struct BenchConfig {
    /// Operations per timed round.
    pub per_round: usize,
    /// Rounds (the median is taken over rounds).
    pub rounds: usize,
    /// Seqs in the four-consumer-thread run.
    pub threaded_seqs: i64,
    /// Repetitions of each synchronize-latency case.
    pub sync_reps: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            per_round: 256,
            rounds: 400,
            threaded_seqs: 100_000,
            sync_reps: 20,
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn row(name: &str, ring: Vec<f64>, raw: Vec<f64>) -> OpRow {
    let (ring_ns, raw_ns) = (median(ring), median(raw));
    OpRow {
        name: name.to_owned(),
        ring_ns,
        raw_ns,
        ratio: ring_ns / raw_ns,
    }
}

/// How a host backend is described in reports: "host", or "host, polling waits".
pub(crate) fn host_device(h: &seqsync::HostBackend) -> String {
    if h.is_polling() {
        "host, polling waits".into()
    } else {
        "host".into()
    }
}

/// The CPU time the calling thread has used so far (zero where the clock is unsupported).
pub(crate) fn thread_cpu_time() -> Duration {
    cpu_time::ThreadTime::try_now()
        .map(|t| t.as_duration())
        .unwrap_or(Duration::ZERO)
}

/// Single-threaded costs: `record`, `wait`, and `synchronize` of a completed seq, ring against
/// raw call, `per_round` calls per timed round.
pub(crate) fn single_thread<B: Backend>(
    b: &B,
    producer: &B::Stream,
    consumer: &B::Stream,
    cfg: &BenchConfig,
) -> Result<Vec<OpRow>> {
    let n = cfg.per_round;
    let events = (0..n)
        .map(|_| b.create_event(EventOptions::default()))
        .collect::<Result<Vec<_>>>()?;
    // One ring for record/wait (one consumer: the stream wait), one for synchronize.
    let ring = EventRingbuf::new(b, "bench", 1, n)?;
    let sync_ring = EventRingbuf::new(b, "bench-sync", 1, n)?;
    let (mut rec, mut rec_raw, mut wait, mut wait_raw, mut sync, mut sync_raw) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let per_op = |t: Instant| t.elapsed().as_nanos() as f64 / n as f64;
    let mut seq = 0i64;
    let mut sync_seq = 0i64;
    for round in 0..cfg.rounds + 5 {
        let keep = round >= 5; // warm-up rounds are dropped
                               // raw record, raw wait
        let t = Instant::now();
        for e in &events {
            b.record(e, producer)?;
        }
        let r1 = per_op(t);
        let t = Instant::now();
        for e in &events {
            b.wait(consumer, e)?;
        }
        let r2 = per_op(t);
        // ring record, ring wait
        let t = Instant::now();
        for i in 0..n as i64 {
            ring.record(producer, seq + i, Blocking::No)?;
        }
        let r3 = per_op(t);
        let t = Instant::now();
        for i in 0..n as i64 {
            ring.wait(consumer, seq + i, Blocking::No)?;
        }
        let r4 = per_op(t);
        seq += n as i64;
        // synchronize on completed work
        for i in 0..n as i64 {
            sync_ring.record(producer, sync_seq + i, Blocking::No)?;
        }
        b.synchronize_stream(producer)?;
        b.synchronize_stream(consumer)?;
        let t = Instant::now();
        for e in &events {
            b.synchronize(e)?;
        }
        let r5 = per_op(t);
        let t = Instant::now();
        for i in 0..n as i64 {
            sync_ring.synchronize(sync_seq + i, Blocking::No)?;
        }
        let r6 = per_op(t);
        sync_seq += n as i64;
        if keep {
            rec_raw.push(r1);
            wait_raw.push(r2);
            rec.push(r3);
            wait.push(r4);
            sync_raw.push(r5);
            sync.push(r6);
        }
    }
    Ok(vec![
        row("record", rec, rec_raw),
        row("wait (stream wait)", wait, wait_raw),
        row("synchronize (completed seq)", sync, sync_raw),
    ])
}

/// One producer, four consumer threads each making its own stream wait on every seq: the ring
/// (blocking calls) against the same handshake written by hand with raw events and a shared
/// counter. Nanoseconds per seq.
pub(crate) fn four_consumers<B: Backend>(
    b: &B,
    streams: &[B::Stream; 5],
    cfg: &BenchConfig,
) -> Result<OpRow> {
    let nseq = cfg.threaded_seqs;
    let size = 64usize;
    let (mut ring_ns, mut raw_ns) = (vec![], vec![]);
    for _ in 0..3 {
        // Ring.
        let ring = EventRingbuf::new(b, "bench4", 4, size)?;
        let t = Instant::now();
        std::thread::scope(|s| -> Result<()> {
            let consumers: Vec<_> = streams[1..]
                .iter()
                .map(|st| {
                    let ring = &ring;
                    s.spawn(move || -> Result<()> {
                        for seq in 0..nseq {
                            ring.wait(st, seq, Blocking::Yes)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for seq in 0..nseq {
                ring.record(&streams[0], seq, Blocking::Yes)?;
            }
            for c in consumers {
                c.join().expect("consumer panicked")?;
            }
            Ok(())
        })?;
        ring_ns.push(t.elapsed().as_nanos() as f64 / nseq as f64);
        for st in streams {
            b.synchronize_stream(st)?;
        }
        // Raw: events indexed by seq % size, a "recorded up to" counter, and per-consumer
        // "waited up to" counters the producer checks before re-recording a slot. Spinning
        // with yield: the fastest hand-written handshake.
        let events = (0..size)
            .map(|_| b.create_event(EventOptions::default()))
            .collect::<Result<Vec<_>>>()?;
        let recorded = AtomicI64::new(0);
        let waited: [AtomicI64; 4] = Default::default();
        let t = Instant::now();
        std::thread::scope(|s| -> Result<()> {
            let consumers: Vec<_> = streams[1..]
                .iter()
                .zip(&waited)
                .map(|(st, done)| {
                    let (events, recorded) = (&events, &recorded);
                    s.spawn(move || -> Result<()> {
                        for seq in 0..nseq {
                            while recorded.load(Ordering::Acquire) <= seq {
                                std::thread::yield_now();
                            }
                            b.wait(st, &events[seq as usize % size])?;
                            done.store(seq + 1, Ordering::Release);
                        }
                        Ok(())
                    })
                })
                .collect();
            for seq in 0..nseq {
                let oldest = seq - size as i64 + 1;
                while waited.iter().any(|w| w.load(Ordering::Acquire) < oldest) {
                    std::thread::yield_now();
                }
                b.record(&events[seq as usize % size], &streams[0])?;
                recorded.store(seq + 1, Ordering::Release);
            }
            for c in consumers {
                c.join().expect("consumer panicked")?;
            }
            Ok(())
        })?;
        raw_ns.push(t.elapsed().as_nanos() as f64 / nseq as f64);
        for st in streams {
            b.synchronize_stream(st)?;
        }
    }
    Ok(row(
        "record + 4 consumer threads' waits, per seq",
        ring_ns,
        raw_ns,
    ))
}

/// Wake-up latency and CPU use of a host synchronize on work of length `wait`: spinning on
/// `query`, the ring's `synchronize`, and (if given) another plain synchronize.
pub(crate) fn sync_latency<B: Backend>(
    b: &B,
    stream: &B::Stream,
    busy: impl Fn(&B::Stream, Duration) -> Result<()>,
    wait: Duration,
    label: &str,
    reps: usize,
) -> Result<Vec<SyncRow>> {
    let ev = b.create_event(EventOptions::default())?;
    let ring = EventRingbuf::new(b, "latency", 1, 1)?;
    let mut rows = Vec::new();
    let mut seq = 0i64;
    for method in ["spin (query loop)", "ring synchronize"] {
        let (mut excess, mut cpu) = (vec![], vec![]);
        for _ in 0..reps {
            let c0 = thread_cpu_time();
            let t0 = Instant::now();
            busy(stream, wait)?;
            if method.starts_with("spin") {
                b.record(&ev, stream)?;
                while !b.query(&ev)? {
                    std::hint::spin_loop();
                }
            } else {
                ring.record(stream, seq, Blocking::No)?;
                ring.synchronize(seq, Blocking::No)?;
                seq += 1;
            }
            let total = t0.elapsed();
            excess.push(total.saturating_sub(wait).as_secs_f64() * 1e6);
            cpu.push((thread_cpu_time() - c0).as_secs_f64() * 1e3);
        }
        rows.push(SyncRow {
            wait: label.to_owned(),
            method: method.to_owned(),
            excess_us: median(excess),
            cpu_ms: median(cpu),
            wait_ms: wait.as_secs_f64() * 1e3,
        });
    }
    Ok(rows)
}

/// The error of a benchmark (`what`: "pool", "graph", …; "" for the ring's) asked to run on a
/// backend it has no measurement for.
pub(crate) fn unsupported(what: &str, backend: &seqsync::AnyBackend) -> seqsync::Error {
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("{what} ")
    };
    crate::invalid(
        "bench",
        format!(
            "no {what}benchmark for the {} backend",
            seqsync::backend::Backend::name(backend)
        ),
    )
}

/// Run every measurement on the backend `kind` picks.
pub fn run(kind: seqsync::BackendKind, cfg: &BenchConfig) -> Result<BenchReport> {
    match seqsync::AnyBackend::new(kind)? {
        seqsync::AnyBackend::Host(h) => run_on_host(&h, cfg),
        #[cfg(feature = "cuda")]
        seqsync::AnyBackend::Cuda(c) => run_cuda(&c, cfg),
        other => Err(unsupported("", &other)),
    }
}

/// Every measurement on the host backend `h` (which may be [polling](seqsync::HostBackend::polling)).
pub fn run_on_host(h: &seqsync::HostBackend, cfg: &BenchConfig) -> Result<BenchReport> {
    let mk = |i: usize| h.new_stream(&format!("bench{i}")).unwrap();
    let (p, c) = (mk(0), mk(1));
    let mut ops = single_thread(h, &p, &c, cfg)?;
    let streams = [mk(2), mk(3), mk(4), mk(5), mk(6)];
    ops.push(four_consumers(h, &streams, cfg)?);
    let busy = |s: &seqsync::backend::host::HostStream, d: Duration| {
        s.launch(move || std::thread::sleep(d));
        Ok(())
    };
    let mut rows = sync_latency(
        h,
        &p,
        busy,
        Duration::from_micros(50),
        "short (50 us)",
        cfg.sync_reps * 5,
    )?;
    rows.extend(sync_latency(
        h,
        &p,
        busy,
        Duration::from_millis(100),
        "long (100 ms)",
        cfg.sync_reps.div_ceil(4),
    )?);
    Ok(BenchReport {
        backend: "host".into(),
        device: host_device(h),
        ops,
        sync: rows,
    })
}

/// Keep a CUDA stream busy for a while: the library's spinning kernel
/// ([`CommandBackend::spin_kernel`](seqsync::backend::CommandBackend::spin_kernel), one thread
/// on the globaltimer), launched on the stream. The benches' stand-in for work of a known
/// length.
#[cfg(feature = "cuda")]
pub(crate) fn cuda_busy(
    gpu: &seqsync::backend::cuda::CudaBackend,
) -> impl Fn(&std::sync::Arc<seqsync::cudarc::driver::CudaStream>, Duration) -> Result<()> + Copy + '_
{
    use seqsync::backend::CommandBackend;
    move |s, d| gpu.launch_kernel(s, &gpu.spin_kernel(d.as_micros() as u64)?)
}

#[cfg(feature = "cuda")]
fn run_cuda(gpu: &seqsync::backend::cuda::CudaBackend, cfg: &BenchConfig) -> Result<BenchReport> {
    let mk = || gpu.new_stream("bench");
    let (p, c) = (mk()?, mk()?);
    let mut ops = single_thread(gpu, &p, &c, cfg)?;
    let streams = [mk()?, mk()?, mk()?, mk()?, mk()?];
    ops.push(four_consumers(gpu, &streams, cfg)?);
    let busy = cuda_busy(gpu);
    let mut rows = sync_latency(
        gpu,
        &p,
        busy,
        Duration::from_micros(50),
        "short (50 us)",
        cfg.sync_reps * 5,
    )?;
    rows.extend(sync_latency(
        gpu,
        &p,
        busy,
        Duration::from_millis(100),
        "long (100 ms)",
        cfg.sync_reps.div_ceil(4),
    )?);
    Ok(BenchReport {
        backend: "cuda".into(),
        device: gpu.device_name()?,
        ops,
        sync: rows,
    })
}
