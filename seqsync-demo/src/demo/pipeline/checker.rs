//! process_data's bookkeeping: which seqs arrived, which matched the reference, and how long
//! each batch took — in memory that does not grow with the number of batches (a run of 10^12
//! batches keeps what a run of 100 keeps).
//!
//! Seqs arrive in order, give or take the batches in flight, so arrivals are counted in a
//! window of the last [`WINDOW`] seqs (a ring of counts), and latencies go to a histogram.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::demo::device::Device;

/// Seqs an arrival may lag behind the newest one and still be told apart from a duplicate
/// (every engine has far fewer batches in flight), and copy-in times kept at once.
pub(crate) const WINDOW: usize = 4096;

/// How close to an arrival [`Checker::wait_until`] stops sleeping and yields instead.
const SPIN_NS: u64 = 100_000;

/// Longest sleep of [`Checker::wait_until`] between looks at [`Checker::stop`]: a run whose
/// thread failed ends this soon after, not at the next arrival (up to 5 s away at the
/// slowest `--rate`).
const STOP_POLL_NS: u64 = 10_000_000;

/// Wrong seqs listed by number (the smallest); the others are only counted.
pub(crate) const WRONG_LISTED: usize = 20;

/// What process_data saw.
#[derive(Debug)]
pub(crate) struct Verification {
    pub matched: i64,
    /// Batches whose output did not match (or whose seq was out of range).
    pub wrong: i64,
    /// The smallest wrong seqs, at most [`WRONG_LISTED`], sorted.
    pub wrong_seqs: Vec<i64>,
    pub missing: i64,
    /// Seqs that arrived more than once (an arrival more than [`WINDOW`] seqs behind the
    /// newest counts as one).
    pub duplicated: i64,
    /// Batch latencies (copy-in issued -> process_data returned) in nanoseconds; only of
    /// batches whose copy-in the engine reported ([`Checker::issued`]).
    pub latency_ns: Histogram<u64>,
    /// [`Engine::Pipeline`](crate::demo::Engine::Pipeline): the runtime's per-stage and
    /// end-to-end latencies of the same run.
    pub stage_latency: Option<seqsync::pipeline::RunLatency>,
    /// [`Engine::Adaptive`](crate::demo::Engine::Adaptive): where the batches' latency went
    /// (the phases of `pipeline/batch_phases.rs`).
    pub phases: Option<Vec<super::PhaseSummary>>,
}

impl Default for Verification {
    fn default() -> Self {
        Verification {
            matched: 0,
            wrong: 0,
            wrong_seqs: Vec::new(),
            missing: 0,
            duplicated: 0,
            latency_ns: new_histogram(),
            stage_latency: None,
            phases: None,
        }
    }
}

/// 1 ns to an hour, 3 significant digits (about 200 KiB, whatever the count).
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Verification {
    /// The `q` quantile (0..=1) of the batch latencies in microseconds, if any were measured.
    pub fn latency_us(&self, q: f64) -> Option<f64> {
        (!self.latency_ns.is_empty()).then(|| self.latency_ns.value_at_quantile(q) as f64 / 1e3)
    }

    /// The largest batch latency in microseconds, if any was measured.
    pub fn latency_max_us(&self) -> Option<f64> {
        (!self.latency_ns.is_empty()).then(|| self.latency_ns.max() as f64 / 1e3)
    }

    /// The latencies as a histogram: `(upper bound in us, count)` per power-of-two bucket
    /// from 1 us, empty buckets left out.
    pub fn latency_histogram_us(&self) -> Vec<(f64, u64)> {
        if self.latency_ns.is_empty() {
            return Vec::new();
        }
        self.latency_ns
            .iter_log(1_000, 2.0)
            .filter(|v| v.count_since_last_iteration() > 0)
            .map(|v| {
                (
                    v.value_iterated_to() as f64 / 1e3,
                    v.count_since_last_iteration(),
                )
            })
            .collect()
    }
}

/// Arrivals: counts of the seqs in `[base, base + WINDOW)`, at `seq % WINDOW`.
struct Seen {
    base: i64,
    counts: Vec<u8>,
    /// Seqs that arrived at least once.
    distinct: i64,
    duplicated: i64,
    wrong: i64,
    wrong_seqs: Vec<i64>,
    latency: Histogram<u64>,
}

impl Seen {
    fn arrive(&mut self, seq: i64) {
        if seq < self.base {
            self.duplicated += 1;
            return;
        }
        let window = WINDOW as i64;
        if seq >= self.base + window {
            // Slide: the seqs leaving the window are forgotten (each slot cleared once).
            let new_base = seq - window + 1;
            let clear = (new_base - self.base).min(window);
            for s in self.base..self.base + clear {
                self.counts[(s % window) as usize] = 0;
            }
            self.base = new_base;
        }
        let c = &mut self.counts[(seq % window) as usize];
        match *c {
            0 => self.distinct += 1,
            1 => self.duplicated += 1,
            _ => {}
        }
        *c = c.saturating_add(1);
    }

