//! One named test per row of the timeline contract (DESIGN.md, "The timeline contract"), on the
//! host backend and, with a GPU, on the CUDA backend (with whichever mechanism
//! `SEQSYNC_TIMELINE_MECHANISM` asks for).

use crate::common;

use std::time::{Duration, Instant};

use common::Harness;
use seqsync::timeline::{wait_all, wait_any, Timeline, MAX_VALUE};
use seqsync::Error;

/// Long enough for anything that must happen.
const LONG: Duration = Duration::from_secs(10);
/// How long a test watches for something that must not happen.
const SHORT: Duration = Duration::from_millis(30);

fn new_query_is_initial<B: Harness>(b: &B) {
    for initial in [0, 1, 123, MAX_VALUE] {
        let t = Timeline::new(b, "t", initial).unwrap();
        assert_eq!(t.query().unwrap(), initial);
    }
}

fn signal_above_current_releases_waiters<B: Harness>(b: &B) {
    let t = Timeline::new(b, "t", 1).unwrap();
    let probe = Timeline::new(b, "probe", 0).unwrap();
    // A stream wait for 3 and one for 5, and a host waiter for 4.
    let (s3, s5) = (b.stream(), b.stream());
    if !b.holds_waits_before_signals() {
        // CUDA `events`: the stream waits (nothing signalled or enqueued for 3 or 5) are
        // refused, nothing enqueued; the host waiter is still released by the signal.
        common::assert_wait_refused(t.wait_on(&s3, 3));
        common::assert_wait_refused(t.wait_on(&s5, 5));
        let host = {
            let t = t.clone();
            std::thread::spawn(move || t.wait(4, LONG))
        };
        std::thread::sleep(SHORT);
        t.signal(4).unwrap();
        assert_eq!(t.query().unwrap(), 4);
        host.join().unwrap().unwrap();
        // Reached: nothing to wait for, not refused.
        t.wait_on(&s3, 3).unwrap();
        probe.signal_on(&s3, 1).unwrap();
        probe.wait(1, LONG).unwrap();
        return;
    }
    t.wait_on(&s3, 3).unwrap();
    probe.signal_on(&s3, 1).unwrap();
    t.wait_on(&s5, 5).unwrap();
    let p5 = Timeline::new(b, "p5", 0).unwrap();
    p5.signal_on(&s5, 1).unwrap();
    let host = {
        let t = t.clone();
        std::thread::spawn(move || t.wait(4, LONG))
    };
    std::thread::sleep(SHORT);
    assert_eq!(probe.query().unwrap(), 0, "released before the signal");
    t.signal(4).unwrap();
    assert_eq!(t.query().unwrap(), 4);
    probe.wait(1, LONG).unwrap();
    host.join().unwrap().unwrap();
    std::thread::sleep(SHORT);
    assert_eq!(p5.query().unwrap(), 0, "a wait for 5 released by 4");
    t.signal(5).unwrap();
    p5.wait(1, LONG).unwrap();
}

fn signal_not_above_current_is_non_monotonic<B: Harness>(b: &B) {
    let t = Timeline::new(b, "frames", 10).unwrap();
    for got in [10, 5, 0] {
        let err = t.signal(got).unwrap_err();
        assert!(
            matches!(err, Error::NonMonotonic { current: 10, got: g, .. } if g == got),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "timeline 'frames': signal of {got} is not above 10, the highest value \
                 signalled or enqueued so far"
            )
        );
    }
    assert_eq!(t.query().unwrap(), 10);
    assert!(!t.is_failed());
    t.signal(11).unwrap();
    assert_eq!(t.query().unwrap(), 11);
}

