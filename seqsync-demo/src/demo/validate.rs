//! A config's checks before anything runs: slot counts, switches that go together, batch size
//! and the host memory the sizes need.

use seqsync::backend::BackendKind;
use seqsync::{Error, Result};

use super::device::CHECK_RUN;
use super::{graph_engine, workload, CopyBy, DemoConfig, Engine, GraphEdge, Release, Variant};

pub(super) fn invalid(msg: String) -> Error {
    crate::invalid("demo", msg)
}

impl DemoConfig {
    /// The graph engines' own options (`--graph-batches`, `--graph-depth`): checked before
    /// anything is computed from them (the slot counts are their product).
    pub(super) fn validate_graph_options(&self) -> Result<()> {
        if let Some(k) = self.graph_batches {
            if !self.engine.uses_graphs() {
                return Err(invalid(
                    "--graph-batches needs --engine graph or adaptive".into(),
                ));
            }
            if k == 0 || k > graph_engine::MAX_GRAPH_BATCHES {
                return Err(invalid(format!(
                    "--graph-batches {k} is outside 1..={}",
                    graph_engine::MAX_GRAPH_BATCHES
                )));
            }
        }
        if let Some(d) = self.graph_depth {
            if self.engine != Engine::Adaptive {
                return Err(invalid("--graph-depth needs --engine adaptive".into()));
            }
            if !(2..=MAX_GRAPH_DEPTH).contains(&d) {
                return Err(invalid(format!(
                    "--graph-depth {d} is outside 2..={MAX_GRAPH_DEPTH}"
                )));
            }
        }
        if self.copy_by.is_some() && !self.engine.chooses_copies() {
            return Err(invalid(
                "--copy needs --engine graph, adaptive or resident".into(),
            ));
        }
        if let Some(span) = self.graph_span {
            if self.engine != Engine::Adaptive {
                return Err(invalid("--graph-span needs --engine adaptive".into()));
            }
            if span == 0 || span > graph_engine::MAX_GRAPH_BATCHES {
                return Err(invalid(format!(
                    "--graph-span {span} is outside 1..={}",
                    graph_engine::MAX_GRAPH_BATCHES
                )));
            }
        }
        if let Some(n) = self.process_threads {
            if !self.engine.has_process_threads() {
                return Err(invalid(
                    "--process-threads needs --engine adaptive or resident".into(),
                ));
            }
            if !(1..=MAX_PROCESS_THREADS).contains(&n) {
                return Err(invalid(format!(
                    "--process-threads {n} is outside 1..={MAX_PROCESS_THREADS}"
                )));
            }
        }
        if let Some(n) = self.slots {
            if self.engine != Engine::Resident {
                return Err(invalid("--slots needs --engine resident".into()));
            }
            if !(1..=MAX_SLOTS).contains(&n) {
                return Err(invalid(format!("--slots {n} is outside 1..={MAX_SLOTS}")));
            }
        }
        Ok(())
    }