    fn wrong(&mut self, seq: i64) {
        self.wrong += 1;
        let at = self.wrong_seqs.partition_point(|&w| w < seq);
        if at < WRONG_LISTED {
            self.wrong_seqs.insert(at, seq);
            self.wrong_seqs.truncate(WRONG_LISTED);
        }
    }
}

/// process_data's bookkeeping: which seqs arrived, and which matched the reference.
pub(crate) struct Checker {
    batches: i64,
    seen: Mutex<Seen>,
    matched: AtomicI64,
    /// Batches issued plus batches processed (right or wrong) so far: the run's progress.
    progress: AtomicI64,
    /// At `seq % WINDOW`: the seq whose copy-in was issued last there (`-1`: none), and when
    /// (nanoseconds since `t0`).
    issued: Vec<(AtomicI64, AtomicU64)>,
    t0: Instant,
    /// When the arrivals start, in nanoseconds since `t0` (0 unless
    /// [`start_arrivals`](Self::start_arrivals) moved it).
    origin_ns: AtomicU64,
    /// Open-loop arrivals (`--rate`): seq `s` arrives `s / rate` seconds after the origin; latency
    /// counts from its arrival. `None`: as fast as possible, latency from the copy-in.
    rate: Option<f64>,
    /// The run stopped ([`stop`](Self::stop)): arrival waits end at once.
    stopped: AtomicBool,
}

impl Checker {
    pub(crate) fn new(batches: i64) -> Self {
        Self::paced(batches, None)
    }

    /// A checker whose batches arrive at `rate` per second ([`issued`](Self::issued) holds a
    /// batch until its arrival).
    pub(crate) fn paced(batches: i64, rate: Option<f64>) -> Self {
        Checker {
            rate,
            batches,
            seen: Mutex::new(Seen {
                base: 0,
                counts: vec![0; WINDOW],
                distinct: 0,
                duplicated: 0,
                wrong: 0,
                wrong_seqs: Vec::new(),
                latency: new_histogram(),
            }),
            matched: AtomicI64::new(0),
            progress: AtomicI64::new(0),
            issued: (0..WINDOW)
                .map(|_| (AtomicI64::new(-1), AtomicU64::new(0)))
                .collect(),
            t0: Instant::now(),
            origin_ns: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        }
    }

    /// The run stopped (a thread failed): arrival waits, now and later, return at once, so
    /// that the threads waiting for arrivals reach their next ring or timeline call (which
    /// fails as stopped) without sleeping until the arrival.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Nanoseconds since the checker was made: the clock of its latencies.
    pub(crate) fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// When seq was issued ([`issued`](Self::issued)), while the checker still holds it.
    pub(crate) fn issued_ns(&self, seq: i64) -> Option<u64> {
        self.slot(seq).and_then(|(tag, at)| {
            (tag.load(Ordering::Acquire) == seq).then(|| at.load(Ordering::Relaxed))
        })
    }

    fn slot(&self, seq: i64) -> Option<&(AtomicI64, AtomicU64)> {
        (seq >= 0).then(|| &self.issued[seq as usize % WINDOW])
    }

    /// With a rate: when seq arrives, in nanoseconds since `t0`.
    fn arrival_ns(&self, seq: i64) -> Option<u64> {
        let origin = self.origin_ns.load(Ordering::Relaxed);
        self.rate
            .map(|rate| origin + (seq.max(0) as f64 / rate * 1e9) as u64)
    }

    /// The source starts now: batch 0 arrives at once, batch `s` `s / rate` seconds later
    /// (without it, from the checker's making). For an engine whose threads must be up before
    /// a batch can move (the resident engine's workers poll for their batches): the time they
    /// take to start is not the batches' latency. Call it before any arrival is read.
    pub(crate) fn start_arrivals(&self) {
        self.origin_ns.store(self.now_ns(), Ordering::Relaxed);
    }

