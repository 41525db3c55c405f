//! What the pipeline is measured against, in the same run: each stage alone, a serialized
//! pipeline, and the same pipeline hand-rolled on raw events without a ring.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::device::Device;
use super::pipeline::{first_error, Checker, Streams, Verification};
use seqsync::backend::Backend;
use seqsync::Result;

/// One stage run alone, back to back on one stream.
#[derive(Debug, Clone, Serialize)]
pub struct StageTiming {
    /// "copy in", "f", "g", "h", "copy out", or "copy in + copy out together" (both copies at
    /// once on two streams, which share the link).
    pub stage: &'static str,
    /// Seconds per batch.
    pub seconds_per_batch: f64,
}

/// Time each stage alone for `batches` batches (after one warm-up round).
pub(crate) fn stages<D: Device>(dev: &D, batches: i64) -> Result<Vec<StageTiming>> {
    let l = *dev.layout();
    let s = dev.backend().new_stream("stage")?;
    let (nin, nx, ny, nout, np) = l.lags();
    let idx = |s: i64, n: i64| (s % n) as usize;
    let mut out = Vec::new();
    type Launch<'a, D> = Box<dyn Fn(&super::device::Stream<D>, i64) -> Result<()> + 'a>;
    let runs: Vec<(&'static str, Launch<'_, D>)> = vec![
        (
            "copy in",
            Box::new(|st, i| dev.copy_in(st, idx(i, np), idx(i, nin))),
        ),
        (
            "f",
            Box::new(|st, i| dev.launch_f(st, idx(i, nin), idx(i, nx))),
        ),
        (
            "g",
            Box::new(|st, i| dev.launch_g(st, idx(i, nin), idx(i, ny))),
        ),
        (
            "h",
            Box::new(|st, i| dev.launch_h(st, idx(i, nx), idx(i, ny), idx(i, nout))),
        ),
        (
            "copy out",
            Box::new(|st, i| dev.copy_out(st, idx(i, nout), 0)),
        ),
    ];
    // The two copies together, on two streams: they share the PCIe link and host memory, so
    // running both at once is slower than either alone.
    let s2 = dev.backend().new_stream("stage2")?;
    dev.copy_in(&s, 0, 0)?;
    dev.copy_out(&s2, 0, 0)?;
    dev.backend().synchronize_stream(&s)?;
    dev.backend().synchronize_stream(&s2)?;
    let t = Instant::now();
    for i in 0..batches {
        dev.copy_in(&s, idx(i, np), idx(i, nin))?;
        dev.copy_out(&s2, idx(i, nout), 0)?;
    }
    dev.backend().synchronize_stream(&s)?;
    dev.backend().synchronize_stream(&s2)?;
    let together = StageTiming {
        stage: "copy in + copy out together",
        seconds_per_batch: t.elapsed().as_secs_f64() / batches as f64,
    };
    for (stage, launch) in runs {
        launch(&s, 0)?;
        dev.backend().synchronize_stream(&s)?;
        let t = Instant::now();
        for i in 0..batches {
            launch(&s, i)?;
        }
        dev.backend().synchronize_stream(&s)?;
        out.push(StageTiming {
            stage,
            seconds_per_batch: t.elapsed().as_secs_f64() / batches as f64,
        });
    }
    out.push(together);
    Ok(out)
}

/// One stream, one thread, synchronize after every batch.
pub(crate) fn serialized<D: Device>(dev: &D, batches: i64) -> Result<(Duration, Verification)> {
    let l = *dev.layout();
    let s = dev.backend().new_stream("serial")?;
    let checker = Checker::new(batches);
    let t = Instant::now();
    for seq in 0..batches {
        dev.fill_input(seq);
        dev.copy_in(&s, (seq % l.npatterns as i64) as usize, 0)?;
        dev.launch_f(&s, 0, 0)?;
        dev.launch_g(&s, 0, 0)?;
        dev.launch_h(&s, 0, 0, 0)?;
        dev.copy_out(&s, 0, 0)?;
        dev.backend().synchronize_stream(&s)?;
        checker.process(dev, 0, seq);
    }
    Ok((t.elapsed(), checker.finish()))
}

