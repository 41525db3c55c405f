//! The seed's pipeline, written by hand on five [`EventRingbuf`]s, as in the seed document.
//!
//! Two host threads (h2g, g2h), five streams (s_h2g, s_f, s_g, s_h, s_g2h), four device ring
//! buffers `in` (nin slots), `x` (nx), `y` (ny), `out` (nout):
//!
//! ```text
//! host batch --h2g copy--> in --f--> x --\
//!                           \--g--> y ---h--> out --g2h copy--> host batch --> process_data
//! ```
//!
//! plus the seed's two variants: [`Variant::KeepInput`] (a third thread consumes the h2g ring
//! and releases each host input batch once its copy has finished) and [`Variant::HostRing`]
//! (a host-side ring of output batches, with one g2h thread launching copies into free host
//! slots and another synchronizing and processing).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::device::{Device, Stream};
use super::trace::HostSpans;
use seqsync::backend::Backend;
use seqsync::{Blocking, EventRingbuf};
use seqsync::{Error, Result};

/// Which of the seed's designs runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The seed's main example: host input batches live long enough by construction (here: a
    /// pool of pinned input buffers, each reused only after an event says its copy finished).
    Seed,
    /// Variant (1): a third thread consumes the h2g ring (`synchronize`) and releases each host
    /// input batch; h2g gets nconsumers = 3 and a blocking record.
    KeepInput,
    /// Variant (2): a ring of `host_slots` output batches in host memory; one g2h thread
    /// launches copies into free host slots, another synchronizes and processes.
    HostRing,
    /// Seed 004: each batch's device buffers come from a stream-ordered pool (allocated on the
    /// copy-in stream, freed after their last reader) instead of fixed ring buffers.
    Pool,
}

impl std::str::FromStr for Variant {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "seed" => Ok(Variant::Seed),
            "keep-input" => Ok(Variant::KeepInput),
            "host-ring" => Ok(Variant::HostRing),
            "pool" => Ok(Variant::Pool),
            o => Err(crate::invalid(
                "demo",
                format!("unknown variant '{o}': expected seed, keep-input, host-ring or pool"),
            )),
        }
    }
}

/// The pipeline's waits (and the g2h synchronize), by name: a test-only switch drops one to
/// prove that verification catches a missing wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DroppedWait {
    /// h2g copy waits on f at s - nin (`in` slot free).
    CopyWaitsF,
    /// h2g copy waits on g at s - nin.
    CopyWaitsG,
    /// f waits on the h2g copy at s (its input).
    FWaitsCopy,
    /// f waits on h at s - nx (`x` slot free).
    FWaitsH,
    /// g waits on the h2g copy at s.
    GWaitsCopy,
    /// g waits on h at s - ny.
    GWaitsH,
    /// h waits on f at s.
    HWaitsF,
    /// h waits on g at s.
    HWaitsG,
    /// h waits on the g2h copy at s - nout (`out` slot free).
    HWaitsCopyOut,
    /// the g2h copy waits on h at s.
    CopyOutWaitsH,
    /// process_data synchronizes on the g2h copy at s.
    ProcessSyncs,
}

impl DroppedWait {
    /// Every wait, in the seed's order.
    pub const ALL: [DroppedWait; 11] = [
        DroppedWait::CopyWaitsF,
        DroppedWait::CopyWaitsG,
        DroppedWait::FWaitsCopy,
        DroppedWait::FWaitsH,
        DroppedWait::GWaitsCopy,
        DroppedWait::GWaitsH,
        DroppedWait::HWaitsF,
        DroppedWait::HWaitsG,
        DroppedWait::HWaitsCopyOut,
        DroppedWait::CopyOutWaitsH,
        DroppedWait::ProcessSyncs,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DroppedWait::CopyWaitsF => "copy-waits-f",
            DroppedWait::CopyWaitsG => "copy-waits-g",
            DroppedWait::FWaitsCopy => "f-waits-copy",
            DroppedWait::FWaitsH => "f-waits-h",
            DroppedWait::GWaitsCopy => "g-waits-copy",
            DroppedWait::GWaitsH => "g-waits-h",
            DroppedWait::HWaitsF => "h-waits-f",
            DroppedWait::HWaitsG => "h-waits-g",
            DroppedWait::HWaitsCopyOut => "h-waits-copy-out",
            DroppedWait::CopyOutWaitsH => "copy-out-waits-h",
            DroppedWait::ProcessSyncs => "process-syncs",
        }
    }
}