fn signal_on_sets_value_when_stream_gets_there<B: Harness>(b: &B) {
    let t = Timeline::new(b, "t", 0).unwrap();
    let s = b.stream();
    b.busy(&s, Duration::from_millis(100));
    t.signal_on(&s, 7).unwrap();
    assert_eq!(
        t.query().unwrap(),
        0,
        "signalled before the stream got there"
    );
    // Checked when enqueued: not above what is enqueued already.
    let err = t.signal_on(&s, 7).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NonMonotonic {
                current: 7,
                got: 7,
                ..
            }
        ),
        "{err}"
    );
    let err = t.signal(5).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NonMonotonic {
                current: 7,
                got: 5,
                ..
            }
        ),
        "{err}"
    );
    t.wait(7, LONG).unwrap();
    assert_eq!(t.query().unwrap(), 7);
    b.sync_stream(&s);
}

fn wait_reached_returns_at_once<B: Harness>(b: &B) {
    let t = Timeline::new(b, "t", 2).unwrap();
    let start = Instant::now();
    for _ in 0..1000 {
        t.wait(1, Duration::ZERO).unwrap();
        t.wait(2, Duration::ZERO).unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(1));
    let s = b.stream();
    t.wait_on(&s, 2).unwrap();
    let probe = Timeline::new(b, "probe", 0).unwrap();
    probe.signal_on(&s, 1).unwrap();
    probe.wait(1, LONG).unwrap();
}

fn wait_timeout_changes_nothing<B: Harness>(b: &B) {
    let t = Timeline::new(b, "t", 2).unwrap();
    for timeout in [Duration::ZERO, Duration::from_millis(20)] {
        let start = Instant::now();
        let err = t.wait(3, timeout).unwrap_err();
        assert!(start.elapsed() >= timeout);
        assert!(
            matches!(err, Error::Timeout { timeout: d, .. } if d == timeout),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("waiting for timeline 't' to reach 3 (at 2)"),
            "{err}"
        );
        assert_eq!(t.query().unwrap(), 2);
        assert!(!t.is_failed());
    }
    t.signal(3).unwrap();
    t.wait(3, Duration::ZERO).unwrap();
}

fn wait_on_before_signal_across_streams<B: Harness>(b: &B) {
    let t = Timeline::new(b, "t", 0).unwrap();
    let after = Timeline::new(b, "after", 0).unwrap();
    let (waiter, signaller) = (b.stream(), b.stream());
    if !b.holds_waits_before_signals() {
        // CUDA `events`: the wait before its signal is refused and enqueues nothing (what the
        // stream does after it runs at once); a wait enqueued after its signal holds.
        common::assert_wait_refused(t.wait_on(&waiter, 1));
        after.signal_on(&waiter, 1).unwrap();
        after.wait(1, LONG).unwrap();
        assert_eq!(t.query().unwrap(), 0);
        b.busy(&signaller, Duration::from_millis(50));
        t.signal_on(&signaller, 1).unwrap();
        t.wait_on(&waiter, 1).unwrap();
        after.signal_on(&waiter, 2).unwrap();
        after.wait(2, LONG).unwrap();
        assert_eq!(
            t.query().unwrap(),
            1,
            "ran past a wait enqueued after its signal"
        );
        return;
    }
    // The wait is enqueued first, with nothing signalled or enqueued for 1 yet.
    t.wait_on(&waiter, 1).unwrap();
    after.signal_on(&waiter, 1).unwrap();
    std::thread::sleep(SHORT);
    assert_eq!(after.query().unwrap(), 0, "ran past an unsignalled wait");
    b.busy(&signaller, Duration::from_millis(50));
    t.signal_on(&signaller, 1).unwrap();
    after.wait(1, LONG).unwrap();
    assert_eq!(t.query().unwrap(), 1);
}

