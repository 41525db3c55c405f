//! The hazard checker: its ordering model case by case, then the seed's pipeline written by
//! hand on `EventRingbuf<ValidatingBackend<HostBackend>>`, intact and with each of its eleven
//! waits/synchronizes removed in turn.

use std::sync::mpsc;
use std::time::Duration;

use seqsync::backend::host::Chaos;
use seqsync::backend::Backend;
use seqsync::hazard::{Hazard, HazardKind, ValidatingBackend};
use seqsync::internal::hazard::{Access, AccessKind, ActorKind, HazardChecker};
use seqsync::timeline::Timeline;
use seqsync::{Blocking, EventRingbuf, HostBackend};

// ---- the model, driven by hand --------------------------------------------------------------

#[test]
fn stream_order_orders_accesses_on_one_stream() {
    let c = HazardChecker::new();
    let t = c.add_thread("main");
    let s = c.add_stream("s");
    c.access(t, s, Access::write("a", "buf", 0, 0));
    c.access(t, s, Access::read("b", "buf", 0, 0));
    c.access(t, s, Access::write("a", "buf", 0, 1));
    c.access(t, s, Access::write("a", "buf", 0, 2));
    assert!(c.is_clean(), "{}", c.report());
}

#[test]
fn event_record_and_stream_wait_order_across_streams() {
    let c = HazardChecker::new();
    let t = c.add_thread("main");
    let (a, b) = (c.add_stream("s_a"), c.add_stream("s_b"));
    let (written, read) = (c.new_event(), c.new_event());
    c.access(t, a, Access::write("produce", "buf", 0, 0));
    c.record(t, written, a);
    c.stream_wait(t, b, written);
    c.access(t, b, Access::read("consume", "buf", 0, 0));
    c.record(t, read, b);
    c.stream_wait(t, a, read);
    c.access(t, a, Access::write("produce", "buf", 0, 1));
    assert!(c.is_clean(), "{}", c.report());
}

#[test]
fn host_synchronize_orders_a_host_read_after_a_stream_write() {
    let c = HazardChecker::new();
    let t = c.add_thread("g2h");
    let s = c.add_stream("s_g2h");
    let ev = c.new_event();
    c.access(t, s, Access::write("copy", "host", 0, 0));
    c.record(t, ev, s);
    c.host_synchronize(t, ev);
    c.access(t, t, Access::read("process_data", "host", 0, 0));
    // The next copy is enqueued by the thread after its read: ordered by the enqueue.
    c.access(t, s, Access::write("copy", "host", 0, 1));
    assert!(c.is_clean(), "{}", c.report());

    // Without the synchronize, the host read races the copy.
    c.record(t, ev, s);
    c.access(t, t, Access::read("process_data", "host", 0, 1));
    let h = only(&c);
    assert_eq!(h.kind, HazardKind::ReadAfterWrite);
    assert_eq!(h.later.actor_kind, ActorKind::Thread);
    assert_eq!(
        h.to_string(),
        "stage process_data (thread g2h) reads host[0] for seq 1, \
         not ordered after stage copy (stream s_g2h) writing host[0] for seq 1"
    );
}

#[test]
fn rerecord_after_a_wait_does_not_change_the_earlier_wait() {
    let c = HazardChecker::new();
    let t = c.add_thread("main");
    let (a, b) = (c.add_stream("s_a"), c.add_stream("s_b"));
    let ev = c.new_event();
    c.access(t, a, Access::write("first", "x", 0, 0));
    c.record(t, ev, a);
    c.stream_wait(t, b, ev); // b joins the first snapshot only
    c.access(t, a, Access::write("second", "y", 0, 0));
    c.record(t, ev, a); // re-record: later waits see `second`, the earlier one does not
    c.access(t, b, Access::read("reader", "x", 0, 0));
    assert!(c.is_clean(), "{}", c.report());
    c.access(t, b, Access::read("reader", "y", 0, 0));
    let h = only(&c);
    assert_eq!(
        (h.buffer.as_str(), h.earlier.stage.as_str()),
        ("y", "second")
    );

    // A wait made after the re-record does order it.
    let c2 = HazardChecker::new();
    let t = c2.add_thread("main");
    let (a, b) = (c2.add_stream("s_a"), c2.add_stream("s_b"));
    let ev = c2.new_event();
    c2.record(t, ev, a);
    c2.access(t, a, Access::write("second", "y", 0, 0));
    c2.record(t, ev, a);
    c2.stream_wait(t, b, ev);
    c2.access(t, b, Access::read("reader", "y", 0, 0));
    assert!(c2.is_clean(), "{}", c2.report());
}

