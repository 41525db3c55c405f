//! Buffer handoff by epochs (`seqsync bench handoff`): what tracking costs, and what its
//! shortcuts save, measured in one run.
//!
//! - `record` and stream `wait` through [`TrackingBackend`] against the inner backend's own
//!   calls (the anchor: CUDA.jl's tracking costs +50 ns on record and +110 ns on wait);
//! - a buffer moving to another stream that already waited for an event covering its last
//!   use (no wait needed) against the same move without shortcuts (a record on the old stream
//!   and a wait on the new one, as cudarc's per-slice events and CUDA.jl before epochs do);
//! - the seed's motivating example: when the child's update finishes, with epochs and without.

use std::time::{Duration, Instant};

use serde::Serialize;

use seqsync::backend::{Backend, EventOptions};
use seqsync::memory::handoff::{Tracked, TrackedStream, TrackingBackend};
use seqsync::Result;

use super::BenchConfig;

/// One comparison, nanoseconds per operation (medians over rounds).
#[derive(Debug, Clone, Serialize)]
pub struct HandoffRow {
    /// What was measured.
    pub name: String,
    /// With tracking (epochs).
    pub tracked_ns: f64,
    /// The baseline (named in `baseline`).
    pub baseline_ns: f64,
    /// What the baseline is.
    pub baseline: String,
    /// What tracking adds: `tracked_ns - baseline_ns`, or, where both sides ran back to back
    /// in each round, the median of the rounds' differences.
    pub extra_ns: f64,
    /// `tracked_ns / baseline_ns`.
    pub ratio: f64,
}

/// The motivating example's overlap.
#[derive(Debug, Clone, Serialize)]
pub struct Overlap {
    /// `more_work`'s length.
    pub more_work_ms: f64,
    /// When the child's update finished (from the parent queueing `more_work`), with epochs:
    /// the median run.
    pub child_ms_epochs: f64,
    /// The same without shortcuts (the child's stream waits for all of the parent's).
    pub child_ms_no_shortcuts: f64,
}

/// Everything `seqsync bench handoff` measures.
#[derive(Debug, Clone, Serialize)]
pub struct HandoffReport {
    /// "host" or "cuda".
    pub backend: String,
    /// The device's name.
    pub device: String,
    /// Per-operation costs.
    pub ops: Vec<HandoffRow>,
    /// The motivating example (not measured by [`run_overhead`]).
    pub overlap: Option<Overlap>,
}

fn row(name: &str, tracked: Vec<f64>, baseline: Vec<f64>, what: &str) -> HandoffRow {
    let (t, b) = (super::median(tracked), super::median(baseline));
    HandoffRow {
        name: name.to_owned(),
        tracked_ns: t,
        baseline_ns: b,
        baseline: what.to_owned(),
        extra_ns: t - b,
        ratio: t / b,
    }
}

/// `b` with `record` and stream `wait` that do nothing: what is left of a tracked call over
/// it is the tracking alone, so the difference is stable even where the real calls are noisy
/// (a loaded host, a driver). Everything else forwards to `b`.
#[derive(Clone)]
pub struct NopRecordWait<B>(pub B);