/// A new stream per batch, each waiting on one timeline for its batch before that is signalled
/// (100 streams: a word keeps a bounded list of the streams that waited on it, 64 long), then
/// signalling a timeline of its own: each is held until its batch is signalled, and released
/// then. (On CUDA the streams made while its waits are open are ones made ahead: 256 a backend;
/// `timeline_cuda.rs` runs 200 on a backend of its own.)
fn a_new_stream_per_batch_waits_on_one_timeline<B: Harness>(b: &B) {
    if !b.holds_waits_before_signals() {
        // CUDA `events` refuses a wait before its signal (wait_on_before_signal_across_streams).
        return;
    }
    let t = Timeline::new(b, "t", 0).unwrap();
    let done: Vec<_> = (1..=100u64)
        .map(|v| {
            let s = b.stream();
            t.wait_on(&s, v).unwrap();
            let d = Timeline::new(b, "done", 0).unwrap();
            d.signal_on(&s, 1).unwrap();
            d
        })
        .collect();
    std::thread::sleep(SHORT);
    assert!(
        done.iter().all(|d| d.query().unwrap() == 0),
        "a stream went past its wait"
    );
    t.signal(50).unwrap();
    for (i, d) in done[..50].iter().enumerate() {
        d.wait(1, LONG)
            .unwrap_or_else(|e| panic!("batch {}: not released by 50: {e}", i + 1));
    }
    assert!(
        done[50..].iter().all(|d| d.query().unwrap() == 0),
        "a stream went past its wait"
    );
    t.signal(100).unwrap();
    for (i, d) in done.iter().enumerate() {
        d.wait(1, LONG)
            .unwrap_or_else(|e| panic!("batch {}: not released by 100: {e}", i + 1));
    }
}

fn wait_all_and_any<B: Harness>(b: &B) {
    let none: [(&Timeline<B>, u64); 0] = [];
    wait_all(&none, Duration::ZERO).unwrap();
    assert_eq!(wait_any(&none, Duration::ZERO).unwrap(), None);
    let x = Timeline::new(b, "x", 0).unwrap();
    let y = Timeline::new(b, "y", 0).unwrap();
    let err = wait_all(&[(&x, 1), (&y, 1)], Duration::ZERO).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err
        .to_string()
        .contains("timeline 'x' to reach 1 (at 0) and timeline 'y' to reach 1 (at 0)"));
    let err = wait_any(&[(&x, 1), (&y, 1)], SHORT).unwrap_err();
    assert!(err.to_string().contains(" or "), "{err}");
    // A signal above the awaited value satisfies both kinds.
    let s = b.stream();
    b.busy(&s, Duration::from_millis(30));
    y.signal_on(&s, 5).unwrap();
    assert_eq!(wait_any(&[(&x, 1), (&y, 1)], LONG).unwrap(), Some(1));
    let err = wait_all(&[(&x, 1), (&y, 1)], SHORT).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    x.signal(9).unwrap();
    wait_all(&[(&x, 1), (&y, 1)], LONG).unwrap();
}

fn fail_wakes_waiters_and_sticks<B: Harness>(b: &B) {
    let t = Timeline::new(b, "t", 3).unwrap();
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let t = t.clone();
            std::thread::spawn(move || t.wait(10, LONG))
        })
        .collect();
    std::thread::sleep(SHORT);
    t.fail(Error::Cancelled("first".into()));
    for w in waiters {
        let err = w.join().unwrap().unwrap_err();
        assert!(
            matches!(&err, Error::TimelineFailed { value: 3, cause, .. }
                if matches!(&**cause, Error::Cancelled(m) if m == "first")),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "timeline 't' failed at value 3: cancelled: first"
        );
    }
    t.fail(Error::Cancelled("second".into()));
    for err in [
        t.query().unwrap_err(),
        t.signal(4).unwrap_err(),
        t.signal_on(&b.stream(), 4).unwrap_err(),
        t.wait(1, LONG).unwrap_err(),
        wait_all(&[(&t, 1)], LONG).unwrap_err(),
    ] {
        assert!(
            matches!(err.root_cause(), Error::Cancelled(m) if m == "first"),
            "{err}"
        );
    }
    // A stream wait on the failed timeline does not block the stream.
    let s = b.stream();
    t.wait_on(&s, 100).unwrap();
    b.sync_stream(&s);
}

