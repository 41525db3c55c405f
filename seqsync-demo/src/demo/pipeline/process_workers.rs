//! process_data on several threads: batches land on the host in seq order (the g2h thread says
//! which, as their launches complete), any free worker checks the next one, and the batches
//! processed are reported on a timeline in seq order, as a single process_data thread would.
//!
//! Why: a check reads lines of a batch that a copy just wrote (at 64 and 256 KiB, before the
//! samples were taken in runs of whole lines, every line), and one thread doing that for every
//! batch was slower than the device (BENCHMARKS.md §13, runs F and O). Several threads read in
//! parallel; the slots stay ordered because `processed` (what the h2g thread waits on before
//! rewriting a slot) only passes a batch once it and every batch before it were checked.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::batch_phases::{BatchPhases, PhaseHistograms};
use super::{failed_by_stop, stopped, Checker};
use crate::demo::device::{Device, Layout};
use seqsync::backend::Backend;
use seqsync::timeline::Timeline;
use seqsync::{Error, Result};

/// Most process_data threads [`auto_threads`] picks where the check samples a batch (runs of
/// lines spread over it; the default): past four the check outran the H200's copies at every
/// size.
const MAX_AUTO_THREADS: usize = 4;

/// ... and where it reads every line of a batch (`--verify-samples 0`): one thread reads about
/// 7 GB/s of freshly written output on the lent machines (a check of every line of 64 KiB took
/// 9-11 µs at p50 beside the resident kernel), so four threads held the resident engine at
/// 64 KiB below the 31 GB/s the device could do, where six reached 0.85-0.87 of it in runs
/// the host did not stall (BENCHMARKS.md §13, run O).
const MAX_AUTO_THREADS_EVERY_LINE: usize = 6;

/// Threads the engine itself keeps busy besides process_data (h2g, g2h and, with the device
/// release, get_data).
const ENGINE_THREADS: usize = 3;

/// process_data threads when not told, for batches of `layout`: the cores left beside the
/// engine's own threads, at least one and at most [`MAX_AUTO_THREADS_EVERY_LINE`] where the
/// check reads every line of a batch, else [`MAX_AUTO_THREADS`].
pub(crate) fn auto_threads(layout: &Layout) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    threads_for(cores, layout)
}

fn threads_for(cores: usize, layout: &Layout) -> usize {
    let most = if layout.check_reads_every_line() {
        MAX_AUTO_THREADS_EVERY_LINE
    } else {
        MAX_AUTO_THREADS
    };
    cores.saturating_sub(ENGINE_THREADS).clamp(1, most)
}

/// process_data spread over worker threads, reporting in seq order.
pub(crate) struct ProcessWorkers<B: Backend> {
    /// Batches `..v` are on the host (their launches completed): signalled by the g2h thread
    /// in seq order, waited for by the workers.
    landed: Timeline<B>,
    /// The next seq a worker takes (taken in order, by whichever worker is free).
    next: AtomicI64,
    /// At `seq % len`: the newest seq processed there (`-1`: none). Written by the worker that
    /// processed it, read by whichever worker advances the frontier. `len` is the run's slots:
    /// seq + slots reuses seq's slot, so (with the h2g thread's waits before slot reuse) it
    /// cannot land, let alone be processed, before the frontier passed seq and the entry was
    /// read. Without those waits (`GraphEdge::GroupWaits` dropped, a test switch) the
    /// frontier may stop early; nothing waits for it then.
    done: Box<[AtomicI64]>,
    /// Batches processed in seq order so far. Its lock is held while `processed` is
    /// signalled, so that the signals go out in order.
    frontier: Mutex<i64>,
    batches: i64,
    /// Test switch ([`GraphEdge::ProcessedInOrder`](crate::demo::GraphEdge::ProcessedInOrder)
    /// dropped): report each batch as it is processed, whether or not those before it were.
    in_order: bool,
    /// Where each batch's latency went: stamped by the h2g and g2h threads and the workers.
    phases: BatchPhases,
    /// Workers that have started (their histograms made, about to take a batch).
    started: std::sync::atomic::AtomicUsize,
}

impl<B: Backend> ProcessWorkers<B> {
    /// Workers for a run of `batches` batches over `slots` slots on `backend`.
    pub(crate) fn new(backend: &B, batches: i64, slots: usize, in_order: bool) -> Result<Self> {
        Ok(ProcessWorkers {
            landed: Timeline::new(backend, "landed", 0)?,
            next: AtomicI64::new(0),
            done: (0..slots.max(1)).map(|_| AtomicI64::new(-1)).collect(),
            frontier: Mutex::new(0),
            batches,
            in_order,
            phases: BatchPhases::new(slots),
            started: Default::default(),
        })
    }

    /// The g2h thread: batches `from..upto` (the launch it saw complete at `now`) and every
    /// batch before them are on the host.
    pub(crate) fn landed(&self, from: i64, upto: i64, now: u64) -> Result<()> {
        self.phases.landed(from..upto, now);
        self.landed
            .signal(upto as u64)
            .map_err(|e| failed_by_stop(&self.landed, e))
    }

