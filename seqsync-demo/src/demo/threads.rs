//! The host threads of the hand-written, graph and adaptive engines: each body on a scoped
//! thread of its own; a failure or a panic in one stops the others (through the engine's own
//! stop, so that their waits end), and the stall [`watchdog`](super::watchdog) watches them all.

use super::watchdog::{Running, Watch};
use seqsync::{Error, Result};

/// A thread body of [`run_threads`] besides the h2g one: its name and what it runs.
pub(crate) type Body<'a> = (&'static str, Box<dyn FnOnce() -> Result<()> + Send + 'a>);

/// Run the h2g body (which may own something `Send` but not `Sync`, the graph engines' graphs,
/// and hands it back) and the other bodies (g2h, and any more) on scoped threads of their own,
/// under the stall [`watchdog`](super::watchdog) (`watch`). When one fails or panics, or the watchdog fires,
/// `stop` is told why, so the others' waits end. Returns every result (h2g's first, the
/// watchdog's stall, if it fired, last) and what h2g handed back (`None` after a panic).
pub(crate) fn run_threads<G: Send>(
    h2g: impl FnOnce() -> (Result<()>, G) + Send,
    others: Vec<Body<'_>>,
    stop: &(dyn Fn(String) + Sync),
    watch: &Watch<'_>,
) -> (Vec<(&'static str, Result<()>)>, Option<G>) {
    run_threads_named("h2g", h2g, others, stop, watch)
}

/// [`run_threads`] with the first body named `first` (in results, panics and the stall
/// watchdog's message) instead of `h2g`: the resident engine's first thread is get_data.
pub(crate) fn run_threads_named<G: Send>(
    first: &'static str,
    h2g: impl FnOnce() -> (Result<()>, G) + Send,
    others: Vec<Body<'_>>,
    stop: &(dyn Fn(String) + Sync),
    watch: &Watch<'_>,
) -> (Vec<(&'static str, Result<()>)>, Option<G>) {
    let panicked = |name: &str, p: Box<dyn std::any::Any + Send>| -> Error {
        let e = crate::invalid(
            "demo",
            format!("thread {name} panicked: {}", crate::panic_message(&*p)),
        );
        // A payload whose own drop panics must not unwind past the stop of the others.
        if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(p)))
        {
            std::mem::forget(again);
        }
        e
    };
    let stopped = |name: &str, r: &Result<()>| {
        if let Err(e) = r {
            stop(format!("thread {name} failed: {e}"));
        }
    };
    let running = Running::new(
        std::iter::once(first)
            .chain(others.iter().map(|(name, _)| *name))
            .collect(),
    );
    let running = &running;
    std::thread::scope(|scope| {
        let a = scope.spawn(|| {
            let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(h2g)) {
                Ok((r, graphs)) => {
                    stopped(first, &r);
                    (r, Some(graphs))
                }
                Err(p) => {
                    let r = Err(panicked(first, p));
                    stopped(first, &r);
                    (r, None)
                }
            };
            running.finished(0);
            r
        });
        let handles: Vec<_> = others
            .into_iter()
            .enumerate()
            .map(|(i, (name, body))| {
                let h = scope.spawn(move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
                        .unwrap_or_else(|p| Err(panicked(name, p)));
                    stopped(name, &r);
                    running.finished(i + 1);
                    r
                });
                (name, h)
            })
            .collect();
        let stall = running.watch(watch, stop);
        let (ra, graphs) = a.join().unwrap_or_else(|p| (Err(panicked(first, p)), None));
        let mut results = vec![(first, ra)];
        for (name, h) in handles {
            results.push((name, h.join().unwrap_or_else(|p| Err(panicked(name, p)))));
        }
        // Last: a thread's own error, if one failed as the watchdog fired, is the cause.
        results.extend(stall.map(|e| ("watchdog", Err(e))));
        (results, graphs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::pipeline::first_error;
    use seqsync::timeline::Timeline;
    use seqsync::HostBackend;
    use std::time::Duration;

    #[test]
    fn threads_that_process_nothing_are_stopped_and_the_run_fails_as_stalled() {
        // h2g and g2h wait for a value nobody signals; the run's stop fails the timeline.
        let host = HostBackend::new();
        let never = Timeline::new(&host, "never", 0).unwrap();
        let stop = |why: String| never.fail(Error::Cancelled(why));
        // As the engines do: a wait ended by the run's stop is a stop.
        let wait = || {
            never
                .wait(1, Duration::MAX)
                .map(|_| ())
                .map_err(|e| crate::demo::pipeline::stopped("never", e))
        };
        let watch = Watch {
            progress: Box::new(|| 0),
            timeout: Duration::from_millis(200),
        };
        let (results, graphs) = run_threads(
            || (wait(), ()),
            vec![("g2h", Box::new(wait))],
            &stop,
            &watch,
        );
        assert!(graphs.is_some());
        let names: Vec<&str> = results.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["h2g", "g2h", "watchdog"]);
        match first_error(results) {
            Err(Error::Stalled {
                timeout_ms: 200,
                threads,
            }) => assert_eq!(threads.len(), 2, "{threads:?}"),
            other => panic!("expected the stall, got {other:?}"),
        }
    }

    #[test]
    fn threads_that_end_leave_no_watchdog_result() {
        let watch = Watch {
            progress: Box::new(|| 0),
            timeout: Duration::from_secs(60),
        };
        let (results, _) = run_threads(
            || (Ok(()), ()),
            vec![("g2h", Box::new(|| Ok(())))],
            &|_| {},
            &watch,
        );
        let names: Vec<&str> = results.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["h2g", "g2h"]);
    }

    #[test]
    fn the_first_thread_goes_by_the_name_it_is_given() {
        let watch = Watch {
            progress: Box::new(|| 0),
            timeout: Duration::from_secs(60),
        };
        let fail = || Err(Error::Cancelled("get_data broke".into()));
        let (results, _) = run_threads_named(
            "get_data",
            || (fail(), ()),
            vec![("process_data", Box::new(|| Ok(())))],
            &|_| {},
            &watch,
        );
        let names: Vec<&str> = results.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["get_data", "process_data"]);
        assert!(results[0].1.is_err());
    }
}
