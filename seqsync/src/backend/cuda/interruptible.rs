//! A host thread's wait for an event that a stop can interrupt
//! ([`Backend::synchronize_interruptible`]): spin briefly, then sleep in short polls (with the
//! thread's timer slack lowered), spinning again around the expected end of the wait.

use std::time::{Duration, Instant};

use super::event::CudaEvent;
use super::timer_slack::TightTimerSlack;
use super::CudaBackend;
use crate::backend::{Backend, Interrupt, SyncOutcome};
use crate::error::Result;

/// How long an interruptible synchronize spins on `cuEventQuery` before it starts sleeping.
/// Short waits finish inside it with a spinning wait's latency.
const SYNC_SPIN: Duration = Duration::from_micros(100);
/// How long an interruptible synchronize sleeps between queries after the spin phase (with
/// the thread's timer slack lowered to 1 µs meanwhile, so the sleep is that long and not the
/// default 50 µs more). It bounds the extra wake-up latency of a long wait, and keeps its CPU
/// use to a small fraction of a core.
const SYNC_POLL: Duration = Duration::from_micros(20);

/// How long before the expected end of a wait (see [`Interrupt::expected_wait`]) an
/// interruptible synchronize stops sleeping and spins. The expectation is a moving average of
/// earlier waits, which include their own wake-up latency, so it runs late by about that much;
/// 200 µs covers it at a cost of 0.2 % of a core during a 100 ms wait.
const SYNC_SPIN_AHEAD: Duration = Duration::from_micros(200);

/// Block until `event` completes or `interrupt` fires.
pub(super) fn synchronize_interruptible(
    backend: &CudaBackend,
    event: &CudaEvent,
    interrupt: &dyn Interrupt,
) -> Result<SyncOutcome> {
    let start = Instant::now();
    let mut slack = None;
    // Spin from shortly before the expected end until well past it; sleep otherwise.
    let window = interrupt
        .expected_wait()
        .map(|e| (e.saturating_sub(SYNC_SPIN_AHEAD), e * 2 + SYNC_SPIN));
    loop {
        if backend.query(event)? {
            return Ok(SyncOutcome::Complete);
        }
        let elapsed = start.elapsed();
        let expected_soon = window.is_some_and(|(from, to)| elapsed >= from && elapsed < to);
        if elapsed < SYNC_SPIN || expected_soon {
            if interrupt.interrupted() {
                return Ok(SyncOutcome::Interrupted);
            }
            std::hint::spin_loop();
        } else {
            slack.get_or_insert_with(TightTimerSlack::new);
            if interrupt.sleep(SYNC_POLL) {
                return Ok(SyncOutcome::Interrupted);
            }
        }
    }
}
