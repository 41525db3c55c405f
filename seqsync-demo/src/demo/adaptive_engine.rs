//! The seed's pipeline on per-slot graphs, K batches a launch only while batches wait
//! ([`Engine::Adaptive`](super::Engine::Adaptive)): an idle pipeline launches each batch as it
//! arrives, a saturated one launches groups as the graph engine does.
//!
//! Every buffer has `S = depth * K` slots (`K` a power of two, `depth` launch groups of `K`:
//! [`auto_depth`] unless told; host input and output batches included) and batch `s` lives in slot
//! `s % S`. A launch carries `m` consecutive batches from `s`, with `m` a power of two that
//! divides `s` (so the slots `s % S ..` do not wrap): one graph per (first slot, `m`) pair,
//! instantiated and uploaded before the run and replayed with nothing to update. A graph has
//! five nodes for each run of `span` consecutive slots of its `m` (one copy in, f, g, h and
//! copy out for all of them: on CUDA one copy or kernel over the span, which costs about what
//! one batch of that size does; `span` is the automatic K at that batch size, at most K,
//! unless told: `--graph-span`). Before each launch the h2g thread waits for batch `s` to arrive, then
//! takes `m` = the largest such power of two no larger than the batches already waiting, `K`
//! and what is left; launch `i` goes on stream `i % STREAMS`.
//!
//! Across launches:
//!
//! - `launched` (an [`EventRingbuf`], nconsumers 1, max_size `S`: at most `S` batches, so at
//!   most `S` launches, are in flight; recorded blocking after each launch, consumed by the
//!   g2h thread): the g2h thread synchronizes on launch `i`, then tells the process_data
//!   threads ([`ProcessWorkers`]) that its batches landed. Which batches launch `i` carried
//!   travels on a channel of the same bound.
//! - `processed` (a [`Timeline`]: the number of batches processed in seq order, signalled by
//!   the process_data threads): a launch that rewrites the slots (host inputs and outputs,
//!   `in`, `x`, `y`, `out`) of batches `s - S ..` runs only once it reached `s + m - S`; those
//!   batches' graphs have run, since they were processed. get_data waits for it on the host
//!   before it fills batch `s + m - 1` in, so with the device release the launch's stream
//!   wait on `arrived` waits for the slots too. Where the h2g thread waits is the
//!   [`SlotWait`]: with [`SlotWait::Device`] (the default with the device release) it does
//!   not wait for the slots, only runs at most `S` batches ahead of them, so a slot freed
//!   starts the launch already enqueued on it with no launch call in between (get_data's
//!   fill and signal only); with [`SlotWait::Host`] it waits on the host, then launches.
//!
//! Each batch is stamped as its launch is called and returns, as the g2h thread sees it land
//! and as its check begins and ends (clock reads on the threads that pass those points anyway):
//! the report's [`phases`](super::DemoReport::phases), where the latency went.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::device::{Device, Stream};
use super::graph_engine::DEPTH;
use super::graph_engine::{record, sync_streams, GraphEdge};
use super::names::parse_name;
use super::pipeline::{
    failed_by_stop, first_error, stopped, Checker, ProcessWorkers, RunOptions, Variant,
    Verification,
};
use super::threads::{run_threads, Body};
use super::watchdog::Watch;
use seqsync::backend::Backend;
use seqsync::graph::GraphExecutable;
use seqsync::timeline::{Mechanism, Timeline};
use seqsync::{Blocking, Error, EventRingbuf, Result};

/// Streams the launches rotate over: enough for several small launches in flight at once.
pub const STREAMS: usize = 8;

/// Batches in flight (launched, not processed) past which the device release launches no
/// batch ahead of its arrival: enough to cover a few arrivals' worth of launch cost.
const AHEAD: i64 = STREAMS as i64;

/// Bytes a saturated launch should carry at most when `--graph-batches` is not given: half
/// the graph engine's, since every batch of a launch waits for the launch ...
const GROUP_BYTES: usize = 2 << 20;

/// ... and batches it should carry at most: with its graphs uploaded, 4 batches a launch and
/// 3 launches in flight reach the device bound from 64 KiB up on the H200, and more only adds
/// latency (BENCHMARKS.md §13, the K x depth scan).
const AUTO_MAX_BATCHES: usize = 4;

