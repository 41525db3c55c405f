//! The seed's pipeline, written by hand on five [`EventRingbuf`]s, as in the seed document.
//!
//! It may use: seqsync's public API (rings, the [`Backend`](seqsync::backend::Backend) trait) and
//! the demo's device layer (`demo::device`: kernels, layout, streams) and traces.
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

//!
//! The loops read like the seed's: tracing and the test-only dropped wait live in [`traced`]
//! (wrappers around the rings and kernel launches), the variants' extra threads in
//! [`variants`].

mod batch_phases;
mod checker;
mod options;
mod process_workers;
mod traced;
mod variants;

use std::time::{Duration, Instant};

use super::device::{Device, Stream};
use super::threads::{run_threads, Body};
use super::watchdog::Watch;
use seqsync::backend::Backend;
use seqsync::timeline::Timeline;
use seqsync::{Blocking, Error, EventRingbuf, Result};
use traced::{Kernels, Tracer};
use variants::{g2h_launch_thread, g2h_process_thread, release_thread};

pub use batch_phases::PhaseSummary;
pub(crate) use checker::{Checker, Verification};
pub(crate) use options::RunOptions;
pub use options::{DroppedWait, Variant};
pub(crate) use process_workers::{auto_threads as auto_process_threads, ProcessWorkers};
pub(crate) use traced::marked;

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

    /// The stream [`new`](Self::new) named `name`.
    fn named(&self, name: &str) -> Option<&Stream<D>> {
        [&self.h2g, &self.f, &self.g, &self.h, &self.g2h]
            .into_iter()
            .zip(["s_h2g", "s_f", "s_g", "s_h", "s_g2h"])
            .find_map(|(s, n)| (n == name).then_some(s))
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
    let checker_owned = Checker::paced(opt.batches, opt.rate);
    let start = Instant::now();
    let (rings, streams, checker) = (&rings, &streams, &checker_owned);
    // The run's threads besides h2g; the pool variant never gets here (see the check above).
    let mut others: Vec<Body<'_>> = Vec::new();
    match opt.variant {
        Variant::Seed | Variant::KeepInput | Variant::Pool => others.push((
            "g2h",
            Box::new(move || g2h_thread(dev, streams, rings, checker, opt)),
        )),
        Variant::HostRing => {
            others.push((
                "g2h-launch",
                Box::new(move || g2h_launch_thread(dev, streams, rings, opt)),
            ));
            others.push((
                "g2h-process",
                Box::new(move || g2h_process_thread(dev, streams, rings, checker, opt)),
            ));
        }
    }
    if opt.variant == Variant::KeepInput {
        others.push((
            "release",
            Box::new(move || release_thread(dev, streams, rings, opt)),
        ));
    }
    let stop = move |why: String| {
        checker.stop();
        rings.stop_all(&why);
    };
    let (results, _) = run_threads(
        move || (h2g_thread(dev, streams, rings, checker, opt), ()),
        others,
        &stop,
        &Watch::run(checker, dev.layout()),
    );
    let synced = streams.sync_all(dev);
    let wall = start.elapsed();
    first_error(results)?;
    synced?;
    Ok((wall, checker_owned.finish()))
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

/// A failed wait on one of the run's timelines, as the stop it is (it fails only through
/// `stop`, after another thread's own error).
pub(crate) fn stopped(name: &str, e: Error) -> Error {
    Error::Stopped {
        ring: name.into(),
        reason: e.to_string().into(),
        cause: Some(std::sync::Arc::new(e)),
    }
}

/// An error of a call on `timeline`: a stop if the run's stop failed the timeline.
pub(crate) fn failed_by_stop<B: Backend>(timeline: &Timeline<B>, e: Error) -> Error {
    if timeline.is_failed() {
        stopped(timeline.name(), e)
    } else {
        e
    }
}

fn h2g_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    checker: &Checker,
    opt: &RunOptions<'_>,
) -> Result<()> {
    let l = *dev.layout();
    let (nin, nx, ny, nout, np) = l.lags();
    let t = Tracer::new(opt, st, "thread h2g");
    let launch = Kernels::new(dev, st, opt);
    // f and g are only waited on without blocking and recorded here: no host spans.
    let (evrb_f, evrb_g) = (t.untimed(&r.f), t.untimed(&r.g));
    let (evrb_h2g, evrb_h, evrb_g2h) = (t.timed(&r.h2g), t.timed(&r.h), t.timed(&r.g2h));
    // Seed / HostRing: an event per host input buffer says when its copy is done.
    let pool = match opt.variant {
        Variant::KeepInput => None,
        _ => Some(InputPool::new(dev)?),
    };
    // Blocking only in KeepInput, where the release thread consumes h2g from another thread.
    let blocking_h2g = opt.variant == Variant::KeepInput;
    for s in 0..opt.batches {
        dev.chaos_pause();
        // get_data: the host batch for s.
        match &pool {
            None => t.time("get_data (wait release)", s, || {
                r.released.synchronize_with_producer(s - np)
            })?,
            Some(pool) => t.time("get_data (wait copy)", s, || pool.wait_free(dev, s))?,
        }
        dev.fill_input(s);

        // h2g copy: in[s % nin] is free once f and g have finished s - nin.
        evrb_f.wait(&st.h2g, s - nin, Blocking::No)?;
        evrb_g.wait(&st.h2g, s - nin, Blocking::No)?;
        checker.issued(s);
        launch.copy_in(s, (s % np) as usize)?;
        evrb_h2g.record(&st.h2g, s, blocking_h2g)?;
        if let Some(pool) = &pool {
            pool.copy_enqueued(dev, &st.h2g, s)?;
        }
        dev.chaos_pause();

        // f: source in[s] (the copy), destination x[s % nx] (free once h finished s - nx).
        evrb_h2g.wait(&st.f, s, Blocking::No)?;
        evrb_h.wait(&st.f, s - nx, Blocking::No)?;
        launch.f(s)?;
        evrb_f.record(&st.f, s, Blocking::No)?;

        // g: the same, into y.
        evrb_h2g.wait(&st.g, s, Blocking::No)?;
        evrb_h.wait(&st.g, s - ny, Blocking::No)?;
        launch.g(s)?;
        evrb_g.record(&st.g, s, Blocking::No)?;
        dev.chaos_pause();

        // h: sources f(s), g(s); destination out[s % nout], free once the g2h copy of
        // s - nout has finished. That copy comes from the other thread: blocking.
        evrb_f.wait(&st.h, s, Blocking::No)?;
        evrb_g.wait(&st.h, s, Blocking::No)?;
        evrb_g2h.wait(&st.h, s - nout, Blocking::Yes)?;
        launch.h(s)?;
        // Consumed on the other thread too: blocking.
        evrb_h.record(&st.h, s, Blocking::Yes)?;
    }
    Ok(())
}

fn g2h_thread<D: Device>(
    dev: &D,
    st: &Streams<D>,
    r: &Rings<D>,
    checker: &Checker,
    opt: &RunOptions<'_>,
) -> Result<()> {
    let t = Tracer::new(opt, st, "thread g2h");
    let launch = Kernels::new(dev, st, opt);
    let (evrb_h, evrb_g2h) = (t.timed(&r.h), t.timed(&r.g2h));
    for s in 0..opt.batches {
        dev.chaos_pause();
        // The g2h copy waits for h (produced on the other thread: blocking) and records g2h
        // (consumed on the other thread too: blocking).
        evrb_h.wait(&st.g2h, s, Blocking::Yes)?;
        launch.copy_out(s, 0)?;
        evrb_g2h.record(&st.g2h, s, Blocking::Yes)?;
        // Produced just above on this thread: non-blocking.
        evrb_g2h.synchronize(s, Blocking::No)?;
        t.time("process_data", s, || checker.process(dev, 0, s));
        if let Some(p) = opt.progress {
            p(s + 1);
        }
    }
    Ok(())
}