impl std::str::FromStr for DroppedWait {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DroppedWait::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = DroppedWait::ALL.iter().map(|w| w.name()).collect();
                crate::invalid(
                    "demo",
                    format!("unknown wait '{s}': expected one of {}", names.join(", ")),
                )
            })
    }
}

/// How one run goes.
pub(crate) struct RunOptions<'a> {
    pub batches: i64,
    pub variant: Variant,
    /// Host output batches (variant HostRing).
    pub host_slots: usize,
    pub drop: Option<DroppedWait>,
    pub spans: Option<&'a HostSpans>,
    pub progress: Option<&'a (dyn Fn(i64) + Sync)>,
}

/// What process_data saw.
#[derive(Debug, Default)]
pub(crate) struct Verification {
    pub matched: i64,
    pub wrong: Vec<i64>,
    pub missing: i64,
    pub duplicated: i64,
    /// Batch latencies (copy-in issued -> process_data returned) in microseconds, sorted; only
    /// of batches whose copy-in the engine reported ([`Checker::issued`]).
    pub latencies_us: Vec<f64>,
}

impl Verification {
    /// The `q` quantile (0..=1) of the batch latencies, if any were measured.
    pub fn latency_us(&self, q: f64) -> Option<f64> {
        let n = self.latencies_us.len();
        (n > 0).then(|| self.latencies_us[((n - 1) as f64 * q).round() as usize])
    }
}

/// process_data's bookkeeping: which seqs arrived, and which matched the reference.
pub(crate) struct Checker {
    seen: Mutex<Vec<u8>>,
    matched: AtomicI64,
    wrong: Mutex<Vec<i64>>,
    /// Per seq: nanoseconds since `t0` when its copy-in was issued (`u64::MAX`: not yet), and
    /// from then to process_data's return.
    issued: Vec<AtomicU64>,
    latency: Vec<AtomicU64>,
    t0: Instant,
}

impl Checker {
    pub(crate) fn new(batches: i64) -> Self {
        Checker {
            seen: Mutex::new(vec![0; batches as usize]),
            matched: AtomicI64::new(0),
            wrong: Mutex::default(),
            issued: (0..batches).map(|_| AtomicU64::new(u64::MAX)).collect(),
            latency: (0..batches).map(|_| AtomicU64::new(u64::MAX)).collect(),
            t0: Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// The engine is about to issue seq's copy-in (latency starts here).
    pub(crate) fn issued(&self, seq: i64) {
        if let Some(t) = self.issued.get(seq as usize) {
            t.store(self.now_ns(), Ordering::Relaxed);
        }
    }

    /// process_data: check host output batch `hout`, which should hold seq's result.
    pub(crate) fn process<D: Device>(&self, dev: &D, hout: usize, seq: i64) {
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen[seq as usize] = seen[seq as usize].saturating_add(1);
        }
        if dev.check_output(hout, seq) {
            self.matched.fetch_add(1, Ordering::Relaxed);
        } else {
            self.wrong
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(seq);
        }
        let issued = self.issued[seq as usize].load(Ordering::Relaxed);
        if issued != u64::MAX {
            self.latency[seq as usize]
                .store(self.now_ns().saturating_sub(issued), Ordering::Relaxed);
        }
    }

    pub(crate) fn finish(self) -> Verification {
        let seen = self.seen.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut wrong = self.wrong.into_inner().unwrap_or_else(|e| e.into_inner());
        wrong.sort_unstable();
        let mut latencies_us: Vec<f64> = self
            .latency
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .filter(|&l| l != u64::MAX)
            .map(|l| l as f64 / 1e3)
            .collect();
        latencies_us.sort_by(f64::total_cmp);
        Verification {
            matched: self.matched.load(Ordering::Relaxed),
            wrong,
            missing: seen.iter().filter(|&&c| c == 0).count() as i64,
            duplicated: seen.iter().filter(|&&c| c > 1).count() as i64,
            latencies_us,
        }
    }
}

/// The five streams.
pub(crate) struct Streams<D: Device> {
    pub h2g: Stream<D>,
    pub f: Stream<D>,
    pub g: Stream<D>,
    pub h: Stream<D>,
    pub g2h: Stream<D>,
}

impl<D: Device> Streams<D> {
    pub(crate) fn new(dev: &D) -> Result<Self> {
        Ok(Streams {
            h2g: dev.backend().new_stream("s_h2g")?,
            f: dev.backend().new_stream("s_f")?,
            g: dev.backend().new_stream("s_g")?,
            h: dev.backend().new_stream("s_h")?,
            g2h: dev.backend().new_stream("s_g2h")?,
        })
    }

