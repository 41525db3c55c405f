//! Cutting a host wait short: the [`Interrupt`] a stopped ring fires, and how a wait that nobody
//! signals to the host polls for it.

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::wait_strategy::{self, Expectation};

/// How [`Backend::synchronize_interruptible`](super::Backend::synchronize_interruptible) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The event completed.
    Complete,
    /// The [`Interrupt`] fired first; the event may still be pending.
    Interrupted,
}

/// Something that can cut a host wait short: a stopped ring.
///
/// `sleep` must return early (with `true`) as soon as the interrupt fires.
pub trait Interrupt {
    /// Has the interrupt fired?
    fn interrupted(&self) -> bool;
    /// Sleep up to `timeout`, returning early if the interrupt fires; returns
    /// [`Interrupt::interrupted`] afterwards.
    fn sleep(&self, timeout: Duration) -> bool;
    /// How long waits like this one took lately, if known: a polling backend spins (instead of
    /// sleeping) around that time, so a wait that ends when expected is noticed at once, and
    /// teaches it how long this wait took (see `wait_strategy.rs`).
    fn expectation(&self) -> Option<&Expectation> {
        None
    }
}

/// A host synchronize on an event that nobody signals to the host (a CUDA event): poll
/// `query` by the [`wait_strategy`], sleeping in [`Interrupt::sleep`] so that the interrupt
/// cuts a sleep short.
pub(crate) fn synchronize_by_polling(
    mut query: impl FnMut() -> Result<bool>,
    interrupt: &dyn Interrupt,
) -> Result<SyncOutcome> {
    let expectation = interrupt.expectation();
    let waited = wait_strategy::wait_until(
        expectation.and_then(Expectation::get),
        false,
        None,
        || match query() {
            Ok(true) => Some(Ok(SyncOutcome::Complete)),
            Err(e) => Some(Err(e)),
            Ok(false) if interrupt.interrupted() => Some(Ok(SyncOutcome::Interrupted)),
            Ok(false) => None,
        },
        |d| {
            interrupt.sleep(d);
        },
    );
    if let (Some(x), Some(Ok(SyncOutcome::Complete))) = (expectation, &waited.result) {
        waited.teach(x);
    }
    waited.result.expect("no deadline")
}

/// An interrupt that fires at an instant: a wait with a time limit.
#[derive(Debug, Clone, Copy)]
pub struct Deadline(pub Instant);

impl Interrupt for Deadline {
    fn interrupted(&self) -> bool {
        Instant::now() >= self.0
    }
    fn sleep(&self, timeout: Duration) -> bool {
        std::thread::sleep(timeout.min(self.0.saturating_duration_since(Instant::now())));
        self.interrupted()
    }
}

/// An interrupt that never fires.
#[derive(Debug, Clone, Copy, Default)]
pub struct NeverInterrupt;

impl Interrupt for NeverInterrupt {
    fn interrupted(&self) -> bool {
        false
    }
    fn sleep(&self, timeout: Duration) -> bool {
        std::thread::sleep(timeout);
        false
    }
}