/// K for `batch_bytes` when not given: the largest power of two of batches within
/// 2 MiB (`GROUP_BYTES`) and 4 (`AUTO_MAX_BATCHES`), at least 1.
pub fn auto_launch_batches(batch_bytes: usize) -> usize {
    launch_batches((GROUP_BYTES / batch_bytes.max(1)).clamp(1, AUTO_MAX_BATCHES))
}

/// Launch groups in flight when `--graph-depth` is not given: the h2g thread may launch a batch
/// only once the batch `S` slots before it was processed, and what the device has queued must
/// outlast that round trip (the launch's completion seen on the host, the check, the next
/// launch). Six groups were the best or within the noise of the best at 64 KiB, 256 KiB and
/// 1 MiB with the automatic K (BENCHMARKS.md §13, run H): three held 256 KiB and 1 MiB at
/// half and two thirds of the device bound ...
const AUTO_DEPTH: usize = 6;

/// ... unless six groups would put more than this in one buffer's slots (huge batches), down
/// to [`DEPTH`] groups.
const MAX_SLOT_BYTES: usize = 512 << 20;

/// Launch groups in flight for batches of `batch_bytes` and launches of at most `k` batches
/// when not given: six, fewer where six groups would hold more than 512 MiB of batches in a
/// buffer, at least three.
pub fn auto_depth(batch_bytes: usize, k: usize) -> usize {
    (MAX_SLOT_BYTES / batch_bytes.saturating_mul(k).max(1)).clamp(DEPTH, AUTO_DEPTH)
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
/// first slot that is a multiple of `m` (and holds a batch), its nodes each over `span`
/// consecutive batches (at most `m`).
fn record_all<D: Device>(
    dev: &D,
    k: usize,
    span: usize,
    slots: usize,
    batches: i64,
    drop: Option<GraphEdge>,
) -> Result<Graphs<D>> {
    let mut graphs = HashMap::new();
    let mut m = 1;
    while m <= k {
        for first in (0..slots).step_by(m) {
            if (first as i64) < batches {
                let exe = record(dev, m, first / m, m, span.min(m), drop)?;
                graphs.insert((first, m), exe);
            }
        }
        m *= 2;
    }
    Ok(graphs)
}

/// Batch bytes below which the release is [`Release::Device`] unless told: from 1 MiB the
/// host release ran faster on the H200, below it the device release did as well or better
/// (BENCHMARKS.md §13, run E).
pub const DEVICE_RELEASE_BELOW: usize = 1 << 20;

/// Where a batch's arrival releases the launch that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Release {
    /// On the device: the h2g thread enqueues each launch ahead of its batches, behind a
    /// stream wait on the `arrived` timeline, and a third thread (get_data) signals that
    /// timeline as each batch arrives, so arrival -> start costs one store and a launch's
    /// host cost is off the batch's path.
    #[default]
    Device,
    /// On the host: the h2g thread waits for a batch's arrival, then fills it in and
    /// launches it.
    Host,
}

impl Release {
    /// Both, the default first.
    pub const ALL: [Release; 2] = [Release::Device, Release::Host];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Release::Device => "device",
            Release::Host => "host",
        }
    }
}

impl std::str::FromStr for Release {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        parse_name(s, "release", &Release::ALL, Release::name)
    }
}

/// Where a launch waits for the slots it rewrites to be free (the batches `S` before it
/// processed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlotWait {
    /// On the device: the launch's stream wait on `arrived` (get_data fills a batch in only
    /// once its slots are free), the launch enqueued up to `S` batches before they are (the
    /// device release only: with the host release the h2g thread fills the host inputs
    /// itself, so it must wait).
    Device,
    /// On the host: the h2g thread waits, then launches.
    Host,
}

impl SlotWait {
    /// Both, the default with the device release first.
    pub const ALL: [SlotWait; 2] = [SlotWait::Device, SlotWait::Host];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SlotWait::Device => "device",
            SlotWait::Host => "host",
        }
    }

    /// The slot wait of a run with `release` when `asked` for one (`None`: the device with
    /// the device release, else the host).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for [`SlotWait::Device`] with [`Release::Host`].
    pub fn for_release(asked: Option<SlotWait>, release: Release) -> Result<SlotWait> {
        match (asked, release) {
            (Some(SlotWait::Device), Release::Host) => Err(crate::invalid(
                "demo",
                "--slot-wait device needs --release device (with the host release the h2g \
                 thread fills the host inputs itself, after their slots are free)"
                    .to_string(),
            )),
            (Some(w), _) => Ok(w),
            (None, Release::Device) => Ok(SlotWait::Device),
            (None, Release::Host) => Ok(SlotWait::Host),
        }
    }
}

