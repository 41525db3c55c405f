//! Many threads allocate, use and free blocks of one pool on several streams, under host chaos
//! (random delays in every stream operation). Every use of a block checks that nobody else
//! wrote it meanwhile, and every reader checks the writer's data: a block handed out while still
//! in use shows up as a wrong value.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seqsync::backend::host::{Chaos, HostStream};
use seqsync::memory::{AllocFlags, Block, Point, Pool, PoolConfig, Wait};
use seqsync::{Error, HostBackend};

const THREADS: usize = 4;
const STREAMS: usize = 4;
const ITERS: usize = 120;
const MAX_BYTES: usize = 40 << 10;

/// A tiny deterministic generator per thread.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Write `tag` over the block, linger, and check it is still all `tag`.
fn write_and_check(block: Block, tag: u32, linger_us: u64, bad: Arc<AtomicU64>) -> impl FnOnce() {
    move || {
        let p = block.addr() as *mut u32;
        let n = block.capacity() / 4;
        for i in 0..n {
            // SAFETY: the block is the test's (what the test checks is that nobody else's).
            unsafe { p.add(i).write_volatile(tag) };
        }
        std::thread::sleep(Duration::from_micros(linger_us));
        // SAFETY: as above.
        if (0..n).any(|i| unsafe { p.add(i).read_volatile() } != tag) {
            bad.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Check the block holds `tag` everywhere.
fn check(block: Block, tag: u32, bad: Arc<AtomicU64>) -> impl FnOnce() {
    move || {
        let p = block.addr() as *const u32;
        // SAFETY: the block is live and ordered after its writer by the test's waits.
        if (0..block.capacity() / 4).any(|i| unsafe { p.add(i).read_volatile() } != tag) {
            bad.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Held {
    block: Block,
    /// Points every later use of the block, and its free, must follow.
    uses: Vec<Point<HostBackend>>,
}

fn stress(seed: u64) -> (seqsync::memory::PoolStats, u64, u64) {
    let host = HostBackend::with_chaos(Chaos {
        seed,
        max_delay: Duration::from_micros(60),
    });
    let streams: Vec<HostStream> = (0..STREAMS)
        .map(|i| host.new_stream(&format!("s{i}")).unwrap())
        .collect();
    // Small enough that requests run into reuse, inserted waits and exhaustion.
    let pool = Pool::new(
        &host,
        "stress",
        PoolConfig {
            slab_bytes: 8 << 10,
            max_bytes: MAX_BYTES,
            ..PoolConfig::default()
        },
    )
    .unwrap();
    let recent: Mutex<VecDeque<Point<HostBackend>>> = Mutex::new(VecDeque::new());
    let bad = Arc::new(AtomicU64::new(0));
    let refused = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (host, streams, pool, recent, bad, refused) =
                (&host, &streams, &pool, &recent, &bad, &refused);
            scope.spawn(move || {
                let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9) ^ ((t as u64 + 1) * 0x1234_5679));
                let mut held: VecDeque<Held> = VecDeque::new();
                for iter in 0..ITERS {
                    host.chaos_pause();
                    let a = &streams[rng.below(STREAMS)];
                    let size = [300, 1000, 4096, 6000][rng.below(4)];
                    let waited = recent.lock().unwrap().get(rng.below(8)).cloned();
                    let waits: Vec<_> = waited.iter().map(Wait::Point).collect();
                    let flags = AllocFlags {
                        allow_wait: rng.below(2) == 0,
                        signal: false,
                    };
                    match pool.alloc_with(a, size, &waits, flags) {
                        Ok(alloc) => {
                            let tag = ((t as u32) << 24) | iter as u32;
                            let linger = rng.below(40) as u64;
                            a.launch(write_and_check(alloc.block, tag, linger, bad.clone()));
                            let written = pool.record(a).unwrap();
                            let mut uses = vec![written.clone()];
                            if rng.below(2) == 0 {
                                let r = &streams[rng.below(STREAMS)];
                                pool.wait(r, &written).unwrap();
                                r.launch(check(alloc.block, tag, bad.clone()));
                                uses.push(pool.record(r).unwrap());
                            }
                            held.push_back(Held {
                                block: alloc.block,
                                uses,
                            });
                        }
                        Err(Error::Exhausted { .. }) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("{e}"),
                    }
                    // Keep up to 3 blocks; free the oldest on a random stream after its uses.
                    while held.len() > rng.below(4) {
                        let h = held.pop_front().unwrap();
                        let f = &streams[rng.below(STREAMS)];
                        let waits: Vec<_> = h.uses.iter().map(Wait::Point).collect();
                        let freed = pool.free(f, h.block, &waits).unwrap();
                        let mut recent = recent.lock().unwrap();
                        recent.push_front(freed);
                        recent.truncate(8);
                    }
                }
                for h in held {
                    let f = &streams[rng.below(STREAMS)];
                    let waits: Vec<_> = h.uses.iter().map(Wait::Point).collect();
                    pool.free(f, h.block, &waits).unwrap();
                }
            });
        }
    });
    for s in &streams {
        s.synchronize().unwrap();
    }
    (
        pool.stats(),
        bad.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    )
}

#[test]
fn no_block_is_handed_out_while_in_use() {
    let (mut waits, mut reuse, mut fresh) = (0, 0, 0);
    for seed in 1..=3 {
        let (stats, bad, refused) = stress(seed);
        (waits, reuse, fresh) = (
            waits + stats.waits,
            reuse + stats.reuse,
            fresh + stats.fresh,
        );
        assert_eq!(
            bad, 0,
            "seed {seed}: {bad} uses saw another user's data; {stats:?}"
        );
        assert_eq!(stats.used_current, 0, "seed {seed}: {stats:?}");
        assert_eq!(stats.host_syncs, 0, "seed {seed}: {stats:?}");
        assert_eq!(stats.exhausted, refused, "seed {seed}");
        assert!(stats.reserved_high <= MAX_BYTES, "seed {seed}: {stats:?}");
        eprintln!("seed {seed}: {stats:?}");
    }
    // Every path ran: zero-sync reuse, fresh memory, inserted waits.
    assert!(
        reuse > 0 && fresh > 0 && waits > 0,
        "{reuse} {fresh} {waits}"
    );
}
