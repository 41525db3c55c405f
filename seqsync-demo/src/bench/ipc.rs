//! `seqsync bench ipc`: a shared ring's `record` + `wait` pair against the in-process ring's
//! ([`EventRingbuf`]) on the same two streams, for each cross-process mechanism of the
//! backend, in one run.
//!
//! The producer and the consumer handles are in this process (the calls and the shared memory
//! they touch are those of two processes; what a second process adds is where the consumer
//! runs, not what a call costs). Every figure is a median over rounds of [`PER_ROUND`] pairs,
//! the contenders' rounds alternating, the streams drained between rounds (not timed).
//!
//! The host wake-up row is a ping-pong between two threads over two rings (a `record_host`
//! that wakes a `synchronize` blocked in the other thread, and back): half a round trip, for
//! shared rings (a futex in the segment) against in-process rings.

use std::time::Instant;

use serde::Serialize;

use super::median;
use seqsync::backend::Backend;
use seqsync::ipc::{Mechanism, SharedRing};
use seqsync::{Blocking, EventRingbuf, Result};

/// Pairs per timed round.
pub const PER_ROUND: i64 = 256;
/// Rounds run before the measured ones.
const WARM_UP: usize = 5;
/// Slots of both rings.
const SLOTS: usize = 8;

/// What `seqsync bench ipc` runs.
#[derive(Debug, Clone)]
pub struct IpcBenchConfig {
    /// Timed rounds (the median counts).
    pub rounds: usize,
}

impl Default for IpcBenchConfig {
    fn default() -> Self {
        IpcBenchConfig { rounds: 200 }
    }
}

/// One mechanism's pair against the in-process ring's.
#[derive(Debug, Clone, Serialize)]
pub struct IpcRow {
    /// The shared ring's mechanism (`HostWord`, `MemOps`, `IpcEvent`).
    pub mechanism: String,
    /// Median nanoseconds per shared-ring `record` + `wait`.
    pub shared_ns: f64,
    /// Median nanoseconds per in-process `record` + `wait`, same streams, same rounds.
    pub ring_ns: f64,
    /// `shared_ns / ring_ns`.
    pub ratio: f64,
}

/// Everything `seqsync bench ipc` measures.
#[derive(Debug, Clone, Serialize)]
pub struct IpcBenchReport {
    /// "host" or "cuda".
    pub backend: String,
    /// The device's name.
    pub device: String,
    /// Per mechanism.
    pub rows: Vec<IpcRow>,
}

/// The pair on `b`'s streams by `mechanism`.
fn pairs<B: Backend>(b: &B, mechanism: Mechanism, cfg: &IpcBenchConfig) -> Result<IpcRow> {
    let (p, c) = (b.new_stream("producer")?, b.new_stream("consumer")?);
    let local = EventRingbuf::new(b, "bench-ipc-local", 1, SLOTS)?;
    let name = format!("bench-ipc-{}-{mechanism:?}", std::process::id());
    let shared = SharedRing::create_with(b, &name, 1, SLOTS, mechanism)?;
    let consumer = SharedRing::open(b, &name)?;
    let (mut seq_l, mut seq_s) = (0i64, 0i64);
    let (mut ring_ns, mut shared_ns) = (Vec::new(), Vec::new());
    for round in 0..WARM_UP + cfg.rounds.max(1) {
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            local.record(&p, seq_l, Blocking::Yes)?;
            local.wait(&c, seq_l, Blocking::Yes)?;
            seq_l += 1;
        }
        let l = t.elapsed();
        b.synchronize_stream(&p)?;
        b.synchronize_stream(&c)?;
        let t = Instant::now();
        for _ in 0..PER_ROUND {
            shared.record(&p, seq_s, Blocking::Yes)?;
            consumer.wait(&c, seq_s, Blocking::Yes)?;
            seq_s += 1;
        }
        let s = t.elapsed();
        b.synchronize_stream(&p)?;
        b.synchronize_stream(&c)?;
        if round >= WARM_UP {
            ring_ns.push(l.as_nanos() as f64 / PER_ROUND as f64);
            shared_ns.push(s.as_nanos() as f64 / PER_ROUND as f64);
        }
    }
    let (shared_ns, ring_ns) = (median(shared_ns), median(ring_ns));
    Ok(IpcRow {
        mechanism: format!("{mechanism:?}"),
        shared_ns,
        ring_ns,
        ratio: shared_ns / ring_ns,
    })
}

