//! Stream-ordered allocation: the pool's contract (DESIGN.md "Stream-ordered allocation") and
//! the ported conformance cases, on the host backend and on CUDA.
//!
//! Ported (`cts_` + the case in snake_case), from `../shared/research/peer-suites.md`:
//! - IREE `runtime/src/iree/hal/cts/queue/queue_alloca_test.cc` (`QueueAllocaTest`, §1.4). Not
//!   ported: `DeallocaPrefersOriginPlacement` and `ZeroAccessFlagsCanonicalized` (seqsync has no
//!   placements or access flags: every free names its stream).
//! - IREE `runtime/src/iree/hal/memory/fixed_block_pool_test.cc` reuse cases (§1.8).
//! - Unified Runtime `test/adapters/level_zero/enqueue_alloc.cpp` (§2.2), including the
//!   multi-queue `SuccessReuse` that UR skips ("Multi queue reuse is not supported").
//!
//! IREE's "queue" is a stream, a semaphore signal is a point, `ALLOW_POOL_WAIT_FRONTIER` is
//! [`AllocFlags::allow_wait`], `stats.wait_count` is [`PoolStats::waits`].

use crate::common;

use std::time::Duration;

use common::Harness;
use seqsync::backend::{Backend, MemoryBackend};
use seqsync::internal::memory::{NativePool, StreamAllocator};
use seqsync::memory::{AllocFlags, Block, Pool, PoolConfig, PoolStats, Wait};
use seqsync::timeline::Timeline;
use seqsync::{Error, HostBackend};

/// What the tests do with memory on a stream: fill, copy, read back.
pub trait MemOps: Harness + MemoryBackend {
    /// Enqueue: write `value` into `n` u32s at `addr`.
    fn fill_u32(&self, stream: &Self::Stream, addr: u64, n: usize, value: u32);
    /// Enqueue: copy `bytes` from `src` to `dst`.
    fn copy(&self, stream: &Self::Stream, dst: u64, src: u64, bytes: usize);
    /// Wait for `stream`, then read `n` u32s at `addr`.
    fn read_u32(&self, stream: &Self::Stream, addr: u64, n: usize) -> Vec<u32>;
}

impl MemOps for HostBackend {
    fn fill_u32(&self, stream: &Self::Stream, addr: u64, n: usize, value: u32) {
        stream.launch(move || {
            let p = addr as *mut u32;
            for i in 0..n {
                // SAFETY: the tests fill only blocks they own, ordered by the pool's points.
                unsafe { p.add(i).write_volatile(value) };
            }
        });
    }
    fn copy(&self, stream: &Self::Stream, dst: u64, src: u64, bytes: usize) {
        stream.launch(move || {
            // SAFETY: both ranges are live blocks of `bytes` bytes owned by the test.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
        });
    }
    fn read_u32(&self, stream: &Self::Stream, addr: u64, n: usize) -> Vec<u32> {
        stream.synchronize().unwrap();
        let p = addr as *const u32;
        // SAFETY: the stream has finished every write the test enqueued on the block.
        (0..n)
            .map(|i| unsafe { p.add(i).read_volatile() })
            .collect()
    }
}

#[cfg(feature = "cuda")]
mod cuda_ops {
    use super::*;
    use seqsync::backend::cuda::CudaBackend;
    use seqsync::cudarc::driver::sys;

    impl MemOps for CudaBackend {
        fn fill_u32(&self, stream: &Self::Stream, addr: u64, n: usize, value: u32) {
            self.context().bind_to_thread().unwrap();
            // SAFETY: `addr` is a live block of at least `n` u32s; the stream is live.
            unsafe { sys::cuMemsetD32Async(addr, value, n, stream.cu_stream()) }
                .result()
                .unwrap();
        }
        fn copy(&self, stream: &Self::Stream, dst: u64, src: u64, bytes: usize) {
            self.context().bind_to_thread().unwrap();
            // SAFETY: both are live device blocks of at least `bytes` bytes.
            unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream.cu_stream()) }
                .result()
                .unwrap();
        }
        fn read_u32(&self, stream: &Self::Stream, addr: u64, n: usize) -> Vec<u32> {
            self.sync_stream(stream);
            self.context().bind_to_thread().unwrap();
            let mut out = vec![0u32; n];
            // SAFETY: `out` has room for `n` u32s; `addr` is a live block of as many.
            unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), addr, n * 4) }
                .result()
                .unwrap();
            out
        }
    }
}

fn pool<B: MemOps>(b: &B, config: PoolConfig) -> Pool<B> {
    Pool::new(b, "test", config).unwrap()
}

fn counts(s: &PoolStats) -> (u64, u64, u64, u64) {
    (s.reuse, s.fresh, s.waits, s.exhausted)
}

// ----------------------------------------------------------------------------------------------
// The contract rows.

/// Same stream: a freed block is reused at once, with no event and no wait.
fn same_stream_reuse_needs_no_event<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let s = b.stream();
    let a = p.alloc(&s, 1000, &[]).unwrap();
    assert!(a.ready.is_none(), "no event unless asked");
    p.free(&s, a.block, &[]).unwrap();
    let a2 = p.alloc(&s, 1000, &[]).unwrap();
    assert_eq!(a2.block.addr(), a.block.addr());
    assert!(a2.ready.is_none());
    assert_eq!(counts(&p.stats()), (1, 1, 0, 0));
    b.fill_u32(&s, a2.block.addr(), 250, 7);
    assert!(b.read_u32(&s, a2.block.addr(), 250).iter().all(|&v| v == 7));
    p.free(&s, a2.block, &[]).unwrap();
}

/// Another stream that is not ordered after the free gets fresh memory, never the freed block.
fn unordered_stream_gets_fresh_memory<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let (s1, s2) = (b.stream(), b.stream());
    let a = p.alloc(&s1, 4096, &[]).unwrap();
    b.busy(&s1, Duration::from_millis(20));
    p.free(&s1, a.block, &[]).unwrap();
    let c = p.alloc(&s2, 4096, &[]).unwrap();
    assert_ne!(c.block.addr(), a.block.addr());
    let st = p.stats();
    assert_eq!(counts(&st), (0, 2, 0, 0));
    assert_eq!(st.reuse_miss, 1);
}

/// A stream that waited (through the pool) on the free's point, or on any later point of the
/// freeing stream, reuses the block: zero synchronization.
fn ordered_stream_reuses<B: MemoryBackend + MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let (s1, s2, s3) = (b.stream(), b.stream(), b.stream());
    let a = p.alloc(&s1, 4096, &[]).unwrap();
    let freed = p.free(&s1, a.block, &[]).unwrap();
    let later = p.record(&s1).unwrap();
    let c = p.alloc(&s2, 4096, &[Wait::Point(&later)]).unwrap();
    assert_eq!(c.block.addr(), a.block.addr());
    assert_eq!(counts(&p.stats()), (1, 1, 0, 0));
    // Transitively: s3 waits on a point of s2 recorded after s2 waited on s1's free.
    let freed2 = p.free(&s1, c.block, &[]).unwrap();
    p.wait(&s2, &freed2).unwrap();
    let via = p.record(&s2).unwrap();
    let d = p.alloc(&s3, 4096, &[Wait::Point(&via)]).unwrap();
    assert_eq!(d.block.addr(), a.block.addr());
    assert_eq!(counts(&p.stats()), (2, 1, 0, 0));
    drop(freed);
}

/// A wait on a plain event teaches the pool nothing: it cannot prove the order, so it does not
/// reuse (honest tracking, no guessing).
fn plain_event_waits_prove_nothing<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let (s1, s2) = (b.stream(), b.stream());
    let a = p.alloc(&s1, 4096, &[]).unwrap();
    let freed = p.free(&s1, a.block, &[]).unwrap();
    let c = p.alloc(&s2, 4096, &[Wait::Event(freed.event())]).unwrap();
    assert_ne!(c.block.addr(), a.block.addr());
    // A point of another pool proves nothing about this pool's seqs either.
    let other = pool(b, PoolConfig::default());
    let x = other.alloc(&s1, 64, &[]).unwrap();
    let other_point = other.free(&s1, x.block, &[]).unwrap();
    let c2 = p.alloc(&s2, 4096, &[Wait::Point(&other_point)]).unwrap();
    assert_ne!(c2.block.addr(), a.block.addr());
    assert_eq!(p.stats().reuse, 0);
}

