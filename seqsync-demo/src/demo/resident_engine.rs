//! The seed's pipeline on one resident kernel ([`Engine::Resident`](super::Engine::Resident)):
//! a kernel launched once per run that stays on the device and takes each batch as it arrives,
//! so that a batch costs no launch at all, only a store on the host (its arrival) and a load
//! (its completion).
//!
//! Every buffer has `S` slots (`--slots`, or [`auto_slots`]; host input and output batches
//! included) and batch `s` lives in slot `s % S`. The kernel's blocks take tiles of batches in seq
//! order from a counter in device memory; a block that took a tile of batch `s` waits until
//! `arrived > s` (and, reading the host's slots in place, until fewer than a cap of tiles are
//! reading: more reads in flight cost the link throughput), then reads the tile from host input
//! slot `s % S` (the copy in), runs f, g and h over each element in one thread (the stages of one
//! element one after the other: within a batch the stages are elementwise, so program order orders
//! them), writes host output slot `s % S` (the copy out), and counts its tile done; the block that
//! counts a batch's last tile sets `done[s % S] = s + 1`. The words are
//! [`ResidentWords`](super::resident_words::ResidentWords).
//!
//! With copies by the copy engines ([`CopyBy::Memcpy`], the default from 4 MiB batches,
//! [`RESIDENT_COPY_ENGINES_FROM`](super::RESIDENT_COPY_ENGINES_FROM), where they move more than
//! the kernel's zero-copy reads and writes) the kernel reads and writes the
//! device's input and output slot `s % S` instead, and streams move the batches (batch `s` on
//! copy-in and copy-out stream `s % 2`, so that two copies each way overlap): on its copy-in
//! stream, the copy of host input slot `s % S` to the device's, a wait until `arrived >= s`
//! (the batch before it arrived: arrivals stay in seq order across the streams), then the
//! stream's write of `arrived = s + 1`; on its copy-out stream, a wait until
//! `done[s % S] > s`, the copy of the device's output slot to the host's, then the write
//! `copied[s % S] = s + 1`.
//!
//! The host threads:
//!
//! - get_data (on the run's first thread): once the workers are up (the source starts then,
//!   `--rate` arrivals counted from there), for each batch, wait until the batch `S` before it
//!   was processed (its input and output slots are free), wait for its arrival (`--rate`), fill
//!   its input in, then `arrived = s + 1` (or enqueue its copy in).
//! - copy_out (copies on streams only): enqueue each batch's copy out once its copy in was,
//!   at most four ahead of the copies out done.
//! - process_data ([`ProcessWorkers`], `--process-threads`): a worker takes the next seq, waits
//!   for get_data to release it ([`Released`], asleep if that takes long), polls `done[s % S]`
//!   (or `copied[s % S]`) until it reaches `s + 1`, checks the batch, and reports it; batches
//!   are reported processed (the `processed` timeline get_data waits on) in seq order.
//!
//! So the only orderings are: arrival before the kernel reads a batch (the kernel's wait on
//! `arrived`; on streams, the arrival written after the copy in), the kernel's writes before
//! the check (the worker's wait on `done`; on streams, the copy out's wait on `done` and the
//! worker's on `copied`), and the check of batch `s - S` before batch `s` overwrites its slots
//! (get_data's wait on `processed`, which precedes the arrival the kernel waits for). Each can
//! be dropped by a test switch ([`GraphEdge::ArrivalWait`], [`GraphEdge::CopyInF`],
//! [`GraphEdge::HCopyOut`], [`GraphEdge::GroupWaits`], [`GraphEdge::ProcessedInOrder`]), and
//! verification must then fail.
//!
//! The kernel ends once every batch was taken, or on `stop` (a thread failed, or the run
//! ended): the engine sets `stop` on every path before it synchronizes the kernel's stream,
//! then raises the `done` words of batches the kernel never finished
//! ([`ResidentWords::release_done`](super::resident_words::ResidentWords::release_done)), so
//! that no copy out waits for ever, before it synchronizes the copy streams.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use super::copy_by::CopyBy;
use super::device::Device;
use super::graph_engine::GraphEdge;
use super::pipeline::{first_error, stopped, Checker, ProcessWorkers};
use super::pipeline::{RunOptions, Variant, Verification};
use super::poll::poll;
use super::released::Released;
use super::threads::{run_threads_named, Body};
use super::watchdog::Watch;
use seqsync::backend::Backend;
use seqsync::timeline::Timeline;
use seqsync::{Error, Result};