/// Ping-pongs per timed wake-up round.
const PINGS: i64 = 64;

/// Half a round trip of a host `record_host` → blocked `synchronize` across two threads, over
/// two shared rings against two in-process rings (alternating rounds).
fn wakeups<B: Backend>(b: &B, cfg: &IpcBenchConfig) -> Result<IpcRow> {
    let tag = std::process::id();
    let shared = |n: &str| -> Result<(SharedRing<B>, SharedRing<B>)> {
        let name = format!("bench-wake-{tag}-{n}");
        let r = SharedRing::create(b, &name, 1, SLOTS)?;
        let c = SharedRing::open(b, &name)?;
        Ok((r, c))
    };
    let (ping_p, ping_c) = shared("ping")?;
    let (pong_p, pong_c) = shared("pong")?;
    let ping_l = EventRingbuf::new(b, "bench-wake-ping", 1, SLOTS)?;
    let pong_l = EventRingbuf::new(b, "bench-wake-pong", 1, SLOTS)?;
    let rounds = (WARM_UP + cfg.rounds.max(1)) as i64;
    let (mut shared_ns, mut ring_ns) = (Vec::new(), Vec::new());
    std::thread::scope(|s| -> Result<()> {
        // The other side: answers every ping with a pong, shared rounds then local, per round.
        let echo = s.spawn(|| -> Result<()> {
            for round in 0..rounds {
                for k in 0..PINGS {
                    let seq = round * PINGS + k;
                    ping_c.synchronize(seq, Blocking::Yes)?;
                    pong_p.record_host(seq, Blocking::Yes)?;
                }
                for k in 0..PINGS {
                    let seq = round * PINGS + k;
                    ping_l.synchronize(seq, Blocking::Yes)?;
                    pong_l.record_host(seq, Blocking::Yes)?;
                }
            }
            Ok(())
        });
        for round in 0..rounds {
            let t = Instant::now();
            for k in 0..PINGS {
                let seq = round * PINGS + k;
                ping_p.record_host(seq, Blocking::Yes)?;
                pong_c.synchronize(seq, Blocking::Yes)?;
            }
            let sh = t.elapsed();
            let t = Instant::now();
            for k in 0..PINGS {
                let seq = round * PINGS + k;
                ping_l.record_host(seq, Blocking::Yes)?;
                pong_l.synchronize(seq, Blocking::Yes)?;
            }
            let lo = t.elapsed();
            if round >= WARM_UP as i64 {
                shared_ns.push(sh.as_nanos() as f64 / (2 * PINGS) as f64);
                ring_ns.push(lo.as_nanos() as f64 / (2 * PINGS) as f64);
            }
        }
        echo.join().expect("the echo thread does not panic")
    })?;
    let (shared_ns, ring_ns) = (median(shared_ns), median(ring_ns));
    Ok(IpcRow {
        mechanism: "host wake-up".into(),
        shared_ns,
        ring_ns,
        ratio: shared_ns / ring_ns,
    })
}

/// Every measurement on `kind` (auto: CUDA if a GPU is present).
///
/// # Errors
/// A backend that cannot be made, or a ring call's error.
pub fn run(kind: seqsync::BackendKind, cfg: &IpcBenchConfig) -> Result<IpcBenchReport> {
    match seqsync::AnyBackend::new(kind)? {
        seqsync::AnyBackend::Host(h) => Ok(IpcBenchReport {
            backend: "host".into(),
            device: super::host_device(&h),
            rows: vec![pairs(&h, Mechanism::HostWord, cfg)?, wakeups(&h, cfg)?],
        }),
        #[cfg(feature = "cuda")]
        seqsync::AnyBackend::Cuda(g) => Ok(IpcBenchReport {
            backend: "cuda".into(),
            device: g.device_name()?,
            rows: vec![
                pairs(&g, Mechanism::MemOps, cfg)?,
                pairs(&g, Mechanism::IpcEvent, cfg)?,
                wakeups(&g, cfg)?,
            ],
        }),
        other => Err(super::unsupported("ipc", &other)),
    }
}