/// Bad input is a named error, and nothing is lost: the pool's blocks and counts are unchanged.
fn bad_input_is_named_and_loses_nothing<B: MemOps>(b: &B) {
    let p = pool(
        b,
        PoolConfig {
            max_alloc: 1 << 20,
            ..PoolConfig::default()
        },
    );
    let s = b.stream();
    let live = p.alloc(&s, 512, &[]).unwrap();
    let gone = p.alloc(&s, 512, &[]).unwrap();
    p.free(&s, gone.block, &[]).unwrap();
    let before = p.stats();

    let e = p.alloc(&s, 0, &[]).unwrap_err();
    assert!(
        matches!(e, Error::AllocSize { size: 0, max, .. } if max == 1 << 20),
        "{e}"
    );
    let e = p.alloc(&s, (1 << 20) + 1, &[]).unwrap_err();
    assert!(matches!(e, Error::AllocSize { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "pool 'test': cannot allocate {} bytes: sizes must be 1..={}",
            (1 << 20) + 1,
            1 << 20
        )
    );
    let e = p.free(&s, gone.block, &[]).unwrap_err();
    assert!(
        matches!(e, Error::DoubleFree { addr, .. } if addr == gone.block.addr()),
        "{e}"
    );
    // Memory of another pool, an interior address, an address nobody allocated.
    let other = pool(b, PoolConfig::default());
    let o = other.alloc(&s, 512, &[]).unwrap();
    for foreign in [
        o.block,
        Block::from_raw(live.block.addr() + 8, 8),
        Block::from_raw(0x10, 512),
    ] {
        let e = p.free(&s, foreign, &[]).unwrap_err();
        assert!(
            matches!(e, Error::ForeignMemory { addr, .. } if addr == foreign.addr()),
            "{e}"
        );
    }

    let after = p.stats();
    assert_eq!(after.used_current, before.used_current);
    assert_eq!(after.frees, before.frees);
    assert_eq!(after.allocs, before.allocs);
    // The live block is still live: it frees fine, once.
    p.free(&s, live.block, &[]).unwrap();
    other.free(&s, o.block, &[]).unwrap();
    assert_eq!(p.stats().used_current, 0);
}

/// Every block's address is a multiple of the pool's alignment.
fn blocks_are_aligned<B: MemOps>(b: &B) {
    for alignment in [256usize, 4096, 65536] {
        let p = pool(
            b,
            PoolConfig {
                alignment,
                slab_bytes: 1 << 20,
                ..PoolConfig::default()
            },
        );
        let s = b.stream();
        let mut blocks = Vec::new();
        for size in [1usize, 100, 300, 5000, 70_000, 2 << 20] {
            let a = p.alloc(&s, size, &[]).unwrap();
            assert_eq!(a.block.addr() % alignment as u64, 0, "size {size}");
            assert!(a.block.capacity() >= size);
            blocks.push(a.block);
        }
        for blk in blocks {
            p.free(&s, blk, &[]).unwrap();
        }
    }
}

/// Size classes: blocks of one class come from one slab; a block above the slab size gets a
/// slab of its own; the used bytes count whole classes.
fn size_classes_carve_slabs<B: MemOps>(b: &B) {
    let p = pool(
        b,
        PoolConfig {
            slab_bytes: 64 << 10,
            ..PoolConfig::default()
        },
    );
    let s = b.stream();
    let small: Vec<_> = (0..16)
        .map(|_| p.alloc(&s, 4000, &[]).unwrap().block)
        .collect();
    let st = p.stats();
    assert_eq!((st.slabs, st.reserved_current), (1, 64 << 10));
    assert_eq!(st.used_current, 16 * 4096);
    let big = p.alloc(&s, 100 << 10, &[]).unwrap().block;
    let st = p.stats();
    assert_eq!(st.slabs, 2);
    assert_eq!(st.reserved_current, (64 << 10) + (112 << 10));
    // No two live blocks overlap.
    let mut ranges: Vec<_> = small
        .iter()
        .chain([&big])
        .map(|b| (b.addr(), b.capacity()))
        .collect();
    ranges.sort();
    assert!(ranges.windows(2).all(|w| w[0].0 + w[0].1 as u64 <= w[1].0));
    for blk in small.into_iter().chain([big]) {
        p.free(&s, blk, &[]).unwrap();
    }
    assert_eq!(p.stats().used_current, 0);
}

/// `trim_to` gives back wholly free slabs whose frees completed, never waiting; the release
/// threshold does the same after each free.
fn trim_and_release_threshold<B: MemOps>(b: &B) {
    let p = pool(
        b,
        PoolConfig {
            slab_bytes: 1 << 20,
            ..PoolConfig::default()
        },
    );
    let s = b.stream();
    let a = p.alloc(&s, 1 << 20, &[]).unwrap();
    let c = p.alloc(&s, 1 << 20, &[]).unwrap();
    b.busy(&s, Duration::from_millis(300));
    let busy_end = p.record(&s).unwrap();
    p.free(&s, a.block, &[]).unwrap();
    let first = p.trim_to(0).unwrap();
    // Asked after the trim: if the busy work is still running, the free was pending during it.
    // (Another test's free that waits for the device to drain can hold this thread's driver
    // calls until the busy work is over: then there is nothing to check.)
    if !b.query(busy_end.event()).unwrap() {
        assert_eq!(first, 0, "a free still pending is not released");
        assert_eq!(p.stats().reserved_current, 2 << 20);
    }
    b.sync_stream(&s);
    assert_eq!(
        first + p.trim_to(0).unwrap(),
        1 << 20,
        "the completed free's slab goes"
    );
    let st = p.stats();
    assert_eq!(
        (st.reserved_current, st.slabs, st.slab_releases),
        (1 << 20, 1, 1)
    );
    assert_eq!(st.reserved_high, 2 << 20);
    assert_eq!(st.host_syncs, 0);

    // Threshold: after a free, completed idle slabs above it go.
    p.set_release_threshold(0);
    b.sync_stream(&s);
    p.free(&s, c.block, &[]).unwrap();
    b.sync_stream(&s);
    let d = p.alloc(&s, 64, &[]).unwrap();
    p.free(&s, d.block, &[]).unwrap(); // triggers the release of c's completed slab
    b.sync_stream(&s);
    let e = p.alloc(&s, 64, &[]).unwrap();
    p.free(&s, e.block, &[]).unwrap();
    let st = p.stats();
    assert!(st.slab_releases >= 2, "{st:?}");
    assert!(st.reserved_current <= 2 << 20, "{st:?}");
    p.reset_high();
    assert_eq!(p.stats().reserved_high, p.stats().reserved_current);
    assert_eq!(p.stats().host_syncs, 0);
}

/// Statistics: used/reserved current and high, counts.
fn stats_track_bytes_and_counts<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::fixed_blocks(4096, 4));
    let s = b.stream();
    let blocks: Vec<_> = (0..4)
        .map(|_| p.alloc(&s, 4096, &[]).unwrap().block)
        .collect();
    let st = p.stats();
    assert_eq!(
        (st.used_current, st.used_high, st.reserved_current),
        (16384, 16384, 16384)
    );
    let e = p.alloc(&s, 4096, &[]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Exhausted {
                requested: 4096,
                reserved: 16384,
                max: 16384,
                stale: 0,
                ..
            }
        ),
        "{e}"
    );
    for blk in &blocks[..2] {
        p.free(&s, *blk, &[]).unwrap();
    }
    let st = p.stats();
    assert_eq!((st.used_current, st.used_high), (8192, 16384));
    assert_eq!((st.allocs, st.frees, st.exhausted), (4, 2, 1));
    p.reset_high();
    assert_eq!(p.stats().used_high, 8192);
    for blk in &blocks[2..] {
        p.free(&s, *blk, &[]).unwrap();
    }
}

/// The native pool behind the same interface: the same round trip, the same checked frees.
fn native_pool_behind_the_same_api<B: MemOps>(b: &B) {
    let native = NativePool::new(b, "native", u64::MAX).unwrap();
    let own = pool(b, PoolConfig::default());
    for alloc in [&native as &dyn StreamAllocator<B>, &own] {
        let (s1, s2) = (b.stream(), b.stream());
        let a = alloc
            .alloc_with(&s1, 4096, &[], AllocFlags::default().signal())
            .unwrap();
        let ready = a.ready.expect("signal asked for a point");
        alloc.wait(&s2, &ready).unwrap();
        b.fill_u32(&s2, a.block.addr(), 1024, 0xA11CA7ED);
        assert!(b
            .read_u32(&s2, a.block.addr(), 1024)
            .iter()
            .all(|&v| v == 0xA11CA7ED));
        let done = alloc.record(&s2).unwrap();
        let freed = alloc.free(&s1, a.block, &[Wait::Point(&done)]).unwrap();
        b.synchronize(freed.event()).unwrap();
        let e = alloc.free(&s1, a.block, &[]).unwrap_err();
        assert!(matches!(e, Error::DoubleFree { .. }), "{e}");
        assert_eq!(alloc.stats().used_current, 0);
        assert_eq!((alloc.stats().allocs, alloc.stats().frees), (1, 1));
    }
}