/// Copy-in and copy-out streams each, batch `s` on stream `s % COPY_STREAMS` (copies by the copy
/// engines): one stream runs one copy at a time, and a 1 MiB copy alone leaves the link idle
/// part of the time.
const COPY_STREAMS: usize = 2;

/// Slots at 256 KiB batches when not told ([`auto_slots`]) ...
const AUTO_SLOTS_AT_256K: f64 = 12.0;

/// ... at least this many (a batch being filled, some on the device or being copied, one
/// being checked) ...
const MIN_AUTO_SLOTS: usize = 6;

/// ... and at most this many.
const MAX_AUTO_SLOTS: usize = 24;

/// Slots for batches of `batch_bytes` when not told: 12 at 256 KiB, inversely as the square
/// root of the batch size (6 from 1 MiB), 6 to 24 (24 at 64 KiB and below). A saturated closed
/// loop keeps every slot full, so its latency is the slots over the throughput (Little's law).
/// With the check sampling runs of whole lines (BENCHMARKS.md §13, run O) it takes a few
/// microseconds, so fewer slots hold the throughput: on the H100, 12 at 256 KiB and 5 or 6 at
/// 1 MiB gave about the throughput of 16 and 8 (at 1 MiB 0.79-0.80 of the device bound against
/// 0.82-0.83) at a p99 within 1.5 x the hand-written engine's, which 16 and 8 missed; at 64 KiB
/// 24 gave 0.92-0.95 of the device bound and 16 or 20 only 0.77-0.87.
pub fn auto_slots(batch_bytes: usize) -> usize {
    let at = AUTO_SLOTS_AT_256K * (262144.0 / batch_bytes.max(1) as f64).sqrt();
    (at.round() as usize).clamp(MIN_AUTO_SLOTS, MAX_AUTO_SLOTS)
}

