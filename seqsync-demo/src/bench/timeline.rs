//! `seqsync bench timeline`: timelines against the raw backend calls, in one run.
//!
//! - a `signal_on` + `wait_on` pair against a raw event record + stream wait
//!   (`cuEventRecord` + `cuStreamWaitEvent` on CUDA), for each timeline mechanism of the
//!   backend;
//! - the same pair made by the backend alone (its own `signal_on` + `wait_on` on a word, no
//!   timeline layer), in the same rounds: what the pair costs above the raw calls splits into
//!   the layer's part and the backend's;
//! - a host `query` against a raw event query (`cuEventQuery`), likewise;
//! - the timeline layer's own cost: the same pair on a backend whose stream operations cost
//!   nothing ([`NullBackend`]) against that backend's own
//!   `signal_on` + `wait_on`;
//! - a cross-stream ping-pong (two streams handing a value back and forth, every wait enqueued
//!   before its signal but with `events`, which refuses that), per round trip, against the same ping-pong on raw events (enqueued in
//!   causal order, which raw events need), for each timeline mechanism of the backend;
//! - a host wait's wake-up latency and CPU on 50 us and 100 ms of stream work, against a
//!   spinning wait.
//!
//! Every per-call figure is a median over rounds, and the contenders' rounds alternate.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::null_backend::NullBackend;
use super::{median, thread_cpu_time, SyncRow};
use seqsync::backend::{Backend, EventOptions};
use seqsync::internal::backend::Semaphore;
use seqsync::timeline::Timeline;
use seqsync::Result;

/// Rounds run before the measured ones (the first rounds of a run pay for cold caches, lazy
/// driver state and the host's clock ramping up).
const WARM_UP: usize = 5;

/// One per-call comparison.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineRow {
    /// The timeline mechanism (`host-word`, `hybrid`, `memops`, `events`).
    pub mechanism: String,
    /// What was measured.
    pub name: String,
    /// The timeline's median nanoseconds per operation.
    pub timeline_ns: f64,
    /// The raw backend calls' median nanoseconds per operation.
    pub raw_ns: f64,
    /// `timeline_ns / raw_ns`.
    pub ratio: f64,
}

/// A ping-pong between two streams.
#[derive(Debug, Clone, Serialize)]
pub struct PingPongRow {
    /// The timeline mechanism (`host-word`, `hybrid`, `memops`, `events`).
    pub mechanism: String,
    /// Microseconds per round trip with timelines (enqueue included).
    pub timeline_us: f64,
    /// Microseconds per round trip on raw events (enqueue included).
    pub raw_us: f64,
    /// `timeline_us / raw_us`.
    pub ratio: f64,
}

/// Everything `seqsync bench timeline` measures.
#[derive(Debug, Clone, Serialize)]
pub struct TimelineBenchReport {
    /// "host" or "cuda".
    pub backend: String,
    /// The device's name.
    pub device: String,
    /// The mechanism a timeline gets by default (with the fallback reason, if any).
    pub mechanism: String,
    /// The crate's locks: "biased" to their thread, or "shared" and why
    /// ([`seqsync::internal::lock_biasing`]).
    pub locks: String,
    /// Per-call costs, per mechanism.
    pub ops: Vec<TimelineRow>,
    /// Cross-stream round trips, per mechanism.
    pub ping_pong: Vec<PingPongRow>,
    /// Host wait wake-up latency and CPU.
    pub wait: Vec<SyncRow>,
}

/// How much to measure.
#[derive(Debug, Clone, Copy)]
pub struct TimelineBenchConfig {
    /// Operations per timed round.
    pub per_round: usize,
    /// Rounds.
    pub rounds: usize,
    /// Round trips per ping-pong run.
    pub round_trips: u64,
    /// Repetitions of each wake-up case (the 100 ms case runs a quarter as many).
    pub wait_reps: usize,
}

impl Default for TimelineBenchConfig {
    fn default() -> Self {
        TimelineBenchConfig {
            per_round: 256,
            rounds: 200,
            round_trips: 2000,
            wait_reps: 40,
        }
    }
}