#[test]
fn a_never_recorded_event_orders_nothing() {
    let c = HazardChecker::new();
    let t = c.add_thread("main");
    let (a, b) = (c.add_stream("s_a"), c.add_stream("s_b"));
    let ev = c.new_event();
    c.access(t, a, Access::write("w", "buf", 0, 0));
    c.stream_wait(t, b, ev);
    c.access(t, b, Access::read("r", "buf", 0, 0));
    assert_eq!(only(&c).kind, HazardKind::ReadAfterWrite);
}

/// Two streams, no events at all: the second access of `buf[1]` races the first.
fn unordered_pair(first: AccessKind, second: AccessKind) -> Hazard {
    let c = HazardChecker::new();
    let t = c.add_thread("main");
    let (sh, sf) = (c.add_stream("s_h"), c.add_stream("s_f"));
    c.access(t, sh, Access::new("h", "x", 1, 1, first));
    c.access(t, sf, Access::new("f", "x", 1, 3, second));
    only(&c)
}

#[test]
fn unordered_write_after_write_is_reported() {
    let h = unordered_pair(AccessKind::Write, AccessKind::Write);
    assert_eq!(h.kind, HazardKind::WriteAfterWrite);
    assert_eq!(
        h.to_string(),
        "stage f (stream s_f) writes x[1] for seq 3, \
         not ordered after stage h (stream s_h) writing x[1] for seq 1"
    );
}

#[test]
fn unordered_write_after_read_is_reported() {
    let h = unordered_pair(AccessKind::Read, AccessKind::Write);
    assert_eq!(h.kind, HazardKind::WriteAfterRead);
    assert_eq!(
        (h.earlier.kind, h.later.kind),
        (AccessKind::Read, AccessKind::Write)
    );
    assert_eq!(
        h.to_string(),
        "stage f (stream s_f) writes x[1] for seq 3, \
         not ordered after stage h (stream s_h) reading x[1] for seq 1"
    );
}

#[test]
fn unordered_read_after_write_is_reported() {
    let h = unordered_pair(AccessKind::Write, AccessKind::Read);
    assert_eq!(h.kind, HazardKind::ReadAfterWrite);
    assert_eq!(
        (h.buffer.as_str(), h.slot, h.earlier.seq, h.later.seq),
        ("x", 1, 1, 3)
    );
    assert_eq!(
        (h.earlier.actor.as_str(), h.later.actor.as_str()),
        ("s_h", "s_f")
    );
    assert_eq!(
        h.to_string(),
        "stage f (stream s_f) reads x[1] for seq 3, \
         not ordered after stage h (stream s_h) writing x[1] for seq 1"
    );
}

#[test]
fn read_after_read_is_no_hazard() {
    let c = HazardChecker::new();
    let t = c.add_thread("main");
    let (a, b) = (c.add_stream("s_a"), c.add_stream("s_b"));
    c.access(t, a, Access::read("r1", "buf", 0, 0));
    c.access(t, b, Access::read("r2", "buf", 0, 0));
    assert!(c.is_clean(), "{}", c.report());
}

