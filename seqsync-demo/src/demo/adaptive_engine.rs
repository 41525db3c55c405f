//! The seed's pipeline on per-slot graphs, K batches a launch only while batches wait
//! ([`Engine::Adaptive`](super::Engine::Adaptive)): an idle pipeline launches each batch as it
//! arrives, a saturated one launches groups as the graph engine does.
//!
//! Every buffer has `S = depth * K` slots (`K` a power of two, `depth` launch groups of `K`:
//! [`DEPTH`] unless told; host input and output batches included) and batch `s` lives in slot
//! `s % S`. A launch carries `m` consecutive batches from `s`, with `m` a power of two that
//! divides `s` (so the slots `s % S ..` do not wrap): one graph per (first slot, `m`) pair,
//! instantiated and uploaded before the run and replayed with nothing to update. Before each launch the h2g thread waits for batch `s` to arrive, then
//! takes `m` = the largest such power of two no larger than the batches already waiting, `K`
//! and what is left; launch `i` goes on stream `i % STREAMS`.
//!
//! Across launches:
//!
//! - `launched` (an [`EventRingbuf`], nconsumers 1, max_size `S`: at most `S` batches, so at
//!   most `S` launches, are in flight; recorded blocking after each launch, consumed by the
//!   g2h thread): the g2h thread synchronizes on launch `i` before `process_data` of its
//!   batches. Which batches launch `i` carried travels on a channel of the same bound.
//! - `processed` (a host [`Timeline`]: the number of batches processed, signalled by the g2h
//!   thread after each launch's batches): the h2g thread waits for `s + m - S` before its
//!   launch rewrites the slots (host inputs and outputs, `in`, `x`, `y`, `out`) of batches
//!   `s - S ..`; those batches' graphs have run, since they were processed.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::device::{Device, Stream};
#[cfg(doc)]
use super::graph_engine::DEPTH;
use super::graph_engine::{record, run_threads, sync_streams, GraphEdge};
use super::pipeline::{first_error, Checker, RunOptions, Variant, Verification};
use seqsync::backend::Backend;
use seqsync::graph::GraphExecutable;
use seqsync::timeline::Timeline;
use seqsync::{Blocking, Error, EventRingbuf, Result};

/// Streams the launches rotate over: enough for several small launches in flight at once.
pub const STREAMS: usize = 8;

/// Bytes a saturated launch should carry at most when `--graph-batches` is not given: half
/// the graph engine's, since every batch of a launch waits for the launch ...
const GROUP_BYTES: usize = 2 << 20;

/// ... and batches it should carry at most: with its graphs uploaded, 4 batches a launch and
/// 3 launches in flight reach the device bound from 64 KiB up on the H200, and more only adds
/// latency (BENCHMARKS.md §13, the K x depth scan).
const AUTO_MAX_BATCHES: usize = 4;

/// K for `batch_bytes` when not given: the largest power of two of batches within
/// [`GROUP_BYTES`] (2 MiB) and [`AUTO_MAX_BATCHES`] (4), at least 1.
pub fn auto_launch_batches(batch_bytes: usize) -> usize {
    launch_batches((GROUP_BYTES / batch_bytes.max(1)).clamp(1, AUTO_MAX_BATCHES))
}

/// The largest power of two at most `k` (at least 1): the adaptive engine's K for a requested
/// or automatic K.
pub fn launch_batches(k: usize) -> usize {
    1 << (usize::BITS - 1 - k.max(1).leading_zeros())
}

/// Batches the next launch carries: the largest power of two that divides `s`, is at most
/// `waiting` (batches arrived and not launched, at least 1), `k` and `left`.
fn launch_size(s: i64, waiting: i64, k: usize, left: i64) -> usize {
    let cap = waiting.min(left).min(k as i64).max(1) as usize;
    let mut m = launch_batches(cap);
    while m > 1 && s % m as i64 != 0 {
        m /= 2;
    }
    m
}

/// A run's graphs, by (first slot, batches).
type Graphs<D> = HashMap<(usize, usize), GraphExecutable<<D as Device>::B>>;

/// Every graph a run of `batches` batches can launch: per power of two `m <= k`, one per
/// first slot that is a multiple of `m` (and holds a batch).
fn record_all<D: Device>(
    dev: &D,
    k: usize,
    slots: usize,
    batches: i64,
    drop: Option<GraphEdge>,
) -> Result<Graphs<D>> {
    let mut graphs = HashMap::new();
    let mut m = 1;
    while m <= k {
        for first in (0..slots).step_by(m) {
            if (first as i64) < batches {
                graphs.insert((first, m), record(dev, m, first / m, m, drop)?);
            }
        }
        m *= 2;
    }
    Ok(graphs)
}