// ----------------------------------------------------------------------------------------------
// IREE QueueAllocaTest (peer-suites §1.4).

/// BasicAlloca: returns a buffer at once; after the signal it holds >= 1024 B that fill and
/// read back.
fn cts_basic_alloca<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let (q, reader) = (b.stream(), b.stream());
    let a = p
        .alloc_with(&q, 1024, &[], AllocFlags::default().signal())
        .unwrap();
    assert_ne!(a.block.addr(), 0);
    assert!(a.block.capacity() >= 1024);
    p.wait(&reader, a.ready.as_ref().unwrap()).unwrap();
    b.fill_u32(&reader, a.block.addr(), 256, 0xABABABAB);
    assert!(b
        .read_u32(&reader, a.block.addr(), 256)
        .iter()
        .all(|&v| v == 0xABABABAB));
    let done = p.record(&reader).unwrap();
    p.free(&q, a.block, &[Wait::Point(&done)]).unwrap();
}

/// ExplicitPassthroughPoolAllocaDealloca: the native pool's alloca; fill 0xA11CA7ED reads back;
/// dealloca waiting on the alloca's signal completes.
fn cts_explicit_passthrough_pool_alloca_dealloca<B: MemOps>(b: &B) {
    let p = NativePool::new(b, "passthrough", u64::MAX).unwrap();
    let q = b.stream();
    let a = p
        .alloc_with(&q, 4096, &[], AllocFlags::default().signal())
        .unwrap();
    b.synchronize(a.ready.as_ref().unwrap().event()).unwrap();
    b.fill_u32(&q, a.block.addr(), 1, 0xA11CA7ED);
    assert_eq!(b.read_u32(&q, a.block.addr(), 1), [0xA11CA7ED]);
    let d = p
        .free(&q, a.block, &[Wait::Point(a.ready.as_ref().unwrap())])
        .unwrap();
    b.synchronize(d.event()).unwrap();
}

/// ExplicitTLSFPoolTransferAllocaDealloca: alloca -> fill -> copy into a zeroed persistent
/// buffer -> dealloca, ordered by points only (no host wait); then the target holds the pattern.
fn cts_explicit_tlsf_pool_transfer_alloca_dealloca<B: MemOps>(b: &B) {
    const N: usize = 1024;
    let p = pool(b, PoolConfig::default());
    let target_mem = b.alloc_memory(4 * N).unwrap();
    let target = b.memory_addr(&target_mem);
    let (q, fill_q, copy_q) = (b.stream(), b.stream(), b.stream());
    b.fill_u32(&copy_q, target, N, 0);
    let a = p
        .alloc_with(&q, 4 * N, &[], AllocFlags::default().signal())
        .unwrap();
    p.wait(&fill_q, a.ready.as_ref().unwrap()).unwrap();
    b.busy(&fill_q, Duration::from_millis(20)); // a late fill shows a missing order
    b.fill_u32(&fill_q, a.block.addr(), N, 0x711FA110);
    let filled = p.record(&fill_q).unwrap();
    p.wait(&copy_q, &filled).unwrap();
    b.copy(&copy_q, target, a.block.addr(), 4 * N);
    let copied = p.record(&copy_q).unwrap();
    let d = p.free(&q, a.block, &[Wait::Point(&copied)]).unwrap();
    b.synchronize(d.event()).unwrap();
    assert!(b
        .read_u32(&copy_q, target, N)
        .iter()
        .all(|&v| v == 0x711FA110));
}

/// The one-block pool of ExplicitFixedBlockPool*: queue 0 allocates and frees with host waits
/// (through the backend, so the pool learns nothing from them).
fn one_block_used_on_queue_0<B: MemOps>(b: &B) -> (Pool<B>, B::Stream, u64) {
    let p = pool(b, PoolConfig::fixed_blocks(4096, 1));
    let q0 = b.stream();
    let a = p
        .alloc_with(&q0, 4096, &[], AllocFlags::default().signal())
        .unwrap();
    b.synchronize(a.ready.as_ref().unwrap().event()).unwrap();
    let d = p
        .free(&q0, a.block, &[Wait::Point(a.ready.as_ref().unwrap())])
        .unwrap();
    b.synchronize(d.event()).unwrap();
    assert_eq!(p.stats().waits, 0);
    (p, q0, a.block.addr())
}

/// ExplicitFixedBlockPoolCrossQueueWaitFrontier: queue 1's alloca with the flag gets the
/// recycled block and the wait count goes 0 -> 1; the block then fills and frees on queue 1.
fn cts_explicit_fixed_block_pool_cross_queue_wait_frontier<B: MemOps>(b: &B) {
    let (p, _q0, addr) = one_block_used_on_queue_0(b);
    let q1 = b.stream();
    let a = p
        .alloc_with(&q1, 4096, &[], AllocFlags::default().allow_wait().signal())
        .unwrap();
    assert_eq!(a.block.addr(), addr);
    assert_eq!(p.stats().waits, 1);
    b.fill_u32(&q1, a.block.addr(), 1024, 0xB10CADA0);
    assert!(b
        .read_u32(&q1, a.block.addr(), 1024)
        .iter()
        .all(|&v| v == 0xB10CADA0));
    p.free(&q1, a.block, &[]).unwrap();
    assert_eq!(p.stats().host_syncs, 0);
}

/// ExplicitFixedBlockPoolRequiresWaitFrontierFlag: without the flag, queue 1's alloca is
/// exhausted; nothing is handed out and the wait count stays 0.
fn cts_explicit_fixed_block_pool_requires_wait_frontier_flag<B: MemOps>(b: &B) {
    let (p, _q0, _addr) = one_block_used_on_queue_0(b);
    let q1 = b.stream();
    let e = p.alloc(&q1, 4096, &[]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Exhausted {
                requested: 4096,
                stale: 1,
                ..
            }
        ),
        "{e}"
    );
    let st = p.stats();
    assert_eq!((st.waits, st.exhausted, st.used_current), (0, 1, 0));
}

/// ExplicitTLSFPoolCrossQueueStaleBlockGrows: a growable pool skips the stale cross-queue block
/// and grows a slab rather than waiting, even with the flag.
fn cts_explicit_tlsf_pool_cross_queue_stale_block_grows<B: MemOps>(b: &B) {
    let p = pool(
        b,
        PoolConfig {
            slab_bytes: 4096,
            ..PoolConfig::default()
        },
    );
    let q0 = b.stream();
    let a = p.alloc(&q0, 4096, &[]).unwrap();
    let d = p.free(&q0, a.block, &[]).unwrap();
    b.synchronize(d.event()).unwrap();
    let q1 = b.stream();
    let c = p
        .alloc_with(&q1, 4096, &[], AllocFlags::default().allow_wait())
        .unwrap();
    assert_ne!(c.block.addr(), a.block.addr());
    let st = p.stats();
    assert_eq!((st.waits, st.slabs), (0, 2));
    p.free(&q1, c.block, &[]).unwrap();
}

/// Whether `r`, a call with a wait on a value not yet enqueued, may go on: on a mechanism that
/// holds no commands behind such a wait (CUDA `events`) it must be refused by name, and the
/// case ends there.
fn refused_or_ok<T: std::fmt::Debug>(
    t: &Timeline<impl seqsync::backend::Backend>,
    r: seqsync::Result<T>,
) -> Option<T> {
    if t.mechanism().holds_commands() {
        return Some(r.unwrap());
    }
    match r {
        Err(Error::WaitBeforeSignalUnsupported { .. }) => None,
        other => panic!("expected WaitBeforeSignalUnsupported, got {other:?}"),
    }
}

