//! `seqsync demo --sweep`: every engine over batch sizes in one process, as a table (JSON) and
//! a plot (SVG) of throughput against batch size, one line per engine plus the resource bound.

use serde::Serialize;

use super::{run, DemoConfig, DemoReport, Engine};
use seqsync::Result;

/// The sweep's batch sizes: 64 KiB to 64 MiB, by factors of 4.
pub const SWEEP_SIZES: [usize; 6] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20];

/// Bytes each run moves at most (fewer batches at large sizes), so a sweep takes minutes.
const SWEEP_BYTES: usize = 6 << 30;

/// One engine at one batch size.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    /// Which engine.
    pub engine: Engine,
    /// Bytes per batch.
    pub batch_bytes: usize,
    /// Batches pushed through.
    pub batches: i64,
    /// Every batch verified?
    pub verified: bool,
    /// Throughput, GB/s.
    pub gbps: f64,
    /// The resource bound measured at this size (same process).
    pub resource_bound_gbps: Option<f64>,
    /// `gbps / resource_bound_gbps`.
    pub ratio_to_resource_bound: Option<f64>,
    /// Batch latency p50 (copy-in issued -> process_data returned).
    pub latency_p50_us: Option<f64>,
    /// Batch latency p99.
    pub latency_p99_us: Option<f64>,
    /// [`Engine::Graph`]: batches per graph.
    pub graph_batches: Option<usize>,
}

/// The whole sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    /// "host" or "cuda".
    pub backend: &'static str,
    /// The GPU's name, or "host".
    pub device: String,
    /// One row per engine and size.
    pub rows: Vec<SweepRow>,
}

/// Batches for one run at `size`: the configured count, fewer where that would move more than
/// [`SWEEP_BYTES`], at least 16.
fn batches_at(config: &DemoConfig, size: usize) -> i64 {
    config
        .batches
        .min((SWEEP_BYTES / size.max(1)).max(16) as i64)
}