impl<B: Backend> Backend for NopRecordWait<B> {
    type Stream = B::Stream;
    type Event = B::Event;
    type Semaphore = B::Semaphore;

    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn new_stream(&self, name: &str) -> Result<Self::Stream> {
        self.0.new_stream(name)
    }
    fn launch_host(&self, s: &Self::Stream, f: Box<dyn FnOnce() + Send + 'static>) -> Result<()> {
        self.0.launch_host(s, f)
    }
    fn synchronize_stream(&self, s: &Self::Stream) -> Result<()> {
        self.0.synchronize_stream(s)
    }
    fn create_event(&self, options: EventOptions) -> Result<Self::Event> {
        self.0.create_event(options)
    }
    /// Does nothing (the arguments escape, so the call is not optimized away).
    fn record(&self, event: &Self::Event, stream: &Self::Stream) -> Result<()> {
        std::hint::black_box((event, stream));
        Ok(())
    }
    /// Does nothing, as [`record`](Self::record).
    fn wait(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()> {
        std::hint::black_box((stream, event));
        Ok(())
    }
    fn synchronize(&self, event: &Self::Event) -> Result<()> {
        self.0.synchronize(event)
    }
    fn synchronize_interruptible(
        &self,
        event: &Self::Event,
        interrupt: &dyn seqsync::internal::backend::Interrupt,
    ) -> Result<seqsync::internal::backend::SyncOutcome> {
        self.0.synchronize_interruptible(event, interrupt)
    }
    fn query(&self, event: &Self::Event) -> Result<bool> {
        self.0.query(event)
    }
    fn stream_id(&self, s: &Self::Stream) -> u64 {
        self.0.stream_id(s)
    }
    fn create_semaphore(
        &self,
        initial: u64,
        waker: seqsync::internal::backend::SemaphoreWaker,
    ) -> Result<Self::Semaphore> {
        self.0.create_semaphore(initial, waker)
    }
    fn signal_on(&self, s: &Self::Stream, sem: &Self::Semaphore, value: u64) -> Result<()> {
        self.0.signal_on(s, sem, value)
    }
    fn wait_on(&self, s: &Self::Stream, sem: &Self::Semaphore, value: u64) -> Result<()> {
        self.0.wait_on(s, sem, value)
    }
}

/// The tracking alone: `record` and stream `wait` through a [`TrackingBackend`] over
/// [`NopRecordWait`]`(b)` against the no-op calls themselves, rounds alternating.
pub fn tracking_only<B: Backend>(b: &B, cfg: &BenchConfig) -> Result<Vec<HandoffRow>> {
    let mut rows = record_wait(&NopRecordWait(b.clone()), cfg)?;
    rows[0].name = "record, tracking only (no-op inner)".into();
    rows[0].baseline = "no-op record".into();
    rows[1].name = "wait, tracking only (no-op inner)".into();
    rows[1].baseline = "no-op stream wait".into();
    Ok(rows)
}

/// `record` and stream `wait`, tracked against raw, rounds alternating.
pub fn record_wait<B: Backend>(b: &B, cfg: &BenchConfig) -> Result<Vec<HandoffRow>> {
    let n = cfg.per_round;
    let tb = TrackingBackend::new(b.clone());
    let (p, c) = (tb.new_stream("producer")?, tb.new_stream("consumer")?);
    let raw_events = (0..n)
        .map(|_| b.create_event(EventOptions::default()))
        .collect::<Result<Vec<_>>>()?;
    let events = (0..n)
        .map(|_| tb.create_event(EventOptions::default()))
        .collect::<Result<Vec<_>>>()?;
    let (mut rec, mut rec_raw, mut wait, mut wait_raw) = (vec![], vec![], vec![], vec![]);
    let per_op = |t: Instant| t.elapsed().as_nanos() as f64 / n as f64;
    for round in 0..cfg.rounds + 5 {
        // The order alternates, so that neither side always runs on the other's warm cache.
        let tracked_first = round % 2 == 1;
        let (mut r1, mut r2, mut r3, mut r4) = (0.0, 0.0, 0.0, 0.0);
        for side in [tracked_first, !tracked_first] {
            if side {
                let t = Instant::now();
                for e in &events {
                    tb.record(e, &p)?;
                }
                r3 = per_op(t);
                let t = Instant::now();
                for e in &events {
                    tb.wait(&c, e)?;
                }
                r4 = per_op(t);
            } else {
                let t = Instant::now();
                for e in &raw_events {
                    b.record(e, p.inner())?;
                }
                r1 = per_op(t);
                let t = Instant::now();
                for e in &raw_events {
                    b.wait(c.inner(), e)?;
                }
                r2 = per_op(t);
            }
        }
        if round % 16 == 0 {
            b.synchronize_stream(p.inner())?;
            b.synchronize_stream(c.inner())?;
        }
        if round >= 5 {
            rec_raw.push(r1);
            wait_raw.push(r2);
            rec.push(r3);
            wait.push(r4);
        }
    }
    Ok(vec![
        paired_row("record", rec, rec_raw, "raw record"),
        paired_row("wait (stream wait)", wait, wait_raw, "raw stream wait"),
    ])
}

/// As [`row`], for rounds that measured both sides back to back: the extra cost is the median
/// of the per-round differences, which a drift of the machine's speed between rounds (the
/// H200's host has two regimes) moves far less than a difference of medians.
fn paired_row(name: &str, tracked: Vec<f64>, baseline: Vec<f64>, what: &str) -> HandoffRow {
    let diffs = tracked.iter().zip(&baseline).map(|(t, b)| t - b).collect();
    HandoffRow {
        extra_ns: super::median(diffs),
        ..row(name, tracked, baseline, what)
    }
}

/// Move `bufs` (last written on `from`) to `to` with one submission each; the waits inserted.
fn move_all<B: Backend>(
    tb: &TrackingBackend<B>,
    bufs: &[Tracked<u32>],
    to: &TrackedStream<B>,
) -> Result<usize> {
    let mut waits = 0;
    for a in bufs {
        waits += tb.submit(to, &[a.write()], |_, cx| *a.get(cx))?.waits;
    }
    Ok(waits)
}

/// Buffers ping-pong between two streams; before each batch of moves the new stream waits
/// for one event covering the old one's uses. With epochs every move is covered by that
/// wait (the *ordered* fact); without shortcuts each move records on the old stream and
/// waits on the new one itself (per buffer, as cudarc's per-slice events do). Also the
/// cost of a submission that stays on its stream.
pub fn moves<B: Backend>(b: &B, cfg: &BenchConfig) -> Result<Vec<HandoffRow>> {
    let n = cfg.per_round;
    let mut per_mode = Vec::new();
    for shortcuts in [true, false] {
        let tb = if shortcuts {
            TrackingBackend::new(b.clone())
        } else {
            TrackingBackend::without_shortcuts(b.clone())
        };
        let streams = [tb.new_stream("s")?, tb.new_stream("t")?];
        let bufs: Vec<Tracked<u32>> = (0..n as u32).map(|i| tb.track(i)).collect();
        let e = tb.create_event(EventOptions::default())?;
        move_all(&tb, &bufs, &streams[0])?;
        let (mut moved, mut stayed) = (vec![], vec![]);
        for round in 0..cfg.rounds + 5 {
            let (from, to) = (&streams[round % 2], &streams[(round + 1) % 2]);
            tb.record(&e, from)?;
            tb.wait(to, &e)?;
            let t = Instant::now();
            let waits = move_all(&tb, &bufs, to)?;
            let m = t.elapsed().as_nanos() as f64 / n as f64;
            let t = Instant::now();
            move_all(&tb, &bufs, to)?; // the same stream again: no handoff
            let s = t.elapsed().as_nanos() as f64 / n as f64;
            assert_eq!(
                waits,
                if shortcuts { 0 } else { n },
                "handoff bench: unexpected waits (shortcuts: {shortcuts})"
            );
            if round % 16 == 0 {
                tb.synchronize_stream(to)?;
            }
            if round >= 5 {
                moved.push(m);
                stayed.push(s);
            }
        }
        per_mode.push((moved, stayed));
    }
    let (epochs, none) = (per_mode.remove(0), per_mode.remove(0));
    Ok(vec![
        row(
            "move covered by an event wait (no wait)",
            epochs.0,
            none.0,
            "the move without shortcuts (record + wait)",
        ),
        row(
            "submission on the same stream",
            epochs.1,
            none.1,
            "the same without shortcuts",
        ),
    ])
}

/// The seed's motivating example, `reps` times each way: the parent writes `a`, records `e`,
/// queues `more` of work; a child thread waits for `e` on its own stream and updates `a`.
/// When the child's update finished, from queueing `more_work`: medians with and without
/// epochs.
pub fn overlap<B: Backend>(
    b: &B,
    busy: &(dyn Fn(&B::Stream, Duration) -> Result<()> + Sync),
    more: Duration,
    reps: usize,
) -> Result<Overlap> {
    let mut child_ms = [vec![], vec![]];
    for rep in 0..reps * 2 {
        let shortcuts = rep % 2 == 0;
        let tb = if shortcuts {
            TrackingBackend::new(b.clone())
        } else {
            TrackingBackend::without_shortcuts(b.clone())
        };
        let (parent, child) = (tb.new_stream("parent")?, tb.new_stream("child")?);
        let a = tb.track(());
        tb.submit(&parent, &[a.write()], |s, _| busy(s, Duration::ZERO))?
            .value?;
        let e = tb.create_event(EventOptions::default())?;
        tb.record(&e, &parent)?;
        let t0 = Instant::now();
        busy(parent.inner(), more)?; // more_work
        let done = std::thread::scope(|sc| {
            sc.spawn(|| -> Result<Duration> {
                tb.wait(&child, &e)?;
                tb.submit(&child, &[a.write()], |s, _| busy(s, Duration::ZERO))?
                    .value?;
                tb.synchronize_stream(&child)?;
                Ok(t0.elapsed())
            })
            .join()
            .expect("child thread panicked")
        })?;
        tb.synchronize_stream(&parent)?;
        child_ms[usize::from(!shortcuts)].push(done.as_secs_f64() * 1e3);
    }
    let [epochs, none] = child_ms;
    Ok(Overlap {
        more_work_ms: more.as_secs_f64() * 1e3,
        child_ms_epochs: super::median(epochs),
        child_ms_no_shortcuts: super::median(none),
    })
}

/// Run every handoff measurement on the backend `kind` picks.
pub fn run(kind: seqsync::BackendKind, cfg: &BenchConfig) -> Result<HandoffReport> {
    match seqsync::AnyBackend::new(kind)? {
        seqsync::AnyBackend::Host(h) => {
            let busy = |s: &seqsync::backend::host::HostStream, d: Duration| -> Result<()> {
                s.launch(move || std::thread::sleep(d));
                Ok(())
            };
            report(&h, "host".into(), &busy, cfg)
        }
        #[cfg(feature = "cuda")]
        seqsync::AnyBackend::Cuda(c) => run_cuda(&c, cfg),
        other => Err(super::unsupported("handoff", &other)),
    }
}

/// Only the record and stream-wait rows ([`record_wait`], [`tracking_only`]), on the backend
/// `kind` picks: `seqsync bench handoff --overhead-only`.
pub fn run_overhead(kind: seqsync::BackendKind, cfg: &BenchConfig) -> Result<HandoffReport> {
    fn ops<B: Backend>(b: &B, device: String, cfg: &BenchConfig) -> Result<HandoffReport> {
        let mut ops = record_wait(b, cfg)?;
        ops.extend(tracking_only(b, cfg)?);
        Ok(HandoffReport {
            backend: b.name().into(),
            device,
            ops,
            overlap: None,
        })
    }
    match seqsync::AnyBackend::new(kind)? {
        seqsync::AnyBackend::Host(h) => ops(&h, "host".into(), cfg),
        #[cfg(feature = "cuda")]
        seqsync::AnyBackend::Cuda(c) => ops(&c, c.device_name()?, cfg),
        other => Err(super::unsupported("handoff", &other)),
    }
}

fn report<B: Backend>(
    b: &B,
    device: String,
    busy: &(dyn Fn(&B::Stream, Duration) -> Result<()> + Sync),
    cfg: &BenchConfig,
) -> Result<HandoffReport> {
    let mut ops = record_wait(b, cfg)?;
    ops.extend(tracking_only(b, cfg)?);
    ops.extend(moves(b, cfg)?);
    let overlap = overlap(b, busy, Duration::from_millis(20), cfg.sync_reps.max(1))?;
    Ok(HandoffReport {
        backend: b.name().into(),
        device,
        ops,
        overlap: Some(overlap),
    })
}

#[cfg(feature = "cuda")]
fn run_cuda(gpu: &seqsync::backend::cuda::CudaBackend, cfg: &BenchConfig) -> Result<HandoffReport> {
    let busy = super::cuda_busy(gpu);
    report(gpu, gpu.device_name()?, &busy, cfg)
}
