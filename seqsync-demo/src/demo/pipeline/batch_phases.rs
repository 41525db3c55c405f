//! Where a batch's latency goes in the adaptive engine: each batch's path cut into phases at
//! the instants its threads pass anyway (a launch call, a synchronize returning, a check), so
//! that one run tells which part of the round trip (issue -> processed -> slot free) to shorten.
//!
//! | phase | from | to |
//! |---|---|---|
//! | `before_launch` | the batch is issued (its arrival with `--rate`, else get_data filling it in) | the launch that carries it is called (0 when it was launched ahead of its arrival) |
//! | `launch` | that launch is called | it returns (the graph launch and its event record, on the h2g thread) |
//! | `on_device` | the launch returned (or the batch was issued, if later) | the g2h thread saw the launch complete: the device's queue, the work, and the host noticing |
//! | `before_check` | seen complete | a process_data thread begins its check |
//! | `check` | the check begins | it ends |
//! | `in_order` | the check ended | every batch before it was checked too, and its slots were released |
//! | `slot_wait` (part of `before_launch`) | the batch was issued, or the h2g thread began waiting for the slots of the launch to come free, if later | they did (the batches `S` before them were processed) |
//!
//! The first five add up to the batch's latency (issue to check done); `in_order` comes after
//! it and delays only the reuse of the batch's slots. A `slot_wait` near `before_launch` says
//! the slots are too few to cover the round trip; a small one with a long `before_launch`, that
//! the h2g thread is busy.
//!
//! Memory: six timestamps per slot (written for a seq before its slot can be reused by
//! `seq + slots`, read before the seq is reported processed) and one histogram per phase per
//! process_data thread, merged when the thread ends: nothing grows with the batches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::checker::new_histogram;

/// The phases, in the order a batch passes them.
const NAMES: [&str; 7] = [
    "before_launch",
    "launch",
    "on_device",
    "before_check",
    "check",
    "in_order",
    "slot_wait",
];

/// One phase over a run: p50, p99 and max in microseconds over the batches measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseSummary {
    /// The phase's name: `before_launch`, `launch`, `on_device`, `before_check`, `check`,
    /// `in_order` or `slot_wait` (see [`DemoReport::phases`](crate::demo::DemoReport::phases)).
    pub phase: &'static str,
    /// Batches measured.
    pub count: u64,
    /// Half of the batches spent at most this long in the phase.
    pub p50_us: f64,
    /// 99 % of the batches spent at most this long in it.
    pub p99_us: f64,
    /// The longest any batch spent in it.
    pub max_us: f64,
}

/// Histograms of the phases, one sample per batch each.
pub(crate) struct PhaseHistograms([Histogram<u64>; NAMES.len()]);

impl PhaseHistograms {
    pub(crate) fn new() -> Self {
        PhaseHistograms(std::array::from_fn(|_| new_histogram()))
    }

    fn record(&mut self, phase: usize, ns: u64) {
        self.0[phase].saturating_record(ns.max(1));
    }

    fn add(&mut self, other: &PhaseHistograms) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            // Same bounds on both sides: the add cannot fail; saturate rather than panic.
            let _ = a.add(b);
        }
    }

    /// One summary per phase that has samples, in the order a batch passes them.
    pub(crate) fn summaries(&self) -> Vec<PhaseSummary> {
        let us = |ns: u64| ns as f64 / 1e3;
        NAMES
            .iter()
            .zip(&self.0)
            .filter(|(_, h)| !h.is_empty())
            .map(|(&phase, h)| PhaseSummary {
                phase,
                count: h.len(),
                p50_us: us(h.value_at_quantile(0.5)),
                p99_us: us(h.value_at_quantile(0.99)),
                max_us: us(h.max()),
            })
            .collect()
    }
}

/// The instants of the batches in flight, at `seq % slots` (nanoseconds on the
/// [`Checker`](super::Checker)'s clock), and the merged histograms.
pub(crate) struct BatchPhases {
    /// When the h2g thread began waiting for the slots of the launch carrying the seq, and
    /// when they were free.
    slot_wait_from: Box<[AtomicU64]>,
    slot_wait_to: Box<[AtomicU64]>,
    /// When the launch carrying the seq was called; written by the h2g thread.
    launch_called: Box<[AtomicU64]>,
    /// When that launch returned; written by the h2g thread.
    launch_returned: Box<[AtomicU64]>,
    /// When the g2h thread saw that launch complete.
    landed: Box<[AtomicU64]>,
    /// When the seq's check ended; written by the worker that checked it, read by the worker
    /// that moves the frontier past it.
    checked: Box<[AtomicU64]>,
    merged: Mutex<PhaseHistograms>,
}

fn instants(slots: usize) -> Box<[AtomicU64]> {
    (0..slots.max(1)).map(|_| AtomicU64::new(0)).collect()
}

impl BatchPhases {
    pub(crate) fn new(slots: usize) -> Self {
        BatchPhases {
            slot_wait_from: instants(slots),
            slot_wait_to: instants(slots),
            launch_called: instants(slots),
            launch_returned: instants(slots),
            landed: instants(slots),
            checked: instants(slots),
            merged: Mutex::new(PhaseHistograms::new()),
        }
    }

    fn at(&self, seq: i64) -> usize {
        seq.rem_euclid(self.landed.len() as i64) as usize
    }

