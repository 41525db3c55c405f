//! `seqsync demo --sweep`: every engine over batch sizes in one process, as a table (JSON) and
//! a plot (SVG): throughput against batch size (a line per engine, the device bound and the
//! resource bound) above p99 latency against batch size (a line per engine and the isolated
//! latency, log scale).

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
    /// The device bound at this size (every batch's work in one graph, no host in the loop;
    /// same process, measured once per size).
    pub device_bound_gbps: Option<f64>,
    /// `gbps / device_bound_gbps`.
    pub ratio_to_device_bound: Option<f64>,
    /// One batch alone on an idle device at this size (median; measured once per size).
    pub isolated_latency_us: Option<f64>,
    /// `latency_p99_us / isolated_latency_us`.
    pub p99_over_isolated: Option<f64>,
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
        let (mut bound, mut device, mut isolated) = (None, None, None);
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
                device = r.device_bound_gbps;
                isolated = r.isolated_latency_us;
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
                device_bound_gbps: device,
                ratio_to_device_bound: device.map(|d| r.gbps / d),
                isolated_latency_us: isolated,
                p99_over_isolated: isolated.and_then(|i| r.latency_p99_us.map(|l| l / i)),
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

/// A plotted line: name, points (batch bytes, value), color, dash pattern (`None`: solid).
struct Series {
    name: String,
    points: Vec<(usize, f64)>,
    color: &'static str,
    dash: Option<&'static str>,
}

/// One panel: its title and value axis, and its lines.
struct Panel<'a> {
    title: &'a str,
    /// Log scale (base 10) for the values, else linear from 0.
    log: bool,
    series: Vec<Series>,
}

const COLORS: [&str; 5] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"];