    pub(super) fn validate(&self, batch_bytes: usize, kind: BackendKind) -> Result<()> {
        if let Some(r) = self.rate {
            if !(r.is_finite() && (MIN_RATE..=MAX_RATE).contains(&r)) {
                return Err(invalid(format!(
                    "--rate {r}: batches per second, from {MIN_RATE} (a batch every 5 s, \
                     under the engines' stall watchdogs) to {MAX_RATE}"
                )));
            }
            let span = (self.batches.max(1) - 1) as f64 / r;
            if span > MAX_ARRIVAL_SPAN_S {
                return Err(invalid(format!(
                    "--rate {r} with --batches {}: the last batch would arrive after {span:.0} s; \
                     at most {MAX_ARRIVAL_SPAN_S} s (a day)",
                    self.batches
                )));
            }
        }
        for (name, v) in [
            ("nin", self.nin),
            ("nx", self.nx),
            ("ny", self.ny),
            ("nout", self.nout),
        ] {
            if v == 0 {
                return Err(invalid(format!(
                    "--{name} must be at least 1 (a ring buffer needs a slot)"
                )));
            }
            if v > MAX_SLOTS {
                return Err(invalid(format!(
                    "--{name} {v} exceeds the {MAX_SLOTS} slots a demo ring buffer may have"
                )));
            }
        }
        if self.host_slots > MAX_SLOTS {
            return Err(invalid(format!(
                "--host-slots {} exceeds {MAX_SLOTS}",
                self.host_slots
            )));
        }
        if self.drop_wait.is_some() && kind != BackendKind::Host {
            return Err(invalid(
                "--drop-wait is a test switch for the host backend (on CUDA the host would read \
                 a batch while its copy still writes it)"
                    .into(),
            ));
        }
        if self.engine != Engine::HandWritten && self.variant != Variant::Seed {
            return Err(invalid(format!(
                "--engine {} runs --variant seed only, not {:?}",
                self.engine.name(),
                self.variant
            )));
        }
        if self.variant == Variant::Pool && self.drop_wait.is_some() {
            return Err(invalid(
                "--drop-wait names the ring pipeline's waits; --variant pool has none".into(),
            ));
        }
        if self.engine != Engine::HandWritten && self.drop_wait.is_some() {
            return Err(invalid("--drop-wait needs --engine handwritten".into()));
        }
        if self.drop_edge.is_some()
            && (!self.engine.slots_everywhere() || kind != BackendKind::Host)
        {
            return Err(invalid(
                "--drop-edge is a test switch for --engine graph, adaptive or resident on the \
                 host backend"
                    .into(),
            ));
        }
        if self.engine == Engine::Resident {
            // Its copies by the copy engines have two orderings of their own.
            let copy_streams =
                self.copy_by.or(CopyBy::auto_for(self.engine, batch_bytes)) == Some(CopyBy::Memcpy);
            match self.drop_edge {
                Some(GraphEdge::CopyInG | GraphEdge::FH | GraphEdge::GH) => {
                    return Err(invalid(
                        "--engine resident runs a batch's stages in one thread, one after the \
                         other: it can drop group-waits, arrival-wait, processed-in-order, and \
                         with --copy memcpy copy-in-f or h-copy-out"
                            .into(),
                    ))
                }
                Some(GraphEdge::CopyInF | GraphEdge::HCopyOut) if !copy_streams => {
                    return Err(invalid(
                        "--drop-edge copy-in-f and h-copy-out with --engine resident need \
                         --copy memcpy (the copies on streams)"
                            .into(),
                    ))
                }
                _ => {}
            }
        }
        if self.release.is_some() && self.engine != Engine::Adaptive {
            return Err(invalid("--release needs --engine adaptive".into()));
        }
        if self.slot_wait.is_some() && self.engine != Engine::Adaptive {
            return Err(invalid("--slot-wait needs --engine adaptive".into()));
        }
        if self.drop_edge == Some(GraphEdge::ArrivalWait)
            && self.engine != Engine::Resident
            && (self.engine != Engine::Adaptive
                || self.release.unwrap_or_default() != Release::Device)
        {
            return Err(invalid(
                "--drop-edge arrival-wait needs --engine adaptive with --release device, or \
                 --engine resident"
                    .into(),
            ));
        }
        if self.drop_edge == Some(GraphEdge::ProcessedInOrder) && !self.engine.has_process_threads()
        {
            return Err(invalid(
                "--drop-edge processed-in-order needs --engine adaptive or resident".into(),
            ));
        }
        self.validate_graph_options()?;
        if self.variant == Variant::HostRing && self.host_slots == 0 {
            return Err(invalid("--host-slots must be at least 1".into()));
        }
        if self.batches < 1 {
            return Err(invalid(format!(
                "--batches must be at least 1, got {}",
                self.batches
            )));
        }
        if batch_bytes == 0 || !batch_bytes.is_multiple_of(4) {
            return Err(invalid(format!(
                "--batch-bytes {batch_bytes} is not a whole number of 4-byte elements (u32)"
            )));
        }
        if batch_bytes < 4 * workload::HEADER {
            return Err(invalid(format!(
                "--batch-bytes {batch_bytes} is below the {}-byte batch header",
                4 * workload::HEADER
            )));
        }
        // Host memory: every buffer on the host backend; the pinned host batches on CUDA
        // (device memory failures come back as errors, host allocation failures would abort);
        // and the reference, 4 bytes per checked element per input pattern.
        let (patterns, outputs) = if self.engine.slots_everywhere() {
            // The graph and resident engines' layouts: a host input and output batch per slot.
            (self.nin, self.nin)
        } else {
            let lags = self
                .nin
                .max(self.nx)
                .max(self.ny)
                .max(self.nout)
                .max(self.host_slots);
            (workload::prime_above(lags), self.host_slots.max(1))
        };
        let host_buffers = if kind == BackendKind::Host {
            self.nin + self.nx + self.ny + self.nout
        } else {
            0
        } + patterns
            + outputs;
        let elements = batch_bytes / 4;
        // A sampled check with fewer than two lines of the body per run keeps the whole body:
        // under twice the samples plus two runs.
        let checked = match self.verify_samples {
            0 => elements,
            n => elements.min(
                n.saturating_mul(2)
                    .saturating_add(2 * CHECK_RUN + workload::HEADER),
            ),
        };
        let need =
            (batch_bytes as u128) * host_buffers as u128 + 4 * checked as u128 * patterns as u128;
        if let Some(avail) = available_memory() {
            if need > avail as u128 {
                return Err(invalid(format!(
                    "these sizes need {:.1} GiB of host memory ({host_buffers} buffers of \
                     {batch_bytes} bytes); {:.1} GiB is available",
                    need as f64 / (1u64 << 30) as f64,
                    avail as f64 / (1u64 << 30) as f64
                )));
            }
        }
        Ok(())
    }
}

/// Slowest `--rate`: a batch every 5 s, so a thread of the pipeline, graph or adaptive engine
/// waiting for an arrival is never taken for stalled (their watchdogs wait at least 10 s).
const MIN_RATE: f64 = 0.2;
/// Fastest `--rate`.
const MAX_RATE: f64 = 1e7;
/// Latest arrival a `--rate` run may have, in seconds.
const MAX_ARRIVAL_SPAN_S: f64 = 86_400.0;

/// Most launch groups in flight (`--graph-depth`).
const MAX_GRAPH_DEPTH: usize = 16;

/// Most process_data threads (`--process-threads`).
const MAX_PROCESS_THREADS: usize = 64;

/// Most slots a demo ring buffer may have.
const MAX_SLOTS: usize = 1 << 16;

/// `MemAvailable` of /proc/meminfo in bytes, where there is one.
/// Host memory available now (Linux `MemAvailable`), if it can be read.
pub(crate) fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
