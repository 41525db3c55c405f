//! `--trace`: a Chrome / Perfetto trace (JSON trace-event format) of one pipeline run.
//!
//! Device work appears on one track per stream, timed by device events; blocking calls appear
//! on one track per host thread, timed by the host clock. Open the file in
//! <https://ui.perfetto.dev> or `chrome://tracing`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{json, Value};

use super::device::Mark;

/// Host-side spans (blocking calls on host threads) of one run.
pub(crate) struct HostSpans {
    pub t0: Instant,
    spans: Mutex<Vec<Span>>,
}

/// One complete span on a track.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub lane: String,
    pub label: String,
    pub seq: i64,
    pub start_us: f64,
    pub dur_us: f64,
}

impl HostSpans {
    pub(crate) fn new(t0: Instant) -> Self {
        HostSpans {
            t0,
            spans: Mutex::default(),
        }
    }

    /// Run `f`, recording it as a span on `lane`.
    pub(crate) fn time<T>(&self, lane: &str, label: &str, seq: i64, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let r = f();
        self.add(lane, label, seq, start, Instant::now());
        r
    }

    /// Record a span on `lane` from `start` to `end`.
    pub(crate) fn add(&self, lane: &str, label: &str, seq: i64, start: Instant, end: Instant) {
        let us = |t: Instant| t.saturating_duration_since(self.t0).as_secs_f64() * 1e6;
        let span = Span {
            lane: lane.to_owned(),
            label: label.to_owned(),
            seq,
            start_us: us(start),
            dur_us: us(end) - us(start),
        };
        self.spans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(span);
    }

    pub(crate) fn take(&self) -> Vec<Span> {
        std::mem::take(&mut *self.spans.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Pair begin/end marks of the same (lane, label, seq) into spans.
pub(crate) fn spans_from_marks(marks: Vec<Mark>) -> Vec<Span> {
    let mut open: BTreeMap<(&str, &str, i64), f64> = BTreeMap::new();
    let mut spans = Vec::new();
    for m in &marks {
        let key = (m.lane, m.label, m.seq);
        if m.begin {
            open.insert(key, m.t_us);
        } else if let Some(start) = open.remove(&key) {
            spans.push(Span {
                lane: m.lane.to_owned(),
                label: m.label.to_owned(),
                seq: m.seq,
                start_us: start,
                dur_us: (m.t_us - start).max(0.0),
            });
        }
    }
    spans
}

/// The trace-event JSON document: streams first, then host threads, one track each.
pub(crate) fn to_chrome_json(device: &[Span], host: &[Span]) -> Value {
    let mut tracks: Vec<(String, u32)> = Vec::new();
    let mut events = Vec::new();
    for (pid, spans) in [(1u32, device), (2u32, host)] {
        for s in spans {
            let tid = match tracks.iter().position(|(l, p)| *l == s.lane && *p == pid) {
                Some(i) => i,
                None => {
                    tracks.push((s.lane.clone(), pid));
                    tracks.len() - 1
                }
            };
            events.push(json!({
                "name": format!("{} {}", s.label, s.seq),
                "cat": if pid == 1 { "stream" } else { "host" },
                "ph": "X",
                "ts": s.start_us,
                "dur": s.dur_us,
                "pid": pid,
                "tid": tid,
                "args": { "seq": s.seq, "stage": s.label },
            }));
        }
    }
    for (tid, (lane, pid)) in tracks.iter().enumerate() {
        events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": lane}}));
        events.push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}));
    }
    events.push(json!({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "streams (device time)"}}));
    events.push(
        json!({"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "host threads"}}),
    );
    json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}