    /// Wait until `n` workers have started (false: `given_up` first).
    pub(crate) fn wait_started(&self, n: usize, given_up: impl Fn() -> bool) -> bool {
        crate::demo::poll::poll(|| self.started.load(Ordering::Acquire) >= n, given_up)
    }

    /// End the workers' waits (a thread failed): they return a stop.
    pub(crate) fn stop(&self, why: String) {
        self.landed.fail(Error::Cancelled(why));
    }

    /// Where the batches' latency goes: the h2g thread stamps its launches here
    /// ([`BatchPhases::launched`]); once the workers ended, the run's phases.
    pub(crate) fn phases(&self) -> &BatchPhases {
        &self.phases
    }

    /// One worker: take the next seq, wait for it to land, check it (host output slot
    /// `seq % slots`), and report it; until no seq is left. `processed` gets the number of
    /// batches processed in seq order, as does `progress`.
    pub(crate) fn work<D: Device<B = B>>(
        &self,
        dev: &D,
        checker: &Checker,
        processed: &Timeline<B>,
        progress: Option<&(dyn Fn(i64) + Sync)>,
    ) -> Result<()> {
        let landed = |seq: i64| {
            self.landed
                .wait(seq as u64 + 1, Duration::MAX)
                .map(|_| ())
                .map_err(|e| stopped("landed", e))
        };
        self.work_polling(dev, checker, processed, progress, &landed)
    }

    /// [`work`](Self::work), each batch's landing waited for by `landed(seq)` instead of the
    /// g2h thread's signal (the resident engine: the worker polls the kernel's done word, and
    /// stamps the landing itself with [`BatchPhases::landed`]).
    pub(crate) fn work_polling<D: Device<B = B>>(
        &self,
        dev: &D,
        checker: &Checker,
        processed: &Timeline<B>,
        progress: Option<&(dyn Fn(i64) + Sync)>,
        landed: &(dyn Fn(i64) -> Result<()> + Sync),
    ) -> Result<()> {
        let mut mine = PhaseHistograms::new();
        self.started.fetch_add(1, Ordering::Release);
        let mut checked = || -> Result<()> {
            let slots = self.done.len() as i64;
            while let Ok(seq) = self
                .next
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < self.batches).then_some(n + 1)
                })
            {
                landed(seq)?;
                dev.chaos_pause();
                let (issued, begin) = (checker.issued_ns(seq), checker.now_ns());
                checker.process(dev, (seq % slots) as usize, seq);
                self.phases
                    .checked(&mut mine, seq, issued, begin, checker.now_ns());
                self.done[(seq % slots) as usize].store(seq, Ordering::Release);
                self.report(seq, checker, processed, progress, &mut mine)?;
            }
            Ok(())
        };
        let r = checked();
        self.phases.merge(&mine);
        r
    }

    /// Advance the frontier past every processed batch (`seq` was just processed) and signal
    /// it; without `in_order`, past `seq` at once.
    fn report(
        &self,
        seq: i64,
        checker: &Checker,
        processed: &Timeline<B>,
        progress: Option<&(dyn Fn(i64) + Sync)>,
        mine: &mut PhaseHistograms,
    ) -> Result<()> {
        let slots = self.done.len() as i64;
        let mut f = self.frontier.lock().unwrap_or_else(|e| e.into_inner());
        let was = *f;
        if self.in_order {
            while *f < self.batches
                && self.done[(*f % slots) as usize].load(Ordering::Acquire) == *f
            {
                *f += 1;
            }
        } else {
            *f = (*f).max(seq + 1);
        }
        if *f > was {
            let now = checker.now_ns();
            for passed in was..*f {
                self.phases.passed(mine, passed, now);
            }
            if let Some(p) = progress {
                p(*f);
            }
            processed
                .signal(*f as u64)
                .map_err(|e| failed_by_stop(processed, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(batch_bytes: usize, verify_samples: usize) -> Layout {
        Layout {
            verify_samples,
            ..Layout::uniform(batch_bytes / 4, 8, 1)
        }
    }

    #[test]
    fn six_threads_where_the_check_reads_every_line_else_four() {
        for bytes in [64 << 10, 1 << 20] {
            assert_eq!(
                threads_for(16, &layout(bytes, 0)),
                6,
                "every element, {bytes}"
            );
            assert_eq!(threads_for(16, &layout(bytes, 4096)), 4, "sampled, {bytes}");
        }
        // Samples as many as the body: every element.
        assert_eq!(threads_for(16, &layout(16 << 10, 4096)), 6);
    }

    #[test]
    fn the_threads_leave_the_engine_its_cores_and_are_at_least_one() {
        assert_eq!(threads_for(2, &layout(64 << 10, 4096)), 1);
        assert_eq!(threads_for(6, &layout(64 << 10, 4096)), 3);
        assert_eq!(threads_for(1, &layout(1 << 20, 4096)), 1);
    }
}