fn failure_propagates_to_later_signals<B: Harness>(b: &B) {
    let upstream = Timeline::new(b, "upstream", 0).unwrap();
    let down = Timeline::new(b, "down", 0).unwrap();
    let further = Timeline::new(b, "further", 0).unwrap();
    let independent = Timeline::new(b, "independent", 0).unwrap();
    let before = Timeline::new(b, "before", 0).unwrap();
    let (s, s2, other) = (b.stream(), b.stream(), b.stream());
    before.signal_on(&s, 1).unwrap();
    if !b.holds_waits_before_signals() {
        // CUDA `events`: nothing signalled or enqueued for upstream's 1: refused.
        common::assert_wait_refused(upstream.wait_on(&s, 1));
        before.wait(1, LONG).unwrap();
        b.sync_stream(&s);
        return;
    }
    upstream.wait_on(&s, 1).unwrap();
    down.signal_on(&s, 1).unwrap();
    // A second hop: s2 waits on `down` and signals `further`.
    down.wait_on(&s2, 1).unwrap();
    further.signal_on(&s2, 1).unwrap();
    independent.signal_on(&other, 1).unwrap();
    before.wait(1, LONG).unwrap();
    upstream.fail(Error::Cancelled("upstream broke".into()));
    for t in [&down, &further] {
        let err = t.wait(1, LONG).unwrap_err();
        assert!(matches!(err, Error::TimelineFailed { .. }), "{err}");
        assert!(
            matches!(err.root_cause(), Error::Cancelled(m) if m == "upstream broke"),
            "{err}"
        );
    }
    // Signals enqueued on the poisoned stream later fail too.
    let later = Timeline::new(b, "later", 0).unwrap();
    later.signal_on(&s, 1).unwrap();
    assert!(later.wait(1, LONG).is_err());
    // What did not depend on it is not affected.
    independent.wait(1, LONG).unwrap();
    assert_eq!(before.query().unwrap(), 1);
    b.sync_stream(&other);
}

fn values_at_or_above_2_63_rejected<B: Harness>(b: &B) {
    let big = 1u64 << 63;
    let err = Timeline::new(b, "t", big).unwrap_err();
    assert!(matches!(err, Error::ValueOutOfRange { got, max, .. } if got == big && max == big - 1));
    let t = Timeline::new(b, "t", 0).unwrap();
    let s = b.stream();
    for v in [big, u64::MAX] {
        for err in [
            t.signal(v).unwrap_err(),
            t.signal_on(&s, v).unwrap_err(),
            t.wait_on(&s, v).unwrap_err(),
            t.wait(v, Duration::ZERO).unwrap_err(),
        ] {
            assert!(
                matches!(err, Error::ValueOutOfRange { got, .. } if got == v),
                "{err}"
            );
        }
    }
    t.signal(MAX_VALUE).unwrap();
    assert_eq!(t.query().unwrap(), MAX_VALUE);
}

fn drop_with_pending_stream_waits_fails_first<B: Harness>(b: &B) {
    let t = Timeline::new(b, "doomed", 0).unwrap();
    let after = Timeline::new(b, "after", 0).unwrap();
    let s = b.stream();
    if b.holds_waits_before_signals() {
        t.wait_on(&s, 5).unwrap();
        after.signal_on(&s, 1).unwrap();
        drop(t);
        // The stream is not stuck, and what it signals after the wait reports the drop.
        let err = after.wait(1, LONG).unwrap_err();
        assert!(
            matches!(
                err.root_cause(),
                Error::TimelineDropped {
                    value: 0,
                    pending: 1,
                    ..
                }
            ),
            "{err}"
        );
    } else {
        // CUDA `events`: the wait before its signal is refused, nothing listed: the drop
        // fails nothing.
        common::assert_wait_refused(t.wait_on(&s, 5));
        after.signal_on(&s, 1).unwrap();
        drop(t);
        after.wait(1, LONG).unwrap();
    }
    b.sync_stream(&s);
    // A timeline dropped with no pending stream wait fails nothing.
    let t = Timeline::new(b, "fine", 0).unwrap();
    let ok = Timeline::new(b, "ok", 0).unwrap();
    let s = b.stream();
    t.signal(5).unwrap();
    t.wait_on(&s, 5).unwrap();
    ok.signal_on(&s, 1).unwrap();
    drop(t);
    ok.wait(1, LONG).unwrap();
}

