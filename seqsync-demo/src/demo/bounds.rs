//! The two bounds every engine is measured against, in the same run (issue 22, item 1):
//!
//! - [`device_bound`]: what these kernels and copies can do at this batch size with no host in
//!   the loop. Every batch's body (h2g copy -> f, g -> h -> g2h copy) goes into one graph, each
//!   batch in slots of its own, with nodes of its own (so nothing orders two batches but the
//!   hardware), and again with the bodies of each run of `span` consecutive batches merged into
//!   five nodes over their slots, as the adaptive engine launches them (so an engine that
//!   merges batches is measured against the same merge); the faster graph is the bound. Each
//!   is launched
//!   and timed from the launch to the stream's end (the fastest of three launches); every
//!   batch is then verified. On
//!   CUDA this is one CUDA graph; on the host backend the graph runs its nodes one after
//!   another on one stream, so there it is the serial time, not a bound.
//! - [`isolated_latency`]: one batch alone through the pipeline on an otherwise idle device,
//!   from its copy-in being issued to its check returning, the median of many rounds: the
//!   floor any engine's latency is measured against. Three ways are timed (the five streams and
//!   their events as the hand-written engine issues one batch, a one-batch graph, and a
//!   resident kernel waiting for the batch's arrival: [`isolated_floor`]) and the lowest
//!   median is the floor.
//!
//! Both also run the resident kernel ([`Engine::Resident`](super::Engine::Resident)): for the
//! device bound with every batch arrived before it starts, a candidate like the graphs.

use std::sync::Arc;
use std::time::Instant;

use super::copy_by::CopyBy;
use super::device::{Device, Layout};
use super::pipeline::Streams;
use super::poll::poll;
use super::report::DeviceBoundBy;
use super::validate::available_memory;
use super::{adaptive_engine, graph_engine};
use seqsync::backend::Backend;
use seqsync::Result;

/// Input bytes the device bound moves at most (fewer batches at large sizes): its buffers are
/// six per batch (host input and output, `in`, `x`, `y`, `out`).
const BOUND_BYTES: usize = 1 << 30;

/// Timed launches of the device bound's graph (after one untimed): the fastest counts.
const BOUND_LAUNCHES: usize = 3;

/// Batches in the device bound's graph: at least this many (memory permitting) ...
const BOUND_MIN_BATCHES: usize = 4;

/// ... and at most this many (five nodes each).
const BOUND_MAX_BATCHES: usize = 512;

/// Rounds of [`isolated_latency`] per way, after [`ISOLATED_WARMUP`] untimed ones.
pub(crate) const ISOLATED_ROUNDS: usize = 100;
const ISOLATED_WARMUP: usize = 5;

/// The device bound: how many batches its graph carried, how many consecutive batches shared
/// a set of nodes in the faster graph, and how long its launch took.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceBound {
    pub batches: usize,
    /// A graph, or the resident kernel (every batch arrived before it starts).
    pub by: DeviceBoundBy,
    pub span: usize,
    /// How the faster graph's nodes copied (copy nodes or copy kernels).
    pub copy_by: CopyBy,
    pub seconds: f64,
}

/// Batches for the device bound at `batch_bytes`, given at most `batches` and `avail` bytes of
/// host memory (of which it takes at most a quarter); `None` when not even one fits.
fn bound_batches(batches: i64, batch_bytes: usize, avail: Option<u64>) -> Option<usize> {
    let by_bytes = (BOUND_BYTES / batch_bytes.max(1)).max(BOUND_MIN_BATCHES);
    let mut n = by_bytes.min(BOUND_MAX_BATCHES).min(batches.max(1) as usize);
    if let Some(avail) = avail {
        // Six buffers a batch on the host backend (two, pinned, on CUDA): count six.
        let fits = (avail / 4) as usize / (6 * batch_bytes.max(1));
        n = n.min(fits);
    }
    (n >= 1).then_some(n)
}

