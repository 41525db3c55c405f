//! The ledger, the registry and the rule, on the host backend.

use super::ledger::*;
use super::registry::*;
use super::*;
use crate::timeline::Timeline;
use crate::{AnyBackend, BackendKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Weak;
use std::time::Duration;

/// The host backend, through the `Backend` trait (this layer names no concrete backend).
fn host() -> AnyBackend {
    AnyBackend::new(BackendKind::Host).unwrap()
}

fn find(id: u64) -> Option<Arc<Ledger>> {
    with_ledger(id, false, |l| Ok(l.cloned()))
}

fn get(id: u64) -> Arc<Ledger> {
    with_ledger(id, true, |l| Ok(l.expect("made when asked").clone()))
}

fn sweep_now() {
    let mut dropped = Vec::new();
    lock_registry().sweep(&mut dropped);
}

fn unique_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1 << 61);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The last handle's drop searches the ledgers (taking every ledger's lock, so taking
/// biased ones away from their threads) only for a timeline some stream waited on.
#[test]
fn only_a_timeline_a_stream_waited_on_searches_the_ledgers_when_dropped() {
    let b = host();
    let s = b.new_stream("s").unwrap();
    let signalled = Timeline::new(&b, "signalled", 0).unwrap();
    signalled.signal_on(&s, 1).unwrap();
    signalled.signal(2).unwrap();
    assert!(signalled.wait(2, Duration::from_secs(5)).is_ok());
    assert!(
        !signalled.shared.last_handle_dropped(),
        "no stream waited on it"
    );
    let waited = Timeline::new(&b, "waited", 0).unwrap();
    waited.wait_on(&s, 5).unwrap();
    waited.signal(5).unwrap();
    assert!(waited.shared.last_handle_dropped(), "a stream waited on it");
    assert!(!waited.is_failed(), "nothing was pending");
}

#[test]
fn a_lookup_sees_a_ledger_made_after_it_was_cached() {
    let id = unique_id();
    // Never reached (and alive to the end): a wait on it keeps the ledger through the
    // other tests' sweeps.
    let (_never_reached, target) = fake();
    assert!(find(id).is_none());
    assert!(find(id).is_none()); // from the cache
                                 // Made by another thread: this one's cache must not hide it.
    let made = std::thread::spawn(move || {
        let l = get(id);
        l.add_wait(&target, 1).unwrap();
        l
    })
    .join()
    .unwrap();
    let found = find(id).expect("the epoch moved: looked up again");
    assert!(Arc::ptr_eq(&made, &found));
    assert!(Arc::ptr_eq(&get(id), &made));
}

#[test]
fn a_swept_idle_ledger_is_retired_and_its_stream_gets_a_new_one() {
    let id = unique_id();
    let old = get(id);
    sweep_now();
    let dead: Weak<dyn FailTarget> = Weak::<Fake>::new();
    assert!(old.add_wait(&dead, 1).is_err());
    assert!(matches!(old.add_signal(&dead, 1), Err(Refused::Retired)));
    assert!(!Arc::ptr_eq(&old, &get(id)));
}

#[test]
fn a_sweep_keeps_ledgers_with_pending_waits_so_failures_still_spread() {
    let host = host();
    let s = host.new_stream("s").unwrap();
    let (a, b) = (
        Timeline::new(&host, "a", 0).unwrap(),
        Timeline::new(&host, "b", 0).unwrap(),
    );
    a.wait_on(&s, 1).unwrap();
    sweep_now();
    b.signal_on(&s, 1).unwrap();
    sweep_now();
    a.fail(Error::Cancelled("upstream".into()));
    let err = b.wait(1, Duration::from_secs(5)).unwrap_err();
    assert!(err.to_string().contains("upstream"), "{err}");
    // The stream stays poisoned through later sweeps.
    sweep_now();
    let c = Timeline::new(&host, "c", 0).unwrap();
    c.signal_on(&s, 1).unwrap();
    assert!(c.wait(1, Duration::from_secs(5)).is_err());
}

#[test]
fn a_signal_sees_the_poison_of_a_ledger_another_thread_made_after_this_one_looked() {
    let host = host();
    let s = host.new_stream("s").unwrap();
    let (a, b) = (
        Timeline::new(&host, "a", 0).unwrap(),
        Timeline::new(&host, "b", 0).unwrap(),
    );
    // This thread looks `s` up and caches "no ledger".
    b.signal_on(&s, 1).unwrap();
    // Another thread's wait makes the ledger (the epoch moves), then `a` fails.
    std::thread::scope(|scope| {
        scope.spawn(|| a.wait_on(&s, 1).unwrap()).join().unwrap();
    });
    a.fail(Error::Cancelled("upstream".into()));
    // The cached "no ledger" is stale: the signal must find the poisoned ledger.
    b.signal_on(&s, 2).unwrap();
    let err = b.wait(2, Duration::from_secs(5)).unwrap_err();
    assert!(err.to_string().contains("upstream"), "{err}");
}