/// Dropping the last handle changes nothing for a value whose signal is already enqueued: the
/// stream waiting for it still runs after the signal's stream got there, and what it signals
/// does not fail (the drop used to fail the timeline at once, releasing the wait early).
fn drop_with_its_signal_enqueued_changes_nothing<B: Harness>(b: &B) {
    for wait_first in [true, false] {
        let t = Timeline::new(b, "t", 0).unwrap();
        let (written, after) = (
            Timeline::new(b, "written", 0).unwrap(),
            Timeline::new(b, "after", 0).unwrap(),
        );
        let (writer, reader) = (b.stream(), b.stream());
        let wait = |t: &Timeline<B>| {
            t.wait_on(&reader, 1).unwrap();
            after.signal_on(&reader, 1).unwrap();
        };
        if wait_first {
            if !b.holds_waits_before_signals() {
                // CUDA `events`: a wait before its signal is refused, nothing enqueued.
                common::assert_wait_refused(t.wait_on(&reader, 1));
                continue;
            }
            wait(&t);
        }
        b.busy(&writer, Duration::from_millis(60));
        written.signal_on(&writer, 1).unwrap();
        t.signal_on(&writer, 1).unwrap();
        if !wait_first {
            wait(&t);
        }
        drop(t);
        after
            .wait(1, LONG)
            .unwrap_or_else(|e| panic!("wait first: {wait_first}: {e}"));
        assert_eq!(
            written.query().unwrap(),
            1,
            "the reader ran before the writer"
        );
        b.sync_stream(&reader);
    }
}

/// A drop with a wait no enqueued signal reaches and a wait one does reach: the first fails
/// (once the enqueued signals have landed, so that the second is not released early), the
/// second goes on in order.
fn drop_fails_only_what_nothing_enqueued_reaches<B: Harness>(b: &B) {
    let t = Timeline::new(b, "t", 0).unwrap();
    let (written, reached, never) = (
        Timeline::new(b, "written", 0).unwrap(),
        Timeline::new(b, "reached", 0).unwrap(),
        Timeline::new(b, "never", 0).unwrap(),
    );
    let (writer, r1, r5) = (b.stream(), b.stream(), b.stream());
    if !b.holds_waits_before_signals() {
        // CUDA `events`: a wait before its signal is refused; once 1 is enqueued, a wait for 1
        // goes on in order after it and one for 5 is still refused (nothing listed, so the
        // drop fails nothing).
        common::assert_wait_refused(t.wait_on(&r1, 1));
        b.busy(&writer, Duration::from_millis(60));
        written.signal_on(&writer, 1).unwrap();
        t.signal_on(&writer, 1).unwrap();
        t.wait_on(&r1, 1).unwrap();
        reached.signal_on(&r1, 1).unwrap();
        common::assert_wait_refused(t.wait_on(&r5, 5));
        never.signal_on(&r5, 1).unwrap();
        drop(t);
        reached.wait(1, LONG).unwrap();
        assert_eq!(written.query().unwrap(), 1, "released before its signal");
        never.wait(1, LONG).unwrap();
        b.sync_stream(&r5);
        return;
    }
    t.wait_on(&r1, 1).unwrap();
    reached.signal_on(&r1, 1).unwrap();
    t.wait_on(&r5, 5).unwrap();
    never.signal_on(&r5, 1).unwrap();
    b.busy(&writer, Duration::from_millis(60));
    written.signal_on(&writer, 1).unwrap();
    t.signal_on(&writer, 1).unwrap();
    drop(t);
    reached.wait(1, LONG).unwrap();
    assert_eq!(written.query().unwrap(), 1, "released before its signal");
    let err = never.wait(1, LONG).unwrap_err();
    assert!(
        matches!(
            err.root_cause(),
            Error::TimelineDropped {
                value: 1,
                pending: 1,
                ..
            }
        ),
        "{err}"
    );
    b.sync_stream(&r5);
}