/// Measure the device bound on a device like `dev` (same backend and batch size, each batch in
/// slots of its own): one untimed launch (uploads, first touches), then the fastest of
/// [`BOUND_LAUNCHES`] timed ones.
///
/// `Ok(None)` when host memory does not allow even one batch's buffers, or when the device
/// cannot allocate them.
///
/// # Errors
/// A failing backend call, or a batch that does not verify (the bound counts only work done
/// right).
pub(crate) fn device_bound<D: Device>(
    dev: &D,
    batches: i64,
    span: usize,
) -> Result<Option<DeviceBound>> {
    let l = *dev.layout();
    let Some(nb) = bound_batches(batches, l.n * 4, available_memory()) else {
        return Ok(None);
    };
    // As the adaptive engine: a power of two (the last span takes what is left).
    let span = adaptive_engine::launch_batches(span.clamp(1, nb));
    let layout = Layout {
        nin: nb,
        nx: nb,
        ny: nb,
        nout: nb,
        npatterns: nb,
        nhout: nb,
        ..l
    };
    let mut best: Option<DeviceBound> = None;
    let mut resident_tried = false;
    // Copy nodes and copy kernels where they differ (CUDA), whatever the run's own copies:
    // the faster counts.
    for copy_by in dev.distinct_copies() {
        // Its buffers come on top of the run's: where they cannot be had (device memory),
        // there is no bound with them, and the run's own report stands.
        let Ok(bound) = dev.with_layout(Layout { copy_by, ..layout }) else {
            continue;
        };
        let graph = fastest_graph(&bound, nb, span, copy_by)?;
        // The resident kernel with every batch arrived before it starts (no host in its loop
        // either), once, on the first of these devices: it copies by itself, whatever the
        // layout's copies.
        let resident = match std::mem::replace(&mut resident_tried, true) {
            false => resident_kernel(&bound, nb)?,
            true => None,
        };
        for d in graph.into_iter().chain(resident) {
            if best.is_none_or(|b| d.seconds < b.seconds) {
                best = Some(d);
            }
        }
    }
    Ok(best)
}

/// The resident kernel over `nb` batches in slots of their own, all arrived before it is
/// launched: the fastest of [`BOUND_LAUNCHES`] timed launches after an untimed one, every batch
/// verified after each. `Ok(None)` where the kernel cannot be had (its words not allocated, or
/// its launch refused: a device without unified addressing): no candidate, as for a graph
/// whose buffers cannot be had.
fn resident_kernel<D: Device>(bound: &D, nb: usize) -> Result<Option<DeviceBound>> {
    for seq in 0..nb as i64 {
        bound.fill_input(seq);
    }
    let b = bound.backend();
    let stream = b.new_stream("s_bound_resident")?;
    let mut seconds = f64::INFINITY;
    for launch in 0..=BOUND_LAUNCHES {
        // SAFETY: `bound` is this function's own device; its stream was synchronized after the
        // kernel before, and nothing else copies into or reads it.
        unsafe { bound.clear_outputs() };
        let Ok(words) = bound.resident_words(nb) else {
            return Ok(None);
        };
        let words = Arc::new(words);
        words.arrive(nb as u64);
        let t = Instant::now();
        // Every batch has arrived: the kernel ends by itself after the last one.
        if bound
            .launch_resident(&stream, &words, nb as i64, true, CopyBy::Kernel)
            .is_err()
        {
            return Ok(None);
        }
        b.synchronize_stream(&stream)?;
        let took = t.elapsed().as_secs_f64();
        if launch > 0 {
            seconds = seconds.min(took);
        }
        let wrong = (0..nb)
            .filter(|&s| words.done(s) != s as u64 + 1 || !bound.check_output(s, s as i64))
            .count();
        if wrong > 0 {
            return Err(crate::invalid(
                "demo",
                format!(
                    "the device bound's resident kernel computed {wrong} of {nb} batches wrong"
                ),
            ));
        }
    }
    Ok(Some(DeviceBound {
        batches: nb,
        by: DeviceBoundBy::Resident,
        span: 1,
        copy_by: CopyBy::Kernel,
        seconds,
    }))
}