/// Run every engine at every size in `sizes`; the baselines (the resource bound) are measured
/// once per size, with the first engine.
///
/// # Errors
/// The first failing run's error (verification failures are rows with `verified: false`).
pub fn sweep(
    config: &DemoConfig,
    sizes: &[usize],
    mut progress: impl FnMut(&SweepRow),
) -> Result<SweepReport> {
    if sizes.is_empty() {
        return Err(super::validate::invalid(
            "--sweep-sizes lists no size".into(),
        ));
    }
    // Every size is checked before the first run (each run checks its own again).
    if let Some(&bad) = sizes.iter().find(|&&s| s == 0 || !s.is_multiple_of(4)) {
        return Err(super::validate::invalid(format!(
            "--sweep-sizes {bad} is not a positive whole number of 4-byte elements (u32)"
        )));
    }
    let mut rows = Vec::new();
    let mut head: Option<(&'static str, String)> = None;
    for &size in sizes {
        let mut bound = None;
        for (i, engine) in Engine::ALL.into_iter().enumerate() {
            let r: DemoReport = run(&DemoConfig {
                engine,
                batch_bytes: Some(size),
                batches: batches_at(config, size),
                baselines: i == 0,
                graph_batches: None,
                spec: None,
                trace: false,
                progress: None,
                ..config.clone()
            })?;
            if i == 0 {
                bound = r.resource_bound_gbps;
            }
            head.get_or_insert((r.backend, r.device.clone()));
            let row = SweepRow {
                engine,
                batch_bytes: size,
                batches: r.batches,
                verified: r.all_verified(),
                gbps: r.gbps,
                resource_bound_gbps: bound,
                ratio_to_resource_bound: bound.map(|b| r.gbps / b),
                latency_p50_us: r.latency_p50_us,
                latency_p99_us: r.latency_p99_us,
                graph_batches: r.graph_batches,
            };
            progress(&row);
            rows.push(row);
        }
    }
    let (backend, device) = head.unwrap_or(("host", "host".into()));
    Ok(SweepReport {
        backend,
        device,
        rows,
    })
}

/// The plot: GB/s against batch size (log scale), a line per engine and a dashed one for the
/// resource bound.
pub fn svg(report: &SweepReport) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 440.0, 70.0, 170.0, 40.0, 50.0);
    let mut sizes: Vec<usize> = report.rows.iter().map(|r| r.batch_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let ymax = report
        .rows
        .iter()
        .flat_map(|r| [Some(r.gbps), r.resource_bound_gbps])
        .flatten()
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let lx = |b: usize| (b as f64).log2();
    let (x0, x1) = (
        lx(*sizes.first().unwrap_or(&1)),
        lx(*sizes.last().unwrap_or(&2)).max(lx(*sizes.first().unwrap_or(&1)) + 1.0),
    );
    let px = |b: usize| left + (lx(b) - x0) / (x1 - x0) * (w - left - right);
    let py = |v: f64| top + (1.0 - v / ymax) * (h - top - bottom);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{left}\" y=\"22\" font-size=\"14\">seqsync demo --sweep: \
         {} ({})</text>\n",
        esc(&report.device),
        report.backend
    );
    // Axes, ticks, labels.
    let (xa, ya) = (h - bottom, w - right);
    s += &format!(
        "<line x1=\"{left}\" y1=\"{xa}\" x2=\"{ya}\" y2=\"{xa}\" stroke=\"black\"/>\n<line \
         x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{xa}\" stroke=\"black\"/>\n"
    );
    for &b in &sizes {
        let x = px(b);
        s += &format!(
            "<line x1=\"{x:.1}\" y1=\"{xa}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            xa + 4.0,
            xa + 18.0,
            size_label(b)
        );
    }
    for i in 0..=5 {
        let v = ymax * i as f64 / 5.0;
        let y = py(v);
        s += &format!(
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{ya}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v:.1}</text>\n",
            left - 6.0,
            y + 4.0
        );
    }
    s += &format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">batch size</text>\n<text \
         x=\"16\" y=\"{:.1}\" transform=\"rotate(-90 16 {:.1})\" text-anchor=\"middle\">GB/s \
         (verified batches)</text>\n",
        (left + ya) / 2.0,
        h - 12.0,
        (top + xa) / 2.0,
        (top + xa) / 2.0
    );
    // Lines: the bound (from the first engine's rows), then each engine.
    let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
    let mut series: Vec<Series> = Vec::new();
    let bound: Vec<(usize, f64)> = sizes
        .iter()
        .filter_map(|&b| {
            report
                .rows
                .iter()
                .find(|r| r.batch_bytes == b)
                .and_then(|r| r.resource_bound_gbps.map(|v| (b, v)))
        })
        .collect();
    if !bound.is_empty() {
        series.push(("resource bound".into(), bound, "black", true));
    }
    for (i, e) in Engine::ALL.into_iter().enumerate() {
        let pts: Vec<(usize, f64)> = report
            .rows
            .iter()
            .filter(|r| r.engine == e)
            .map(|r| (r.batch_bytes, r.gbps))
            .collect();
        if !pts.is_empty() {
            series.push((e.name().into(), pts, colors[i % colors.len()], false));
        }
    }
    for (i, (name, pts, color, dashed)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .map(|&(b, v)| format!("{:.1},{:.1}", px(b), py(v)))
            .collect();
        let dash = if *dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        s += &format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>\n",
            path.join(" ")
        );
        for &(b, v) in pts {
            s += &format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>\n",
                px(b),
                py(v)
            );
        }
        let ly = top + 10.0 + 20.0 * i as f64;
        s += &format!(
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{color}\" \
             stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
            ya + 12.0,
            ya + 36.0,
            ya + 42.0,
            ly + 4.0,
            esc(name)
        );
    }
    s += "</svg>\n";
    s
}

/// A plotted line: name, points (batch bytes, GB/s), color, dashed?
type Series = (String, Vec<(usize, f64)>, &'static str, bool);

fn size_label(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{} MiB", b >> 20)
    } else {
        format!("{} KiB", b >> 10)
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