/// AllocaWithWaitSemaphores: the alloca waits on timeline w (0 -> 1) and signals s; s is not
/// reached until the host signals w; then the buffer (>= 512 B) accepts a fill.
fn cts_alloca_with_wait_semaphores<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let w = Timeline::new(b, "w", 0).unwrap();
    let Some(a) = refused_or_ok(
        &w,
        p.alloc_with(
            &q,
            512,
            &[Wait::Timeline(&w, 1)],
            AllocFlags::default().signal(),
        ),
    ) else {
        return;
    };
    let s = a.ready.as_ref().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!b.query(s.event()).unwrap(), "s reached before w");
    w.signal(1).unwrap();
    b.synchronize(s.event()).unwrap();
    assert!(a.block.capacity() >= 512);
    b.fill_u32(&q, a.block.addr(), 128, 5);
    assert!(b.read_u32(&q, a.block.addr(), 128).iter().all(|&v| v == 5));
    p.free(&q, a.block, &[]).unwrap();
}

/// A free whose wait list holds a failed timeline does not free: the block stays allocated and
/// usable, and frees fine afterwards; an allocation waiting on it hands nothing out.
fn failed_timeline_in_a_wait_list_does_not_free<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let a = p.alloc(&q, 1024, &[]).unwrap();
    let t = Timeline::new(b, "reader", 0).unwrap();
    t.fail(Error::InvalidArgument {
        ring: "reader".into(),
        message: "the reader failed".into(),
    });
    let before = p.stats();
    let e = p.free(&q, a.block, &[Wait::Timeline(&t, 1)]).unwrap_err();
    assert!(matches!(e, Error::TimelineFailed { .. }), "{e}");
    assert_eq!(p.stats(), before, "nothing changed");
    b.fill_u32(&q, a.block.addr(), 256, 3);
    assert!(b.read_u32(&q, a.block.addr(), 256).iter().all(|&v| v == 3));
    p.free(&q, a.block, &[]).unwrap();
    let e = p.alloc(&q, 1024, &[Wait::Timeline(&t, 1)]).unwrap_err();
    assert!(matches!(e, Error::TimelineFailed { .. }), "{e}");
    assert_eq!((p.stats().allocs, p.stats().used_current), (1, 0));
}

/// The same with a point of a busy stream as `w`.
fn alloca_waits_on_a_point_of_a_busy_stream<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let (gate, q) = (b.stream(), b.stream());
    b.busy(&gate, Duration::from_millis(300));
    let w = p.record(&gate).unwrap();
    let a = p
        .alloc_with(&q, 512, &[Wait::Point(&w)], AllocFlags::default().signal())
        .unwrap();
    let s = a.ready.as_ref().unwrap();
    // s first, then w: if s is done, w was done before it. (Asking only whether s is done
    // failed once with four tests sharing the H200: another test's free waited for the device
    // to drain, the busy kernel included, before this one's calls returned.)
    let s_done = b.query(s.event()).unwrap();
    let w_done = b.query(w.event()).unwrap();
    assert!(!s_done || w_done, "s reached before w");
    b.synchronize(s.event()).unwrap();
    assert!(b.query(w.event()).unwrap());
    assert!(a.block.capacity() >= 512);
    b.fill_u32(&q, a.block.addr(), 128, 5);
    assert!(b.read_u32(&q, a.block.addr(), 128).iter().all(|&v| v == 5));
    p.free(&q, a.block, &[]).unwrap();
}

/// AllocaDeallocaCycle: twice: alloca 2048 B -> wait -> fill a pattern -> read it back ->
/// dealloca -> wait.
fn cts_alloca_dealloca_cycle<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    for pattern in [0xDEADCAFEu32, 0xCAFEF00D] {
        let a = p
            .alloc_with(&q, 2048, &[], AllocFlags::default().signal())
            .unwrap();
        b.synchronize(a.ready.as_ref().unwrap().event()).unwrap();
        b.fill_u32(&q, a.block.addr(), 512, pattern);
        assert!(b
            .read_u32(&q, a.block.addr(), 512)
            .iter()
            .all(|&v| v == pattern));
        let d = p
            .free(&q, a.block, &[Wait::Point(a.ready.as_ref().unwrap())])
            .unwrap();
        b.synchronize(d.event()).unwrap();
    }
    assert_eq!(counts(&p.stats()), (1, 1, 0, 0));
}

/// BufferMetadata: right after the call, the block reports >= 4096 bytes, at an aligned
/// address; then dealloca.
fn cts_buffer_metadata<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let a = p.alloc(&q, 4096, &[]).unwrap();
    assert_eq!(a.block.size(), 4096);
    assert!(a.block.capacity() >= 4096);
    assert_eq!(a.block.addr() % p.config().alignment as u64, 0);
    p.free(&q, a.block, &[]).unwrap();
}

/// DeallocaReleasesMemory: after the dealloca the block is no longer the caller's: using it in
/// another dealloca fails with a named error (seqsync cannot see raw fills of it).
fn cts_dealloca_releases_memory<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let a = p.alloc(&q, 4096, &[]).unwrap();
    b.fill_u32(&q, a.block.addr(), 1024, 0xFFFFFFFF);
    let d = p.free(&q, a.block, &[]).unwrap();
    b.synchronize(d.event()).unwrap();
    assert_eq!(p.stats().used_current, 0);
    let e = p.free(&q, a.block, &[]).unwrap_err();
    assert!(matches!(e, Error::DoubleFree { .. }), "{e}");
}

/// ChainedAllocaDealloca: alloca (signal a) -> dealloca (waits a), no host wait between;
/// waiting on the dealloca succeeds.
fn cts_chained_alloca_dealloca<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let a = p
        .alloc_with(&q, 1024, &[], AllocFlags::default().signal())
        .unwrap();
    let d = p
        .free(&q, a.block, &[Wait::Point(a.ready.as_ref().unwrap())])
        .unwrap();
    b.synchronize(d.event()).unwrap();
}

/// DefaultPoolRepeatedChainedAllocaDealloca: 32 chained alloca -> dealloca of 1024 B each
/// complete, reusing one block.
fn cts_default_pool_repeated_chained_alloca_dealloca<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let mut last = None;
    for _ in 0..32 {
        let a = p
            .alloc_with(&q, 1024, &[], AllocFlags::default().signal())
            .unwrap();
        last = Some(
            p.free(&q, a.block, &[Wait::Point(a.ready.as_ref().unwrap())])
                .unwrap(),
        );
    }
    b.synchronize(last.unwrap().event()).unwrap();
    assert_eq!(counts(&p.stats()), (31, 1, 0, 0));
    assert_eq!(p.stats().host_syncs, 0);
}

// ----------------------------------------------------------------------------------------------
// IREE fixed_block_pool_test reuse cases (peer-suites §1.8): 4 blocks of 256 B.

/// ReserveReusesDominatedFrontier: a requester at the free's point reuses the block.
fn cts_reserve_reuses_dominated_frontier<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::fixed_blocks(256, 4));
    let (q0, r) = (b.stream(), b.stream());
    let a = p.alloc(&q0, 128, &[]).unwrap();
    let death = p.free(&q0, a.block, &[]).unwrap();
    let c = p.alloc(&r, 64, &[Wait::Point(&death)]).unwrap();
    assert_eq!(c.block.addr(), a.block.addr());
    let st = p.stats();
    assert_eq!((st.reuse, st.fresh), (1, 1));
}

/// ReserveSkipsStaleBlockAndReturnsLaterFreshBlock: a requester behind the free gets a fresh
/// block even when a wait is allowed (fresh beats waiting); at the free it reuses.
fn cts_reserve_skips_stale_block_and_returns_later_fresh_block<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::fixed_blocks(256, 4));
    let (q0, r) = (b.stream(), b.stream());
    let before = p.record(&q0).unwrap();
    let a = p.alloc(&q0, 256, &[]).unwrap();
    let death = p.free(&q0, a.block, &[]).unwrap();
    let c = p
        .alloc_with(
            &r,
            256,
            &[Wait::Point(&before)],
            AllocFlags::default().allow_wait(),
        )
        .unwrap();
    assert_ne!(c.block.addr(), a.block.addr());
    let st = p.stats();
    assert_eq!((st.reuse_miss, st.waits), (1, 0));
    let d = p.alloc(&r, 256, &[Wait::Point(&death)]).unwrap();
    assert_eq!(d.block.addr(), a.block.addr());
}

/// ReserveCanReturnStaleBlockWhenWaitAllowed: with one block, a requester behind its free and
/// the flag gets it after an inserted wait; reuse_miss 1, wait 1.
fn cts_reserve_can_return_stale_block_when_wait_allowed<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::fixed_blocks(256, 1));
    let (q0, r) = (b.stream(), b.stream());
    let a = p.alloc(&q0, 256, &[]).unwrap();
    b.busy(&q0, Duration::from_millis(200));
    b.fill_u32(&q0, a.block.addr(), 64, 1);
    p.free(&q0, a.block, &[]).unwrap();
    let c = p
        .alloc_with(&r, 256, &[], AllocFlags::default().allow_wait())
        .unwrap();
    assert_eq!(c.block.addr(), a.block.addr());
    let st = p.stats();
    assert_eq!((st.reuse_miss, st.waits), (1, 1));
    // The inserted wait really orders r after q0's use: r's fill lands last.
    b.fill_u32(&r, c.block.addr(), 64, 2);
    b.sync_stream(&q0);
    assert!(b.read_u32(&r, c.block.addr(), 64).iter().all(|&v| v == 2));
}

