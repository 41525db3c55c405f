//! The stall watchdog: when no thread has made progress for the timeout, it stops every ring
//! and names what each thread is blocked on and who must act.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::super::plan::Plan;
use crate::backend::Backend;
use crate::error::Error;
use crate::EventRingbuf;

/// What a thread is doing, as the watchdog sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Doing {
    Starting = 0,
    Wait = 1,
    Synchronize = 2,
    Record = 3,
    Launch = 4,
    Finished = 5,
}

impl Doing {
    fn from_u8(v: u8) -> Doing {
        match v {
            1 => Doing::Wait,
            2 => Doing::Synchronize,
            3 => Doing::Record,
            4 => Doing::Launch,
            5 => Doing::Finished,
            _ => Doing::Starting,
        }
    }
}

/// One thread's progress: steps completed and the call it is in. Written by the thread with
/// relaxed stores (a few per op), read by the watchdog.
#[derive(Debug, Default)]
pub(super) struct Progress {
    steps: AtomicU64,
    doing: AtomicU8,
    /// The ring (wait, synchronize, record) or stage (launch) index.
    what: AtomicUsize,
    seq: AtomicI64,
}

impl Progress {
    /// The thread enters a call.
    pub(super) fn enter(&self, doing: Doing, what: usize, seq: i64) {
        self.what.store(what, Ordering::Relaxed);
        self.seq.store(seq, Ordering::Relaxed);
        self.doing.store(doing as u8, Ordering::Relaxed);
    }

    /// The call returned: one step of progress.
    pub(super) fn step(&self) {
        self.steps.fetch_add(1, Ordering::Relaxed);
    }

    /// The thread left its loop.
    pub(super) fn finish(&self) {
        self.doing.store(Doing::Finished as u8, Ordering::Relaxed);
        self.steps.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> (Doing, usize, i64) {
        (
            Doing::from_u8(self.doing.load(Ordering::Relaxed)),
            self.what.load(Ordering::Relaxed),
            self.seq.load(Ordering::Relaxed),
        )
    }
}

/// Watches `progress` (one per plan thread) until `done` says the run is over; when the sum
/// of steps has not moved for `timeout`, stops every ring and returns the stall error.
pub(super) fn watch<B: Backend>(
    plan: &Plan,
    rings: &[EventRingbuf<B>],
    progress: &[Progress],
    timeout: Duration,
    batches: i64,
    done: &mpsc::Receiver<()>,
) -> Option<Error> {
    let tick = (timeout / 4).clamp(Duration::from_millis(1), Duration::from_millis(100));
    let total = || {
        progress
            .iter()
            .map(|p| p.steps.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let (mut last, mut since) = (total(), Instant::now());
    loop {
        match done.recv_timeout(tick) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return None,
        }
        let now = total();
        if now != last {
            (last, since) = (now, Instant::now());
            continue;
        }
        if since.elapsed() < timeout {
            continue;
        }
        let threads = report(plan, rings, progress, batches);
        let error = Error::Stalled {
            timeout_ms: timeout.as_millis().min(u64::MAX as u128) as u64,
            threads,
        };
        for r in rings {
            r.stop(error.to_string());
        }
        return Some(error);
    }
}

/// One line per plan thread: what it is blocked on and who must act.
fn report<B: Backend>(
    plan: &Plan,
    rings: &[EventRingbuf<B>],
    progress: &[Progress],
    batches: i64,
) -> Vec<String> {
    let index: HashMap<&str, usize> = plan
        .threads
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let state = |thread: &str| -> String {
        match index.get(thread).copied() {
            Some(i) => match progress[i].snapshot() {
                (Doing::Finished, _, _) => format!("finished its {batches} batches"),
                (_, _, seq) => format!("at seq {seq}"),
            },
            None => "unknown".into(),
        }
    };
    plan.threads
        .iter()
        .zip(progress)
        .map(|(t, p)| {
            let (doing, what, seq) = p.snapshot();
            let ring = plan.rings.get(what);
            let ring_name = ring.map_or("?", |r| r.name.as_str());
            let text = match doing {
                Doing::Finished => format!("finished its {batches} batches"),
                Doing::Starting => "not started".to_string(),
                Doing::Launch => format!(
                    "in stage {}'s closure for seq {seq} (it has not returned)",
                    plan.stages.get(what).map_or("?", |s| s.name.as_str())
                ),
                Doing::Wait | Doing::Synchronize => {
                    let call = if doing == Doing::Wait {
                        "wait"
                    } else {
                        "synchronize"
                    };
                    let recorded = rings.get(what).map_or(0, |r| r.next_seq());
                    let who = ring.map_or(String::new(), |r| {
                        format!(
                            "stage {} on thread {} ({})",
                            r.producer,
                            r.thread,
                            state(&r.thread)
                        )
                    });
                    if seq < recorded {
                        format!(
                            "blocked in {call} on ring {ring_name} at seq {seq} (recorded; the \
                             work before it has not completed on {who}'s stream)"
                        )
                    } else {
                        format!(
                            "blocked in {call} on ring {ring_name} at seq {seq} ({recorded} \
                             recorded): {who} must record it"
                        )
                    }
                }
                Doing::Record => {
                    let (max_size, who) = ring.map_or((0, String::new()), |r| {
                        let who: Vec<String> = r
                            .consumers
                            .iter()
                            .map(|c| {
                                format!(
                                    "{} on thread {} at lag {} ({})",
                                    c.stage,
                                    c.thread,
                                    c.lag,
                                    state(&c.thread)
                                )
                            })
                            .collect();
                        (r.max_size, who.join(", "))
                    });
                    format!(
                        "blocked in record on ring {ring_name} at seq {seq} (ring full, max_size \
                         {max_size}): seq {} must first be released by its consumers: {who}",
                        seq - max_size as i64
                    )
                }
            };
            format!("thread {}: {text}", t.name)
        })
        .collect()
}
