//! How a host thread waits for something that may not wake it: the one strategy behind the
//! ring's host `synchronize` (on backends that poll an event, CUDA) and timelines' host waits.
//!
//! It may use: std and libc only; the backends and the ring and timeline layers use it.
//!
//! A waiter that nobody wakes (the GPU finishes work, the host is not told) must poll. Spinning
//! wakes at once but burns a core; sleeping between polls is cheap but late by the sleep. The
//! strategy gets both for the common case, a wait about as long as the previous ones (a
//! pipeline's period), by learning how long waits take ([`Expectation`]):
//!
//! | elapsed since the wait began | what the waiter does |
//! |---|---|
//! | `< SPIN` (100 µs) | spin (a short wait ends here with a spinning wait's latency) |
//! | before `expected - SPIN_AHEAD` (200 µs) (or with no expectation yet) | sleep `elapsed / 8` between polls (at least `FINE_POLL`, 20 µs, at most `POLL_MAX`, 2 ms), never past `expected - SPIN_AHEAD` |
//! | `expected - SPIN_AHEAD .. expected + SPIN_AFTER` (200 µs) | spin |
//! | later | sleep `(elapsed - expected) / 4` between polls (same bounds): a wait a little late is noticed soon, a very late one cheaply |
//!
//! A sleep is thus a fraction of how long the wait has lasted (or of how late it is), so a wait
//! that ends at a surprising time is noticed within about that fraction of its length, and a
//! long wait wakes about `8 ln(POLL_MAX / FINE_POLL)` times, then once per `POLL_MAX`. A
//! waiter that *is* woken on completion (the host backend's timelines) sleeps up to
//! `PARK_MAX` (50 ms) instead of polling, but still spins around the expected end, where a spin is
//! faster than a wake-up.
//!
//! Sleeps run with the thread's timer slack lowered to 1 µs (`TightTimerSlack`): with Linux's
//! default 50 µs, every short sleep overshoots by up to that much.
//!
//! The expectation learns when the wait was *seen* to end, knowing how coarse the last sleep
//! was (see [`Expectation::learn`]): a moving average of the times waits were noticed would
//! drift late by the wake-up latency, the spin window would then open after the work ended, and
//! the waits would be noticed one sleep late.
//!
//! Cost on a 100 ms wait that ends when expected: the first `SPIN`, the window
//! (`SPIN_AHEAD + SPIN_AFTER`), and about 80 wake-ups, each a few µs of CPU (5 on the H200's
//! host, 20–30 on a loaded 2-core VM): 0.8 % of a core on the first, 3 % on the second.

use std::time::{Duration, Instant};

// A hint, not state to model: std's atomic under loom too.
use std::sync::atomic::{AtomicU64, Ordering};

/// How long a wait spins before it first sleeps.
pub(crate) const SPIN: Duration = Duration::from_micros(100);
/// How long before the expected end a wait starts spinning again.
pub(crate) const SPIN_AHEAD: Duration = Duration::from_micros(200);
/// How long after the expected end a wait keeps spinning.
pub(crate) const SPIN_AFTER: Duration = Duration::from_micros(200);
/// The shortest sleep between polls.
pub(crate) const FINE_POLL: Duration = Duration::from_micros(20);
/// The longest sleep between polls.
pub(crate) const POLL_MAX: Duration = Duration::from_millis(2);
/// The longest sleep of a waiter that is woken on completion (a safety net only).
pub(crate) const PARK_MAX: Duration = Duration::from_millis(50);

/// How long waits of one kind took lately: a moving average (see the [module docs](self)).
/// Shared by the waits it describes (a ring's host synchronizes, a timeline's host waits).
#[derive(Debug, Default)]
pub struct Expectation {
    /// Nanoseconds; 0: nothing learnt yet.
    ns: AtomicU64,
}

impl Expectation {
    /// Nothing learnt yet.
    pub fn new() -> Self {
        Expectation {
            ns: AtomicU64::new(0),
        }
    }

    /// The expected length of the next wait, once one was learnt.
    pub fn get(&self) -> Option<Duration> {
        match self.ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// A wait ended after `after` and by `by` (the last poll that found it pending, and the
    /// one that found it done). Seen precisely (`by - after` at most two `FINE_POLL`s (20 µs each)), `by`
    /// goes into a moving average (a quarter's weight). Seen after a long sleep, an
    /// expectation outside that interval was wrong: it moves to the interval's start at once,
    /// so that the next wait spins from a little early (and sees the end precisely) rather
    /// than sleeping past it.
    pub fn learn(&self, after: Duration, by: Duration) {
        let ns = |d: Duration| (d.as_nanos().min(u64::MAX as u128 / 4) as u64).max(1);
        let (after, by) = (ns(after), ns(by.max(after)));
        let old = self.ns.load(Ordering::Relaxed);
        let new = if by - after <= ns(FINE_POLL * 2) {
            if old == 0 {
                by
            } else {
                old - old / 4 + by / 4
            }
        } else if (after..=by).contains(&old) {
            old
        } else {
            after
        };
        self.ns.store(new.max(1), Ordering::Relaxed);
    }
}

/// What a waiter does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Poll again at once.
    Spin,
    /// Sleep (or park) up to this long, then poll.
    Sleep(Duration),
}