/// A failure spreads to a later signal of a stream that waited on the failed timeline unless
/// that signal's timeline has already reached the value (by another route): then there is
/// nothing left to fail. The same whether or not the stream's bookkeeping was pruned first
/// (it used to depend on that).
fn a_failure_spreads_by_one_rule_whatever_was_pruned<B: Harness>(b: &B) {
    for prune_first in [false, true] {
        let (y, z, w1, w2) = (
            Timeline::new(b, "y", 0).unwrap(),
            Timeline::new(b, "z", 0).unwrap(),
            Timeline::new(b, "w1", 0).unwrap(),
            Timeline::new(b, "w2", 0).unwrap(),
        );
        let (s, other) = (b.stream(), b.stream());
        if !b.holds_waits_before_signals() {
            // CUDA `events`: nothing signalled or enqueued for y's 1: refused.
            common::assert_wait_refused(y.wait_on(&s, 1));
            return;
        }
        y.wait_on(&s, 1).unwrap();
        z.signal_on(&s, 300).unwrap();
        z.signal(400).unwrap();
        let unreached = Timeline::new(b, "unreached", 0).unwrap();
        y.wait_on(&other, 1).unwrap();
        unreached.signal_on(&other, 1).unwrap();
        if prune_first {
            // More wait entries than a ledger keeps before pruning (alternating timelines, so
            // that no two join one entry), all reached, then one more: the prune drops every
            // resolved entry, z's reached signal among them.
            for v in 1..=300u64 {
                (if v % 2 == 0 { &w1 } else { &w2 }).wait_on(&s, v).unwrap();
            }
            w1.signal(1000).unwrap();
            w2.signal(1000).unwrap();
            w1.wait_on(&s, 1000).unwrap();
            w2.wait_on(&s, 1001).unwrap();
            w2.signal(1001).unwrap();
        }
        y.fail(Error::Cancelled("y broke".into()));
        assert_eq!(z.query().ok(), Some(400), "prune first: {prune_first}");
        // A later signal of the poisoned stream, and one of a timeline not reached, fail.
        assert!(
            unreached.wait(1, LONG).is_err(),
            "prune first: {prune_first}"
        );
        let later = Timeline::new(b, "later", 0).unwrap();
        later.signal_on(&s, 1).unwrap();
        assert!(later.wait(1, LONG).is_err(), "prune first: {prune_first}");
        b.sync_stream(&s);
        b.sync_stream(&other);
    }
}

