//! process_data's bookkeeping: which seqs arrived, which matched the reference, and how long
//! each batch took.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::demo::device::Device;

/// What process_data saw.
#[derive(Debug, Default)]
pub(crate) struct Verification {
    pub matched: i64,
    pub wrong: Vec<i64>,
    pub missing: i64,
    pub duplicated: i64,
    /// Batch latencies (copy-in issued -> process_data returned) in microseconds, sorted; only
    /// of batches whose copy-in the engine reported ([`Checker::issued`]).
    pub latencies_us: Vec<f64>,
}

impl Verification {
    /// The `q` quantile (0..=1) of the batch latencies, if any were measured.
    pub fn latency_us(&self, q: f64) -> Option<f64> {
        let n = self.latencies_us.len();
        (n > 0).then(|| self.latencies_us[((n - 1) as f64 * q).round() as usize])
    }
}

/// process_data's bookkeeping: which seqs arrived, and which matched the reference.
pub(crate) struct Checker {
    seen: Mutex<Vec<u8>>,
    matched: AtomicI64,
    wrong: Mutex<Vec<i64>>,
    /// Per seq: nanoseconds since `t0` when its copy-in was issued (`u64::MAX`: not yet), and
    /// from then to process_data's return.
    issued: Vec<AtomicU64>,
    latency: Vec<AtomicU64>,
    t0: Instant,
}

impl Checker {
    pub(crate) fn new(batches: i64) -> Self {
        Checker {
            seen: Mutex::new(vec![0; batches as usize]),
            matched: AtomicI64::new(0),
            wrong: Mutex::default(),
            issued: (0..batches).map(|_| AtomicU64::new(u64::MAX)).collect(),
            latency: (0..batches).map(|_| AtomicU64::new(u64::MAX)).collect(),
            t0: Instant::now(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// The engine is about to issue seq's copy-in (latency starts here).
    pub(crate) fn issued(&self, seq: i64) {
        if let Some(t) = self.issued.get(seq as usize) {
            t.store(self.now_ns(), Ordering::Relaxed);
        }
    }

    /// process_data: check host output batch `hout`, which should hold seq's result.
    pub(crate) fn process<D: Device>(&self, dev: &D, hout: usize, seq: i64) {
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen[seq as usize] = seen[seq as usize].saturating_add(1);
        }
        if dev.check_output(hout, seq) {
            self.matched.fetch_add(1, Ordering::Relaxed);
        } else {
            self.wrong
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(seq);
        }
        let issued = self.issued[seq as usize].load(Ordering::Relaxed);
        if issued != u64::MAX {
            self.latency[seq as usize]
                .store(self.now_ns().saturating_sub(issued), Ordering::Relaxed);
        }
    }

    pub(crate) fn finish(self) -> Verification {
        let seen = self.seen.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut wrong = self.wrong.into_inner().unwrap_or_else(|e| e.into_inner());
        wrong.sort_unstable();
        let mut latencies_us: Vec<f64> = self
            .latency
            .iter()
            .map(|l| l.load(Ordering::Relaxed))
            .filter(|&l| l != u64::MAX)
            .map(|l| l as f64 / 1e3)
            .collect();
        latencies_us.sort_by(f64::total_cmp);
        Verification {
            matched: self.matched.load(Ordering::Relaxed),
            wrong,
            missing: seen.iter().filter(|&&c| c == 0).count() as i64,
            duplicated: seen.iter().filter(|&&c| c > 1).count() as i64,
            latencies_us,
        }
    }
}
