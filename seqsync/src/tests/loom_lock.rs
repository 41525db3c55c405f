//! Loom models of the crate's lock (`src/lock/`, the buffer tracker's, the timelines' and their
//! ledgers'). Threads each make a two-step update of the value under the lock (read, then write
//! back one more); a lock that let two in at once, or that did not publish a holder's write to
//! the next holder, loses an update or shows loom a data race on the cell. Shared (one
//! compare-and-swap to take it, a release store to give it back), and biased to a first thread
//! that keeps taking it while others take it away (the asymmetric barriers are `SeqCst` fences
//! here, which is what the pair guarantees).

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

/// Two updates under `lock`.
fn bump(lock: &Lock<(u32, u32)>) {
    let mut g = lock.lock();
    let v = g.0;
    g.0 = v + 1;
    g.1 += 1;
}

#[test]
fn loom_biased_lock_taken_away_excludes_and_publishes() {
    loom::model(|| {
        let lock = Arc::new(Lock::new_biasable((0u32, 0u32)));
        // The model's thread claims it, then takes it again while another takes it away.
        bump(&lock);
        assert!(lock.is_biased());
        let other = {
            let lock = lock.clone();
            thread::spawn(move || bump(&lock))
        };
        bump(&lock);
        other.join().unwrap();
        assert!(!lock.is_biased());
        let g = lock.lock();
        assert_eq!((g.0, g.1), (3, 3));
    });
}

#[test]
fn loom_two_threads_racing_to_take_a_biased_lock_away() {
    loom::model(|| {
        let lock = Arc::new(Lock::new_biasable((0u32, 0u32)));
        bump(&lock);
        let others: Vec<_> = (0..2)
            .map(|_| {
                let lock = lock.clone();
                thread::spawn(move || bump(&lock))
            })
            .collect();
        bump(&lock);
        for t in others {
            t.join().unwrap();
        }
        let g = lock.lock();
        assert_eq!((g.0, g.1), (4, 4));
    });
}