fn row(mechanism: &str, name: &str, t: Vec<f64>, raw: Vec<f64>) -> TimelineRow {
    let (timeline_ns, raw_ns) = (median(t), median(raw));
    TimelineRow {
        mechanism: mechanism.to_owned(),
        name: name.to_owned(),
        timeline_ns,
        raw_ns,
        ratio: timeline_ns / raw_ns,
    }
}

/// How the crate's locks run in this process.
fn locks() -> String {
    match seqsync::internal::lock_biasing() {
        Ok(()) => "biased".into(),
        Err(why) => format!("shared ({why})"),
    }
}

/// `signal_on` + `wait_on` pairs and host queries, against raw events.
pub(crate) fn per_call<B: Backend>(
    b: &B,
    s1: &B::Stream,
    s2: &B::Stream,
    cfg: &TimelineBenchConfig,
) -> Result<(String, Vec<TimelineRow>)> {
    let n = cfg.per_round;
    let t = Timeline::new(b, "bench", 0)?;
    let mechanism = t.mechanism().to_string();
    let name = t.mechanism().name();
    let events = (0..n)
        .map(|_| b.create_event(EventOptions::default()))
        .collect::<Result<Vec<_>>>()?;
    // The backend's own signal_on + wait_on on a word of its own, without the timeline layer:
    // splits the pair's extra cost into the layer's and the backend's.
    let sem = b.create_semaphore(0, std::sync::Arc::new(|| {}))?;
    let (mut pair_t, mut pair_raw, mut pair_b) = (vec![], vec![], vec![]);
    let (mut v, mut w) = (0u64, 0u64);
    for round in 0..cfg.rounds + WARM_UP {
        let (mut tl, mut raw, mut alone) = (0.0, 0.0, 0.0);
        // The order rotates, so that no contender always runs first (on a cold cache, or
        // right after the streams drained).
        for k in 0..3 {
            match (round + k) % 3 {
                0 => {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        v += 1;
                        t.signal_on(s1, v)?;
                        t.wait_on(s2, v)?;
                    }
                    tl = t0.elapsed().as_nanos() as f64 / n as f64;
                }
                1 => {
                    let t0 = Instant::now();
                    for ev in &events {
                        b.record(ev, s1)?;
                        b.wait(s2, ev)?;
                    }
                    raw = t0.elapsed().as_nanos() as f64 / n as f64;
                }
                _ => {
                    let t0 = Instant::now();
                    for _ in 0..n {
                        w += 1;
                        b.signal_on(s1, &sem, w)?;
                        b.wait_on(s2, &sem, w)?;
                    }
                    alone = t0.elapsed().as_nanos() as f64 / n as f64;
                }
            }
        }
        if round >= WARM_UP {
            pair_t.push(tl);
            pair_raw.push(raw);
            pair_b.push(alone);
        }
        // Keep the queues short: let both streams drain.
        t.wait(v, Duration::from_secs(60))?;
        b.synchronize(&events[n - 1])?;
        b.synchronize_stream(s1)?;
        b.synchronize_stream(s2)?;
        sem.load()?; // the word's points up to `w` are reached: their events are reused
    }
    b.synchronize_stream(s2)?;
    let (mut q_t, mut q_raw) = (vec![], vec![]);
    for _ in 0..cfg.rounds {
        let t0 = Instant::now();
        for _ in 0..n {
            std::hint::black_box(t.query()?);
        }
        q_t.push(t0.elapsed().as_nanos() as f64 / n as f64);
        let t0 = Instant::now();
        for ev in &events {
            std::hint::black_box(b.query(ev)?);
        }
        q_raw.push(t0.elapsed().as_nanos() as f64 / n as f64);
    }
    Ok((
        mechanism,
        vec![
            row(
                name,
                "signal_on + wait_on (raw: record + stream wait)",
                pair_t,
                pair_raw.clone(),
            ),
            row(
                name,
                "  backend alone (no timeline layer)",
                pair_b,
                pair_raw.clone(),
            ),
            row(name, "host query (raw: event query)", q_t, q_raw),
        ],
    ))
}

