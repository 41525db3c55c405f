//! Loom model of the crate's lock (`src/lock.rs`, the buffer tracker's, the timelines' and their ledgers'): one compare-and-swap
//! to take it, a release store to give it back. Two threads each make a two-step update of the
//! value under the lock (read, then write back one more); a lock that let both in at once, or
//! that did not publish a holder's write to the next holder, loses an update or shows loom a
//! data race on the cell.

use loom::sync::Arc;
use loom::thread;

use crate::lock::Lock;

#[test]
fn loom_lock_excludes_and_publishes() {
    loom::model(|| {
        let lock = Arc::new(Lock::new((0u32, 0u32)));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let lock = lock.clone();
                thread::spawn(move || {
                    let mut g = lock.lock();
                    let v = g.0;
                    g.0 = v + 1;
                    g.1 += 1;
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let g = lock.lock();
        assert_eq!((g.0, g.1), (2, 2));
    });
}