    pub(crate) fn sync_all(&self, dev: &D) -> Result<()> {
        for s in [&self.h2g, &self.f, &self.g, &self.h, &self.g2h] {
            dev.backend().synchronize_stream(s)?;
        }
        Ok(())
    }
}

type Ring<D> = EventRingbuf<<D as Device>::B>;

/// The seed's five rings (plus a counter ring per variant).
struct Rings<D: Device> {
    h2g: Ring<D>,
    f: Ring<D>,
    g: Ring<D>,
    h: Ring<D>,
    g2h: Ring<D>,
    /// KeepInput: the release thread counts host input batches released (no events).
    released: Ring<D>,
    /// HostRing: the processing thread counts host output batches processed (no events).
    processed: Ring<D>,
}

impl<D: Device> Rings<D> {
    fn new(dev: &D, opt: &RunOptions<'_>) -> Result<Self> {
        let l = dev.layout();
        let b = dev.backend();
        // One consumer fewer on the ring whose wait a test dropped.
        let n = |base: u32, waits: &[DroppedWait]| {
            base - waits.iter().any(|w| Some(*w) == opt.drop) as u32
        };
        let keep_input = opt.variant == Variant::KeepInput;
        let host_ring = opt.variant == Variant::HostRing;
        Ok(Rings {
            // h2g: produced by the h2g copy (stream s_h2g, thread h2g). Consumed by f and g on
            // the same thread right after it (lag 0), so one entry is ever outstanding:
            // nconsumers = 2, max_size = 1. KeepInput adds the release thread, which
            // synchronizes on it from another thread: nconsumers = 3, a blocking record, and
            // max_size = the host input buffers that link the two threads (npatterns).
            h2g: EventRingbuf::new(
                b,
                "h2g",
                n(2, &[DroppedWait::FWaitsCopy, DroppedWait::GWaitsCopy]) + keep_input as u32,
                if keep_input { l.npatterns } else { 1 },
            )?,
            // f: produced by f (s_f, thread h2g). Consumed by the h2g copy of s + nin (same
            // thread, earlier in the loop: lag nin) and by h at s (same thread, later, lag 0):
            // nconsumers = 2; the copy's lag keeps nin entries outstanding: max_size = nin.
            f: EventRingbuf::new(
                b,
                "f",
                n(2, &[DroppedWait::CopyWaitsF, DroppedWait::HWaitsF]),
                l.nin,
            )?,
            // g: the same story as f, with g's own stream.
            g: EventRingbuf::new(
                b,
                "g",
                n(2, &[DroppedWait::CopyWaitsG, DroppedWait::HWaitsG]),
                l.nin,
            )?,
            // h: produced by h (s_h, thread h2g). Consumed by f at lag nx and g at lag ny (same
            // thread, earlier in the loop: max_size >= max(nx, ny) or the thread deadlocks on
            // itself) and by the g2h copy at lag 0 on the other thread (no minimum; nout slots
            // of `out` link the threads, so nout entries of slack): nconsumers = 3,
            // max_size = max(max(nx, ny), nout), record blocking.
            h: EventRingbuf::new(
                b,
                "h",
                n(
                    3,
                    &[
                        DroppedWait::FWaitsH,
                        DroppedWait::GWaitsH,
                        DroppedWait::CopyOutWaitsH,
                    ],
                ),
                l.nx.max(l.ny).max(l.nout),
            )?,
            // g2h: produced by the g2h copy (s_g2h, thread g2h). Consumed by h at lag nout on
            // the other thread (slack nout) and by process_data's synchronize at lag 0: on the
            // same thread (Seed, KeepInput), or on the processing thread (HostRing, whose
            // host_slots output batches add their slack): nconsumers = 2,
            // max_size = nout (HostRing: max(nout, host_slots)), record blocking.
            g2h: EventRingbuf::new(
                b,
                "g2h",
                n(2, &[DroppedWait::HWaitsCopyOut, DroppedWait::ProcessSyncs]),
                if host_ring {
                    l.nout.max(opt.host_slots)
                } else {
                    l.nout
                },
            )?,
            // Counters (nconsumers = 0: no events, never full): waited on with
            // synchronize_with_producer.
            released: EventRingbuf::new(b, "released", 0, 1)?,
            processed: EventRingbuf::new(b, "processed", 0, 1)?,
        })
    }