#[test]
fn repeated_races_of_one_pair_are_counted_not_repeated() {
    let c = HazardChecker::new();
    let t = c.add_thread("main");
    let (a, b) = (c.add_stream("s_a"), c.add_stream("s_b"));
    for seq in 0..4 {
        c.access(t, a, Access::write("w", "buf", 0, seq));
        c.access(t, b, Access::read("r", "buf", 0, seq));
    }
    let hazards = c.hazards();
    // r after w (RAW) 4 times; w after r (WAR) 3 times.
    assert_eq!(hazards.len(), 2, "{}", c.report());
    assert_eq!(
        (hazards[0].kind, hazards[0].count),
        (HazardKind::ReadAfterWrite, 4)
    );
    assert_eq!(
        (hazards[1].kind, hazards[1].count),
        (HazardKind::WriteAfterRead, 3)
    );
    assert!(hazards[0].to_string().ends_with(" (4 times)"));
}

#[test]
#[should_panic(expected = "host thread a makes a access on host thread b; only a stream")]
fn a_thread_cannot_access_for_another_thread() {
    let c = HazardChecker::new();
    let (a, b) = (c.add_thread("a"), c.add_thread("b"));
    c.access(a, b, Access::read("r", "buf", 0, 0));
}

#[test]
fn validating_backend_names_the_calling_thread() {
    let vb = ValidatingBackend::new(HostBackend::new());
    let s = vb.new_stream("s_copy").unwrap();
    std::thread::Builder::new()
        .name("worker".into())
        .spawn({
            let vb = vb.clone();
            move || {
                vb.access(&s, Access::write("copy", "host", 0, 0));
                vb.host_access(Access::read("process_data", "host", 0, 0));
            }
        })
        .unwrap()
        .join()
        .unwrap();
    let h = only(vb.checker());
    assert_eq!(h.later.actor, "worker");
}

fn only(c: &HazardChecker) -> Hazard {
    let hazards = c.hazards();
    assert_eq!(
        hazards.len(),
        1,
        "expected one hazard, got:\n{}",
        c.report()
    );
    hazards.into_iter().next().unwrap()
}

// ---- the seed's pipeline, by hand -----------------------------------------------------------

/// The seed's buffer sizes.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    nin: usize,
    nx: usize,
    ny: usize,
    nout: usize,
}

const SIZES: [Sizes; 2] = [
    Sizes {
        nin: 2,
        nx: 2,
        ny: 3,
        nout: 2,
    },
    Sizes {
        nin: 3,
        nx: 1,
        ny: 2,
        nout: 1,
    },
];

const BATCHES: i64 = 12;

/// The eleven waits/synchronizes of the seed's pipeline, named consumer-first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guard {
    /// h2g copy waits on f at s - nin.
    H2gWaitsF,
    /// h2g copy waits on g at s - nin.
    H2gWaitsG,
    /// f waits on the h2g copy at s.
    FWaitsH2g,
    /// f waits on h at s - nx.
    FWaitsH,
    /// g waits on the h2g copy at s.
    GWaitsH2g,
    /// g waits on h at s - ny.
    GWaitsH,
    /// h waits on f at s.
    HWaitsF,
    /// h waits on g at s.
    HWaitsG,
    /// h waits on the g2h copy at s - nout.
    HWaitsG2h,
    /// g2h copy waits on h at s.
    G2hWaitsH,
    /// The g2h thread synchronizes on the g2h copy before process_data.
    G2hSynchronize,
}

use Guard::*;

const ALL_SYNCS: [Guard; 11] = [
    H2gWaitsF,
    H2gWaitsG,
    FWaitsH2g,
    FWaitsH,
    GWaitsH2g,
    GWaitsH,
    HWaitsF,
    HWaitsG,
    HWaitsG2h,
    G2hWaitsH,
    G2hSynchronize,
];

impl Guard {
    /// The buffer and the two stages whose race the removal opens.
    fn race(self) -> (&'static str, &'static str, &'static str) {
        match self {
            H2gWaitsF | FWaitsH2g => ("in", "h2g", "f"),
            H2gWaitsG | GWaitsH2g => ("in", "h2g", "g"),
            FWaitsH | HWaitsF => ("x", "f", "h"),
            GWaitsH | HWaitsG => ("y", "g", "h"),
            HWaitsG2h | G2hWaitsH => ("out", "h", "g2h"),
            G2hSynchronize => ("host_batch", "g2h", "process_data"),
        }
    }
}

fn slot(seq: i64, n: usize) -> usize {
    seq.rem_euclid(n as i64) as usize
}