/// The timeline layer alone: `signal_on` + `wait_on` on the [`NullBackend`] (every wait takes
/// the full path: its value lands only at the end of the round) against the backend's own
/// `signal_on` + `wait_on` on a word of its own.
pub(crate) fn layer_alone(cfg: &TimelineBenchConfig) -> Result<TimelineRow> {
    let b = NullBackend::default();
    let (s1, s2) = (b.new_stream("s1")?, b.new_stream("s2")?);
    let t = Timeline::new(&b, "layer", 0)?;
    let sem = b.create_semaphore(0, std::sync::Arc::new(|| {}))?;
    let n = cfg.per_round;
    let (mut layer, mut raw) = (vec![], vec![]);
    let mut v = 0u64;
    for _ in 0..cfg.rounds {
        let mut w = v;
        let t0 = Instant::now();
        for _ in 0..n {
            v += 1;
            t.signal_on(&s1, v)?;
            t.wait_on(&s2, v)?;
        }
        layer.push(t0.elapsed().as_nanos() as f64 / n as f64);
        let t0 = Instant::now();
        for _ in 0..n {
            w += 1;
            b.signal_on(&s1, &sem, w)?;
            b.wait_on(&s2, &sem, w)?;
        }
        raw.push(t0.elapsed().as_nanos() as f64 / n as f64);
        b.catch_up();
    }
    t.wait(v, Duration::from_secs(1))?;
    Ok(row(
        "null (layer)",
        "signal_on + wait_on (raw: null backend's)",
        layer,
        raw,
    ))
}

