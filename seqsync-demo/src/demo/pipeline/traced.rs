//! The layer between the seed's loops and the rings and kernels they call: tracing (host spans,
//! device marks) when `--trace` is on, and the test-only switch that drops one named wait.
//!
//! With tracing off and no dropped wait every call here is the plain call behind one branch:
//! no allocation and no lock on the hot path.

use std::ptr;

use super::{Ring, RunOptions, Streams};
use crate::demo::device::{Device, Layout, Stream};
use crate::demo::trace::HostSpans;
use seqsync::{Blocking, Result};

/// One host thread's view of the run: its trace lane and the wait a test dropped.
pub(super) struct Tracer<'a, D: Device> {
    spans: Option<&'a HostSpans>,
    lane: &'static str,
    /// The dropped wait: the ring's name and what it skips there.
    dropped: Option<(&'static str, Skip<'a, D>)>,
}

/// What a ring wrapper skips.
enum Skip<'a, D: Device> {
    /// Nothing: every call goes through.
    Nothing,
    /// `wait` with this consumer stream.
    Wait(&'a Stream<D>),
    /// `synchronize` (which then only waits for the record, consuming nothing).
    Synchronize,
}

impl<D: Device> Clone for Skip<'_, D> {
    fn clone(&self) -> Self {
        match self {
            Skip::Nothing => Skip::Nothing,
            Skip::Wait(s) => Skip::Wait(*s),
            Skip::Synchronize => Skip::Synchronize,
        }
    }
}

impl<'a, D: Device> Tracer<'a, D> {
    pub(super) fn new(opt: &RunOptions<'a>, st: &'a Streams<D>, lane: &'static str) -> Self {
        let dropped = opt.drop.map(|w| {
            let (ring, consumer) = w.site();
            let skip = match st.named(consumer) {
                Some(stream) => Skip::Wait(stream),
                None => Skip::Synchronize,
            };
            (ring, skip)
        });
        Tracer {
            spans: opt.spans,
            lane,
            dropped,
        }
    }

    fn wrap(&self, ring: &'a Ring<D>, spans: Option<&'a HostSpans>) -> TracedRing<'a, D> {
        let skip = match &self.dropped {
            Some((name, skip)) if *name == ring.name() => skip.clone(),
            _ => Skip::Nothing,
        };
        TracedRing {
            ring,
            spans,
            lane: self.lane,
            skip,
        }
    }

    /// `ring` as this thread calls it: records, blocking waits and synchronizes become host
    /// spans ("record h", "wait g2h", ...) when tracing.
    pub(super) fn timed(&self, ring: &'a Ring<D>) -> TracedRing<'a, D> {
        self.wrap(ring, self.spans)
    }

    /// `ring` with the dropped-wait switch only (calls that never block: no spans).
    pub(super) fn untimed(&self, ring: &'a Ring<D>) -> TracedRing<'a, D> {
        self.wrap(ring, None)
    }

    /// Run `f`, as a host span `label` when tracing.
    pub(super) fn time<T>(&self, label: &str, seq: i64, f: impl FnOnce() -> T) -> T {
        match self.spans {
            Some(s) => s.time(self.lane, label, seq, f),
            None => f(),
        }
    }
}

/// A ring as one thread calls it: the seed's `record` / `wait` / `synchronize`, traced when
/// tracing and skipping the test's dropped wait.
pub(super) struct TracedRing<'a, D: Device> {
    ring: &'a Ring<D>,
    spans: Option<&'a HostSpans>,
    lane: &'static str,
    skip: Skip<'a, D>,
}