/// The seed's example with `removed` left out (and its ring's nconsumers lowered by one);
/// returns the hazards found.
fn seed_pipeline(n: Sizes, removed: Option<Guard>, host: HostBackend) -> Vec<Hazard> {
    let vb = ValidatingBackend::new(host);
    let keep = |w: Guard| removed != Some(w);
    let ring = |name: &str, consumers: &[Guard], max_size: usize| {
        let nconsumers = consumers.iter().filter(|&&w| keep(w)).count() as u32;
        EventRingbuf::new(&vb, name, nconsumers, max_size).unwrap()
    };
    let evrb_h2g = ring("h2g", &[FWaitsH2g, GWaitsH2g], 1);
    let evrb_f = ring("f", &[H2gWaitsF, HWaitsF], n.nin);
    let evrb_g = ring("g", &[H2gWaitsG, HWaitsG], n.nin);
    let evrb_h = ring(
        "h",
        &[FWaitsH, GWaitsH, G2hWaitsH],
        n.nx.max(n.ny).max(n.nout),
    );
    let evrb_g2h = ring("g2h", &[HWaitsG2h, G2hSynchronize], n.nout);
    let rings = [&evrb_h2g, &evrb_f, &evrb_g, &evrb_h, &evrb_g2h];
    let [s_h2g, s_f, s_g, s_h, s_g2h] =
        ["s_h2g", "s_f", "s_g", "s_h", "s_g2h"].map(|name| vb.new_stream(name).unwrap());
    let (nin, nx, ny, nout) = (n.nin as i64, n.nx as i64, n.ny as i64, n.nout as i64);
    // A failing thread stops every ring, so the other thread wakes instead of hanging.
    let stop_all_on_error = |r: seqsync::Result<()>| {
        if let Err(e) = &r {
            rings.iter().for_each(|ring| ring.stop(e.to_string()));
        }
        r
    };

    let h2g_thread = || -> seqsync::Result<()> {
        for s in 0..BATCHES {
            // get_data(); then the h2g copy into in[s % nin].
            if keep(H2gWaitsF) {
                evrb_f.wait(&s_h2g, s - nin, Blocking::No)?;
            }
            if keep(H2gWaitsG) {
                evrb_g.wait(&s_h2g, s - nin, Blocking::No)?;
            }
            s_h2g.inner().launch(|| {});
            vb.access(&s_h2g, Access::write("h2g", "in", slot(s, n.nin), s));
            evrb_h2g.record(&s_h2g, s, Blocking::No)?;

            if keep(FWaitsH2g) {
                evrb_h2g.wait(&s_f, s, Blocking::No)?;
            }
            if keep(FWaitsH) {
                evrb_h.wait(&s_f, s - nx, Blocking::No)?;
            }
            s_f.inner().launch(|| {});
            vb.access(&s_f, Access::read("f", "in", slot(s, n.nin), s));
            vb.access(&s_f, Access::write("f", "x", slot(s, n.nx), s));
            evrb_f.record(&s_f, s, Blocking::No)?;

            if keep(GWaitsH2g) {
                evrb_h2g.wait(&s_g, s, Blocking::No)?;
            }
            if keep(GWaitsH) {
                evrb_h.wait(&s_g, s - ny, Blocking::No)?;
            }
            s_g.inner().launch(|| {});
            vb.access(&s_g, Access::read("g", "in", slot(s, n.nin), s));
            vb.access(&s_g, Access::write("g", "y", slot(s, n.ny), s));
            evrb_g.record(&s_g, s, Blocking::No)?;

            if keep(HWaitsF) {
                evrb_f.wait(&s_h, s, Blocking::No)?;
            }
            if keep(HWaitsG) {
                evrb_g.wait(&s_h, s, Blocking::No)?;
            }
            if keep(HWaitsG2h) {
                evrb_g2h.wait(&s_h, s - nout, Blocking::Yes)?;
            }
            s_h.inner().launch(|| {});
            vb.access(&s_h, Access::read("h", "x", slot(s, n.nx), s));
            vb.access(&s_h, Access::read("h", "y", slot(s, n.ny), s));
            vb.access(&s_h, Access::write("h", "out", slot(s, n.nout), s));
            evrb_h.record(&s_h, s, Blocking::Yes)?;
        }
        Ok(())
    };

    let g2h_thread = || -> seqsync::Result<()> {
        for s in 0..BATCHES {
            if keep(G2hWaitsH) {
                evrb_h.wait(&s_g2h, s, Blocking::Yes)?;
            }
            s_g2h.inner().launch(|| {});
            vb.access(&s_g2h, Access::read("g2h", "out", slot(s, n.nout), s));
            vb.access(&s_g2h, Access::write("g2h", "host_batch", 0, s));
            evrb_g2h.record(&s_g2h, s, Blocking::Yes)?;

            if keep(G2hSynchronize) {
                evrb_g2h.synchronize(s, Blocking::No)?;
            }
            // process_data(local_batch), on this thread.
            vb.host_access(Access::read("process_data", "host_batch", 0, s));
        }
        Ok(())
    };

    std::thread::scope(|scope| {
        let h2g = std::thread::Builder::new()
            .name("h2g".into())
            .spawn_scoped(scope, || stop_all_on_error(h2g_thread()))
            .unwrap();
        let g2h = std::thread::Builder::new()
            .name("g2h".into())
            .spawn_scoped(scope, || stop_all_on_error(g2h_thread()))
            .unwrap();
        for (name, t) in [("h2g", h2g), ("g2h", g2h)] {
            if let Err(e) = t.join().unwrap() {
                panic!("thread {name} failed ({n:?}, {removed:?} removed): {e}");
            }
        }
    });
    for s in [&s_h2g, &s_f, &s_g, &s_h, &s_g2h] {
        s.inner().synchronize().unwrap();
    }
    vb.checker().hazards()
}

