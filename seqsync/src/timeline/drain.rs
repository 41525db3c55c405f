//! Timelines whose last handle went while signals of theirs were still in flight.
//!
//! Dropping the last [`Timeline`](super::Timeline) handle changes nothing for values whose
//! signal is already enqueued: they arrive, and the stream waits for them are released by
//! them, in order. Only the waits that nothing enqueued can ever satisfy must fail, and only
//! once the enqueued signals have landed (a failure releases every wait on the timeline, the
//! satisfiable ones too). So such a timeline is *kept* here, alive (a failure upstream of its
//! signals still spreads through it), until it has reached the last value enqueued or failed;
//! then it is settled: its unsatisfiable waits fail with
//! [`Error::TimelineDropped`](crate::Error::TimelineDropped), and it goes.
//!
//! Nothing calls back when a CUDA stream writes a word, so one thread of the crate's (started
//! when the first timeline is kept, ended when none is left) looks at the kept timelines every
//! [`POLL`]. Memory: one entry per timeline dropped with signals in flight, gone once they
//! land.
//!
//! A signal in flight may never land: its stream may itself wait, before it, for a value of
//! this timeline that nothing enqueued reaches (or for another timeline that only this one's
//! waiters would signal). With no handle left, nobody can signal that value any more. The first
//! case is seen from the ledgers: every look counts what the signals no wait of this timeline
//! holds bring it to; once the value stands there with waits above it left, the signals behind
//! those waits never land, and the timeline fails then (its satisfiable waits were reached
//! first). For the second, a kept timeline whose value has not moved for [`STALL`] while
//! stream waits on it exist for values above everything enqueued, and whose signals still in
//! flight all stand behind open timeline waits on their streams, fails then, as it would have
//! at the drop (which releases its other waits too: the bound that keeps a dropped timeline
//! from hanging its streams forever). A signal held by its stream's own work only (a slow
//! kernel, a long host function: no open timeline wait ahead of it) is waited for, up to
//! [`SLOW_WORK`] of standing still (such work may itself wait, by an event, on a stream that is
//! stuck).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A timeline kept until its signals in flight have landed.
pub(crate) trait Draining: Send + Sync {
    /// Settle it if its signals have landed (or it failed), or, with `still` (how long its
    /// value has stood still, given once per [`STALL`] from the first), if waits on it for
    /// values nothing enqueued reaches exist and its signals left are stuck (see the module
    /// docs), or, with `look`, if the signals left are held behind its own waits for good (a
    /// search of every stream's ledger): `true` once there is nothing left to do.
    fn settle(&self, still: Option<Duration>, look: bool) -> bool;
    /// Its value now (to see whether it moves).
    fn progress(&self) -> u64;
}

/// How often the kept timelines are looked at.
pub(crate) const POLL: Duration = Duration::from_millis(1);

/// How long a kept timeline's value may stand still before its signals in flight are taken
/// for stuck (see the module docs).
pub(crate) const STALL: Duration = Duration::from_secs(5);

/// How long a kept timeline's value may stand still while a signal of it is held by its
/// stream's own work only, before that signal is taken for stuck too (see the module docs).
pub(crate) const SLOW_WORK: Duration = Duration::from_secs(120);

/// How long a kept timeline's value stands still before the ledgers are searched for signals
/// held for good, and how often they are searched while it stands (a search takes every
/// stream's ledger lock: not on every poll).
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(10);

/// A kept timeline, the value it had when last seen moving, since when, when its ledgers were
/// last searched, and when it was last asked whether it is stuck.
type Entry = (Arc<dyn Draining>, u64, Instant, Instant, Instant);

struct Kept {
    list: Vec<Entry>,
    /// A thread is looking at `list`.
    running: bool,
}

static KEPT: Mutex<Kept> = Mutex::new(Kept {
    list: Vec::new(),
    running: false,
});

fn lock() -> std::sync::MutexGuard<'static, Kept> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keep `t` until it settles.
pub(crate) fn keep(t: Arc<dyn Draining>) {
    let mut k = lock();
    let v = t.progress();
    let now = Instant::now();
    k.list.push((t, v, now, now, now));
    if k.running {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("seqsync-drain".into())
        .spawn(run);
    // A thread that cannot be started now leaves the entry for the next `keep` to look at.
    k.running = spawned.is_ok();
}

/// The thread: settle what can be, until nothing is kept.
fn run() {
    loop {
        std::thread::sleep(POLL);
        let list = std::mem::take(&mut lock().list);
        // Settled outside the lock: settling fails timelines, and a timeline dropped here may
        // keep another.
        let now = Instant::now();
        let mut left: Vec<Entry> = list
            .into_iter()
            .filter_map(|(t, seen, since, searched, asked)| {
                let v = t.progress();
                let (seen, since) = if v != seen { (v, now) } else { (seen, since) };
                let still = now.duration_since(since);
                // Stalled, but not found stuck: asked again only after another stall (the
                // question searches every stream's ledger), not on every poll.
                let stalled = still >= STALL && now.duration_since(asked) >= STALL;
                let look = still >= LOOK_EVERY && now.duration_since(searched) >= LOOK_EVERY;
                if t.settle(stalled.then_some(still), look) {
                    return None;
                }
                let searched = if look { now } else { searched };
                Some((t, seen, since, searched, if stalled { now } else { asked }))
            })
            .collect();
        let mut k = lock();
        left.append(&mut k.list);
        k.list = left;
        if k.list.is_empty() {
            k.running = false;
            return;
        }
    }
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    use crate::timeline::Timeline;
    use crate::{AnyBackend, BackendKind};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A timeline whose last handle goes while its signal is in flight is kept alive (so a
    /// failure upstream still finds it) until the signal lands, then let go.
    #[test]
    fn a_timeline_dropped_with_a_signal_in_flight_is_kept_until_it_lands() {
        let b = AnyBackend::new(BackendKind::Host).unwrap();
        let (w, r) = (b.new_stream("w").unwrap(), b.new_stream("r").unwrap());
        let t = Timeline::new(&b, "t", 0).unwrap();
        t.wait_on(&r, 1).unwrap();
        let (go, gate) = std::sync::mpsc::channel::<()>();
        crate::backend::Backend::launch_host(
            &b,
            &w,
            Box::new(move || {
                let _ = gate.recv_timeout(Duration::from_secs(10));
            }),
        )
        .unwrap();
        t.signal_on(&w, 1).unwrap();
        let weak = Arc::downgrade(&t.shared);
        drop(t);
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            weak.upgrade().is_some(),
            "let go while its signal is in flight"
        );
        go.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while weak.upgrade().is_some() {
            assert!(
                Instant::now() < deadline,
                "still kept after its signal landed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