/// The faster of the bound's two graphs on `bound` (nodes per batch, nodes per `span`
/// batches), every batch verified.
fn fastest_graph<D: Device>(
    bound: &D,
    nb: usize,
    span: usize,
    copy_by: CopyBy,
) -> Result<Option<DeviceBound>> {
    for seq in 0..nb as i64 {
        bound.fill_input(seq);
    }
    let b = bound.backend();
    let stream = b.new_stream("s_bound")?;
    let mut best: Option<DeviceBound> = None;
    let spans: &[usize] = if span > 1 { &[1, span] } else { &[1] };
    for &span in spans {
        let exe = graph_engine::record(bound, nb, 0, nb, span, None)?;
        // Every host output batch is cleared first, so that what is checked below is what
        // this graph wrote (the graph before it wrote the same values).
        // SAFETY: `bound` is this function's own device; its stream was synchronized after
        // every launch of the graph before, and nothing else copies into or reads it.
        unsafe { bound.clear_outputs() };
        exe.launch(&stream)?;
        b.synchronize_stream(&stream)?;
        // The best of a few launches: a bound is what the device can do, and one launch of a
        // few milliseconds can land on a clock ramp or a neighbour's burst.
        let mut seconds = f64::INFINITY;
        for _ in 0..BOUND_LAUNCHES {
            let t = Instant::now();
            exe.launch(&stream)?;
            b.synchronize_stream(&stream)?;
            seconds = seconds.min(t.elapsed().as_secs_f64());
        }
        let wrong = (0..nb)
            .filter(|&s| !bound.check_output(s, s as i64))
            .count();
        if wrong > 0 {
            return Err(crate::invalid(
                "demo",
                format!(
                    "the device bound's graph ({span} batches a node, copies by {}) computed \
                     {wrong} of {nb} batches wrong",
                    copy_by.name()
                ),
            ));
        }
        if best.is_none_or(|b| seconds < b.seconds) {
            best = Some(DeviceBound {
                batches: nb,
                by: DeviceBoundBy::Graph,
                span,
                copy_by,
                seconds,
            });
        }
    }
    Ok(best)
}

/// The median of `rounds` timings of one batch alone, issued as the hand-written engine issues
/// it (five streams, events between them) and as a one-batch graph; the lower median, in
/// microseconds. Uses slot 0 of every buffer of `dev`: nothing else may run on it meanwhile.
///
/// # Errors
/// A failing backend call, or a batch that does not verify.
pub(crate) fn isolated_latency<D: Device>(dev: &D, rounds: usize) -> Result<f64> {
    let b = dev.backend();
    let np = dev.layout().npatterns as i64;
    let st = Streams::new(dev)?;
    let ev = || b.create_event(Default::default());
    let (e_in, e_f, e_g, e_h, e_out) = (ev()?, ev()?, ev()?, ev()?, ev()?);
    let graph = graph_engine::record(dev, 1, 0, 1, 1, None)?;
    let s_graph = b.new_stream("s_isolated")?;
    let check = |seq: i64| -> Result<()> {
        if dev.check_output(0, seq) {
            Ok(())
        } else {
            Err(crate::invalid(
                "demo",
                format!("the isolated-latency batch {seq} computed wrong"),
            ))
        }
    };
    let (mut streams, mut graphed) = (Vec::new(), Vec::new());
    for r in 0..ISOLATED_WARMUP + rounds {
        // Through the five streams: host input `seq % np`.
        let seq = r as i64;
        dev.fill_input(seq);
        let t = Instant::now();
        let hin = (seq % np) as usize;
        dev.copy_in(&st.h2g, hin, 0)?;
        b.record(&e_in, &st.h2g)?;
        b.wait(&st.f, &e_in)?;
        dev.launch_f(&st.f, 0, 0)?;
        b.record(&e_f, &st.f)?;
        b.wait(&st.g, &e_in)?;
        dev.launch_g(&st.g, 0, 0)?;
        b.record(&e_g, &st.g)?;
        b.wait(&st.h, &e_f)?;
        b.wait(&st.h, &e_g)?;
        dev.launch_h(&st.h, 0, 0, 0)?;
        b.record(&e_h, &st.h)?;
        b.wait(&st.g2h, &e_h)?;
        dev.copy_out(&st.g2h, 0, 0)?;
        b.record(&e_out, &st.g2h)?;
        b.synchronize(&e_out)?;
        check(seq)?;
        let streamed = t.elapsed().as_secs_f64();
        // As one graph: it reads host input 0, so a seq that lands there.
        let seq = r as i64 * np;
        dev.fill_input(seq);
        let t = Instant::now();
        graph.launch(&s_graph)?;
        b.synchronize_stream(&s_graph)?;
        check(seq)?;
        let graph_s = t.elapsed().as_secs_f64();
        if r >= ISOLATED_WARMUP {
            streams.push(streamed);
            graphed.push(graph_s);
        }
    }
    st.sync_all(dev)?;
    Ok(median(streams).min(median(graphed)) * 1e6)
}