/// The plan (see the [module docs](self)): what to do `elapsed` into a wait expected to take
/// `expected`, for a waiter that is woken on completion (`notified`) or not.
pub(crate) fn next(elapsed: Duration, expected: Option<Duration>, notified: bool) -> Next {
    if elapsed < SPIN {
        return Next::Spin;
    }
    // Sleep a fraction of how long the wait has lasted (or, past the expected end, of how late
    // it is): a wait that ends at a surprising time is noticed within that fraction of it.
    let backoff = |t: Duration, fraction: u32| {
        if notified {
            PARK_MAX
        } else {
            (t / fraction).clamp(FINE_POLL, POLL_MAX)
        }
    };
    let Some(e) = expected else {
        return Next::Sleep(backoff(elapsed, 8));
    };
    let from = e.saturating_sub(SPIN_AHEAD);
    if elapsed < from {
        return Next::Sleep(backoff(elapsed, 8).min(from - elapsed));
    }
    if elapsed < e + SPIN_AFTER {
        return Next::Spin;
    }
    Next::Sleep(backoff(elapsed - e, 4))
}

/// Lowers the calling thread's timer slack to 1 µs while it lives (Linux), restoring it on
/// drop: a sleep of 20 µs then takes about 20 µs, not up to 70.
pub(crate) struct TightTimerSlack(Option<libc::c_ulong>);

impl TightTimerSlack {
    pub(crate) fn new() -> Self {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: PR_GET_TIMERSLACK takes no pointer arguments and only reads this thread's
            // setting; it returns the slack in nanoseconds, or -1 on error.
            let old = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
            if old <= 0 {
                return TightTimerSlack(None);
            }
            // SAFETY: PR_SET_TIMERSLACK with a plain integer changes only this thread's slack.
            let ok =
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) }
                    == 0;
            TightTimerSlack(ok.then_some(old as libc::c_ulong))
        }
        #[cfg(not(target_os = "linux"))]
        TightTimerSlack(None)
    }
}

impl Drop for TightTimerSlack {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(old) = self.0 {
            // SAFETY: as in `new`: restores this thread's own previous setting.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, old, 0, 0, 0) };
        }
    }
}

/// How a wait ended.
pub(crate) struct Waited<R> {
    /// What `check` returned, or `None` at the deadline.
    pub(crate) result: Option<R>,
    /// When the last check that found it pending ran (since the wait began).
    pub(crate) pending_at: Duration,
    /// When the check that found it done ran (or the deadline passed).
    pub(crate) done_at: Duration,
}

impl<R> Waited<R> {
    /// Teach `x` how long this wait took, if it ended.
    pub(crate) fn teach(&self, x: &Expectation) {
        if self.result.is_some() {
            x.learn(self.pending_at, self.done_at);
        }
    }
}

/// Wait by the [plan](step): `check` until it returns `Some`, `sleep(d)` (which may return
/// early, e.g. when woken) between checks, until `deadline`. `check` is called at once first.
pub(crate) fn wait_until<R>(
    expected: Option<Duration>,
    notified: bool,
    deadline: Option<Instant>,
    mut check: impl FnMut() -> Option<R>,
    mut sleep: impl FnMut(Duration),
) -> Waited<R> {
    let start = Instant::now();
    let mut last_pending = Duration::ZERO;
    let mut slack = None;
    loop {
        if let Some(r) = check() {
            return Waited {
                result: Some(r),
                pending_at: last_pending,
                done_at: start.elapsed(),
            };
        }
        let now = Instant::now();
        let elapsed = now - start;
        last_pending = elapsed;
        let left = match deadline {
            Some(d) if now >= d => {
                return Waited {
                    result: None,
                    pending_at: elapsed,
                    done_at: elapsed,
                }
            }
            Some(d) => d - now,
            None => Duration::MAX,
        };
        match next(elapsed, expected, notified) {
            // Under loom a spin would never let another thread run: park briefly instead.
            #[cfg(not(seqsync_loom))]
            Next::Spin => {
                for _ in 0..16 {
                    std::hint::spin_loop();
                }
            }
            #[cfg(seqsync_loom)]
            Next::Spin => sleep(FINE_POLL.min(left)),
            Next::Sleep(d) => {
                slack.get_or_insert_with(TightTimerSlack::new);
                sleep(d.min(left));
            }
        }
    }
}