// ----------------------------------------------------------------------------------------------
// Unified Runtime enqueue_alloc (peer-suites §2.2).

/// Success: alloc of a u32 with no waits gives a non-null pointer and event; a fill waiting on
/// it works; the free gives an event.
fn cts_success<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let a = p
        .alloc_with(&q, 4, &[], AllocFlags::default().signal())
        .unwrap();
    assert_ne!(a.block.addr(), 0);
    assert!(a.ready.is_some());
    b.fill_u32(&q, a.block.addr(), 1, 0xC0FFEE);
    assert_eq!(b.read_u32(&q, a.block.addr(), 1), [0xC0FFEE]);
    let f = p.free(&q, a.block, &[]).unwrap();
    b.synchronize(f.event()).unwrap();
}

/// SuccessReuse: alloc (A) -> free (waits A, F) -> alloc2 waiting F gets the same pointer.
fn cts_success_reuse<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let a = p
        .alloc_with(&q, 4, &[], AllocFlags::default().signal())
        .unwrap();
    let f = p
        .free(&q, a.block, &[Wait::Point(a.ready.as_ref().unwrap())])
        .unwrap();
    let a2 = p
        .alloc_with(&q, 4, &[Wait::Point(&f)], AllocFlags::default().signal())
        .unwrap();
    assert_eq!(a2.block.addr(), a.block.addr());
    assert!(a2.ready.is_some());
    p.free(&q, a2.block, &[]).unwrap();
}

/// SuccessFromPool: an explicitly created pool (non-default config) serves and frees.
fn cts_success_from_pool<B: MemOps>(b: &B) {
    let p = Pool::new(
        b,
        "explicit",
        PoolConfig {
            slab_bytes: 64 << 10,
            max_bytes: 1 << 20,
            ..PoolConfig::default()
        },
    )
    .unwrap();
    let q = b.stream();
    let a = p
        .alloc_with(&q, 4, &[], AllocFlags::default().signal())
        .unwrap();
    b.fill_u32(&q, a.block.addr(), 1, 0xC0FFEE);
    assert_eq!(b.read_u32(&q, a.block.addr(), 1), [0xC0FFEE]);
    p.free(&q, a.block, &[]).unwrap();
}

/// SuccessWithKernel: alloc with no event, work on the same stream, free: in-stream order only.
fn cts_success_with_kernel<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let a = p.alloc(&q, 16 * 4, &[]).unwrap();
    b.fill_u32(&q, a.block.addr(), 16, 0xDA7A);
    assert!(b
        .read_u32(&q, a.block.addr(), 16)
        .iter()
        .all(|&v| v == 0xDA7A));
    p.free(&q, a.block, &[]).unwrap();
}

/// SuccessWithKernelRepeat: alloc -> work -> free (no event) -> alloc ptr2 -> work on ptr2 ->
/// finish -> free ptr2. The second work sees its own data.
fn cts_success_with_kernel_repeat<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let a = p.alloc(&q, 64, &[]).unwrap();
    b.busy(&q, Duration::from_millis(10));
    b.fill_u32(&q, a.block.addr(), 16, 1);
    p.free(&q, a.block, &[]).unwrap();
    let a2 = p.alloc(&q, 64, &[]).unwrap();
    b.fill_u32(&q, a2.block.addr(), 16, 2);
    assert!(b.read_u32(&q, a2.block.addr(), 16).iter().all(|&v| v == 2));
    p.free(&q, a2.block, &[]).unwrap();
}

/// SuccessMt (multi queue, same device): one thread per queue allocates many blocks with no
/// events, fills each with 0xAF, checks them, frees all.
fn cts_success_mt<B: MemOps>(b: &B) {
    const QUEUES: usize = 4;
    const ALLOCS: usize = 64;
    let p = pool(b, PoolConfig::default());
    std::thread::scope(|scope| {
        for t in 0..QUEUES {
            let (p, b) = (&p, b.clone());
            scope.spawn(move || {
                let q = b.stream();
                let blocks: Vec<_> = (0..ALLOCS)
                    .map(|_| p.alloc(&q, 1024, &[]).unwrap().block)
                    .collect();
                b.sync_stream(&q);
                for blk in &blocks {
                    b.fill_u32(&q, blk.addr(), 256, 0xAFAFAFAF ^ t as u32);
                }
                for blk in &blocks {
                    let v = b.read_u32(&q, blk.addr(), 256);
                    assert!(v.iter().all(|&x| x == 0xAFAFAFAF ^ t as u32));
                }
                for blk in blocks {
                    p.free(&q, blk, &[]).unwrap();
                }
                b.sync_stream(&q);
            });
        }
    });
    let st = p.stats();
    assert_eq!((st.allocs, st.frees, st.used_current), (256, 256, 0));
}

/// SuccessReuse across queues (UR skips it: "Multi queue reuse is not supported"): alloc on
/// queue 0, fill, free (F0); on queue i, an alloc waiting F(i-1) gets the same pointer.
fn cts_multi_queue_success_reuse<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let queues: Vec<_> = (0..4).map(|_| b.stream()).collect();
    let a = p.alloc(&queues[0], 1024, &[]).unwrap();
    let addr = a.block.addr();
    b.fill_u32(&queues[0], addr, 256, 0xAF);
    let mut freed = p.free(&queues[0], a.block, &[]).unwrap();
    for (i, q) in queues.iter().enumerate().skip(1) {
        let ai = p.alloc(q, 1024, &[Wait::Point(&freed)]).unwrap();
        assert_eq!(ai.block.addr(), addr, "queue {i}");
        b.fill_u32(q, addr, 256, 0xAF + i as u32);
        freed = p.free(q, ai.block, &[]).unwrap();
    }
    b.synchronize(freed.event()).unwrap();
    assert!(b
        .read_u32(&queues[3], addr, 256)
        .iter()
        .all(|&v| v == 0xAF + 3));
    assert_eq!(counts(&p.stats()), (3, 1, 0, 0));
}

/// SuccessDependantSharedAcrossQueues: alloc, fill and free each go to the next queue round
/// robin; the order is carried by points only. The data written is the data read.
fn cts_success_dependant_shared_across_queues<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let queues: Vec<_> = (0..3).map(|_| b.stream()).collect();
    let mut next = 0;
    let mut q = || {
        next = (next + 1) % queues.len();
        &queues[next]
    };
    let mut prev: Option<seqsync::memory::Point<B>> = None;
    for round in 0..6u32 {
        let waits: Vec<_> = prev.iter().map(Wait::Point).collect();
        let qa = q();
        let a = p
            .alloc_with(qa, 4096, &waits, AllocFlags::default().signal())
            .unwrap();
        let qf = q();
        p.wait(qf, a.ready.as_ref().unwrap()).unwrap();
        b.busy(qf, Duration::from_millis(5));
        b.fill_u32(qf, a.block.addr(), 1024, 0xAF00 + round);
        let filled = p.record(qf).unwrap();
        let qr = q();
        p.wait(qr, &filled).unwrap();
        let v = b.read_u32(qr, a.block.addr(), 1024);
        assert!(v.iter().all(|&x| x == 0xAF00 + round), "round {round}");
        let qd = q();
        prev = Some(p.free(qd, a.block, &[Wait::Point(&filled)]).unwrap());
    }
    b.synchronize(prev.unwrap().event()).unwrap();
}

