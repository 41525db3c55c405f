//! One plan thread's loop: its steps for seq `0..batches`, in order.

use std::time::Instant;

use super::compile::Action;
use super::latency::{Collector, Timed};
use super::stages::{BlockingCall, ObserverFn, StageCtx};
use super::watchdog::{Doing, Progress};
use super::ThreadStats;
use crate::backend::Backend;
use crate::error::Error;
use crate::{Blocking, EventRingbuf};

/// Where a failure happened, for the stop reason.
pub(super) struct Failed {
    pub(super) seq: i64,
    pub(super) error: Error,
}

/// Run `f`, a ring call; tell `observer` about it if it was a blocking one.
pub(super) fn observed<T>(
    observer: Option<&ObserverFn<'_>>,
    blocking: Blocking,
    call: BlockingCall<'_>,
    f: impl FnOnce() -> T,
) -> T {
    match observer {
        Some(o) if blocking == Blocking::Yes => {
            let start = Instant::now();
            let r = f();
            o(&BlockingCall {
                start,
                end: Instant::now(),
                ..call
            });
            r
        }
        _ => f(),
    }
}

/// Who a thread tells what it does: the user's observer of blocking calls, the watchdog, the
/// latency collector.
pub(super) struct Told<'t, 'o> {
    pub(super) observer: Option<&'t ObserverFn<'o>>,
    pub(super) progress: Option<&'t Progress>,
    pub(super) latency: &'t Collector,
}

pub(super) fn run_thread<B: Backend>(
    name: &str,
    steps: &[Action<'_, '_, B>],
    rings: &[EventRingbuf<B>],
    batches: i64,
    stats: &mut ThreadStats,
    told: Told<'_, '_>,
) -> std::result::Result<(), Failed> {
    let Told {
        observer,
        progress,
        latency,
    } = told;
    let enter = |doing, what, seq| {
        if let Some(p) = progress {
            p.enter(doing, what, seq);
        }
    };
    let stepped = || {
        if let Some(p) = progress {
            p.step();
        }
    };
    let now = Instant::now();
    let call = |call, ring: usize, seq| BlockingCall {
        thread: name,
        call,
        ring: rings[ring].name(),
        seq,
        start: now,
        end: now,
    };
    let times_batches = latency.times_batches();
    if steps.is_empty() {
        // Nothing to do in any batch: done at once (a loop of nothing would not see another
        // thread's failure, and would count to `batches` first).
        stats.iterations = batches;
        if let Some(p) = progress {
            p.finish();
        }
        return Ok(());
    }
    for seq in 0..batches {
        let fail = |error| Failed { seq, error };
        if times_batches {
            latency.batch_started(seq, Instant::now());
        }
        for step in steps {
            match step {
                Action::Wait {
                    ring,
                    lag,
                    blocking,
                    stream,
                } => {
                    let s = seq - lag;
                    enter(Doing::Wait, *ring, s);
                    observed(observer, *blocking, call("wait", *ring, s), || {
                        rings[*ring].wait(stream, s, *blocking)
                    })
                    .map_err(fail)?;
                    stepped();
                    stats.waits += 1;
                }
                Action::Sync {
                    ring,
                    lag,
                    blocking,
                    after,
                    observes,
                    ends_batch,
                } => {
                    let s = seq - lag;
                    enter(Doing::Synchronize, *ring, s);
                    observed(observer, *blocking, call("synchronize", *ring, s), || {
                        rings[*ring].synchronize(s, *blocking)
                    })
                    .map_err(fail)?;
                    stepped();
                    stats.synchronizes += 1;
                    let synced = (*observes || *ends_batch).then(Instant::now);
                    if let (true, Some(at)) = (*observes, synced) {
                        latency.observed(*ring, s, at);
                    }
                    if let Some(after) = after {
                        after(seq).map_err(fail)?;
                    }
                    if let (true, Some(at)) = (*ends_batch, synced) {
                        let end = if after.is_some() { Instant::now() } else { at };
                        latency.batch_ended(seq, end);
                    }
                }
                Action::Launch {
                    stage,
                    index,
                    stream,
                    f,
                    timed,
                } => {
                    enter(Doing::Launch, *index, seq);
                    let start = (*timed != Timed::Not).then(Instant::now);
                    f(&StageCtx {
                        seq,
                        stage,
                        thread: name,
                        stream: *stream,
                    })
                    .map_err(fail)?;
                    match (timed, start) {
                        (Timed::Host, Some(start)) => {
                            let end = Instant::now();
                            latency.host_stage(*index, start, end);
                            latency.batch_ended(seq, end);
                        }
                        (Timed::Stream, Some(start)) => latency.launched(*index, seq, start),
                        _ => {}
                    }
                    stepped();
                    stats.launches += 1;
                }
                Action::Record {
                    ring,
                    blocking,
                    stream,
                } => {
                    enter(Doing::Record, *ring, seq);
                    observed(
                        observer,
                        *blocking,
                        call("record", *ring, seq),
                        || match stream {
                            Some(stream) => rings[*ring].record(stream, seq, *blocking),
                            None => rings[*ring].record_host(seq, *blocking),
                        },
                    )
                    .map_err(fail)?;
                    stepped();
                    stats.records += 1;
                }
            }
        }
        stats.iterations = seq + 1;
    }
    if let Some(p) = progress {
        p.finish();
    }
    Ok(())
}