/// The isolated latency of batches of `dev`'s size, in microseconds: the lowest of
/// [`isolated_latency`] on a one-slot device for each of [`Device::distinct_copies`] (copy
/// nodes and copy kernels where they differ, whatever the run's own copies: the same floor for
/// every engine of a sweep), and of one batch through a resident kernel ([`resident_latency`],
/// measured once).
pub(crate) fn isolated_floor<D: Device>(dev: &D, rounds: usize) -> Result<f64> {
    let mut floor = f64::INFINITY;
    let mut resident_tried = false;
    for copy_by in dev.distinct_copies() {
        let one = Layout {
            nin: 1,
            nx: 1,
            ny: 1,
            nout: 1,
            npatterns: 1,
            nhout: 1,
            copy_by,
            ..*dev.layout()
        };
        let Ok(d) = dev.with_layout(one) else {
            continue;
        };
        floor = floor.min(isolated_latency(&d, rounds)?);
        if !std::mem::replace(&mut resident_tried, true) {
            if let Some(s) = resident_latency(&d, rounds)? {
                floor = floor.min(s * 1e6);
            }
        }
    }
    if !floor.is_finite() {
        // No one-slot device could be had: the run's own.
        floor = isolated_latency(dev, rounds)?;
    }
    Ok(floor)
}