/// SuccessDependantSharedAcrossQueuesSyncValidate: alloc i waits fill(i-1) on another queue;
/// after the alloc's queue finishes, allocation i-1 holds 0xAF.
fn cts_success_dependant_shared_across_queues_sync_validate<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let queues: Vec<_> = (0..2).map(|_| b.stream()).collect();
    let mut prev: Option<(seqsync::memory::Block, seqsync::memory::Point<B>)> = None;
    let mut blocks = Vec::new();
    for i in 0..6 {
        let (qa, qf) = (&queues[i % 2], &queues[(i + 1) % 2]);
        let waits: Vec<_> = prev.iter().map(|(_, f)| Wait::Point(f)).collect();
        let a = p
            .alloc_with(qa, 1024, &waits, AllocFlags::default().signal())
            .unwrap();
        b.sync_stream(qa);
        if let Some((blk, _)) = prev {
            let v = b.read_u32(qa, blk.addr(), 256);
            assert!(
                v.iter().all(|&x| x == 0xAFAFAFAF),
                "allocation {} before {i}",
                i - 1
            );
        }
        p.wait(qf, a.ready.as_ref().unwrap()).unwrap();
        b.busy(qf, Duration::from_millis(5));
        b.fill_u32(qf, a.block.addr(), 256, 0xAFAFAFAF);
        prev = Some((a.block, p.record(qf).unwrap()));
        blocks.push(a.block);
    }
    for q in &queues {
        b.sync_stream(q);
    }
    for blk in blocks {
        p.free(&queues[0], blk, &[]).unwrap();
    }
}

/// A free whose timeline wait fails *after* the call never makes the block available: the
/// reader, released by the same failure, still reads it. Here the reader waits for its input,
/// then reads the block slowly and signals `r`; the free waits on `r = 1`; the input fails.
/// An allocation on the freeing stream (which would reuse the block at once) must get other
/// memory, and the reader must read what was written before the free (it used to read the
/// next user's fill). Both pools.
fn a_free_whose_wait_fails_later_never_frees<B: MemOps>(b: &B) {
    for native in [false, true] {
        let p: Box<dyn StreamAllocator<B>> = if native {
            Box::new(NativePool::new(b, "native", u64::MAX).unwrap())
        } else {
            Box::new(pool(b, PoolConfig::default()))
        };
        let (reader, freer) = (b.stream(), b.stream());
        let (input, r) = (
            Timeline::new(b, "input", 0).unwrap(),
            Timeline::new(b, "r", 0).unwrap(),
        );
        if !b.holds_waits_before_signals() {
            // CUDA `events`: the reader's wait for its input (nothing signalled or enqueued
            // yet) is refused, nothing enqueued; the case needs it.
            common::assert_wait_refused(input.wait_on(&reader, 1));
            return;
        }
        let a = p
            .alloc_with(&reader, 1024, &[], AllocFlags::default())
            .unwrap();
        let out = p
            .alloc_with(&reader, 1024, &[], AllocFlags::default())
            .unwrap();
        b.fill_u32(&reader, a.block.addr(), 256, 7);
        input.wait_on(&reader, 1).unwrap();
        b.busy(&reader, Duration::from_millis(80));
        b.copy(&reader, out.block.addr(), a.block.addr(), 1024);
        r.signal_on(&reader, 1).unwrap();
        let Some(_) = refused_or_ok(&r, p.free(&freer, a.block, &[Wait::Timeline(&r, 1)])) else {
            return;
        };
        input.fail(Error::Cancelled("the input broke".into()));
        assert!(r.query().is_err(), "the reader's completion failed too");
        let next = p
            .alloc_with(&freer, 1024, &[], AllocFlags::default())
            .unwrap();
        b.fill_u32(&freer, next.block.addr(), 256, 9);
        assert!(
            b.read_u32(&reader, out.block.addr(), 256)
                .iter()
                .all(|&v| v == 7),
            "native: {native}: the block was handed out under its reader"
        );
        let s = p.stats();
        if !native {
            assert_ne!(next.block.addr(), a.block.addr(), "reused under its reader");
        }
        assert_eq!((s.quarantined, s.leaked), (0, 1), "native: {native}");
        // Freeing it again is still a double free.
        let e = p.free(&freer, a.block, &[]).unwrap_err();
        assert!(
            matches!(e, Error::DoubleFree { .. }),
            "native: {native}: {e}"
        );
        b.sync_stream(&freer);
    }
}

/// A free whose timeline wait was reached, the timeline failing only after that (before the
/// pool looked again): the wait was released by its signal, so the block is freed, not leaked.
fn a_free_whose_wait_was_reached_before_a_failure_frees<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let r = Timeline::new(b, "r", 0).unwrap();
    let a = p.alloc(&q, 1024, &[]).unwrap();
    let Some(_) = refused_or_ok(&r, p.free(&q, a.block, &[Wait::Timeline(&r, 1)])) else {
        return;
    };
    assert_eq!(p.stats().quarantined, 1);
    r.signal(1).unwrap();
    r.fail(Error::Cancelled("after the value".into()));
    b.sync_stream(&q);
    let again = p.alloc(&q, 1024, &[]).unwrap();
    assert_eq!(
        again.block.addr(),
        a.block.addr(),
        "not reused once reached"
    );
    let s = p.stats();
    assert_eq!((s.quarantined, s.leaked), (0, 0));
    p.free(&q, again.block, &[]).unwrap();
}

/// A free whose timeline wait is reached later frees as usual once it is: the block is held
/// back (quarantined) until the host sees the value, then reused.
fn a_free_whose_wait_is_reached_later_frees_then<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let r = Timeline::new(b, "r", 0).unwrap();
    let a = p.alloc(&q, 1024, &[]).unwrap();
    let Some(_) = refused_or_ok(&r, p.free(&q, a.block, &[Wait::Timeline(&r, 1)])) else {
        return;
    };
    assert_eq!(p.stats().quarantined, 1);
    let held = p.alloc(&q, 1024, &[]).unwrap();
    assert_ne!(
        held.block.addr(),
        a.block.addr(),
        "handed out before its wait"
    );
    r.signal(1).unwrap();
    b.sync_stream(&q);
    let again = p.alloc(&q, 1024, &[]).unwrap();
    assert_eq!(again.block.addr(), a.block.addr(), "reused once reached");
    let s = p.stats();
    assert_eq!((s.quarantined, s.leaked), (0, 0));
    p.free(&q, held.block, &[]).unwrap();
    p.free(&q, again.block, &[]).unwrap();
    // The native pool enqueues the driver's free only once the value is reached.
    let n = NativePool::new(b, "native", u64::MAX).unwrap();
    let r2 = Timeline::new(b, "r2", 0).unwrap();
    let a = n.alloc(&q, 1024, &[]).unwrap();
    n.free(&q, a.block, &[Wait::Timeline(&r2, 1)]).unwrap();
    assert_eq!(n.stats().quarantined, 1);
    r2.signal(1).unwrap();
    b.sync_stream(&q);
    let c = n.alloc(&q, 1024, &[]).unwrap();
    assert_eq!((n.stats().quarantined, n.stats().leaked), (0, 0));
    n.free(&q, c.block, &[]).unwrap();
    b.sync_stream(&q);
}

/// A free that waits on a value before its signal is enqueued: where the mechanism cannot hold
/// the free's record behind such a wait (CUDA `events`), refused before anything is enqueued
/// (the block stays allocated); elsewhere held back until the value is reached.
fn a_free_waiting_before_its_signal_is_refused_where_it_cannot_be_held<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let r = Timeline::new(b, "r", 0).unwrap();
    let a = p.alloc(&q, 1024, &[]).unwrap();
    if r.mechanism().holds_commands() {
        p.free(&q, a.block, &[Wait::Timeline(&r, 1)]).unwrap();
        assert_eq!(p.stats().quarantined, 1);
        r.signal(1).unwrap();
        b.sync_stream(&q);
        return;
    }
    let before = p.stats();
    let e = p.free(&q, a.block, &[Wait::Timeline(&r, 1)]).unwrap_err();
    assert!(
        matches!(e, Error::WaitBeforeSignalUnsupported { .. }),
        "{e}"
    );
    assert_eq!(p.stats(), before, "nothing changed");
    p.free(&q, a.block, &[]).unwrap();
    b.sync_stream(&q);
}

/// A free held back on a timeline value does not keep the timeline alive as a handle: when the
/// application drops its last handle with nothing enqueued to reach the value, the timeline
/// fails (`TimelineDropped`), the free's stream goes on, and the block is leaked, not handed
/// out (the pool's own handle used to keep the timeline from failing: the stream waited
/// forever and the block stayed quarantined).
fn a_held_free_does_not_keep_its_timeline_from_failing_when_dropped<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let q = b.stream();
    let r = Timeline::new(b, "r", 0).unwrap();
    if !r.mechanism().holds_commands() {
        return; // refused there (see above)
    }
    let a = p.alloc(&q, 1024, &[]).unwrap();
    let Some(_) = refused_or_ok(&r, p.free(&q, a.block, &[Wait::Timeline(&r, 1)])) else {
        return;
    };
    assert_eq!(p.stats().quarantined, 1);
    drop(r);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let c = p.alloc(&q, 1024, &[]).unwrap();
        assert_ne!(
            c.block.addr(),
            a.block.addr(),
            "handed out a block whose free failed"
        );
        p.free(&q, c.block, &[]).unwrap();
        let s = p.stats();
        if (s.quarantined, s.leaked) == (0, 1) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still held: {s:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    b.sync_stream(&q);
}

