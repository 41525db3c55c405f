//! Sizes at the edges: a request whose size class does not fit in a usize is a named error
//! (`AllocSize`), never a panic; `fixed_blocks(b, n)` serves exactly n blocks of b bytes
//! whatever b's size class.
use std::panic::{catch_unwind, AssertUnwindSafe};

use seqsync::memory::{Pool, PoolConfig};
use seqsync::HostBackend;

#[test]
fn a_huge_size_is_a_named_error_not_a_panic() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let p = Pool::new(&host, "p", PoolConfig::default()).unwrap();
    for size in [usize::MAX, usize::MAX - 1000] {
        match catch_unwind(AssertUnwindSafe(|| p.alloc(&s, size, &[]))) {
            Ok(Err(seqsync::Error::AllocSize { .. })) => {}
            Ok(Err(e)) => panic!("alloc({size}): {e}"),
            Ok(Ok(a)) => panic!("alloc({size}) succeeded: {:?}", a.block),
            Err(_) => panic!("alloc({size}) panicked"),
        }
    }
}

#[test]
fn fixed_blocks_serve_exactly_count_blocks() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    for (bytes, count) in [(1000usize, 4usize), (100, 1), (4000, 3)] {
        let p = Pool::new(&host, "fixed", PoolConfig::fixed_blocks(bytes, count)).unwrap();
        for i in 0..count {
            p.alloc(&s, bytes, &[])
                .unwrap_or_else(|e| panic!("fixed_blocks({bytes}, {count}): block {i}: {e}"));
        }
        assert!(p.alloc(&s, bytes, &[]).is_err());
    }
}