    /// Block until `at_ns` after `t0`: a sleep to within [`SPIN_NS`] of it, then yields (a
    /// sleep alone overshoots by tens of microseconds, which would count as latency). Returns
    /// early once the run [stopped](Self::stop).
    fn wait_until(&self, at_ns: u64) {
        loop {
            let now = self.now_ns();
            if now >= at_ns || self.stopped.load(Ordering::Relaxed) {
                return;
            }
            let left = at_ns - now;
            if left > SPIN_NS {
                let nap = (left - SPIN_NS).min(STOP_POLL_NS);
                std::thread::sleep(std::time::Duration::from_nanos(nap));
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// Block until seq has arrived (at once without a rate): get_data's wait, without the
    /// latency stamp of [`issued`](Self::issued).
    pub(crate) fn wait_arrival(&self, seq: i64) {
        if let Some(at) = self.arrival_ns(seq) {
            self.wait_until(at);
        }
    }

    /// Seqs `0..n` have arrived by now: all of them without a rate.
    pub(crate) fn arrived(&self) -> i64 {
        match self.rate {
            Some(rate) => {
                let since = self
                    .now_ns()
                    .saturating_sub(self.origin_ns.load(Ordering::Relaxed));
                let n = (since as f64 / 1e9 * rate).floor() as i64 + 1;
                n.clamp(0, self.batches)
            }
            None => self.batches,
        }
    }

    /// The engine is about to issue seq's copy-in: latency starts here, or, with a rate, at
    /// seq's arrival, which this waits for (a batch late already is issued at once, and its
    /// lateness counts).
    pub(crate) fn issued(&self, seq: i64) {
        let at_ns = match self.arrival_ns(seq) {
            Some(arrival) => {
                self.wait_until(arrival);
                arrival
            }
            None => self.now_ns(),
        };
        if let Some((tag, at)) = self.slot(seq) {
            // The time first, then the tag that makes it valid.
            at.store(at_ns, Ordering::Relaxed);
            tag.store(seq, Ordering::Release);
        }
        self.progress.fetch_add(1, Ordering::Relaxed);
    }

    /// Batches [`issued`](Self::issued) plus batches [`process`](Self::process)ed (right or
    /// wrong) so far: a count that grows while the run moves, also while a launch's batches
    /// arrive one by one at a slow rate.
    pub(crate) fn progress(&self) -> i64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// process_data: check host output batch `hout`, which should hold seq's result.
    pub(crate) fn process<D: Device>(&self, dev: &D, hout: usize, seq: i64) {
        let in_range = (0..self.batches).contains(&seq);
        let ok = in_range && dev.check_output(hout, seq);
        let latency = self
            .issued_ns(seq)
            .map(|at| self.now_ns().saturating_sub(at));
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if in_range {
            seen.arrive(seq);
        }
        if ok {
            self.matched.fetch_add(1, Ordering::Relaxed);
        } else {
            seen.wrong(seq);
        }
        if let Some(ns) = latency {
            seen.latency.saturating_record(ns.max(1));
        }
        self.progress.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn finish(self) -> Verification {
        let seen = self.seen.into_inner().unwrap_or_else(|e| e.into_inner());
        Verification {
            matched: self.matched.load(Ordering::Relaxed),
            wrong: seen.wrong,
            wrong_seqs: seen.wrong_seqs,
            missing: self.batches - seen.distinct,
            duplicated: seen.duplicated,
            latency_ns: seen.latency,
            stage_latency: None,
            phases: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen() -> Seen {
        Checker::new(1 << 40).seen.into_inner().unwrap()
    }

    #[test]
    fn arrivals_count_from_their_start() {
        // A batch every 10 ms: 50 ms after the checker was made, about 6 have arrived;
        // started again, one (two only 10 ms later).
        let c = Checker::paced(1000, Some(100.0));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(c.arrived() >= 5, "{}", c.arrived());
        c.start_arrivals();
        assert!(c.arrived() <= 2, "{}", c.arrived());
        assert!(c.arrival_ns(0).unwrap() >= 50_000_000);
    }

    #[test]
    fn a_stop_ends_an_arrival_wait_at_once() {
        // Batch 5 arrives 25 s after the start at the slowest rate; the stop comes after 20 ms.
        let c = Checker::paced(10, Some(0.2));
        let start = Instant::now();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                c.wait_arrival(5);
                c.issued(6);
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            c.stop();
            waiter.join().unwrap();
        });
        let took = start.elapsed();
        assert!(took < std::time::Duration::from_secs(2), "{took:?}");
        // Waits after the stop return at once too.
        let t = Instant::now();
        c.wait_arrival(9);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn arrivals_in_order_over_many_windows_count_once_each() {
        let mut s = seen();
        for seq in 0..(3 * WINDOW as i64 + 17) {
            s.arrive(seq);
        }
        assert_eq!((s.distinct, s.duplicated), (3 * WINDOW as i64 + 17, 0));
        assert_eq!(s.counts.len(), WINDOW, "the window does not grow");
    }

    #[test]
    fn a_repeat_inside_the_window_and_one_behind_it_are_duplicates() {
        let mut s = seen();
        for seq in [0, 1, 2, 1, 1] {
            s.arrive(seq);
        }
        assert_eq!(
            (s.distinct, s.duplicated),
            (3, 1),
            "a seq counted once however often"
        );
        s.arrive(10 * WINDOW as i64);
        s.arrive(0);
        assert_eq!((s.distinct, s.duplicated), (4, 2));
        // A gap is missing: nothing arrived for it.
        assert_eq!(s.distinct, 4);
    }

    #[test]
    fn the_smallest_wrong_seqs_are_listed_and_all_counted() {
        let mut s = seen();
        for seq in (0..100).rev() {
            s.wrong(seq);
        }
        assert_eq!(s.wrong, 100);
        assert_eq!(s.wrong_seqs, (0..WRONG_LISTED as i64).collect::<Vec<_>>());
    }
}