/// Longest the resident way of [`isolated_floor`] waits for one batch before it gives up.
const RESIDENT_ROUND_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The median of `rounds` batches through a resident kernel (one slot, the kernel launched
/// once and idle between them), from the arrival's store to the check's end, in seconds;
/// `Ok(None)` where the kernel cannot be had (as in [`resident_kernel`]).
fn resident_latency<D: Device>(dev: &D, rounds: usize) -> Result<Option<f64>> {
    let b = dev.backend();
    let np = dev.layout().npatterns as i64;
    let Ok(words) = dev.resident_words(1) else {
        return Ok(None);
    };
    let words = Arc::new(words);
    let stream = b.new_stream("s_isolated_resident")?;
    let total = ISOLATED_WARMUP + rounds;
    if dev
        .launch_resident(&stream, &words, total as i64, true, CopyBy::Kernel)
        .is_err()
    {
        return Ok(None);
    }
    let timed = (|| -> Result<Vec<f64>> {
        let mut times = Vec::with_capacity(rounds);
        for r in 0..total {
            // Host input 0 (the kernel's one slot) holds a seq that lands there.
            let seq = r as i64 * np;
            dev.fill_input(seq);
            let t = Instant::now();
            words.arrive(r as u64 + 1);
            let done = poll(
                || words.done(0) > r as u64,
                || t.elapsed() > RESIDENT_ROUND_LIMIT,
            );
            if !done {
                return Err(crate::invalid(
                    "demo",
                    format!(
                        "the isolated-latency resident kernel did not finish batch {r} within \
                         {} s",
                        RESIDENT_ROUND_LIMIT.as_secs()
                    ),
                ));
            }
            if !dev.check_output(0, seq) {
                return Err(crate::invalid(
                    "demo",
                    format!("the isolated-latency resident batch {seq} computed wrong"),
                ));
            }
            if r >= ISOLATED_WARMUP {
                times.push(t.elapsed().as_secs_f64());
            }
        }
        Ok(times)
    })();
    // Stopped on every path, then synchronized (after the last round it has ended already).
    words.stop();
    let synced = b.synchronize_stream(&stream);
    let times = timed?;
    synced?;
    Ok(Some(median(times)))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::device::HostDevice;
    use seqsync::backend::host::HostBackend;

    fn host_device(batches: usize) -> HostDevice {
        HostDevice::new(HostBackend::new(), Layout::uniform(1024, batches, 4))
    }

    #[test]
    fn a_graph_of_spans_computes_every_batch_the_last_span_short() {
        // 7 batches in spans of 4: one set of nodes for batches 0..4, one for 4..7.
        let dev = host_device(7);
        for seq in 0..7 {
            dev.fill_input(seq);
        }
        let exe = graph_engine::record(&dev, 7, 0, 7, 4, None).unwrap();
        let b = dev.backend();
        let stream = b.new_stream("s").unwrap();
        exe.launch(&stream).unwrap();
        b.synchronize_stream(&stream).unwrap();
        let wrong: Vec<usize> = (0..7).filter(|&s| !dev.check_output(s, s as i64)).collect();
        assert!(wrong.is_empty(), "batches {wrong:?} wrong");
        // Cleared, nothing verifies.
        // SAFETY: the stream was synchronized; nothing else uses the device.
        unsafe { dev.clear_outputs() };
        assert!((0..7).all(|s| !dev.check_output(s, s as i64)));
    }

    #[test]
    fn the_device_bound_verifies_both_graphs_and_keeps_every_batch() {
        let dev = host_device(1);
        for span in [1, 4, 64] {
            let d = device_bound(&dev, 7, span).unwrap().unwrap();
            assert_eq!(d.batches, 7, "span {span}");
            // The span is a power of two within the batches; the bound's is 1 or that one.
            let within = launch_batches_at_most(span, 7);
            assert!(d.span == 1 || d.span == within, "{span}: {d:?}");
            assert!(d.seconds > 0.0 && d.seconds.is_finite());
        }
    }

    #[test]
    fn the_resident_kernel_bound_runs_every_batch_and_verifies_it() {
        let dev = host_device(1);
        let bound = dev
            .with_layout(Layout {
                nin: 9,
                nx: 9,
                ny: 9,
                nout: 9,
                npatterns: 9,
                nhout: 9,
                ..*dev.layout()
            })
            .unwrap();
        let d = resident_kernel(&bound, 9)
            .unwrap()
            .expect("the host backend has the kernel");
        assert!(d.by == DeviceBoundBy::Resident && d.batches == 9, "{d:?}");
        assert!(d.seconds > 0.0 && d.seconds.is_finite());
    }

    #[test]
    fn the_resident_way_of_the_isolated_latency_times_each_batch() {
        let dev = host_device(1);
        let us = resident_latency(&dev, 20)
            .unwrap()
            .expect("the host backend has the kernel");
        assert!(us > 0.0 && us.is_finite(), "{us}");
    }

    fn launch_batches_at_most(span: usize, batches: usize) -> usize {
        adaptive_engine::launch_batches(span.clamp(1, batches))
    }

    #[test]
    fn the_device_bound_takes_fewer_batches_at_large_sizes_and_fits_memory() {
        assert_eq!(bound_batches(400, 64 << 10, None), Some(400));
        assert_eq!(bound_batches(4000, 64 << 10, None), Some(BOUND_MAX_BATCHES));
        assert_eq!(bound_batches(400, 1 << 20, None), Some(400));
        assert_eq!(bound_batches(400, 64 << 20, None), Some(16));
        assert_eq!(bound_batches(400, 1 << 31, None), Some(BOUND_MIN_BATCHES));
        assert_eq!(
            bound_batches(3, 64 << 20, None),
            Some(3),
            "never more than the run"
        );
        // A quarter of 24 MiB holds one batch of 1 MiB's six buffers.
        assert_eq!(bound_batches(400, 1 << 20, Some(24 << 20)), Some(1));
        assert_eq!(bound_batches(400, 1 << 20, Some(1 << 20)), None);
    }
}