impl<D: Device> TracedRing<'_, D> {
    fn timed<T>(&self, op: &str, seq: i64, f: impl FnOnce() -> T) -> T {
        match self.spans {
            Some(s) => s.time(self.lane, &format!("{op} {}", self.ring.name()), seq, f),
            None => f(),
        }
    }

    /// [`EventRingbuf::record`](seqsync::EventRingbuf::record).
    pub(super) fn record(
        &self,
        stream: &Stream<D>,
        seq: i64,
        blocking: impl Into<Blocking>,
    ) -> Result<()> {
        self.timed("record", seq, || self.ring.record(stream, seq, blocking))
    }

    /// [`EventRingbuf::wait`](seqsync::EventRingbuf::wait); a no-op if it is the dropped wait.
    pub(super) fn wait(
        &self,
        stream: &Stream<D>,
        seq: i64,
        blocking: impl Into<Blocking>,
    ) -> Result<()> {
        if let Skip::Wait(dropped) = self.skip {
            if ptr::eq(dropped, stream) {
                return Ok(());
            }
        }
        match blocking.into() {
            Blocking::Yes => self.timed("wait", seq, || self.ring.wait(stream, seq, Blocking::Yes)),
            Blocking::No => self.ring.wait(stream, seq, Blocking::No),
        }
    }

    /// [`EventRingbuf::synchronize`](seqsync::EventRingbuf::synchronize); if it is the dropped
    /// wait, only waits until `seq` is recorded (consuming nothing, not waiting for the event).
    pub(super) fn synchronize(&self, seq: i64, blocking: impl Into<Blocking>) -> Result<()> {
        if let Skip::Synchronize = self.skip {
            return self.ring.synchronize_with_producer(seq);
        }
        self.timed("synchronize", seq, || self.ring.synchronize(seq, blocking))
    }
}

/// The seed's kernel launches on the five streams, between trace marks when tracing.
pub(super) struct Kernels<'a, D: Device> {
    dev: &'a D,
    st: &'a Streams<D>,
    l: Layout,
    tracing: bool,
}

impl<'a, D: Device> Kernels<'a, D> {
    pub(super) fn new(dev: &'a D, st: &'a Streams<D>, opt: &RunOptions<'_>) -> Self {
        Kernels {
            dev,
            st,
            l: *dev.layout(),
            tracing: opt.spans.is_some(),
        }
    }

    fn slot(s: i64, n: usize) -> usize {
        (s % n as i64) as usize
    }

    /// The h2g copy of seq `s`: host input buffer `hin` into `in[s % nin]`.
    pub(super) fn copy_in(&self, s: i64, hin: usize) -> Result<()> {
        let (d, st) = (self.dev, &self.st.h2g);
        let i = Self::slot(s, self.l.nin);
        marked(d, self.tracing, st, "s_h2g", "copy in", s, || {
            d.copy_in(st, hin, i)
        })
    }

    /// f: `in[s % nin]` into `x[s % nx]`.
    pub(super) fn f(&self, s: i64) -> Result<()> {
        let (d, st) = (self.dev, &self.st.f);
        let (i, x) = (Self::slot(s, self.l.nin), Self::slot(s, self.l.nx));
        marked(d, self.tracing, st, "s_f", "f", s, || d.launch_f(st, i, x))
    }

    /// g: `in[s % nin]` into `y[s % ny]`.
    pub(super) fn g(&self, s: i64) -> Result<()> {
        let (d, st) = (self.dev, &self.st.g);
        let (i, y) = (Self::slot(s, self.l.nin), Self::slot(s, self.l.ny));
        marked(d, self.tracing, st, "s_g", "g", s, || d.launch_g(st, i, y))
    }

    /// h: `x[s % nx]` and `y[s % ny]` into `out[s % nout]`.
    pub(super) fn h(&self, s: i64) -> Result<()> {
        let (d, st) = (self.dev, &self.st.h);
        let (x, y) = (Self::slot(s, self.l.nx), Self::slot(s, self.l.ny));
        let out = Self::slot(s, self.l.nout);
        marked(d, self.tracing, st, "s_h", "h", s, || {
            d.launch_h(st, x, y, out)
        })
    }

    /// The g2h copy of seq `s`: `out[s % nout]` into host output batch `hout`.
    pub(super) fn copy_out(&self, s: i64, hout: usize) -> Result<()> {
        let (d, st) = (self.dev, &self.st.g2h);
        let out = Self::slot(s, self.l.nout);
        marked(d, self.tracing, st, "s_g2h", "copy out", s, || {
            d.copy_out(st, out, hout)
        })
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