/// Run the seed's pipeline on adaptive launches of at most `k` batches (a power of two);
/// returns the wall time, what process_data saw and how many launches carried the batches. The
/// layout must have `depth * k` slots in every buffer and as many host input and output
/// batches.
pub(crate) fn run<D: Device>(
    dev: &D,
    opt: &RunOptions<'_>,
    k: usize,
    depth: usize,
    drop: Option<GraphEdge>,
) -> Result<(Duration, Verification, u64)> {
    debug_assert!(opt.variant == Variant::Seed && opt.drop.is_none());
    // Aligned launches need a power of two (the layout was made for this K).
    let k = launch_batches(k);
    let l = *dev.layout();
    let slots = depth * k;
    assert!(
        [l.nin, l.nx, l.ny, l.nout, l.npatterns, l.nhout]
            .iter()
            .all(|&n| n == slots),
        "the adaptive engine's layout has depth * k slots everywhere"
    );
    let b = dev.backend();
    let batches = opt.batches;
    let graphs = record_all(dev, k, slots, batches, drop)?;
    let streams: Vec<Stream<D>> = (0..STREAMS)
        .map(|i| b.new_stream(&format!("s_adaptive{i}")))
        .collect::<Result<_>>()?;
    // Every graph on the device before the run: a graph's first launch uploads it otherwise,
    // which would land on the first batch of each slot and size.
    for exe in graphs.values() {
        exe.upload(&streams[0])?;
    }
    b.synchronize_stream(&streams[0])?;
    let waits = drop != Some(GraphEdge::GroupWaits);
    let launched = EventRingbuf::new(b, "launched", 1, slots)?;
    let processed = Timeline::new(b, "processed", 0)?;
    let (tx, rx) = mpsc::sync_channel::<(i64, i64, usize)>(slots);
    let checker_owned = Checker::paced(batches, opt.rate);
    let checker = &checker_owned;
    let s_total = slots as i64;
    let start = Instant::now();
    let (launched, processed, streams) = (&launched, &processed, &streams);
    let launches = std::sync::atomic::AtomicU64::new(0);
    let launches_ref = &launches;
    // The h2g thread owns the graphs (they are `Send`, not `Sync`) and hands them back, to be
    // dropped only after the streams were synchronized.
    let h2g = move || -> (Result<()>, Graphs<D>) {
        let r = (|| -> Result<()> {
            let (mut s, mut i) = (0i64, 0i64);
            while s < batches {
                dev.chaos_pause();
                checker.wait_arrival(s);
                let waiting = checker.arrived() - s;
                let m = launch_size(s, waiting, k, batches - s);
                // Slots of batches s - S .. s + m - S are free once those batches were processed.
                let free_from = s + m as i64 - s_total;
                if waits && free_from > 0 {
                    // Failed only by `stop` below, after the other thread's own error: a stop.
                    processed
                        .wait(free_from as u64, Duration::MAX)
                        .map_err(|e| Error::Stopped {
                            ring: "processed".into(),
                            reason: e.to_string().into(),
                            cause: Some(std::sync::Arc::new(e)),
                        })?;
                }
                for seq in s..s + m as i64 {
                    dev.fill_input(seq);
                    checker.issued(seq);
                }
                let first = (s % s_total) as usize;
                let exe = graphs
                    .get(&(first, m))
                    .expect("record_all made a graph for every (first slot, size)");
                let stream = &streams[i as usize % STREAMS];
                exe.launch(stream)?;
                // Consumed on the g2h thread: blocking.
                launched.record(stream, i, Blocking::Yes)?;
                // The g2h thread ends early only when it failed (and stopped the ring).
                tx.send((i, s, m)).map_err(|_| Error::Stopped {
                    ring: "launched".into(),
                    reason: "the g2h thread ended early".into(),
                    cause: None,
                })?;
                s += m as i64;
                i += 1;
                launches_ref.store(i as u64, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        })();
        (r, graphs)
    };
    let g2h = move || -> Result<()> {
        let mut done = 0i64;
        while done < batches {
            let Ok((i, s, m)) = rx.recv() else {
                return Err(crate::invalid("demo", "the h2g thread ended early"));
            };
            dev.chaos_pause();
            // Produced on the h2g thread: blocking.
            launched.synchronize(i, Blocking::Yes)?;
            for seq in s..s + m as i64 {
                // process_data: the graph's copy into host output batch seq % S is done.
                checker.process(dev, (seq % s_total) as usize, seq);
                if let Some(p) = opt.progress {
                    p(seq + 1);
                }
            }
            done = s + m as i64;
            processed.signal(done as u64)?;
        }
        Ok(())
    };
    let stop = |why: String| {
        launched.stop(why.clone());
        processed.fail(Error::Cancelled(why));
    };
    let (results, graphs) = run_threads(h2g, g2h, &stop);
    let synced = sync_streams(b, streams);
    let wall = start.elapsed();
    first_error(results)?;
    synced?;
    // The graphs are dropped only now, after the streams were synchronized.
    std::mem::drop(graphs);
    let launches = launches.into_inner();
    Ok((wall, checker_owned.finish(), launches))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_automatic_k_is_a_power_of_two_of_batches_within_2_mib_and_4_batches() {
        assert_eq!(auto_launch_batches(64 << 10), 4);
        assert_eq!(auto_launch_batches(256 << 10), 4);
        assert_eq!(auto_launch_batches(1 << 20), 2);
        assert_eq!(
            auto_launch_batches(700 << 10),
            2,
            "2.9 batches round down to 2"
        );
        assert_eq!(auto_launch_batches(3 << 20), 1);
        assert_eq!(auto_launch_batches(1 << 10), 4);
    }

    #[test]
    fn launches_take_what_waits_in_aligned_powers_of_two() {
        assert_eq!(launch_batches(1), 1);
        assert_eq!(launch_batches(48), 32);
        assert_eq!(launch_batches(64), 64);
        // Saturated: K at every multiple of K.
        assert_eq!(launch_size(128, 1000, 64, 1000), 64);
        // One waiting: one batch, wherever it is.
        assert_eq!(launch_size(37, 1, 64, 1000), 1);
        // Three waiting at 6: two (6 is even, not a multiple of 4).
        assert_eq!(launch_size(6, 3, 64, 1000), 2);
        assert_eq!(launch_size(5, 3, 64, 1000), 1);
        // What is left bounds it too.
        assert_eq!(launch_size(64, 1000, 64, 5), 4);
        // Nothing counted as waiting still launches the batch that arrived.
        assert_eq!(launch_size(8, 0, 64, 10), 1);
    }
}