fn lines(hazards: &[Hazard]) -> String {
    hazards.iter().map(|h| format!("  {h}\n")).collect()
}

#[test]
fn seed_pipeline_intact_is_clean() {
    for n in SIZES {
        let hazards = seed_pipeline(n, None, HostBackend::new());
        assert!(hazards.is_empty(), "{n:?}:\n{}", lines(&hazards));
    }
}

#[test]
fn seed_pipeline_intact_is_clean_under_chaos() {
    let hazards = seed_pipeline(SIZES[0], None, HostBackend::with_chaos(Chaos::new(7)));
    assert!(hazards.is_empty(), "{}", lines(&hazards));
}

fn assert_removal_reported(n: Sizes, removed: Guard, host: HostBackend) {
    let hazards = seed_pipeline(n, Some(removed), host);
    let (buffer, a, b) = removed.race();
    assert!(
        !hazards.is_empty(),
        "{removed:?} removed ({n:?}): no hazard reported"
    );
    for h in &hazards {
        assert!(
            h.buffer == buffer && h.involves(a) && h.involves(b),
            "{removed:?} removed ({n:?}): expected only races of {a} and {b} on {buffer}, \
             got:\n{}",
            lines(&hazards)
        );
    }
}

#[test]
fn seed_pipeline_each_removed_wait_is_reported() {
    for n in SIZES {
        for removed in ALL_SYNCS {
            assert_removal_reported(n, removed, HostBackend::new());
        }
    }
}

#[test]
fn seed_pipeline_removed_waits_are_reported_under_chaos() {
    for (i, removed) in ALL_SYNCS.into_iter().enumerate() {
        let chaos = Chaos::new(100 + i as u64);
        assert_removal_reported(SIZES[0], removed, HostBackend::with_chaos(chaos));
    }
}