impl std::str::FromStr for SlotWait {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        parse_name(s, "slot wait", &SlotWait::ALL, SlotWait::name)
    }
}

/// How an adaptive run launches: at most `k` batches a launch (a power of two), each node
/// over `span` consecutive batches (a power of two, at most `k`), `depth` launch groups of
/// slots, the release and slot wait, and `process_threads` process_data threads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Launching {
    pub(crate) k: usize,
    pub(crate) span: usize,
    pub(crate) depth: usize,
    pub(crate) release: Release,
    pub(crate) slot_wait: SlotWait,
    pub(crate) process_threads: usize,
}

impl Release {
    /// The release a run of `batch_bytes` batches gets with `mechanism` (that of the run's
    /// timelines) when `asked` for one (`None`: the device for batches below
    /// [`DEVICE_RELEASE_BELOW`] where the mechanism allows it, else the host).
    ///
    /// # Errors
    /// [`Error::WaitBeforeSignalUnsupported`] for the device release with a mechanism whose
    /// stream waits do not hold the commands after them ([`Mechanism::holds_commands`], false
    /// for events): the launches enqueued ahead of their batches would read them unfilled.
    pub fn for_mechanism(
        asked: Option<Release>,
        mechanism: &Mechanism,
        batch_bytes: usize,
    ) -> Result<Release> {
        match asked {
            Some(Release::Device) if !mechanism.holds_commands() => {
                Err(Error::WaitBeforeSignalUnsupported {
                    timeline: "arrived".into(),
                    value: 1,
                    enqueued: 0,
                    mechanism: mechanism.name().into(),
                })
            }
            Some(r) => Ok(r),
            None if mechanism.holds_commands() && batch_bytes < DEVICE_RELEASE_BELOW => {
                Ok(Release::Device)
            }
            None => Ok(Release::Host),
        }
    }

    /// [`Release::for_mechanism`] with the mechanism of `backend`'s timelines.
    pub(crate) fn on<B: Backend>(
        asked: Option<Release>,
        backend: &B,
        batch_bytes: usize,
    ) -> Result<Release> {
        let probe = Timeline::new(backend, "arrived", 0)?;
        Release::for_mechanism(asked, &probe.mechanism(), batch_bytes)
    }
}

