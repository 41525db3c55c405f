//! Waiting on a word another thread or the device writes: spin, then yield, then nap.

use std::time::{Duration, Instant};

/// Spin on `ready` (then yield, then nap: a wait that lasts is not worth a core) until it holds
/// or `given_up` does; true when it held.
pub(crate) fn poll(ready: impl Fn() -> bool, given_up: impl Fn() -> bool) -> bool {
    /// Spins before the first yield, and how long to yield before napping.
    const SPINS: u32 = 256;
    const YIELD_FOR: Duration = Duration::from_millis(1);
    const NAP: Duration = Duration::from_micros(20);
    for _ in 0..SPINS {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    let t = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if given_up() {
            return false;
        }
        if t.elapsed() < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(NAP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_ends_when_ready_or_given_up() {
        assert!(poll(|| true, || false));
        assert!(!poll(|| false, || true));
    }
}