#[test]
fn seed_pipeline_reports_name_stage_stream_buffer_and_seq() {
    let hazards = seed_pipeline(SIZES[0], Some(HWaitsF), HostBackend::new());
    let first = &hazards[0];
    assert_eq!(
        first.kind,
        HazardKind::ReadAfterWrite,
        "{}",
        lines(&hazards)
    );
    assert_eq!(
        first.to_string(),
        "stage h (stream s_h) reads x[0] for seq 0, \
         not ordered after stage f (stream s_f) writing x[0] for seq 0 (6 times)"
    );
    let hazards = seed_pipeline(SIZES[0], Some(G2hSynchronize), HostBackend::new());
    assert_eq!(
        hazards[0].to_string(),
        "stage process_data (thread g2h) reads host_batch[0] for seq 0, \
         not ordered after stage g2h (stream s_g2h) writing host_batch[0] for seq 0 (12 times)"
    );
}

// ---- host stages: a record with no stream ---------------------------------------------------

/// A host thread writes `buf[s % 2]` itself and publishes `s` with
/// [`EventRingbuf::record_host`]; a second thread makes a stream wait on it (unless
/// `consumer_waits` is false) and reads the slot on that stream. The producer reuses a slot
/// only once it has synchronized on the stream's read of it.
fn host_stage_feeds_a_stream(consumer_waits: bool) -> Vec<Hazard> {
    let vb = ValidatingBackend::new(HostBackend::new());
    host_stage_feeds_a_stream_on(&vb, &vb, |s| s, consumer_waits)
}

/// [`host_stage_feeds_a_stream`] with the rings on `b`, a backend over `vb` (`validating`
/// gives `vb`'s stream of one of `b`'s).
fn host_stage_feeds_a_stream_on<B: Backend>(
    b: &B,
    vb: &ValidatingBackend<HostBackend>,
    validating: impl Fn(&B::Stream) -> &<ValidatingBackend<HostBackend> as Backend>::Stream + Sync,
    consumer_waits: bool,
) -> Vec<Hazard> {
    const N: usize = 2;
    const BATCHES: i64 = 8;
    let s_read = b.new_stream("s_read").unwrap();
    // Room for every batch: without the consumer's wait nothing releases a seq, and the host
    // stage must still publish each one through the backend.
    let produced = EventRingbuf::new(b, "produce", 1, BATCHES as usize).unwrap();
    let consumed = EventRingbuf::new(b, "consume", 1, N).unwrap();
    std::thread::scope(|scope| {
        let host_stage = std::thread::Builder::new()
            .name("host_stage".into())
            .spawn_scoped(scope, || -> seqsync::Result<()> {
                for s in 0..BATCHES {
                    consumed.synchronize(s - N as i64, Blocking::Yes)?; // buf[s % 2] is free
                    vb.host_access(Access::write("produce", "buf", s as usize % N, s));
                    produced.record_host(s, Blocking::Yes)?;
                }
                Ok(())
            })
            .unwrap();
        let consumer = std::thread::Builder::new()
            .name("consumer".into())
            .spawn_scoped(scope, || -> seqsync::Result<()> {
                for s in 0..BATCHES {
                    if consumer_waits {
                        produced.wait(&s_read, s, Blocking::Yes)?;
                    } else {
                        // Blocks until `s` is recorded, but orders nothing (and consumes nothing).
                        produced.synchronize_with_producer(s)?;
                    }
                    vb.access(
                        validating(&s_read),
                        Access::read("consume", "buf", s as usize % N, s),
                    );
                    consumed.record(&s_read, s, Blocking::Yes)?;
                }
                Ok(())
            })
            .unwrap();
        host_stage.join().unwrap().unwrap();
        consumer.join().unwrap().unwrap();
    });
    b.synchronize_stream(&s_read).unwrap();
    vb.checker().hazards()
}

/// The buffer tracker forwards a host stage's `record_host` to the backend it wraps, so a
/// checker under it still sees the host stage's order (and still reports a dropped wait).
#[test]
fn a_host_record_through_the_buffer_tracker_reaches_the_checker() {
    use seqsync::memory::handoff::TrackingBackend;
    for waits in [true, false] {
        let vb = ValidatingBackend::new(HostBackend::new());
        let tb = TrackingBackend::new(vb.clone());
        let hazards = host_stage_feeds_a_stream_on(&tb, &vb, |s| s.inner(), waits);
        assert_eq!(hazards.is_empty(), waits, "{}", lines(&hazards));
    }
}