/// A timeline for the ledger alone: its value is set by hand, and it counts the reads.
pub(super) struct Fake {
    pub(super) value: AtomicU64,
    pub(super) reads: AtomicU64,
}

impl FailTarget for Fake {
    fn reached_value(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.value.load(Ordering::Relaxed)
    }
    fn mark_failed(&self, _: Arc<Error>) -> Option<Vec<Propagation>> {
        None
    }
    fn release(&self) {}
}

pub(super) fn fake() -> (Arc<Fake>, Weak<dyn FailTarget>) {
    let t = Arc::new(Fake {
        value: AtomicU64::new(0),
        reads: AtomicU64::new(0),
    });
    let arc: Arc<dyn FailTarget> = t.clone();
    let weak = Arc::downgrade(&arc);
    (t, weak)
}

/// Waits on timelines that failed already list nothing: a stream that waits on two of them in
/// turn, again and again, keeps its ledger's size (and is poisoned).
#[test]
fn waits_on_failed_timelines_do_not_grow_the_ledger() {
    let b = host();
    let s = b.new_stream("s").unwrap();
    let (x, y) = (
        Timeline::new(&b, "x", 0).unwrap(),
        Timeline::new(&b, "y", 0).unwrap(),
    );
    x.fail(Error::Cancelled("x".into()));
    y.fail(Error::Cancelled("y".into()));
    let after = Timeline::new(&b, "after", 0).unwrap();
    for v in 1..=10_000u64 {
        x.wait_on(&s, v).unwrap();
        y.wait_on(&s, v).unwrap();
    }
    let id = crate::backend::Backend::stream_id(&b, &s);
    let ledger = find(id).expect("the stream has a ledger");
    assert!(ledger.len() < 8, "{} entries", ledger.len());
    assert!(is_poisoned(id));
    // What it signals now fails.
    after.signal_on(&s, 1).unwrap();
    assert!(after.is_failed());
}

/// A ledger whose only entries left are signals of a timeline that failed (they never land)
/// is idle: a sweep retires it, so ledgers of streams gone do not stay for good.
#[test]
fn a_ledger_left_with_signals_of_a_failed_timeline_is_retired() {
    let b = host();
    let s = b.new_stream("s").unwrap();
    let (u, t) = (
        Timeline::new(&b, "u", 0).unwrap(),
        Timeline::new(&b, "t", 0).unwrap(),
    );
    u.wait_on(&s, 1).unwrap(); // listed: u is at 0
    t.signal_on(&s, 1).unwrap(); // kept behind it
    let id = crate::backend::Backend::stream_id(&b, &s);
    assert!(
        find(id).is_some(),
        "listed while its wait is pending (no sweep, another test's either, retires it now)"
    );
    t.fail(Error::Cancelled("t".into()));
    u.signal(1).unwrap();
    crate::backend::Backend::synchronize_stream(&b, &s).unwrap();
    sweep_now();
    assert!(
        find(id).is_none(),
        "the ledger was kept for a signal that never lands"
    );
}

/// A poisoned stream's ledger is never retired by a sweep; once its stream is gone, `forget`
/// drops it (a pool of streams that replaces poisoned ones does not keep their ledgers for
/// good). (No sweep here: the registry is the process's, and other tests count on theirs.)
#[test]
fn a_forgotten_stream_s_poisoned_ledger_leaves_the_registry() {
    let b = host();
    let (_s, id) = poisoned_stream(&b);
    forget(id);
    assert!(find(id).is_none());
}

/// A stream whose ledger a failure poisoned (a wait on a failed timeline), and its id.
fn poisoned_stream(b: &AnyBackend) -> (crate::backend::AnyStream, u64) {
    let s = b.new_stream("s").unwrap();
    let t = Timeline::new(b, "t", 0).unwrap();
    t.fail(Error::Cancelled("t".into()));
    t.wait_on(&s, 1).unwrap();
    let id = crate::backend::Backend::stream_id(b, &s);
    assert!(find(id).is_some_and(|l| l.is_poisoned().unwrap()));
    (s, id)
}