/// A free on a stream behind an earlier wait before its signal, whose own timeline wait's
/// signal is enqueued already: accepted, and frees as usual. (CUDA `events` refuses the earlier
/// wait, nothing enqueued or held on the host: the free's wait, its signal on the device, is
/// accepted there too; it used to be refused, the stream's timeline operations being held on
/// the host behind the earlier wait.)
fn a_free_on_a_stream_behind_a_wait_before_its_signal_is_accepted<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let (q, sig) = (b.stream(), b.stream());
    let (gate, r) = (
        Timeline::new(b, "gate", 0).unwrap(),
        Timeline::new(b, "r", 0).unwrap(),
    );
    let a = p.alloc(&q, 1024, &[]).unwrap();
    if b.holds_waits_before_signals() {
        gate.wait_on(&q, 1).unwrap();
    } else {
        // CUDA `events`: refused, nothing enqueued.
        common::assert_wait_refused(gate.wait_on(&q, 1));
    }
    b.busy(&sig, Duration::from_millis(20));
    r.signal_on(&sig, 1).unwrap();
    p.free(&q, a.block, &[Wait::Timeline(&r, 1)]).unwrap();
    gate.signal(1).unwrap();
    b.sync_stream(&q);
    b.sync_stream(&sig);
}

/// An allocation or free refused for a wait list entry (a value out of range) enqueues none
/// of the list: the stream is not left holding the first entry's wait, which nobody signals.
fn a_refused_wait_list_enqueues_nothing<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let s = b.stream();
    let (t, u) = (
        Timeline::new(b, "t", 0).unwrap(),
        Timeline::new(b, "u", 0).unwrap(),
    );
    let late = seqsync::timeline::MAX_VALUE + 1;
    // Refused for the value out of range, or (CUDA `events`, whose waits before their
    // signal hold no command) already for the first entry: either way before enqueuing.
    let refused = |e: &Error| {
        matches!(
            e,
            Error::ValueOutOfRange { .. } | Error::WaitBeforeSignalUnsupported { .. }
        )
    };
    let e = p
        .alloc(&s, 64, &[Wait::Timeline(&t, 1), Wait::Timeline(&u, late)])
        .unwrap_err();
    assert!(refused(&e), "{e}");
    let x = p.alloc(&s, 64, &[]).unwrap();
    let e = p
        .free(
            &s,
            x.block,
            &[Wait::Timeline(&t, 1), Wait::Timeline(&u, late)],
        )
        .unwrap_err();
    assert!(refused(&e), "{e}");
    // Work after the refusals runs without `t` reaching 1.
    b.fill_u32(&s, x.block.addr(), 16, 5);
    let ran = reaches_its_end(b, &s);
    t.signal(1).unwrap(); // releases a wait left behind, if any, so that the test ends
    assert!(ran, "a refused call left a wait on the stream");
    assert!(b.read_u32(&s, x.block.addr(), 16).iter().all(|&v| v == 5));
    p.free(&s, x.block, &[]).unwrap();
}

/// Does `s` get past everything enqueued on it so far within 5 s (no wait left parks it)?
fn reaches_its_end<B: MemOps>(b: &B, s: &B::Stream) -> bool {
    use seqsync::backend::EventOptions;
    let done = b.create_event(EventOptions::default()).unwrap();
    b.record(&done, s).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !b.query(&done).unwrap() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    b.query(&done).unwrap()
}

/// An allocation refused for want of memory (exhausted) enqueues nothing, its wait list
/// included: a wait nobody will now satisfy would park the stream for good.
fn an_exhausted_alloc_enqueues_no_waits<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::fixed_blocks(256, 1));
    let s = b.stream();
    let t = Timeline::new(b, "never", 0).unwrap();
    let x = p.alloc(&s, 256, &[]).unwrap();
    let e = p.alloc(&s, 256, &[Wait::Timeline(&t, 1)]).unwrap_err();
    // A mechanism that cannot hold a wait before its signal refuses the wait first (nothing
    // enqueued either way); the others find the pool exhausted.
    let exhausted = if t.mechanism().holds_commands() {
        assert!(matches!(e, Error::Exhausted { .. }), "{e}");
        1
    } else {
        assert!(
            matches!(e, Error::WaitBeforeSignalUnsupported { .. }),
            "{e}"
        );
        0
    };
    b.fill_u32(&s, x.block.addr(), 16, 5);
    let ran = reaches_its_end(b, &s);
    t.signal(1).unwrap(); // releases a wait left behind, if any, so that the test ends
    assert!(ran, "an exhausted alloc left its wait on the stream");
    assert!(b.read_u32(&s, x.block.addr(), 16).iter().all(|&v| v == 5));
    assert_eq!(p.stats().exhausted, exhausted);
    p.free(&s, x.block, &[]).unwrap();
}

/// A free on a reader's stream that waited for its writer's timeline outside the free's wait
/// list: the timeline fails while the writer still writes, which releases the reader's stream
/// past the free (memops, host; with events and hybrid the reader's event wait still holds,
/// but the pool cannot tell the waits apart). The block is not handed out again (it would be
/// written by the old writer).
fn a_free_past_a_wait_released_by_a_failure_is_not_reused<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::default());
    let (w, r) = (b.stream(), b.stream());
    let t = Timeline::new(b, "written", 0).unwrap();
    let x = p
        .alloc_with(&w, 4096, &[], AllocFlags::default().signal())
        .unwrap();
    b.busy(&w, Duration::from_millis(300));
    b.fill_u32(&w, x.block.addr(), 1024, 1);
    t.signal_on(&w, 1).unwrap();
    p.wait(&r, x.ready.as_ref().unwrap()).unwrap();
    t.wait_on(&r, 1).unwrap(); // the reader waits for its writer
    p.free(&r, x.block, &[]).unwrap();
    t.fail(Error::Cancelled("the writer's watchdog".into()));
    // Did the writer's signal land before the failure (this thread held up past the busy
    // work, by another test's driver calls that wait for the device, say)? Then the failure
    // released nothing, the free's point means what it says, and a reuse is right.
    let landed = match t.query() {
        Err(Error::TimelineFailed { value, .. }) => value >= 1,
        other => panic!("failed just now, yet {other:?}"),
    };
    // On the free's own stream: a reuse would need no wait at all.
    let next = p.alloc(&r, 4096, &[]).unwrap();
    if landed {
        assert_eq!(
            p.stats().leaked,
            0,
            "the writer was done before the failure"
        );
    } else {
        assert_ne!(
            next.block.addr(),
            x.block.addr(),
            "handed out under its writer"
        );
        assert_eq!(p.stats().leaked, 1);
    }
    b.fill_u32(&r, next.block.addr(), 1024, 9);
    b.sync_stream(&w);
    assert!(b
        .read_u32(&r, next.block.addr(), 1024)
        .iter()
        .all(|&v| v == 9));
    p.free(&r, next.block, &[]).unwrap();
}

/// A block allocated on a stream with no timeline wait pending, then freed there behind a wait
/// not reached yet: its users are that stream's own work, so the stream's next allocation
/// reuses it in stream order (a fixed pool of one block is not exhausted by the wait).
fn a_block_freed_on_its_own_stream_behind_a_pending_wait_is_reused_there<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::fixed_blocks(256, 1));
    let (w, s) = (b.stream(), b.stream());
    let t = Timeline::new(b, "written", 0).unwrap();
    let x = p.alloc(&s, 256, &[]).unwrap();
    b.busy(&w, Duration::from_millis(200));
    t.signal_on(&w, 1).unwrap();
    t.wait_on(&s, 1).unwrap(); // pending: its signal is behind the busy work
    p.free(&s, x.block, &[]).unwrap();
    let y = p.alloc(&s, 256, &[]).unwrap();
    assert_eq!(y.block.addr(), x.block.addr(), "reused on its own stream");
    b.fill_u32(&s, y.block.addr(), 64, 3);
    assert!(b.read_u32(&s, y.block.addr(), 64).iter().all(|&v| v == 3));
    p.free(&s, y.block, &[]).unwrap();
    b.sync_stream(&w);
}