#[test]
fn a_host_record_orders_a_stream_wait_after_the_host_stage() {
    let hazards = host_stage_feeds_a_stream(true);
    assert!(hazards.is_empty(), "false hazards:\n{}", lines(&hazards));
}

#[test]
fn a_host_record_without_the_consumers_wait_is_reported() {
    let hazards: Vec<String> = host_stage_feeds_a_stream(false)
        .iter()
        .map(|h| h.to_string())
        .collect();
    assert_eq!(
        hazards,
        [
            "stage consume (stream s_read) reads buf[0] for seq 0, not ordered after stage \
             produce (thread host_stage) writing buf[0] for seq 0 (4 times)",
            "stage consume (stream s_read) reads buf[1] for seq 1, not ordered after stage \
             produce (thread host_stage) writing buf[1] for seq 1 (4 times)"
        ]
    );
}

/// The same through the pipeline runtime: a host stage on thread t0 writes `buf`, a stream
/// stage on thread t1 reads it; the runtime publishes the host stage with `record_host`.
#[test]
fn a_pipeline_host_stage_feeding_a_stream_stage_is_clean() {
    use seqsync::pipeline::{self, derive, PipelineSpec, StageSpec};
    let spec = PipelineSpec::builder()
        .buffer("buf", 2)
        .thread("t0")
        .stage("produce", StageSpec::on_host().writes("buf"))
        .thread("t1")
        .stage("consume", StageSpec::on_stream("s_read").reads("buf"))
        .build()
        .unwrap();
    let plan = derive(&spec).unwrap();
    let vb = ValidatingBackend::new(HostBackend::new());
    let streams = pipeline::new_streams(&vb, &plan).unwrap();
    let stages = pipeline::Stages::<ValidatingBackend<HostBackend>>::new()
        .stage("produce", |cx| {
            vb.host_access(Access::write("produce", "buf", cx.seq as usize % 2, cx.seq));
            Ok(())
        })
        .stage("consume", |cx| {
            let slot = cx.seq as usize % 2;
            vb.access(
                cx.stream.unwrap(),
                Access::read("consume", "buf", slot, cx.seq),
            );
            Ok(())
        });
    pipeline::run(pipeline::RunConfig {
        plan: &plan,
        backend: &vb,
        streams: &streams,
        stages: &stages,
        batches: 12,
        stall_timeout: None,
    })
    .unwrap();
    let hazards = vb.checker().hazards();
    assert!(hazards.is_empty(), "false hazards:\n{}", lines(&hazards));
}

/// A stream wait on a timeline is released by whichever signal at or above its value lands
/// first: a higher signal of another, unordered stream may, so the waiter is ordered after
/// what every such signal covers, not after the lowest one alone.
#[test]
fn a_wait_released_by_another_streams_higher_signal_is_not_ordered_after_the_lower_one() {
    let vb = ValidatingBackend::new(HostBackend::new());
    let (a, b, t) = (
        vb.new_stream("a").unwrap(),
        vb.new_stream("b").unwrap(),
        vb.new_stream("t").unwrap(),
    );
    let tl = Timeline::new(&vb, "tl", 0).unwrap();
    let (go, gate) = mpsc::channel::<()>();
    let held = move || {
        let _ = gate.recv_timeout(Duration::from_secs(10));
    };
    vb.launch_host(&a, Box::new(held)).unwrap();
    vb.access(&a, Access::write("produce", "x", 0, 0));
    tl.signal_on(&a, 5).unwrap();
    tl.signal_on(&b, 10).unwrap(); // nothing before it on b: lands at once
    tl.wait_on(&t, 3).unwrap(); // released by b's 10; a is still held
    vb.access(&t, Access::read("consume", "x", 0, 0));
    // Proof of the race: t's work is done while a's write has not run.
    vb.synchronize_stream(&t).unwrap();
    let racy = !vb.checker().is_clean();
    go.send(()).unwrap();
    vb.synchronize_stream(&a).unwrap();
    assert!(
        racy,
        "t read x[0] before a wrote it, and the checker reported nothing"
    );
}