    /// The h2g thread: the launch of `seqs` waited for its slots over `slot_wait` (from, to),
    /// was called at `called` and returned at `returned` (all on the
    /// [`Checker::now_ns`](super::Checker::now_ns) clock).
    pub(crate) fn launched(
        &self,
        seqs: std::ops::Range<i64>,
        slot_wait: (u64, u64),
        called: u64,
        returned: u64,
    ) {
        for seq in seqs {
            let i = self.at(seq);
            self.slot_wait_from[i].store(slot_wait.0, Ordering::Relaxed);
            self.slot_wait_to[i].store(slot_wait.1, Ordering::Relaxed);
            self.launch_called[i].store(called, Ordering::Relaxed);
            self.launch_returned[i].store(returned, Ordering::Relaxed);
        }
    }

    /// The g2h thread: `seqs` were seen complete at `now`. (Its signal to the workers, which
    /// follows, orders these stores and the h2g thread's before the workers' loads.)
    pub(crate) fn landed(&self, seqs: std::ops::Range<i64>, now: u64) {
        for seq in seqs {
            self.landed[self.at(seq)].store(now, Ordering::Relaxed);
        }
    }

    /// A worker checked `seq` from `begin` to `end`; it was issued at `issued` (`None`: not
    /// known, and the phases before the check are not recorded for it).
    pub(crate) fn checked(
        &self,
        into: &mut PhaseHistograms,
        seq: i64,
        issued: Option<u64>,
        begin: u64,
        end: u64,
    ) {
        let i = self.at(seq);
        self.checked[i].store(end, Ordering::Relaxed);
        let landed = self.landed[i].load(Ordering::Relaxed);
        if let Some(issued) = issued {
            let called = self.launch_called[i].load(Ordering::Relaxed);
            let returned = self.launch_returned[i].load(Ordering::Relaxed);
            into.record(0, called.saturating_sub(issued));
            into.record(1, returned.saturating_sub(called));
            into.record(2, landed.saturating_sub(returned.max(issued)));
            // Only the part after the batch's issue: a launch made ahead of its arrival may
            // wait for slots before there is a batch to wait.
            let from = self.slot_wait_from[i].load(Ordering::Relaxed).max(issued);
            let to = self.slot_wait_to[i].load(Ordering::Relaxed);
            into.record(6, to.saturating_sub(from));
        }
        into.record(3, begin.saturating_sub(landed));
        into.record(4, end.saturating_sub(begin));
    }

    /// The worker that moved the frontier: `seq` was passed at `now` (the frontier's lock
    /// orders this load after the store of the worker that checked it).
    pub(crate) fn passed(&self, into: &mut PhaseHistograms, seq: i64, now: u64) {
        let checked = self.checked[self.at(seq)].load(Ordering::Relaxed);
        into.record(5, now.saturating_sub(checked));
    }

    /// A worker ended: its samples join the run's.
    pub(crate) fn merge(&self, mine: &PhaseHistograms) {
        self.merged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(mine);
    }

    /// The run's phases.
    pub(crate) fn summaries(&self) -> Vec<PhaseSummary> {
        self.merged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .summaries()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// To 0.1 us: the histograms keep 3 significant digits.
    fn rounded(us: f64) -> f64 {
        (us * 10.0).round() / 10.0
    }

    #[test]
    fn a_batchs_phases_add_up_to_its_path() {
        let p = BatchPhases::new(4);
        let mut h = PhaseHistograms::new();
        // Issued at 1 us, launch called at 3, returned at 4, landed at 10, checked 12..15.
        p.launched(5..7, (500, 1_500), 3_000, 4_000);
        p.landed(5..7, 10_000);
        p.checked(&mut h, 5, Some(1_000), 12_000, 15_000);
        p.passed(&mut h, 5, 20_000);
        p.merge(&h);
        let got: Vec<(&str, f64)> = p
            .summaries()
            .iter()
            .map(|s| (s.phase, rounded(s.p50_us)))
            .collect();
        assert_eq!(
            got,
            [
                ("before_launch", 2.0),
                ("launch", 1.0),
                ("on_device", 6.0),
                ("before_check", 2.0),
                ("check", 3.0),
                ("in_order", 5.0),
                ("slot_wait", 0.5),
            ]
        );
    }

    #[test]
    fn a_batch_launched_ahead_of_its_arrival_waits_on_the_device_from_its_arrival() {
        let p = BatchPhases::new(2);
        let mut h = PhaseHistograms::new();
        // Launched at 1..2 us, arrived at 5, landed at 9.
        p.launched(0..1, (0, 900), 1_000, 2_000);
        p.landed(0..1, 9_000);
        p.checked(&mut h, 0, Some(5_000), 9_000, 9_500);
        let s = h.summaries();
        assert_eq!(s[0].phase, "before_launch");
        assert!(s[0].max_us <= 0.01, "ahead of its arrival: no wait");
        let slot_wait = s.iter().find(|p| p.phase == "slot_wait").unwrap();
        assert!(
            slot_wait.max_us <= 0.01,
            "the slots came free before it arrived"
        );
        assert_eq!((s[2].phase, rounded(s[2].p50_us)), ("on_device", 4.0));
    }

    #[test]
    fn a_batch_issued_unknown_has_only_the_phases_from_its_landing() {
        let p = BatchPhases::new(2);
        let mut h = PhaseHistograms::new();
        p.landed(0..1, 9_000);
        p.checked(&mut h, 0, None, 9_000, 9_500);
        let names: Vec<&str> = h.summaries().iter().map(|s| s.phase).collect();
        assert_eq!(names, ["before_check", "check"]);
    }
}
