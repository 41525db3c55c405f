//! Sleeping on a segment until something changes: every change a blocked call may wait for
//! bumps one of the header's futex words ([`Channel`]) and wakes its sleepers (a
//! process-shared futex), and a sleeper looks at its peers' liveness every [`CHECK_EVERY`]
//! meanwhile. A stop wakes both channels.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rustix::thread::futex;

use super::peers::CHECK_EVERY;
use super::segment::Header;

/// Which of the segment's futex words a change bumps, and a wait sleeps on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Channel {
    /// Slots, sequence, peers, stop: `changes`.
    State,
    /// A seq's completion: `done_changes`.
    Done,
}

fn words(h: &Header, c: Channel) -> (&AtomicU32, &AtomicU32) {
    match c {
        Channel::State => (&h.changes, &h.sleepers),
        Channel::Done => (&h.done_changes, &h.done_sleepers),
    }
}

/// Tell the sleepers of channel `c` that something changed (`always`: wake them even when
/// none is counted).
pub(crate) fn wake(h: &Header, c: Channel, always: bool) {
    let (changes, sleepers) = words(h, c);
    changes.fetch_add(1, Ordering::SeqCst);
    if always || sleepers.load(Ordering::SeqCst) > 0 {
        let _ = futex::wake(changes, futex::Flags::empty(), u32::MAX);
    }
}

/// A stop: every sleeper of both channels, whether counted or not.
pub(crate) fn wake_all(h: &Header) {
    wake(h, Channel::State, true);
    wake(h, Channel::Done, true);
}

/// Sleep until `ready` has an answer; `every` runs once per [`CHECK_EVERY`] (the liveness
/// check) and ends the sleep with its answer, if it has one. `None` once `deadline` passed.
pub(crate) fn sleep_until<T>(
    h: &Header,
    c: Channel,
    deadline: Option<Instant>,
    mut ready: impl FnMut() -> Option<T>,
    mut every: impl FnMut() -> Option<T>,
) -> Option<T> {
    let (changes, sleepers) = words(h, c);
    let mut checked = Instant::now();
    loop {
        // Read before looking, so that a change made after the look wakes the futex wait.
        let seen = changes.load(Ordering::SeqCst);
        if let Some(r) = ready() {
            return Some(r);
        }
        let now = Instant::now();
        if now.duration_since(checked) >= CHECK_EVERY {
            if let Some(r) = every() {
                return Some(r);
            }
            checked = now;
        }
        let mut slice = CHECK_EVERY;
        if let Some(d) = deadline {
            if now >= d {
                return None;
            }
            slice = slice.min(d - now);
        }
        let ts = futex::Timespec {
            tv_sec: slice.as_secs() as _,
            tv_nsec: slice.subsec_nanos().max(1) as _,
        };
        sleepers.fetch_add(1, Ordering::SeqCst);
        let _ = futex::wait(changes, futex::Flags::empty(), seen, Some(&ts));
        sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What is left of a timeout as a deadline (`None`: a timeout too large to add).
pub(crate) fn deadline(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// Sleep up to `timeout`, or until the next change of the segment's state (a stop, say).
pub(crate) fn sleep_for(h: &Header, timeout: Duration) {
    let seen = h.changes.load(Ordering::SeqCst);
    let ts = futex::Timespec {
        tv_sec: timeout.as_secs() as _,
        tv_nsec: timeout.subsec_nanos().max(1) as _,
    };
    h.sleepers.fetch_add(1, Ordering::SeqCst);
    let _ = futex::wait(&h.changes, futex::Flags::empty(), seen, Some(&ts));
    h.sleepers.fetch_sub(1, Ordering::SeqCst);
}