    fn all(&self) -> [&Ring<D>; 7] {
        [
            &self.h2g,
            &self.f,
            &self.g,
            &self.h,
            &self.g2h,
            &self.released,
            &self.processed,
        ]
    }

    fn stop_all(&self, reason: &str) {
        for r in self.all() {
            r.stop(reason);
        }
    }
}

/// get_data's host input buffers: seq `s` uses buffer `s % npatterns`, which is free again once
/// the copy out of it for seq `s - npatterns` has completed; an event per buffer says when.
pub(crate) struct InputPool<B: Backend> {
    copied: Vec<B::Event>,
}

impl<B: Backend> InputPool<B> {
    pub(crate) fn new<D: Device<B = B>>(dev: &D) -> Result<Self> {
        let copied = (0..dev.layout().npatterns)
            .map(|_| dev.backend().create_event(Default::default()))
            .collect::<Result<_>>()?;
        Ok(InputPool { copied })
    }

    fn at(&self, s: i64) -> &B::Event {
        &self.copied[(s % self.copied.len() as i64) as usize]
    }

    /// Block until the host input buffer of `s` may be rewritten.
    pub(crate) fn wait_free<D: Device<B = B>>(&self, dev: &D, s: i64) -> Result<()> {
        if s >= self.copied.len() as i64 {
            dev.backend().synchronize(self.at(s))?;
        }
        Ok(())
    }

