//! Where a batch's latency goes in the adaptive engine: each batch's path cut into phases at
//! the instants its threads pass anyway (a launch call, a synchronize returning, a check), so
//! that one run tells which part of the round trip (issue -> processed -> slot free) to shorten.
//!
//! | phase | from | to |
//! |---|---|---|
//! | `before_launch` | the batch is issued (its arrival with `--rate`, else its input being filled in: by get_data with the device release, by the h2g thread with the host release) | the launch that carries it is called (0 when it was launched ahead of its issue) |
//! | `launch` | that launch is called (or the batch was issued, if later) | it returns (the graph launch and the record of its event, on the h2g thread; the record waits while `S` launches are in flight, a bound only launches of one batch reach) |
//! | `on_device` | the launch returned (or the batch was issued, if later) | the g2h thread saw the launch complete: the device's queue, the work, and the host noticing |
//! | `before_check` | seen complete | a process_data thread begins its check |
//! | `check` | the check begins | it ends |
//! | `in_order` | the check ended | every batch before it was checked too, and its slots were released |
//! | `slot_wait` | the h2g thread began waiting for the slots of the launch that carries the batch to come free | they did (the batches `S` before them were processed) |
//!
//! The resident engine has no launch a batch: there `before_launch` runs from the batch's
//! issue to get_data beginning its fill, `launch` is the fill, `on_device` runs from the
//! release (the store of its arrival, or its copy in enqueued) to its worker seeing it done,
//! and `slot_wait` is get_data's wait for the batch's slots.
//!
//! The first five add up to the batch's latency (issue to check done); `in_order` comes after
//! it and delays only the reuse of the batch's slots. `slot_wait` is the h2g thread's, per
//! launch, and mostly not part of the latency: without `--rate` a batch is issued only once its
//! slots are free, so its latency starts after the wait. It says whether the slots cover the
//! round trip: a saturated run whose launches wait long for slots has too few of them, one whose
//! launches do not wait is held elsewhere (the phases above say where).
//!
//! Under the test switches that drop the waits before slot reuse or the in-order report
//! ([`GraphEdge`](crate::demo::GraphEdge)), a slot's stamps may be overwritten before they are
//! read: the phases of such a run mean nothing (its verification fails anyway).
//!
//! Memory: five timestamps per slot (written for a seq before its slot can be reused by
//! `seq + slots`, read before the seq is reported processed) and one histogram per phase per
//! process_data thread, merged when the thread ends: nothing grows with the batches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The phases, in the order a batch passes them (`slot_wait`, the h2g thread's, last); the
/// index of each in [`PhaseHistograms`].
#[derive(Debug, Clone, Copy)]
enum Phase {
    BeforeLaunch,
    Launch,
    OnDevice,
    BeforeCheck,
    Check,
    InOrder,
    SlotWait,
}