/// A counter one thread advances and another waits on: what a hand-written pipeline uses to
/// pass "I recorded seq s" between threads.
/// `abort` ends every wait: set when the other thread failed.
struct Progress {
    value: AtomicI64,
    abort: AtomicBool,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Progress {
    fn new() -> Self {
        Progress {
            value: AtomicI64::new(0),
            abort: AtomicBool::new(false),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Everything below `v` is done.
    fn advance(&self, v: i64) {
        self.value.store(v, Ordering::SeqCst);
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }

    /// Wake every waiter for good: the other side failed.
    fn abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cv.notify_all();
    }

    /// Block until everything below `v` is done.
    fn wait_for(&self, v: i64) -> Result<()> {
        if self.value.load(Ordering::SeqCst) >= v {
            return Ok(());
        }
        let mut g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.value.load(Ordering::SeqCst) < v {
            if self.abort.load(Ordering::SeqCst) {
                return Err(crate::invalid(
                    "hand-rolled baseline",
                    "the other thread failed",
                ));
            }
            g = self.cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        Ok(())
    }
}

/// Run a hand-rolled thread body; if it fails or panics, abort every handshake.
fn abort_on_failure(progress: &[&Progress], body: impl FnOnce() -> Result<()>) -> Result<()> {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or_else(|p| {
        Err(crate::invalid(
            "hand-rolled baseline",
            format!("thread panicked: {}", crate::panic_message(&*p)),
        ))
    });
    if r.is_err() {
        progress.iter().for_each(|p| p.abort());
    }
    r
}

/// The seed's pipeline with raw events and hand-written cross-thread handshakes, no ring.
pub(crate) fn handrolled<D: Device>(dev: &D, batches: i64) -> Result<(Duration, Verification)> {
    let l = *dev.layout();
    let b = dev.backend();
    let (nin, nx, ny, nout, np) = l.lags();
    let nh = nx.max(ny).max(nout);
    let events = |n: i64| {
        (0..n)
            .map(|_| b.create_event(Default::default()))
            .collect::<Result<Vec<_>>>()
    };
    let (ev_h2g, ev_f, ev_g, ev_h, ev_g2h, ev_copied) = (
        events(1)?,
        events(nin)?,
        events(nin)?,
        events(nh)?,
        events(nout)?,
        events(np)?,
    );
    let st = Streams::new(dev)?;
    let h_recorded = Progress::new(); // h2g -> g2h: h recorded below this seq
    let h_consumed = Progress::new(); // g2h -> h2g: g2h waited on h below this seq
    let g2h_recorded = Progress::new(); // g2h -> h2g: g2h copy recorded below this seq
    let checker = Checker::new(batches);
    let at = |s: i64, n: i64| (s % n) as usize;
    let t = Instant::now();
    let all = [&h_recorded, &h_consumed, &g2h_recorded];
    let results = std::thread::scope(|scope| {
        let h2g = scope.spawn(|| {
            abort_on_failure(&all, || {
                for s in 0..batches {
                    if s >= np {
                        b.synchronize(&ev_copied[at(s, np)])?;
                    }
                    dev.fill_input(s);
                    if s >= nin {
                        b.wait(&st.h2g, &ev_f[at(s - nin, nin)])?;
                        b.wait(&st.h2g, &ev_g[at(s - nin, nin)])?;
                    }
                    dev.copy_in(&st.h2g, at(s, np), at(s, nin))?;
                    b.record(&ev_h2g[0], &st.h2g)?;
                    b.record(&ev_copied[at(s, np)], &st.h2g)?;
                    b.wait(&st.f, &ev_h2g[0])?;
                    if s >= nx {
                        b.wait(&st.f, &ev_h[at(s - nx, nh)])?;
                    }
                    dev.launch_f(&st.f, at(s, nin), at(s, nx))?;
                    b.record(&ev_f[at(s, nin)], &st.f)?;
                    b.wait(&st.g, &ev_h2g[0])?;
                    if s >= ny {
                        b.wait(&st.g, &ev_h[at(s - ny, nh)])?;
                    }
                    dev.launch_g(&st.g, at(s, nin), at(s, ny))?;
                    b.record(&ev_g[at(s, nin)], &st.g)?;
                    b.wait(&st.h, &ev_f[at(s, nin)])?;
                    b.wait(&st.h, &ev_g[at(s, nin)])?;
                    if s >= nout {
                        g2h_recorded.wait_for(s - nout + 1)?;
                        b.wait(&st.h, &ev_g2h[at(s - nout, nout)])?;
                    }
                    dev.launch_h(&st.h, at(s, nx), at(s, ny), at(s, nout))?;
                    // ev_h[s % nh] is free once g2h has waited on seq s - nh.
                    h_consumed.wait_for(s - nh + 1)?;
                    b.record(&ev_h[at(s, nh)], &st.h)?;
                    h_recorded.advance(s + 1);
                }
                Ok(())
            })
        });
        let g2h = scope.spawn(|| {
            abort_on_failure(&all, || {
                for s in 0..batches {
                    h_recorded.wait_for(s + 1)?;
                    b.wait(&st.g2h, &ev_h[at(s, nh)])?;
                    h_consumed.advance(s + 1);
                    dev.copy_out(&st.g2h, at(s, nout), 0)?;
                    b.record(&ev_g2h[at(s, nout)], &st.g2h)?;
                    g2h_recorded.advance(s + 1);
                    b.synchronize(&ev_g2h[at(s, nout)])?;
                    checker.process(dev, 0, s);
                }
                Ok(())
            })
        });
        // Both bodies catch their own panics, so joining cannot fail.
        vec![
            ("h2g", h2g.join().unwrap_or(Ok(()))),
            ("g2h", g2h.join().unwrap_or(Ok(()))),
        ]
    });
    let synced = st.sync_all(dev);
    let wall = t.elapsed();
    first_error(results)?;
    synced?;
    Ok((wall, checker.finish()))
}
