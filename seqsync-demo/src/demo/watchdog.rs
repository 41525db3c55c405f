//! The stall watchdog of the hand-written, graph and adaptive engines: a run that makes no
//! progress for its [`stall_timeout`] is stopped and fails with [`Error::Stalled`] instead of
//! hanging (what the pipeline runtime's own watchdog, with the same timeout, does for
//! [`Engine::Pipeline`]). Not watched: the pool variant and the two-process pipeline.
//!
//! A slow run is not a stalled one: the watchdog looks only at whether a count moved (the
//! engines count batches issued and batches processed, so a launch's batches arriving one by
//! one at a slow rate count as progress), and `--rate` is validated so that arrivals come well
//! within the timeout (`validate.rs`). It stops the run through the engine's own stop (the one
//! a failed thread uses), so every wait on a ring or timeline ends; a wait the stop cannot end
//! (a device that never completes its work, where the driver offers no way out) is beyond it.
//!
//! [`Engine::Pipeline`]: super::Engine::Pipeline

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::device::Layout;
use super::pipeline::Checker;
use seqsync::Error;

/// How long a run of little work may make no progress before it is stopped: the pipeline
/// runtime's default. Runs of more work get more ([`stall_timeout`]).
pub(crate) const STALL_TIMEOUT: Duration = seqsync::internal::pipeline::DEFAULT_STALL_TIMEOUT;

/// Nanoseconds one element may take per kernel round on the slowest machine a run is expected
/// on, about ten times what a debug build on a loaded two-core VM takes: the watchdog must not
/// take big batches or a high `--intensity` for a stall.
const SLOWEST_NS_PER_ROUND: u64 = 100;

/// The stall timeout of a run with `layout`: [`STALL_TIMEOUT`] plus the time every batch the
/// layout holds at once (its largest ring) would take at [`SLOWEST_NS_PER_ROUND`], three
/// kernels of `intensity` rounds and four passes (two copies, fill, check) per element.
/// Bounded however large the work (it saturates at about 584 years).
pub(crate) fn stall_timeout(layout: &Layout) -> Duration {
    let in_flight = [
        layout.nin,
        layout.nx,
        layout.ny,
        layout.nout,
        layout.npatterns,
        layout.nhout,
    ]
    .into_iter()
    .max()
    .unwrap_or(1)
    .max(1) as u64;
    let rounds = 3 * u64::from(layout.intensity) + 4;
    let work_ns = in_flight
        .saturating_mul(layout.n as u64)
        .saturating_mul(rounds)
        .saturating_mul(SLOWEST_NS_PER_ROUND);
    STALL_TIMEOUT.saturating_add(Duration::from_nanos(work_ns))
}

/// Longest the watchdog sleeps between looks at the count (it wakes at once when the run's
/// threads end).
const LOOK_EVERY: Duration = Duration::from_millis(50);

/// What the watchdog watches: a count that grows while the run makes progress, and how long
/// it may stand still.
pub(crate) struct Watch<'a> {
    pub progress: Box<dyn Fn() -> i64 + Sync + 'a>,
    pub timeout: Duration,
}

impl<'a> Watch<'a> {
    /// An engine's run: the batches `checker` saw issued and processed, for the
    /// [`stall_timeout`] of `layout`.
    pub(crate) fn run(checker: &'a Checker, layout: &Layout) -> Self {
        Watch {
            progress: Box::new(move || checker.progress()),
            timeout: stall_timeout(layout),
        }
    }
}

/// A run's threads, by name, and which have finished; the last to finish wakes the watchdog.
pub(crate) struct Running {
    names: Vec<&'static str>,
    finished: Mutex<Vec<bool>>,
    all_finished: Condvar,
}

impl Running {
    pub(crate) fn new(names: Vec<&'static str>) -> Self {
        Running {
            finished: Mutex::new(vec![false; names.len()]),
            names,
            all_finished: Condvar::new(),
        }
    }

    /// Thread `i` (in the order of the names) finished.
    pub(crate) fn finished(&self, i: usize) {
        let mut f = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(x) = f.get_mut(i) {
            *x = true;
        }
        if f.iter().all(|&x| x) {
            self.all_finished.notify_all();
        }
    }