/// The phases' names, by [`Phase`].
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
    /// 1 ns to an hour, 2 significant digits (each quantile at most 1 % above the true one,
    /// as the runtime's latencies): about 36 KiB a phase, whatever the count, so a
    /// process_data thread's set stays small however many threads run.
    pub(crate) fn new() -> Self {
        PhaseHistograms(std::array::from_fn(|_| {
            Histogram::new_with_bounds(1, 3_600_000_000_000, 2).expect("valid histogram bounds")
        }))
    }

    fn record(&mut self, phase: Phase, ns: u64) {
        self.0[phase as usize].saturating_record(ns.max(1));
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
    /// How long the h2g thread waited for the slots of the launch carrying the seq (ns).
    slot_wait: Box<[AtomicU64]>,
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
            slot_wait: instants(slots),
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

    /// The h2g thread: the launch of `seqs` waited `slot_wait` nanoseconds for its slots, was
    /// called at `called` and returned at `returned` (on the
    /// [`Checker::now_ns`](super::Checker::now_ns) clock).
    pub(crate) fn launched(
        &self,
        seqs: std::ops::Range<i64>,
        slot_wait: u64,
        called: u64,
        returned: u64,
    ) {
        for seq in seqs {
            let i = self.at(seq);
            self.slot_wait[i].store(slot_wait, Ordering::Relaxed);
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
            // Each phase from the later of its start and the issue: a batch launched ahead of
            // its issue starts its latency inside the launch or on the device.
            let (called_, returned_) = (called.max(issued), returned.max(issued));
            into.record(Phase::BeforeLaunch, called.saturating_sub(issued));
            into.record(Phase::Launch, returned_.saturating_sub(called_));
            into.record(Phase::OnDevice, landed.saturating_sub(returned_));
        }
        into.record(Phase::SlotWait, self.slot_wait[i].load(Ordering::Relaxed));
        into.record(Phase::BeforeCheck, begin.saturating_sub(landed));
        into.record(Phase::Check, end.saturating_sub(begin));
    }

    /// The worker that moved the frontier: `seq` was passed at `now` (the frontier's lock
    /// orders this load after the store of the worker that checked it).
    pub(crate) fn passed(&self, into: &mut PhaseHistograms, seq: i64, now: u64) {
        let checked = self.checked[self.at(seq)].load(Ordering::Relaxed);
        into.record(Phase::InOrder, now.saturating_sub(checked));
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

    /// To 0.1 us: the histograms keep 2 significant digits.
    fn rounded(us: f64) -> f64 {
        (us * 10.0).round() / 10.0
    }

    /// Each phase's name and p50, rounded.
    fn p50s(summaries: &[PhaseSummary]) -> Vec<(&'static str, f64)> {
        summaries
            .iter()
            .map(|s| (s.phase, rounded(s.p50_us)))
            .collect()
    }

    #[test]
    fn a_batchs_phases_add_up_to_its_path() {
        let p = BatchPhases::new(4);
        let mut h = PhaseHistograms::new();
        // Issued at 1 us, launch called at 3, returned at 4, landed at 10, checked 12..15.
        p.launched(5..7, 500, 3_000, 4_000);
        p.landed(5..7, 10_000);
        p.checked(&mut h, 5, Some(1_000), 12_000, 15_000);
        p.passed(&mut h, 5, 20_000);
        p.merge(&h);
        assert_eq!(
            p50s(&p.summaries()),
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
    fn a_batch_issued_during_its_launch_or_after_it_starts_there() {
        let p = BatchPhases::new(2);
        // Launched at 1..2 us; issued at 5 (after the launch returned), landed at 9: all of
        // its latency on the device.
        let mut h = PhaseHistograms::new();
        p.launched(0..1, 700, 1_000, 2_000);
        p.landed(0..1, 9_000);
        p.checked(&mut h, 0, Some(5_000), 9_000, 9_500);
        assert_eq!(
            p50s(&h.summaries()),
            [
                ("before_launch", 0.0),
                ("launch", 0.0),
                ("on_device", 4.0),
                ("before_check", 0.0),
                ("check", 0.5),
                ("slot_wait", 0.7),
            ]
        );
        // Issued at 1.5 us, during the launch: half the launch, then the device.
        let mut h = PhaseHistograms::new();
        p.checked(&mut h, 0, Some(1_500), 9_000, 9_500);
        let s = h.summaries();
        assert_eq!(
            [
                rounded(s[0].p50_us),
                rounded(s[1].p50_us),
                rounded(s[2].p50_us)
            ],
            [0.0, 0.5, 7.0]
        );
    }

    #[test]
    fn a_batch_issued_unknown_has_only_the_phases_from_its_landing() {
        let p = BatchPhases::new(2);
        let mut h = PhaseHistograms::new();
        p.landed(0..1, 9_000);
        p.checked(&mut h, 0, None, 9_000, 9_500);
        let names: Vec<&str> = h.summaries().iter().map(|s| s.phase).collect();
        assert_eq!(names, ["before_check", "check", "slot_wait"]);
    }
}