/// A dropped timeline whose enqueued signal can never land (its stream waits, before it, for a
/// value of the same timeline that nothing enqueued reaches) fails once its value has stood
/// still for the drain's stall bound, so the stream goes on (it used to wait forever).
fn a_drop_whose_signal_can_never_land_fails_after_the_stall_bound<B: Harness>(b: &B) {
    let t = Timeline::new(b, "t", 0).unwrap();
    let after = Timeline::new(b, "after", 0).unwrap();
    let s = b.stream();
    if !b.holds_waits_before_signals() {
        // CUDA `events`: nothing signalled or enqueued for 2: refused, nothing enqueued.
        common::assert_wait_refused(t.wait_on(&s, 2));
        return;
    }
    t.wait_on(&s, 2).unwrap();
    t.signal_on(&s, 1).unwrap();
    after.signal_on(&s, 1).unwrap();
    drop(t);
    let start = Instant::now();
    let err = after.wait(1, Duration::from_secs(30)).unwrap_err();
    assert!(
        matches!(err.root_cause(), Error::TimelineDropped { .. }),
        "{err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    b.sync_stream(&s);
}

/// A dropped timeline with a wait nothing enqueued reaches and an enqueued signal held only by
/// slow work (longer than the drain's stall bound): the signal still lands, and the wait it
/// satisfies is released by it, not by the failure the other wait brings once it has landed.
fn a_drop_waits_past_the_stall_bound_for_a_signal_behind_slow_work<B: Harness>(b: &B) {
    let (a, c, d) = (b.stream(), b.stream(), b.stream());
    let (u, w) = (
        Timeline::new(b, "u", 0).unwrap(),
        Timeline::new(b, "w", 0).unwrap(),
    );
    let t = Timeline::new(b, "t", 0).unwrap();
    b.busy(&a, Duration::from_millis(6500)); // past the 5 s stall bound
    t.signal_on(&a, 2).unwrap();
    t.wait_on(&c, 2).unwrap(); // its signal is enqueued: satisfiable
    u.signal_on(&c, 1).unwrap();
    if !b.holds_waits_before_signals() {
        // CUDA `events`: nothing enqueued reaches 3: refused, nothing enqueued.
        common::assert_wait_refused(t.wait_on(&d, 3));
        drop(t);
        u.wait(1, Duration::from_secs(30)).unwrap();
        return;
    }
    t.wait_on(&d, 3).unwrap(); // nothing enqueued reaches 3
    w.signal_on(&d, 1).unwrap();
    drop(t);
    u.wait(1, Duration::from_secs(30))
        .expect("the slow signal landed: the wait it satisfies is not failed");
    let err = w.wait(1, Duration::from_secs(30)).unwrap_err();
    assert!(
        matches!(err.root_cause(), Error::TimelineDropped { .. }),
        "{err}"
    );
    b.sync_stream(&a);
    b.sync_stream(&c);
    b.sync_stream(&d);
}

on_both_backends!(
    a_drop_whose_signal_can_never_land_fails_after_the_stall_bound,
    a_drop_waits_past_the_stall_bound_for_a_signal_behind_slow_work,
    drop_with_its_signal_enqueued_changes_nothing,
    drop_fails_only_what_nothing_enqueued_reaches,
    a_failure_spreads_by_one_rule_whatever_was_pruned,
    new_query_is_initial,
    signal_above_current_releases_waiters,
    signal_not_above_current_is_non_monotonic,
    signal_on_sets_value_when_stream_gets_there,
    wait_reached_returns_at_once,
    wait_timeout_changes_nothing,
    wait_on_before_signal_across_streams,
    a_new_stream_per_batch_waits_on_one_timeline,
    wait_all_and_any,
    fail_wakes_waiters_and_sticks,
    failure_propagates_to_later_signals,
    values_at_or_above_2_63_rejected,
    drop_with_pending_stream_waits_fails_first,
);

on_polling_host!(
    drop_with_its_signal_enqueued_changes_nothing,
    drop_fails_only_what_nothing_enqueued_reaches,
    a_failure_spreads_by_one_rule_whatever_was_pruned,
    new_query_is_initial,
    signal_above_current_releases_waiters,
    signal_not_above_current_is_non_monotonic,
    signal_on_sets_value_when_stream_gets_there,
    wait_reached_returns_at_once,
    wait_timeout_changes_nothing,
    wait_on_before_signal_across_streams,
    a_new_stream_per_batch_waits_on_one_timeline,
    wait_all_and_any,
    fail_wakes_waiters_and_sticks,
    failure_propagates_to_later_signals,
    values_at_or_above_2_63_rejected,
    drop_with_pending_stream_waits_fails_first,
);
