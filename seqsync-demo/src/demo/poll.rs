//! Waiting on a word another thread or the device writes: spin, then yield, then nap.

use std::time::{Duration, Instant};

/// Spins before the first yield.
const SPINS: u32 = 256;
/// How long to yield before sleeping.
const YIELD_FOR: Duration = Duration::from_millis(1);
/// A nap of [`poll`] once it sleeps.
const NAP: Duration = Duration::from_micros(20);

/// Spin on `ready` (then yield, then nap: a wait that lasts is not worth a core) until it holds
/// or `given_up` does; true when it held.
pub(crate) fn poll(ready: impl Fn() -> bool, given_up: impl Fn() -> bool) -> bool {
    if let Some(held) = spin_then_yield(&ready, &given_up) {
        return held;
    }
    loop {
        if ready() {
            return true;
        }
        if given_up() {
            return false;
        }
        std::thread::sleep(NAP);
    }
}

/// The first phases of [`poll`]: spin on `ready`, then yield for up to `YIELD_FOR` (1 ms);
/// `Some(true)` once it held, `Some(false)` once `given_up` did, `None` when neither did by then
/// (the caller sleeps: a nap, or a wait for a wake-up where something rings one).
pub(crate) fn spin_then_yield(
    ready: &impl Fn() -> bool,
    given_up: &impl Fn() -> bool,
) -> Option<bool> {
    for _ in 0..SPINS {
        if ready() {
            return Some(true);
        }
        std::hint::spin_loop();
    }
    let t = Instant::now();
    while t.elapsed() < YIELD_FOR {
        if ready() {
            return Some(true);
        }
        if given_up() {
            return Some(false);
        }
        std::thread::yield_now();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_ends_when_ready_or_given_up() {
        assert!(poll(|| true, || false));
        assert!(!poll(|| false, || true));
    }

    #[test]
    fn spinning_and_yielding_end_after_a_millisecond_of_neither() {
        let t = Instant::now();
        assert_eq!(spin_then_yield(&|| false, &|| false), None);
        assert!(t.elapsed() >= YIELD_FOR);
        assert_eq!(spin_then_yield(&|| true, &|| false), Some(true));
        assert_eq!(spin_then_yield(&|| false, &|| true), Some(false));
    }
}