/// Run the seed's pipeline on a resident kernel over the layout's slots (every buffer and the
/// host input and output batches the same number), process_data on `process_threads` threads;
/// returns the wall time and what process_data saw.
pub(crate) fn run<D: Device>(
    dev: &D,
    opt: &RunOptions<'_>,
    process_threads: usize,
    drop: Option<GraphEdge>,
) -> Result<(Duration, Verification)> {
    debug_assert!(opt.variant == Variant::Seed && opt.drop.is_none());
    let l = *dev.layout();
    let slots = l.npatterns;
    assert!(
        [l.nin, l.nx, l.ny, l.nout, l.nhout]
            .iter()
            .all(|&n| n == slots),
        "the resident engine's layout has the same slots everywhere"
    );
    let b = dev.backend();
    let batches = opt.batches;
    let words = std::sync::Arc::new(dev.resident_words(slots)?);
    let stream = b.new_stream("s_resident")?;
    // Copies by the copy engines: COPY_STREAMS streams for the copies in (each followed by its
    // arrival) and as many for the copies out (each after a wait for its batch's done word).
    let copies = l.copy_by;
    let staged = match copies {
        CopyBy::Kernel => None,
        CopyBy::Memcpy => {
            let streams = |name| {
                (0..COPY_STREAMS)
                    .map(|_| b.new_stream(name))
                    .collect::<Result<Vec<_>>>()
            };
            Some((streams("s_copy_in")?, streams("s_copy_out")?))
        }
    };
    let processed = Timeline::new(b, "processed", 0)?;
    let released = Released::new();
    let released = &released;
    let workers =
        ProcessWorkers::new(b, batches, slots, drop != Some(GraphEdge::ProcessedInOrder))?;
    let checker_owned = Checker::paced(batches, opt.rate);
    let (checker, workers, processed, words_ref) = (&checker_owned, &workers, &processed, &*words);
    let (words_arc, staged_ref) = (&words, &staged);
    // Batches whose copy in get_data enqueued: the copy_out thread follows it (and so stays
    // within the slots ahead of the checks that get_data keeps to).
    let copies_in = AtomicI64::new(0);
    let copies_in = &copies_in;
    let waits = drop != Some(GraphEdge::GroupWaits);
    let threads = process_threads.max(1);
    let s_total = slots as i64;
    if staged.is_some() {
        words.hold_through_copies_out();
    }
    let start = Instant::now();
    dev.launch_resident(
        &stream,
        &words,
        batches,
        drop != Some(GraphEdge::ArrivalWait),
        copies,
    )?;
    let get_data = move || -> (Result<()>, ()) {
        let r = (|| -> Result<()> {
            // The source starts once the workers are up (their start is not latency).
            if !workers.wait_started(threads, || words_ref.stopped()) {
                return Err(stopped(
                    "process_data",
                    Error::Cancelled("the run stopped".into()),
                ));
            }
            checker.start_arrivals();
            for s in 0..batches {
                dev.chaos_pause();
                if words_ref.stopped() {
                    // A thread failed (or the watchdog fired): no more batches, the first
                    // S included (their wait below would not see it).
                    return Err(stopped(
                        "get_data",
                        Error::Cancelled("the run stopped".into()),
                    ));
                }
                // Slot s % S is free once batch s - S was processed.
                let wait_from = checker.now_ns();
                if waits && s >= s_total {
                    processed
                        .wait((s + 1 - s_total) as u64, Duration::MAX)
                        .map_err(|e| stopped("processed", e))?;
                }
                let slot_wait = checker.now_ns().saturating_sub(wait_from);
                checker.wait_arrival(s);
                let fill_from = checker.now_ns();
                dev.fill_input(s);
                let filled = checker.now_ns();
                checker.issued(s);
                // The phases (batch_phases.rs): with a rate, `before_launch` is the arrival to
                // the fill's start (get_data late: its slots not yet free, or its thread held),
                // `launch` the fill, `on_device` the release to its worker seeing it done
                // (without a rate latency starts after the fill: all of it `on_device`).
                // Stamped before the release, which the worker's load of `done` follows.
                workers
                    .phases()
                    .launched(s..s + 1, slot_wait, fill_from, filled);
                match staged_ref {
                    None => words_ref.arrive(s as u64 + 1),
                    Some((copy_in, _)) => {
                        let copy_in = &copy_in[s as usize % COPY_STREAMS];
                        let signal = drop != Some(GraphEdge::CopyInF);
                        dev.resident_copy_in(copy_in, words_arc, s, signal)?;
                        if !signal {
                            // The test switch: an arrival not ordered after its copy.
                            words_ref.arrive(s as u64 + 1);
                        }
                        copies_in.store(s + 1, Ordering::Release);
                        words_ref.arrivals_enqueued(s as u64 + 1);
                    }
                }
                released.raise(s as u64 + 1);
            }
            Ok(())
        })();
        (r, ())
    };
    // A worker's wait for its batch: its release (asleep if that takes long: released.rs), then
    // the kernel's `done` for its slot, or with copies by the copy engines the copy-out's
    // `copied`.
    let landed = move |seq: i64| -> Result<()> {
        let slot = (seq % s_total) as usize;
        let word = |slot| match staged_ref {
            None => words_ref.done(slot),
            Some(_) => words_ref.copied(slot),
        };
        let given_up = || words_ref.stopped();
        if released.wait(seq as u64 + 1, given_up) && poll(|| word(slot) > seq as u64, given_up) {
            workers.phases().landed(seq..seq + 1, checker.now_ns());
            Ok(())
        } else {
            Err(Error::Stopped {
                ring: "done".into(),
                reason: "the run stopped".into(),
                cause: None,
            })
        }
    };
    let process = move || workers.work_polling(dev, checker, processed, opt.progress, &landed);
    let stop = |why: String| {
        checker.stop();
        words_ref.stop();
        released.wake_all();
        processed.fail(Error::Cancelled(why.clone()));
        workers.stop(why);
    };
    // copy_out (copies on streams): enqueue each batch's copy out once its copy in was; a thread
    // of its own, as the calls of both copies would hold get_data at 1 MiB batches.
    let copy_out = move || -> Result<()> {
        let Some((_, copy_out)) = staged_ref else {
            return Ok(());
        };
        let wait = drop != Some(GraphEdge::HCopyOut);
        // At most this many copies out enqueued and not yet done: a stream's queue stays
        // short (an enqueue into a full one would block, and after a stop nothing drains it
        // until release_done, which comes after this thread ends).
        let lead = 2 * COPY_STREAMS as i64;
        for s in 0..batches {
            let before = s - lead;
            let ready = || {
                copies_in.load(Ordering::Acquire) > s
                    && (before < 0 || words_ref.copied((before % s_total) as usize) > before as u64)
            };
            if !poll(ready, || words_ref.stopped()) || words_ref.stopped() {
                return Err(stopped(
                    "copies in",
                    Error::Cancelled("the run stopped".into()),
                ));
            }
            dev.resident_copy_out(&copy_out[s as usize % COPY_STREAMS], words_arc, s, wait)?;
        }
        Ok(())
    };
    let mut others: Vec<Body<'_>> = Vec::new();
    if staged.is_some() {
        others.push(("copy_out", Box::new(copy_out)));
    }
    for _ in 0..threads {
        others.push(("process_data", Box::new(process)));
    }
    let (results, _) = run_threads_named(
        "get_data",
        get_data,
        others,
        &stop,
        &Watch::run(checker, &l),
    );
    // Every path: the kernel ends (it has taken every batch already after a complete run),
    // then the copies out waiting for batches it never finished are let go.
    words.stop();
    let mut synced = b.synchronize_stream(&stream);
    if let Some((copy_in, copy_out)) = &staged {
        // The kernel's stream returned (ended, or failed): nothing writes `done` any more.
        words.release_done(batches.max(0) as u64);
        for s in copy_in.iter().chain(copy_out) {
            synced = synced.and(b.synchronize_stream(s));
        }
    }
    let wall = start.elapsed();
    match (first_error(results), synced) {
        // The streams' own error (a kernel that faulted never stores `done`: the threads saw a
        // stop or a stall) says more than what it caused.
        (Err(e), Err(device)) if e.is_stopped() || matches!(e, Error::Stalled { .. }) => {
            return Err(device)
        }
        (threads, device) => {
            threads?;
            device?;
        }
    }
    let mut verification = checker_owned.finish();
    verification.phases = Some(workers.phases().summaries());
    Ok((wall, verification))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_ends_on_stop_with_batches_not_yet_arrived() {
        use crate::demo::device::{HostDevice, Layout};
        use seqsync::backend::host::HostBackend;
        let slots = 4;
        let dev = HostDevice::new(HostBackend::new(), Layout::uniform(64, slots, 1));
        let b = dev.backend();
        let words = std::sync::Arc::new(dev.resident_words(slots).unwrap());
        let stream = b.new_stream("s").unwrap();
        dev.launch_resident(&stream, &words, 10, true, CopyBy::Kernel)
            .unwrap();
        for seq in 0..3 {
            dev.fill_input(seq);
        }
        words.arrive(3);
        // Batches 0..3 complete, each checked right; batch 3 never arrives.
        assert!(poll(|| words.done(2) == 3, || false));
        assert!((0..3).all(|s| dev.check_output(s as usize, s)));
        words.stop();
        // Synchronized on a thread of its own: a kernel that missed the stop fails the test
        // (after 5 s) instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        let b2 = b.clone();
        std::thread::spawn(move || tx.send(b2.synchronize_stream(&stream)));
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(r) => r.unwrap(),
            Err(_) => panic!("the kernel did not end on stop"),
        }
        assert_eq!(words.done(3), 0, "batch 3 never arrived");
    }

    #[test]
    fn the_automatic_slots_fall_as_the_square_root_of_the_batch_within_6_and_24() {
        assert_eq!(auto_slots(256 << 10), 12);
        assert_eq!(auto_slots(128 << 10), 17);
        assert_eq!(auto_slots(64 << 10), 24);
        assert_eq!(auto_slots(1 << 20), 6);
        assert_eq!(auto_slots(512 << 10), 8);
        assert_eq!(auto_slots(64 << 20), 6);
        assert_eq!(auto_slots(64), 24);
        assert_eq!(auto_slots(0), 24);
    }
}