    /// Watch the run until every thread finished (`None`) or `watch.progress` stood still for
    /// `watch.timeout`: then `stop` the run and return the stall, naming the threads still
    /// running.
    pub(crate) fn watch(&self, watch: &Watch<'_>, stop: &(dyn Fn(String) + Sync)) -> Option<Error> {
        let mut last = (watch.progress)();
        let mut since = Instant::now();
        let mut finished = self.finished.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if finished.iter().all(|&x| x) {
                return None;
            }
            let nap = LOOK_EVERY
                .min(watch.timeout.saturating_sub(since.elapsed()))
                .max(Duration::from_millis(1));
            finished = self
                .all_finished
                .wait_timeout(finished, nap)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            let now = (watch.progress)();
            if now != last {
                (last, since) = (now, Instant::now());
            } else if since.elapsed() >= watch.timeout && !finished.iter().all(|&x| x) {
                let threads = self
                    .names
                    .iter()
                    .zip(finished.iter())
                    .map(|(name, &done)| {
                        let state = if done { "finished" } else { "still waiting" };
                        format!("thread {name}: {state} (progress stood at {last})")
                    })
                    .collect();
                drop(finished);
                let e = Error::Stalled {
                    timeout_ms: watch.timeout.as_millis() as u64,
                    threads,
                };
                stop(e.to_string());
                return Some(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

    fn layout(n: usize, slots: usize, intensity: u32) -> Layout {
        Layout {
            n,
            nin: slots,
            nx: 2,
            ny: 2,
            nout: 2,
            npatterns: 3,
            nhout: 2,
            intensity,
            verify_samples: 64,
            copy_by: Default::default(),
        }
    }

    #[test]
    fn the_stall_timeout_grows_with_the_work_a_run_holds_at_once() {
        // The seed's default (64 Ki elements, 2 slots, intensity 8): about the runtime's 10 s.
        let small = stall_timeout(&layout(1 << 16, 2, 8));
        assert!(small >= STALL_TIMEOUT && small < STALL_TIMEOUT + Duration::from_secs(1));
        // 1 GiB batches: minutes; more slots, more.
        let big = stall_timeout(&layout(1 << 28, 2, 8));
        assert!(big > Duration::from_secs(600), "{big:?}");
        assert!(stall_timeout(&layout(1 << 28, 8, 8)) > big);
        // The largest intensity: bounded, no overflow.
        let most = stall_timeout(&layout(usize::MAX, usize::MAX, u32::MAX));
        assert!(most > Duration::from_nanos(u64::MAX), "{most:?}");
    }

    #[test]
    fn a_run_that_processes_nothing_is_stopped_with_a_stall_naming_its_threads() {
        let running = Running::new(vec!["h2g", "g2h"]);
        // Both threads wait until the run is stopped.
        let stopped = AtomicBool::new(false);
        let watch = Watch {
            progress: Box::new(|| 7),
            timeout: Duration::from_millis(100),
        };
        let reason = Mutex::new(String::new());
        let stop = |why: String| {
            *reason.lock().unwrap() = why;
            stopped.store(true, Ordering::SeqCst);
        };
        let started = Instant::now();
        let e = std::thread::scope(|s| {
            for i in 0..2 {
                let (running, stopped) = (&running, &stopped);
                s.spawn(move || {
                    while !stopped.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    running.finished(i);
                });
            }
            running.watch(&watch, &stop)
        });
        assert!(started.elapsed() >= Duration::from_millis(100));
        match e {
            Some(Error::Stalled {
                timeout_ms,
                threads,
            }) => {
                assert_eq!(timeout_ms, 100);
                assert_eq!(
                    threads,
                    [
                        "thread h2g: still waiting (progress stood at 7)",
                        "thread g2h: still waiting (progress stood at 7)"
                    ]
                );
            }
            other => panic!("expected a stall, got {other:?}"),
        }
        assert!(
            reason.lock().unwrap().contains("stalled"),
            "the run was stopped with the stall as its reason"
        );
    }

    #[test]
    fn a_run_that_keeps_processing_is_not_stopped() {
        let running = Running::new(vec!["worker"]);
        let count = AtomicI64::new(0);
        let watch = Watch {
            progress: Box::new(|| count.load(Ordering::SeqCst)),
            timeout: Duration::from_millis(150),
        };
        let stop = |why: String| panic!("stopped: {why}");
        let e = std::thread::scope(|s| {
            s.spawn(|| {
                // 600 ms of batches, one every 10 ms: four timeouts long, never one apart.
                for _ in 0..60 {
                    std::thread::sleep(Duration::from_millis(10));
                    count.fetch_add(1, Ordering::SeqCst);
                }
                running.finished(0);
            });
            running.watch(&watch, &stop)
        });
        assert!(e.is_none(), "{e:?}");
    }

    #[test]
    fn the_watchdog_ends_when_the_threads_do_not_at_its_timeout() {
        let running = Running::new(vec!["a", "b"]);
        let watch = Watch {
            progress: Box::new(|| 0),
            timeout: Duration::from_secs(60),
        };
        let stop = |why: String| panic!("stopped: {why}");
        let started = Instant::now();
        let e = std::thread::scope(|s| {
            for i in 0..2 {
                let running = &running;
                s.spawn(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    running.finished(i);
                });
            }
            running.watch(&watch, &stop)
        });
        assert!(e.is_none(), "{e:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