/// The native pool: a block freed on its own stream past a wait (enqueued there after the
/// allocation) that a failure released before the free is never handed out again: the user the
/// wait stood for may still be at work when the driver would reuse it in stream order.
fn a_native_free_past_a_wait_released_by_a_failure_is_leaked<B: MemOps>(b: &B) {
    let n = NativePool::new(b, "native", u64::MAX).unwrap();
    let (w, r) = (b.stream(), b.stream());
    let t = Timeline::new(b, "written", 0).unwrap();
    let x = n.alloc(&r, 4096, &[]).unwrap();
    b.busy(&w, Duration::from_millis(300));
    t.signal_on(&w, 1).unwrap();
    t.wait_on(&r, 1).unwrap(); // r waits for its writer on w
    t.fail(Error::Cancelled("the writer's watchdog".into()));
    // As in `a_free_past_a_wait_released_by_a_failure_is_not_reused`: a signal that landed
    // before the failure released nothing.
    let landed = match t.query() {
        Err(Error::TimelineFailed { value, .. }) => value >= 1,
        other => panic!("failed just now, yet {other:?}"),
    };
    n.free(&r, x.block, &[]).unwrap();
    assert_eq!(n.stats().leaked, u64::from(!landed));
    b.sync_stream(&w);
    b.sync_stream(&r);
}

/// The wait tier never takes a block whose free sits behind a timeline wait not reached yet,
/// even one freed on the stream that allocated it: the requester's inserted wait would sit
/// behind that wait too, maybe for a value the requester itself signals later (a deadlock).
/// Refused as exhausted instead; taken once the wait is reached.
fn an_inserted_wait_never_takes_a_block_freed_behind_a_pending_wait<B: MemOps>(b: &B) {
    let p = pool(b, PoolConfig::fixed_blocks(256, 1));
    let (w, a, other) = (b.stream(), b.stream(), b.stream());
    let t = Timeline::new(b, "gate", 0).unwrap();
    let x = p.alloc(&a, 256, &[]).unwrap();
    b.busy(&w, Duration::from_millis(300));
    t.signal_on(&w, 1).unwrap();
    t.wait_on(&a, 1).unwrap(); // pending behind the busy work
    p.free(&a, x.block, &[]).unwrap();
    match p.alloc_with(&other, 256, &[], AllocFlags::default().allow_wait()) {
        Err(e) => assert!(matches!(e, Error::Exhausted { .. }), "{e}"),
        // Only if the wait was reached first: this thread held up past the busy work (a
        // driver call behind another test's free, say). Reached stays reached: a later look
        // still sees it.
        Ok(early) => {
            assert!(
                t.query().unwrap() >= 1,
                "taken behind a wait not reached: {early:?}"
            );
            p.free(&other, early.block, &[]).unwrap();
        }
    }
    t.wait(1, Duration::from_secs(30)).unwrap();
    b.sync_stream(&a);
    let y = p
        .alloc_with(&other, 256, &[], AllocFlags::default().allow_wait())
        .unwrap();
    assert_eq!(
        y.block.addr(),
        x.block.addr(),
        "taken once the wait is reached"
    );
    p.free(&other, y.block, &[]).unwrap();
    b.sync_stream(&other);
}

on_both_backends!(
    a_refused_wait_list_enqueues_nothing,
    an_inserted_wait_never_takes_a_block_freed_behind_a_pending_wait,
    a_block_freed_on_its_own_stream_behind_a_pending_wait_is_reused_there,
    a_native_free_past_a_wait_released_by_a_failure_is_leaked,
    an_exhausted_alloc_enqueues_no_waits,
    a_free_past_a_wait_released_by_a_failure_is_not_reused,
    a_free_on_a_stream_behind_a_wait_before_its_signal_is_accepted,
    a_held_free_does_not_keep_its_timeline_from_failing_when_dropped,
    a_free_waiting_before_its_signal_is_refused_where_it_cannot_be_held,
    a_free_whose_wait_fails_later_never_frees,
    a_free_whose_wait_was_reached_before_a_failure_frees,
    a_free_whose_wait_is_reached_later_frees_then,
    same_stream_reuse_needs_no_event,
    unordered_stream_gets_fresh_memory,
    ordered_stream_reuses,
    plain_event_waits_prove_nothing,
    bad_input_is_named_and_loses_nothing,
    blocks_are_aligned,
    size_classes_carve_slabs,
    trim_and_release_threshold,
    stats_track_bytes_and_counts,
    native_pool_behind_the_same_api,
    cts_basic_alloca,
    cts_explicit_passthrough_pool_alloca_dealloca,
    cts_explicit_tlsf_pool_transfer_alloca_dealloca,
    cts_explicit_fixed_block_pool_cross_queue_wait_frontier,
    cts_explicit_fixed_block_pool_requires_wait_frontier_flag,
    cts_explicit_tlsf_pool_cross_queue_stale_block_grows,
    cts_alloca_with_wait_semaphores,
    alloca_waits_on_a_point_of_a_busy_stream,
    failed_timeline_in_a_wait_list_does_not_free,
    cts_alloca_dealloca_cycle,
    cts_buffer_metadata,
    cts_dealloca_releases_memory,
    cts_chained_alloca_dealloca,
    cts_default_pool_repeated_chained_alloca_dealloca,
    cts_reserve_reuses_dominated_frontier,
    cts_reserve_skips_stale_block_and_returns_later_fresh_block,
    cts_reserve_can_return_stale_block_when_wait_allowed,
    cts_success,
    cts_success_reuse,
    cts_success_from_pool,
    cts_success_with_kernel,
    cts_success_with_kernel_repeat,
    cts_success_mt,
    cts_multi_queue_success_reuse,
    cts_success_dependant_shared_across_queues,
    cts_success_dependant_shared_across_queues_sync_validate,
);

// ----------------------------------------------------------------------------------------------
// Host only.

/// A free whose wait list fails does not free: the block stays allocated and usable.
#[test]
fn failed_wait_list_does_not_free() {
    let host = HostBackend::new();
    let p = Pool::new(&host, "test", PoolConfig::default()).unwrap();
    let (s, broken) = (
        host.new_stream("s").unwrap(),
        host.new_stream("broken").unwrap(),
    );
    let a = p.alloc(&s, 1024, &[]).unwrap();
    broken.launch(|| panic!("a reader failed"));
    let reader_done = p.record(&broken).unwrap();
    assert!(broken.synchronize().is_err());
    let before = p.stats();
    let e = p
        .free(&s, a.block, &[Wait::Point(&reader_done)])
        .unwrap_err();
    assert!(e.to_string().contains("a reader failed"), "{e}");
    assert_eq!(p.stats(), before, "nothing changed");
    // Still allocated: usable, and freeable (not a double free).
    host.fill_u32(&s, a.block.addr(), 256, 9);
    assert!(host
        .read_u32(&s, a.block.addr(), 256)
        .iter()
        .all(|&v| v == 9));
    p.free(&s, a.block, &[]).unwrap();
    // An allocation whose wait list fails hands nothing out.
    let e = p.alloc(&s, 1024, &[Wait::Point(&reader_done)]).unwrap_err();
    assert!(e.to_string().contains("a reader failed"), "{e}");
    assert_eq!(p.stats().allocs, 1);
}

/// The hazard checker sees the pool's ordering: a reuse across streams that the pool proved
/// safe is also ordered by happens-before.
#[test]
fn pool_ordering_is_real_ordering_for_the_hazard_checker() {
    use seqsync::hazard::ValidatingBackend;
    use seqsync::internal::hazard::Access;
    let v = ValidatingBackend::new(HostBackend::new());
    let (s1, s2) = (
        Backend::new_stream(&v, "s1").unwrap(),
        Backend::new_stream(&v, "s2").unwrap(),
    );
    let p = Pool::new(&v, "checked", PoolConfig::default()).unwrap();
    let a = p.alloc(&s1, 4096, &[]).unwrap();
    v.access(&s1, Access::write("first", "block", 0, 0));
    let freed = p.free(&s1, a.block, &[]).unwrap();
    let c = p.alloc(&s2, 4096, &[Wait::Point(&freed)]).unwrap();
    assert_eq!(c.block.addr(), a.block.addr());
    v.access(&s2, Access::write("second", "block", 0, 1));
    assert!(v.checker().is_clean(), "{}", v.checker().report());
    // Control: a third stream writing the block with no wait is reported.
    let s3 = Backend::new_stream(&v, "s3").unwrap();
    v.access(&s3, Access::write("third", "block", 0, 2));
    assert!(!v.checker().is_clean());
}