/// Run the seed's pipeline on adaptive launches as `how` says (at most `k` batches a launch,
/// released by arrivals on the device or the host, slots waited for on the device or the
/// host, process_data on `process_threads` threads); returns the wall time, what
/// process_data saw and how many launches carried the batches. The layout must have
/// `depth * k` slots in every buffer and as many host input and output batches.
pub(crate) fn run<D: Device>(
    dev: &D,
    opt: &RunOptions<'_>,
    how: Launching,
    drop: Option<GraphEdge>,
) -> Result<(Duration, Verification, u64)> {
    debug_assert!(opt.variant == Variant::Seed && opt.drop.is_none());
    let Launching {
        k,
        span,
        depth,
        release,
        slot_wait,
        process_threads,
    } = how;
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
    // Device release: the number of batches arrived and filled in (get_data's signal). Made
    // first, so that a mechanism that cannot hold the launches refuses before anything is
    // enqueued.
    let arrived = Timeline::new(b, "arrived", 0)?;
    let release = Release::for_mechanism(Some(release), &arrived.mechanism(), l.n * 4)?;
    let slots_on_device = SlotWait::for_release(Some(slot_wait), release)? == SlotWait::Device;
    let batches = opt.batches;
    let span = launch_batches(span.min(k));
    let graphs = record_all(dev, k, span, slots, batches, drop)?;
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
    let on_device = release == Release::Device;
    let arrival_waits = drop != Some(GraphEdge::ArrivalWait);
    // Launches in flight: those of the batches between the last processed and the last
    // launched, at most `S` (the slots) or, waiting for the slots on the device, `2 S` (the
    // h2g thread runs up to `S` batches ahead of them); one a batch at worst.
    let ahead = if slots_on_device { slots } else { 0 };
    let launched = EventRingbuf::new(b, "launched", 1, slots + ahead)?;
    let processed = Timeline::new(b, "processed", 0)?;
    let workers =
        ProcessWorkers::new(b, batches, slots, drop != Some(GraphEdge::ProcessedInOrder))?;
    let workers = &workers;
    let (tx, rx) = mpsc::sync_channel::<(i64, i64, usize)>(slots + ahead);
    let checker_owned = Checker::paced(batches, opt.rate);
    let checker = &checker_owned;
    let s_total = slots as i64;
    let start = Instant::now();
    let (launched, processed, arrived, streams) = (&launched, &processed, &arrived, &streams);
    let launches = std::sync::atomic::AtomicU64::new(0);
    let launches_ref = &launches;
    // Slots `..until` of every buffer are free once the batches before `until + S` were
    // processed (their graphs have run and their host outputs were read).
    let slots_free = move |until: i64| -> Result<()> {
        if waits && until > 0 {
            processed
                .wait(until as u64, Duration::MAX)
                .map_err(|e| stopped("processed", e))?;
        }
        Ok(())
    };
    // get_data, in a thread of its own with the device release: fill batch s in as it
    // arrives (once its host input slot is free), then signal `arrived` past it.
    let get_data = move || -> Result<()> {
        for s in 0..batches {
            dev.chaos_pause();
            slots_free(s + 1 - s_total)?;
            checker.wait_arrival(s);
            dev.fill_input(s);
            checker.issued(s);
            arrived
                .signal(s as u64 + 1)
                .map_err(|e| failed_by_stop(arrived, e))?;
        }
        Ok(())
    };
    // The h2g thread owns the graphs (they are `Send`, not `Sync`) and hands them back, to be
    // dropped only after the streams were synchronized.
    let h2g = move || -> (Result<()>, Graphs<D>) {
        let r = (|| -> Result<()> {
            let (mut s, mut i) = (0i64, 0i64);
            while s < batches {
                dev.chaos_pause();
                if !on_device {
                    checker.wait_arrival(s);
                } else if checker.arrived() <= s {
                    // Ahead of the arrivals: launched early only while the device keeps up
                    // (fewer than AHEAD batches in flight), so that when it does not, batches
                    // wait on the host and go out in groups.
                    slots_free(s + 1 - AHEAD)?;
                }
                // Launched ahead of its arrival: one batch.
                let waiting = checker.arrived() - s;
                let m = launch_size(s, waiting, k, batches - s);
                // Slots of batches s - S .. s + m - S are free once those batches were
                // processed: waited for here; or, with the slots waited for on the device, by
                // the launch's wait on `arrived` (get_data fills batch s + m - 1 in only once
                // batch s + m - S was processed), the h2g thread running up to S batches ahead.
                let waited_from = checker.now_ns();
                slots_free(s + m as i64 - s_total - ahead as i64)?;
                let slot_wait = checker.now_ns().saturating_sub(waited_from);
                let stream = &streams[i as usize % STREAMS];
                if on_device {
                    if arrival_waits {
                        arrived
                            .wait_on(stream, (s + m as i64) as u64)
                            .map_err(|e| failed_by_stop(arrived, e))?;
                    }
                } else {
                    for seq in s..s + m as i64 {
                        dev.fill_input(seq);
                        checker.issued(seq);
                    }
                }
                let first = (s % s_total) as usize;
                let exe = graphs
                    .get(&(first, m))
                    .expect("record_all made a graph for every (first slot, size)");
                let called = checker.now_ns();
                exe.launch(stream)?;
                // Consumed on the g2h thread: blocking.
                launched.record(stream, i, Blocking::Yes)?;
                workers
                    .phases()
                    .launched(s..s + m as i64, slot_wait, called, checker.now_ns());
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
    // Waits for each launch in launch order and hands its batches to the process_data
    // threads.
    let g2h = move || -> Result<()> {
        let mut landed = 0i64;
        while landed < batches {
            // The h2g thread ends early only when it failed or was stopped: a stop here, so
            // that the error that stopped the run is the one reported (first_error).
            let (i, s, m) = rx.recv().map_err(|_| Error::Stopped {
                ring: "launched".into(),
                reason: "the h2g thread ended early".into(),
                cause: None,
            })?;
            dev.chaos_pause();
            // Produced on the h2g thread: blocking.
            launched.synchronize(i, Blocking::Yes)?;
            // The graph's copies into host output batches s.. are done.
            landed = s + m as i64;
            workers.landed(s, landed, checker.now_ns())?;
        }
        Ok(())
    };
    let process = move || workers.work(dev, checker, processed, opt.progress);
    // A failed `arrived` also releases the launches still waiting for it on the device.
    let stop = |why: String| {
        checker.stop();
        launched.stop(why.clone());
        processed.fail(Error::Cancelled(why.clone()));
        arrived.fail(Error::Cancelled(why.clone()));
        workers.stop(why);
    };
    let mut others: Vec<Body<'_>> = vec![("g2h", Box::new(g2h))];
    for _ in 0..process_threads.max(1) {
        others.push(("process_data", Box::new(process)));
    }
    if on_device {
        others.push(("get_data", Box::new(get_data)));
    }
    let (results, graphs) = run_threads(h2g, others, &stop, &Watch::run(checker, dev.layout()));
    let synced = sync_streams(b, streams);
    let wall = start.elapsed();
    first_error(results)?;
    synced?;
    // The graphs are dropped only now, after the streams were synchronized.
    std::mem::drop(graphs);
    let launches = launches.into_inner();
    let mut verification = checker_owned.finish();
    verification.phases = Some(workers.phases().summaries());
    Ok((wall, verification, launches))
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
    fn the_automatic_depth_is_six_groups_within_512_mib_a_buffer() {
        for (bytes, k) in [(64 << 10, 4), (256 << 10, 4), (1 << 20, 2), (64 << 20, 1)] {
            assert_eq!(auto_depth(bytes, k), 6);
        }
        // 128 MiB batches: four groups hold 512 MiB; huge ones: at least three, no overflow.
        assert_eq!(auto_depth(128 << 20, 1), 4);
        assert_eq!(auto_depth(1 << 30, 1), 3);
        assert_eq!(auto_depth(usize::MAX, 64), 3);
    }

    #[test]
    fn the_device_release_needs_a_mechanism_that_holds_commands() {
        let events = Mechanism::Events {
            fallback_reason: None,
        };
        // Asked for: refused with the mechanism named; by default: the host.
        let small = 64 << 10;
        let e = Release::for_mechanism(Some(Release::Device), &events, small).unwrap_err();
        assert!(
            matches!(&e, Error::WaitBeforeSignalUnsupported { timeline, mechanism, .. }
                if timeline == "arrived" && mechanism == "events"),
            "{e}"
        );
        assert_eq!(
            Release::for_mechanism(None, &events, small).unwrap(),
            Release::Host
        );
        assert_eq!(
            Release::for_mechanism(Some(Release::Host), &events, small).unwrap(),
            Release::Host
        );
        for m in [Mechanism::MemOps, Mechanism::Hybrid, Mechanism::HostWord] {
            assert_eq!(
                Release::for_mechanism(None, &m, small).unwrap(),
                Release::Device
            );
            // From DEVICE_RELEASE_BELOW the host unless asked; asked, the device.
            assert_eq!(
                Release::for_mechanism(None, &m, DEVICE_RELEASE_BELOW).unwrap(),
                Release::Host
            );
            assert_eq!(
                Release::for_mechanism(Some(Release::Device), &m, DEVICE_RELEASE_BELOW).unwrap(),
                Release::Device
            );
            assert_eq!(
                Release::for_mechanism(Some(Release::Device), &m, small).unwrap(),
                Release::Device
            );
        }
    }

    #[test]
    fn every_graph_has_five_nodes_for_each_run_of_the_span() {
        use crate::demo::device::{HostDevice, Layout};
        use seqsync::backend::host::HostBackend;
        let slots = 16;
        let dev = HostDevice::new(HostBackend::new(), Layout::uniform(64, slots, 1));
        // K 8 in nodes of 2: launches of 8 and 4 batches are 4 and 2 runs, smaller ones one.
        let graphs = record_all(&dev, 8, 2, slots, 100, None).unwrap();
        for m in [1, 2, 4, 8] {
            let exe = &graphs[&(0, m)];
            assert_eq!(exe.graph().dag().len(), 5 * m.div_ceil(2), "m {m}");
        }
        // One graph per (first slot, size): 16 + 8 + 4 + 2.
        assert_eq!(graphs.len(), 30);
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