/// A stream dropped by its owner (not through a pool of streams) forgets its ledger too: a
/// poisoned one, which no sweep retires, would otherwise stay for the life of the process.
#[test]
fn a_dropped_stream_s_poisoned_ledger_leaves_the_registry() {
    let b = host();
    let (s, id) = poisoned_stream(&b);
    drop(s);
    assert!(find(id).is_none(), "the dropped stream's ledger stayed");
}

/// A mark covers the waits enqueued on its stream before it: pending until reached; failed
/// once one of them is released by a failure, also when an earlier failure had poisoned the
/// stream already; waits after the mark do not count.
#[test]
fn a_mark_sees_the_waits_before_it() {
    let b = host();
    let s = b.new_stream("s").unwrap();
    let id = crate::backend::Backend::stream_id(&b, &s);
    assert!(stream_mark(id).is_none(), "no wait listed yet");
    let (t, late) = (
        Timeline::new(&b, "t", 0).unwrap(),
        Timeline::new(&b, "late", 0).unwrap(),
    );
    t.wait_on(&s, 1).unwrap();
    let m = stream_mark(id).expect("a wait is listed");
    // A later wait on the same timeline does not raise what the mark waits for.
    t.wait_on(&s, 10).unwrap();
    late.wait_on(&s, 1).unwrap();
    late.fail(Error::Cancelled("late".into())); // after the mark: not its business
    assert_eq!(m.state(), MarkState::Pending, "t not reached yet");
    t.signal(1).unwrap();
    assert_eq!(m.state(), MarkState::Reached);
    t.signal(10).unwrap();
    // A wait before a mark on a poisoned stream, released by a failure of its own.
    let t2 = Timeline::new(&b, "t2", 0).unwrap();
    t2.wait_on(&s, 1).unwrap();
    let m2 = stream_mark(id).unwrap();
    assert_eq!(
        m2.state(),
        MarkState::Failed,
        "poisoned by `late` before the mark"
    );
    let s2 = b.new_stream("s2").unwrap();
    let id2 = crate::backend::Backend::stream_id(&b, &s2);
    let t3 = Timeline::new(&b, "t3", 0).unwrap();
    t3.wait_on(&s2, 1).unwrap();
    let m3 = stream_mark(id2).unwrap();
    t3.fail(Error::Cancelled("t3".into()));
    assert_eq!(m3.state(), MarkState::Failed);
    drop(t2);
}

/// A gone stream's ledger is kept while a wait listed there is not reached (work its owner
/// did not know of still depends on it), and forgotten once it is.
#[test]
fn a_forgotten_stream_s_ledger_stays_while_a_wait_is_pending() {
    let b = host();
    let s = b.new_stream("s").unwrap();
    let t = Timeline::new(&b, "t", 0).unwrap();
    t.wait_on(&s, 1).unwrap();
    let id = crate::backend::Backend::stream_id(&b, &s);
    forget(id);
    assert!(find(id).is_some(), "forgotten with a wait pending");
    t.signal(1).unwrap();
    forget(id);
    assert!(find(id).is_none());
    // Poisoned and pending when forgotten: the next sweep that finds it settled retires it
    // (no sweep ever retires a poisoned ledger whose stream lives).
    let s2 = b.new_stream("s2").unwrap();
    let (u, p) = (
        Timeline::new(&b, "u", 0).unwrap(),
        Timeline::new(&b, "p", 0).unwrap(),
    );
    p.wait_on(&s2, 1).unwrap();
    p.fail(Error::Cancelled("p".into()));
    u.wait_on(&s2, 1).unwrap();
    let id2 = crate::backend::Backend::stream_id(&b, &s2);
    forget(id2);
    assert!(find(id2).is_some(), "forgotten with a wait pending");
    u.signal(1).unwrap();
    let mut dropped = Vec::new();
    assert!(find(id2).unwrap().retire_if_idle(&mut dropped));
    // Forgotten with a wait pending, but the stream is still used: a later failure poisons
    // it, and no sweep retires its ledger (it would lose the poison).
    let s3 = b.new_stream("s3").unwrap();
    let (v, w) = (
        Timeline::new(&b, "v", 0).unwrap(),
        Timeline::new(&b, "w", 0).unwrap(),
    );
    v.wait_on(&s3, 1).unwrap();
    let id3 = crate::backend::Backend::stream_id(&b, &s3);
    forget(id3);
    w.wait_on(&s3, 1).unwrap();
    v.signal(1).unwrap();
    w.fail(Error::Cancelled("w".into()));
    assert!(!find(id3).unwrap().retire_if_idle(&mut dropped));
    assert!(is_poisoned(id3));
}