    /// The copy out of the host input buffer of `s` has just been enqueued on `stream`.
    pub(crate) fn copy_enqueued<D: Device<B = B>>(
        &self,
        dev: &D,
        stream: &B::Stream,
        s: i64,
    ) -> Result<()> {
        dev.backend().record(self.at(s), stream)
    }
}

/// Time `f` as a host span when tracing.
fn timed<T>(
    spans: Option<&HostSpans>,
    lane: &str,
    label: &str,
    seq: i64,
    f: impl FnOnce() -> T,
) -> T {
    match spans {
        Some(s) => s.time(lane, label, seq, f),
        None => f(),
    }
}

/// Launch `f` between trace marks on `s` when tracing.
pub(crate) fn marked<D: Device>(
    dev: &D,
    tracing: bool,
    s: &Stream<D>,
    lane: &'static str,
    label: &'static str,
    seq: i64,
    f: impl FnOnce() -> Result<()>,
) -> Result<()> {
    if tracing {
        dev.mark(s, lane, label, seq, true)?;
    }
    f()?;
    if tracing {
        dev.mark(s, lane, label, seq, false)?;
    }
    Ok(())
}

/// Run the seed's pipeline for `opt.batches` batches; returns the wall time and what
/// process_data saw.
pub(crate) fn run<D: Device>(dev: &D, opt: &RunOptions<'_>) -> Result<(Duration, Verification)> {
    if opt.variant == Variant::Pool {
        return Err(crate::invalid(
            "demo",
            "the pool variant has its own pipeline (pool_pipeline::run)",
        ));
    }
    let streams = Streams::new(dev)?;
    let rings = Rings::<D>::new(dev, opt)?;
    let checker = Checker::new(opt.batches);
    let start = Instant::now();
    let (streams_ref, checker_ref) = (&streams, &checker);
    let results: Vec<(&str, Result<()>)> =
        std::thread::scope(|scope| {
            let (rings, streams, checker) = (&rings, streams_ref, checker_ref);
            let guarded = move |name: &'static str, body: &(dyn Fn() -> Result<()> + Sync)| {
                // A panic is an error too: the other threads must be stopped, not left blocked.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
                    .unwrap_or_else(|p| {
                        Err(crate::invalid(
                            "demo",
                            format!("thread {name} panicked: {}", crate::panic_message(&*p)),
                        ))
                    });
                if let Err(e) = &r {
                    rings.stop_all(&format!("thread {name} failed: {e}"));
                }
                (name, r)
            };
            let mut handles = vec![scope
                .spawn(move || guarded("h2g", &|| h2g_thread(dev, streams, rings, checker, opt)))];
            match opt.variant {
                // (Pool never gets here: see the check above.)
                Variant::Seed | Variant::KeepInput | Variant::Pool => {
                    handles.push(scope.spawn(move || {
                        guarded("g2h", &|| g2h_thread(dev, streams, rings, checker, opt))
                    }));
                }
                Variant::HostRing => {
                    handles.push(scope.spawn(move || {
                        guarded("g2h-launch", &|| {
                            g2h_launch_thread(dev, streams, rings, opt)
                        })
                    }));
                    handles.push(scope.spawn(move || {
                        guarded("g2h-process", &|| {
                            g2h_process_thread(dev, streams, rings, checker, opt)
                        })
                    }));
                }
            }
            if opt.variant == Variant::KeepInput {
                handles.push(scope.spawn(move || {
                    guarded("release", &|| release_thread(dev, streams, rings, opt))
                }));
            }
            handles
                .into_iter()
                .map(|h| h.join().expect("pipeline thread panicked"))
                .collect()
        });
    let synced = streams.sync_all(dev);
    let wall = start.elapsed();
    first_error(results)?;
    synced?;
    Ok((wall, checker.finish()))
}

/// The first real error among the threads' results (a `Stopped` only if nothing else failed).
pub(crate) fn first_error(results: Vec<(&str, Result<()>)>) -> Result<()> {
    let mut stopped = None;
    for (_, r) in results {
        match r {
            Err(e) if !e.is_stopped() => return Err(e),
            Err(e) => stopped = stopped.or(Some(e)),
            Ok(()) => {}
        }
    }
    stopped.map_or(Ok(()), Err)
}