/// The plot: GB/s against batch size (log scale) with the device and resource bounds dashed,
/// above p99 latency against batch size (both log scale) with the isolated latency dashed.
pub fn svg(report: &SweepReport) -> String {
    let mut sizes: Vec<usize> = report.rows.iter().map(|r| r.batch_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    // A per-size value taken from the first row at that size that has it.
    let per_size = |f: fn(&SweepRow) -> Option<f64>| -> Vec<(usize, f64)> {
        sizes
            .iter()
            .filter_map(|&b| {
                report
                    .rows
                    .iter()
                    .filter(|r| r.batch_bytes == b)
                    .find_map(f)
                    .map(|v| (b, v))
            })
            .collect()
    };
    let per_engine = |f: fn(&SweepRow) -> Option<f64>| -> Vec<Series> {
        Engine::ALL
            .into_iter()
            .enumerate()
            .map(|(i, e)| Series {
                name: e.name().into(),
                points: report
                    .rows
                    .iter()
                    .filter(|r| r.engine == e)
                    .filter_map(|r| f(r).map(|v| (r.batch_bytes, v)))
                    .collect(),
                color: COLORS[i % COLORS.len()],
                dash: None,
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    let mut throughput = vec![
        Series {
            name: "device bound".into(),
            points: per_size(|r| r.device_bound_gbps),
            color: "black",
            dash: Some("6 4"),
        },
        Series {
            name: "resource bound".into(),
            points: per_size(|r| r.resource_bound_gbps),
            color: "#888",
            dash: Some("2 3"),
        },
    ];
    throughput.extend(per_engine(|r| Some(r.gbps)));
    let mut latency = vec![Series {
        name: "isolated latency".into(),
        points: per_size(|r| r.isolated_latency_us),
        color: "black",
        dash: Some("6 4"),
    }];
    latency.extend(per_engine(|r| r.latency_p99_us));
    let panels = [
        Panel {
            title: "GB/s (verified batches)",
            log: false,
            series: throughput,
        },
        Panel {
            title: "p99 latency, us",
            log: true,
            series: latency,
        },
    ];
    let (w, ph, top) = (760.0, 330.0, 34.0);
    let h = top + ph * panels.len() as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"70\" y=\"22\" font-size=\"14\">seqsync demo --sweep: \
         {} ({})</text>\n",
        esc(&report.device),
        report.backend
    );
    for (k, p) in panels.iter().enumerate() {
        s += &panel(p, &sizes, w, top + ph * k as f64, ph);
    }
    s += "</svg>\n";
    s
}

/// One panel's axes, grid, lines, points and legend, `height` tall from `y0`.
fn panel(p: &Panel<'_>, sizes: &[usize], w: f64, y0: f64, height: f64) -> String {
    let (left, right, top, bottom) = (70.0, 170.0, y0 + 10.0, y0 + height - 45.0);
    // Finite values only set the scale (at most 12 decades on a log panel).
    let values = || {
        p.series
            .iter()
            .flat_map(|s| s.points.iter().map(|&(_, v)| v))
            .filter(|v| v.is_finite())
    };
    let (lo, hi) = if p.log {
        let pos = || values().filter(|v| *v > 0.0);
        let lo = pos().fold(f64::INFINITY, f64::min);
        let hi = pos().fold(0.0f64, f64::max);
        if lo.is_finite() {
            let lo = lo.log10().floor().max(-300.0);
            (lo, hi.log10().ceil().clamp(lo + 1.0, lo + 12.0))
        } else {
            (0.0, 1.0)
        }
    } else {
        (0.0, values().fold(0.0f64, f64::max).max(1e-9) * 1.1)
    };
    let scale = |v: f64| if p.log { v.max(1e-12).log10() } else { v };
    let py = |v: f64| bottom - (scale(v) - lo) / (hi - lo) * (bottom - top);
    let lx = |b: usize| (b.max(1) as f64).log2();
    let x0 = lx(*sizes.first().unwrap_or(&1));
    let x1 = lx(*sizes.last().unwrap_or(&2)).max(x0 + 1.0);
    let xa = w - right;
    let px = |b: usize| left + (lx(b) - x0) / (x1 - x0) * (xa - left);
    let mut s = format!(
        "<line x1=\"{left}\" y1=\"{bottom}\" x2=\"{xa}\" y2=\"{bottom}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"black\"/>\n"
    );
    for &b in sizes {
        let x = px(b);
        s += &format!(
            "<line x1=\"{x:.1}\" y1=\"{bottom}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            bottom + 4.0,
            bottom + 18.0,
            size_label(b)
        );
    }
    let ticks: Vec<f64> = if p.log {
        (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        (0..=5).map(|i| hi * i as f64 / 5.0).collect()
    };
    for v in ticks {
        let y = py(v);
        let label = if p.log && v >= 1.0 {
            format!("{v:.0}")
        } else if p.log {
            format!("{v}")
        } else {
            format!("{v:.1}")
        };
        s += &format!(
            "<line x1=\"{left}\" y1=\"{y:.1}\" x2=\"{xa}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>\n",
            left - 6.0,
            y + 4.0
        );
    }
    let mid = (top + bottom) / 2.0;
    s += &format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">batch size</text>\n<text \
         x=\"16\" y=\"{mid:.1}\" transform=\"rotate(-90 16 {mid:.1})\" \
         text-anchor=\"middle\">{}</text>\n",
        (left + xa) / 2.0,
        bottom + 34.0,
        esc(p.title)
    );
    for (i, line) in p.series.iter().filter(|l| !l.points.is_empty()).enumerate() {
        // A point off the scale (not finite) is left out; one beyond it is drawn at its edge.
        let shown: Vec<(usize, f64)> = line
            .points
            .iter()
            .copied()
            .filter(|(_, v)| v.is_finite())
            .collect();
        let y = |v: f64| py(v).clamp(top, bottom);
        let path: Vec<String> = shown
            .iter()
            .map(|&(b, v)| format!("{:.1},{:.1}", px(b), y(v)))
            .collect();
        let dash = line
            .dash
            .map(|d| format!(" stroke-dasharray=\"{d}\""))
            .unwrap_or_default();
        let color = line.color;
        s += &format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>\n",
            path.join(" ")
        );
        for &(b, v) in &shown {
            s += &format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>\n",
                px(b),
                y(v)
            );
        }
        let ly = top + 10.0 + 20.0 * i as f64;
        s += &format!(
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{color}\" \
             stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
            xa + 12.0,
            xa + 36.0,
            xa + 42.0,
            ly + 4.0,
            esc(&line.name)
        );
    }
    s
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(engine: Engine, batch_bytes: usize, gbps: f64, p99: f64) -> SweepRow {
        SweepRow {
            engine,
            batch_bytes,
            batches: 1,
            verified: true,
            gbps,
            resource_bound_gbps: Some(gbps),
            ratio_to_resource_bound: Some(1.0),
            device_bound_gbps: Some(f64::INFINITY),
            ratio_to_device_bound: Some(0.0),
            isolated_latency_us: Some(0.0),
            p99_over_isolated: None,
            latency_p50_us: Some(p99),
            latency_p99_us: Some(p99),
            graph_batches: None,
        }
    }

    #[test]
    fn values_off_the_scale_are_left_out_of_the_plot_not_drawn_or_looped_over() {
        let report = SweepReport {
            backend: "host",
            device: "host".into(),
            rows: vec![
                row(Engine::HandWritten, 1 << 16, 1.0, f64::INFINITY),
                row(Engine::HandWritten, 1 << 18, f64::NAN, 1e300),
                row(Engine::Graph, 1 << 16, 2.0, 1e-300),
            ],
        };
        let svg = svg(&report);
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
        // Log ticks: at most 13 decades however far apart the values.
        assert!(svg.matches("stroke=\"#ddd\"").count() <= 13 + 6, "{svg}");
    }
}