impl<R> std::fmt::Debug for Waited<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waited")
            .field("done", &self.result.is_some())
            .field("pending_at", &self.pending_at)
            .field("done_at", &self.done_at)
            .finish()
    }
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_wait_spins_first() {
        assert_eq!(next(Duration::ZERO, None, false), Next::Spin);
        assert_eq!(next(99 * US, Some(100 * MS), true), Next::Spin);
    }

    #[test]
    fn an_unknown_wait_sleeps_an_eighth_of_its_length_up_to_poll_max() {
        assert_eq!(next(120 * US, None, false), Next::Sleep(FINE_POLL));
        assert_eq!(next(200 * US, None, false), Next::Sleep(25 * US));
        assert_eq!(next(2 * MS, None, false), Next::Sleep(250 * US));
        assert_eq!(next(8 * MS, None, false), Next::Sleep(MS));
        assert_eq!(next(80 * MS, None, false), Next::Sleep(POLL_MAX));
        assert_eq!(next(80 * MS, None, true), Next::Sleep(PARK_MAX));
    }

    #[test]
    fn an_expected_wait_sleeps_until_the_margin_then_spins_across_the_end() {
        let e = Some(100 * MS);
        assert_eq!(next(50 * MS, e, false), Next::Sleep(POLL_MAX));
        assert_eq!(next(99 * MS, e, false), Next::Sleep(800 * US));
        // Never sleeps past the start of the window, notified or not.
        assert_eq!(next(99_700 * US, e, false), Next::Sleep(100 * US));
        assert_eq!(next(99_700 * US, e, true), Next::Sleep(100 * US));
        assert_eq!(next(99_800 * US, e, false), Next::Spin);
        assert_eq!(next(100_099 * US, e, true), Next::Spin);
        // Late: polls a quarter of the lateness apart.
        assert_eq!(next(100_199 * US, e, false), Next::Spin);
        assert_eq!(next(100_200 * US, e, false), Next::Sleep(50 * US));
        assert_eq!(next(100_400 * US, e, false), Next::Sleep(100 * US));
        assert_eq!(next(120 * MS, e, false), Next::Sleep(POLL_MAX));
        assert_eq!(next(100_200 * US, e, true), Next::Sleep(PARK_MAX));
    }

    #[test]
    fn the_expectation_averages_precise_ends_and_jumps_into_coarse_ones() {
        let x = Expectation::new();
        assert_eq!(x.get(), None);
        // Coarse, nothing learnt: the start of the interval.
        x.learn(98 * MS, 100 * MS);
        assert_eq!(x.get(), Some(98 * MS));
        // Coarse and later than expected: to the start of the interval.
        x.learn(99_500 * US, 100 * MS);
        assert_eq!(x.get(), Some(99_500 * US));
        // Coarse and inside it: unchanged.
        x.learn(99 * MS, 101 * MS);
        assert_eq!(x.get(), Some(99_500 * US));
        // Coarse and earlier than expected: to the start of the interval too.
        x.learn(97 * MS, 99 * MS);
        assert_eq!(x.get(), Some(97 * MS));
        x.learn(99_500 * US, 100 * MS);
        // Precise: a quarter of the way.
        x.learn(100_490 * US, 100_500 * US);
        assert_eq!(x.get(), Some(99_750 * US));
    }

    #[test]
    fn a_wait_seen_after_a_long_sleep_knows_the_last_pending_poll() {
        let start = Instant::now();
        // Done from 3 ms on; every sleep takes 5 ms whatever it was asked for.
        let w = wait_until(
            None,
            false,
            None,
            || (start.elapsed() >= 3 * MS).then_some(()),
            |_| std::thread::sleep(5 * MS),
        );
        assert!(w.result.is_some());
        // The last pending poll ran right after the spin (before the 3 ms at which the
        // condition became true: a loaded machine stretches the spin past 1 ms, as CI's two
        // cores did), the one that saw it done a 5 ms sleep later.
        assert!(w.pending_at >= SPIN && w.pending_at < 3 * MS, "{w:?}");
        assert!(w.done_at >= w.pending_at + 5 * MS, "{w:?}");
    }

    #[test]
    fn a_wait_seen_while_spinning_knows_its_end_closely() {
        // Best of five: a preemption in the middle of the spin separates the two polls too.
        let closest = (0..5)
            .map(|_| {
                let start = Instant::now();
                let w = wait_until(
                    None,
                    false,
                    None,
                    || (start.elapsed() >= 50 * US).then_some(()),
                    std::thread::sleep,
                );
                assert!(w.result.is_some());
                w.done_at - w.pending_at
            })
            .min()
            .unwrap();
        // Seen precisely: the expectation averages it in.
        assert!(closest <= FINE_POLL * 2, "{closest:?}");
    }

    #[test]
    fn a_wait_times_out_at_its_deadline() {
        let t0 = Instant::now();
        let w = wait_until(
            None,
            false,
            Some(t0 + 3 * MS),
            || None::<()>,
            std::thread::sleep,
        );
        assert!(w.result.is_none());
        assert!(t0.elapsed() >= 3 * MS);
    }
}