fn h2g_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    checker: &Checker,
    opt: &RunOptions<'_>,
) -> Result<()> {
    let l = *dev.layout();
    let (nin, nx, ny, nout, np) = (
        l.nin as i64,
        l.nx as i64,
        l.ny as i64,
        l.nout as i64,
        l.npatterns as i64,
    );
    let keep = |w: DroppedWait| opt.drop != Some(w);
    let tracing = opt.spans.is_some();
    let lane = "thread h2g";
    // Seed / HostRing: an event per host input buffer says when its copy is done.
    let pool = match opt.variant {
        Variant::KeepInput => None,
        _ => Some(InputPool::new(dev)?),
    };
    for s in 0..opt.batches {
        dev.chaos_pause();
        let hin = (s % np) as usize;
        // get_data: the host batch for s.
        match &pool {
            None => timed(opt.spans, lane, "get_data (wait release)", s, || {
                r.released.synchronize_with_producer(s - np)
            })?,
            Some(pool) => timed(opt.spans, lane, "get_data (wait copy)", s, || {
                pool.wait_free(dev, s)
            })?,
        }
        dev.fill_input(s);

        // h2g copy: in[s % nin] is free once f and g have finished s - nin.
        if keep(DroppedWait::CopyWaitsF) {
            r.f.wait(&st.h2g, s - nin, Blocking::No)?;
        }
        if keep(DroppedWait::CopyWaitsG) {
            r.g.wait(&st.h2g, s - nin, Blocking::No)?;
        }
        checker.issued(s);
        marked(dev, tracing, &st.h2g, "s_h2g", "copy in", s, || {
            dev.copy_in(&st.h2g, hin, (s % nin) as usize)
        })?;
        // Blocking only in KeepInput, where the release thread consumes it from another thread.
        let blocking = opt.variant == Variant::KeepInput;
        timed(opt.spans, lane, "record h2g", s, || {
            r.h2g.record(&st.h2g, s, blocking)
        })?;
        if let Some(pool) = &pool {
            pool.copy_enqueued(dev, &st.h2g, s)?;
        }
        dev.chaos_pause();

        // f: source in[s] (the copy), destination x[s % nx] (free once h finished s - nx).
        if keep(DroppedWait::FWaitsCopy) {
            r.h2g.wait(&st.f, s, Blocking::No)?;
        }
        if keep(DroppedWait::FWaitsH) {
            r.h.wait(&st.f, s - nx, Blocking::No)?;
        }
        marked(dev, tracing, &st.f, "s_f", "f", s, || {
            dev.launch_f(&st.f, (s % nin) as usize, (s % nx) as usize)
        })?;
        r.f.record(&st.f, s, Blocking::No)?;

        // g: the same, into y.
        if keep(DroppedWait::GWaitsCopy) {
            r.h2g.wait(&st.g, s, Blocking::No)?;
        }
        if keep(DroppedWait::GWaitsH) {
            r.h.wait(&st.g, s - ny, Blocking::No)?;
        }
        marked(dev, tracing, &st.g, "s_g", "g", s, || {
            dev.launch_g(&st.g, (s % nin) as usize, (s % ny) as usize)
        })?;
        r.g.record(&st.g, s, Blocking::No)?;
        dev.chaos_pause();

        // h: sources f(s), g(s); destination out[s % nout], free once the g2h copy of
        // s - nout has finished. That copy comes from the other thread: blocking.
        if keep(DroppedWait::HWaitsF) {
            r.f.wait(&st.h, s, Blocking::No)?;
        }
        if keep(DroppedWait::HWaitsG) {
            r.g.wait(&st.h, s, Blocking::No)?;
        }
        if keep(DroppedWait::HWaitsCopyOut) {
            timed(opt.spans, lane, "wait g2h", s, || {
                r.g2h.wait(&st.h, s - nout, Blocking::Yes)
            })?;
        }
        marked(dev, tracing, &st.h, "s_h", "h", s, || {
            dev.launch_h(
                &st.h,
                (s % nx) as usize,
                (s % ny) as usize,
                (s % nout) as usize,
            )
        })?;
        // Consumed on the other thread too: blocking.
        timed(opt.spans, lane, "record h", s, || {
            r.h.record(&st.h, s, Blocking::Yes)
        })?;
    }
    Ok(())
}