/// Round trips between two streams: `a` signals `ping = k` after `pong >= k - 1`, `b` signals
/// `pong = k` after `ping >= k`; `b`'s waits are enqueued before `a`'s signals (after them
/// where the mechanism cannot wait before a signal: CUDA `events`).
pub(crate) fn ping_pong<B: Backend>(b: &B, cfg: &TimelineBenchConfig) -> Result<PingPongRow> {
    let (sa, sb) = (b.new_stream("ping")?, b.new_stream("pong")?);
    let n = cfg.round_trips;
    let mut timeline_us = vec![];
    let mut raw_us = vec![];
    let mut mechanism = String::new();
    for _ in 0..3 {
        let (ping, pong) = (Timeline::new(b, "ping", 0)?, Timeline::new(b, "pong", 0)?);
        mechanism = ping.mechanism().name().to_owned();
        // A mechanism that cannot wait before the signal (CUDA `events` refuses it) gets its
        // waits in causal order, as raw events do.
        let before = ping.mechanism().holds_commands();
        let t0 = Instant::now();
        for k in 1..=n {
            if before {
                ping.wait_on(&sb, k)?;
                pong.signal_on(&sb, k)?;
            }
            pong.wait_on(&sa, k - 1)?;
            ping.signal_on(&sa, k)?;
            if !before {
                ping.wait_on(&sb, k)?;
                pong.signal_on(&sb, k)?;
            }
        }
        pong.wait(n, Duration::from_secs(120))?;
        timeline_us.push(t0.elapsed().as_secs_f64() * 1e6 / n as f64);

        let evs = (0..2 * n)
            .map(|_| b.create_event(EventOptions::default()))
            .collect::<Result<Vec<_>>>()?;
        let t0 = Instant::now();
        for k in 0..n as usize {
            let (e_ping, e_pong) = (&evs[2 * k], &evs[2 * k + 1]);
            if k > 0 {
                b.wait(&sa, &evs[2 * k - 1])?;
            }
            b.record(e_ping, &sa)?;
            b.wait(&sb, e_ping)?;
            b.record(e_pong, &sb)?;
        }
        b.synchronize(&evs[2 * n as usize - 1])?;
        raw_us.push(t0.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    let (timeline_us, raw_us) = (median(timeline_us), median(raw_us));
    Ok(PingPongRow {
        mechanism,
        timeline_us,
        raw_us,
        ratio: timeline_us / raw_us,
    })
}

/// A host wait on `wait` of stream work: spinning on `query` against `Timeline::wait`.
pub(crate) fn wake_up<B: Backend>(
    b: &B,
    stream: &B::Stream,
    busy: impl Fn(&B::Stream, Duration) -> Result<()>,
    wait: Duration,
    label: &str,
    reps: usize,
) -> Result<Vec<SyncRow>> {
    let t = Timeline::new(b, "wake", 0)?;
    let mut v = 0u64;
    let mut rows = vec![];
    for method in ["spin (query loop)", "timeline wait"] {
        let (mut excess, mut cpu) = (vec![], vec![]);
        for _ in 0..reps {
            v += 1;
            let c0 = thread_cpu_time();
            let t0 = Instant::now();
            busy(stream, wait)?;
            t.signal_on(stream, v)?;
            if method.starts_with("spin") {
                while t.query()? < v {
                    std::hint::spin_loop();
                }
            } else {
                t.wait(v, Duration::from_secs(60))?;
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

fn waits<B: Backend>(
    b: &B,
    busy: impl Fn(&B::Stream, Duration) -> Result<()> + Copy,
    cfg: &TimelineBenchConfig,
) -> Result<Vec<SyncRow>> {
    let s = b.new_stream("wake")?;
    let mut rows = wake_up(
        b,
        &s,
        busy,
        Duration::from_micros(50),
        "short (50 us)",
        cfg.wait_reps,
    )?;
    rows.extend(wake_up(
        b,
        &s,
        busy,
        Duration::from_millis(100),
        "long (100 ms)",
        cfg.wait_reps.div_ceil(4),
    )?);
    Ok(rows)
}

/// Run every measurement on the backend `kind` picks.
pub fn run(kind: seqsync::BackendKind, cfg: &TimelineBenchConfig) -> Result<TimelineBenchReport> {
    match seqsync::AnyBackend::new(kind)? {
        seqsync::AnyBackend::Host(h) => run_on_host(&h, cfg),
        #[cfg(feature = "cuda")]
        seqsync::AnyBackend::Cuda(c) => run_cuda(&c, cfg),
        other => Err(super::unsupported("timeline", &other)),
    }
}

/// Every measurement on the host backend `h` (which may be [polling](seqsync::HostBackend::polling)).
pub fn run_on_host(
    h: &seqsync::HostBackend,
    cfg: &TimelineBenchConfig,
) -> Result<TimelineBenchReport> {
    let (s1, s2) = (h.new_stream("s1").unwrap(), h.new_stream("s2").unwrap());
    let (mechanism, mut ops) = per_call(h, &s1, &s2, cfg)?;
    ops.push(layer_alone(cfg)?);
    let busy = |s: &seqsync::backend::host::HostStream, d: Duration| {
        s.launch(move || std::thread::sleep(d));
        Ok(())
    };
    Ok(TimelineBenchReport {
        backend: "host".into(),
        device: super::host_device(h),
        mechanism,
        locks: locks(),
        ops,
        ping_pong: vec![ping_pong(h, cfg)?],
        wait: waits(h, busy, cfg)?,
    })
}

#[cfg(feature = "cuda")]
fn run_cuda(
    gpu: &seqsync::backend::cuda::CudaBackend,
    cfg: &TimelineBenchConfig,
) -> Result<TimelineBenchReport> {
    use seqsync::backend::cuda::TimelineMechanism;
    let (s1, s2) = (gpu.new_stream("s1")?, gpu.new_stream("s2")?);
    let mechanism = Timeline::new(gpu, "default", 0)?.mechanism().to_string();
    let (mut ops, mut ping) = (vec![], vec![]);
    for m in [
        TimelineMechanism::Hybrid,
        TimelineMechanism::MemOps,
        TimelineMechanism::Events,
    ] {
        let b = gpu.clone().with_timeline_mechanism(m);
        let measured = per_call(&b, &s1, &s2, cfg).and_then(|(_, rows)| {
            ops.extend(rows);
            ping.push(ping_pong(&b, cfg)?);
            Ok(())
        });
        match measured {
            Ok(()) => {}
            // Stream memory operations unusable here: the reason is in `mechanism`.
            Err(e) if m != TimelineMechanism::Events => eprintln!("timeline {m:?}: {e}"),
            Err(e) => return Err(e),
        }
    }
    let busy = super::cuda_busy(gpu);
    ops.push(layer_alone(cfg)?);
    Ok(TimelineBenchReport {
        backend: "cuda".into(),
        device: gpu.device_name()?,
        mechanism,
        locks: locks(),
        ops,
        ping_pong: ping,
        wait: waits(gpu, busy, cfg)?,
    })
}