/// The g2h copy of seq `s` into host output batch `hout`: it waits for h (produced on the
/// other thread: blocking), copies `out[s % nout]`, and records the g2h ring (consumed on the
/// other thread too: blocking).
fn copy_out<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    opt: &RunOptions<'_>,
    lane: &str,
    s: i64,
    hout: usize,
) -> Result<()> {
    let nout = dev.layout().nout as i64;
    if opt.drop != Some(DroppedWait::CopyOutWaitsH) {
        timed(opt.spans, lane, "wait h", s, || {
            r.h.wait(&st.g2h, s, Blocking::Yes)
        })?;
    }
    marked(
        dev,
        opt.spans.is_some(),
        &st.g2h,
        "s_g2h",
        "copy out",
        s,
        || dev.copy_out(&st.g2h, (s % nout) as usize, hout),
    )?;
    timed(opt.spans, lane, "record g2h", s, || {
        r.g2h.record(&st.g2h, s, Blocking::Yes)
    })
}

fn g2h_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    checker: &Checker,
    opt: &RunOptions<'_>,
) -> Result<()> {
    let lane = "thread g2h";
    for s in 0..opt.batches {
        dev.chaos_pause();
        copy_out(dev, st, r, opt, lane, s, 0)?;
        // Produced just above on this thread: non-blocking.
        if opt.drop != Some(DroppedWait::ProcessSyncs) {
            timed(opt.spans, lane, "synchronize g2h", s, || {
                r.g2h.synchronize(s, Blocking::No)
            })?;
        }
        timed(opt.spans, lane, "process_data", s, || {
            checker.process(dev, 0, s)
        });
        if let Some(p) = opt.progress {
            p(s + 1);
        }
    }
    Ok(())
}

/// KeepInput: release each host input batch once its copy has finished.
fn release_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    opt: &RunOptions<'_>,
) -> Result<()> {
    for s in 0..opt.batches {
        dev.chaos_pause();
        timed(opt.spans, "thread release", "synchronize h2g", s, || {
            r.h2g.synchronize(s, Blocking::Yes)
        })?;
        // Counts releases; h2g's get_data waits on it with synchronize_with_producer.
        r.released.record(&st.h2g, s, Blocking::No)?;
    }
    Ok(())
}

/// HostRing: launch each g2h copy into a free host output batch.
fn g2h_launch_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    opt: &RunOptions<'_>,
) -> Result<()> {
    let k = opt.host_slots as i64;
    let lane = "thread g2h-launch";
    for s in 0..opt.batches {
        dev.chaos_pause();
        // Host batch s % k is free once the processing thread has finished s - k.
        timed(opt.spans, lane, "wait free host slot", s, || {
            r.processed.synchronize_with_producer(s - k)
        })?;
        copy_out(dev, st, r, opt, lane, s, (s % k) as usize)?;
    }
    Ok(())
}

/// HostRing: synchronize on each g2h copy and process it.
fn g2h_process_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    checker: &Checker,
    opt: &RunOptions<'_>,
) -> Result<()> {
    let k = opt.host_slots as i64;
    let lane = "thread g2h-process";
    for s in 0..opt.batches {
        dev.chaos_pause();
        // Produced on the launch thread: blocking.
        if opt.drop != Some(DroppedWait::ProcessSyncs) {
            timed(opt.spans, lane, "synchronize g2h", s, || {
                r.g2h.synchronize(s, Blocking::Yes)
            })?;
        } else {
            r.g2h.synchronize_with_producer(s)?;
        }
        timed(opt.spans, lane, "process_data", s, || {
            checker.process(dev, (s % k) as usize, s)
        });
        r.processed.record(&st.g2h, s, Blocking::No)?;
        if let Some(p) = opt.progress {
            p(s + 1);
        }
    }
    Ok(())
}
