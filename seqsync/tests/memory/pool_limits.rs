//! The pool's limits and failure edges: what it advertises it serves; configurations at the
//! top of the range are errors, not panics; an inserted wait never lands on a free that
//! failed; a pool never blocks the host, not even when it drops.
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::time::Duration;

use seqsync::memory::{AllocFlags, Pool, PoolConfig, Wait};
use seqsync::timeline::Timeline;
use seqsync::{Error, HostBackend};

#[test]
fn every_size_up_to_max_alloc_is_served_by_an_empty_pool() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let cfg = PoolConfig {
        max_bytes: 1000,
        ..PoolConfig::default()
    };
    let p = Pool::new(&host, "p", cfg).unwrap();
    // 1000 bytes would take the 1024-byte class: the largest class within 1000 is 768.
    assert_eq!(p.max_alloc(), 768);
    let a = p.alloc(&s, p.max_alloc(), &[]).unwrap();
    assert_eq!(a.block.capacity(), 768);
    assert!(matches!(
        p.alloc(&s, 769, &[]),
        Err(Error::AllocSize {
            size: 769,
            max: 768,
            ..
        })
    ));
    assert_eq!(p.stats().exhausted, 0);
}

#[test]
fn a_pool_that_holds_no_block_is_refused_when_made() {
    let host = HostBackend::new();
    let cfg = PoolConfig {
        max_bytes: 255,
        ..PoolConfig::default()
    };
    let e = Pool::new(&host, "tiny", cfg).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

#[test]
fn an_alignment_at_the_top_of_the_range_is_an_error_not_a_panic() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    for shift in [62u32, 63] {
        let cfg = PoolConfig {
            alignment: 1usize << shift,
            ..PoolConfig::default()
        };
        let r = catch_unwind(AssertUnwindSafe(|| {
            Pool::new(&host, "p", cfg).and_then(|p| p.alloc(&s, 1, &[]).map(|a| a.block))
        }));
        let r = r.unwrap_or_else(|_| panic!("alignment 2^{shift}: a panic"));
        assert!(r.is_err(), "alignment 2^{shift}: no host memory that large");
    }
}

/// A free accepted while its wait list was fine, whose reader fails afterwards (its closure
/// panics), never completes: an allocation allowed to wait does not get a wait on it (which
/// would fail a healthy stream); the block is leaked and counted instead.
#[test]
fn an_inserted_wait_never_lands_on_a_free_that_failed() {
    let host = HostBackend::new();
    let (reader, freer, healthy) = (
        host.new_stream("reader").unwrap(),
        host.new_stream("freer").unwrap(),
        host.new_stream("healthy").unwrap(),
    );
    let p = Pool::new(&host, "p", PoolConfig::fixed_blocks(4096, 1)).unwrap();
    let x = p.alloc(&freer, 4096, &[]).unwrap().block;
    reader.launch(|| {
        std::thread::sleep(Duration::from_millis(20));
        panic!("the last reader failed");
    });
    let read = p.record(&reader).unwrap();
    p.free(&freer, x, &[Wait::Point(&read)]).unwrap();
    assert!(freer.synchronize().is_err(), "the free's wait failed");

    let flags = AllocFlags::default().allow_wait();
    let e = p.alloc_with(&healthy, 4096, &[], flags).unwrap_err();
    assert!(matches!(e, Error::Exhausted { stale: 0, .. }), "{e}");
    healthy.launch(|| {});
    healthy.synchronize().unwrap();
    let st = p.stats();
    assert_eq!((st.leaked, st.waits, st.exhausted), (1, 0, 1), "{st:?}");
}

/// A pool dropped while a free is held by a timeline value that the dropping thread signals
/// only afterwards: the drop returns at once (the slab is leaked, not freed under the stream).
#[test]
fn dropping_the_pool_never_waits_for_a_pending_free() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let go = Timeline::new(&host, "go", 0).unwrap();
    let p = Pool::new(&host, "p", PoolConfig::default()).unwrap();
    let a = p.alloc(&s, 4096, &[]).unwrap().block;
    go.wait_on(&s, 1).unwrap();
    p.free(&s, a, &[]).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(p);
        let _ = tx.send(());
    });
    let dropped = rx.recv_timeout(Duration::from_secs(5)).is_ok();
    go.signal(1).unwrap();
    s.synchronize().unwrap();
    assert!(dropped, "the pool's drop waited for the stream");
}

/// A block written on `writer` by slow work (`ms`), which then signals `input` 1; its last
/// reader waits for `input` 1 on `reader`, and the block is freed on `freer` after the
/// reader's point.
struct Handed {
    pool: Pool<HostBackend>,
    writer: seqsync::backend::host::HostStream,
    reader: seqsync::backend::host::HostStream,
    freer: seqsync::backend::host::HostStream,
    input: Timeline<HostBackend>,
    addr: u64,
}

fn handed_over(ms: u64) -> Handed {
    let host = HostBackend::new();
    let (writer, reader, freer) = (
        host.new_stream("writer").unwrap(),
        host.new_stream("reader").unwrap(),
        host.new_stream("freer").unwrap(),
    );
    let pool = Pool::new(&host, "p", PoolConfig::default()).unwrap();
    let input = Timeline::new(&host, "input", 0).unwrap();
    let a = pool.alloc(&writer, 1024, &[]).unwrap().block;
    let addr = a.addr();
    writer.launch(move || std::thread::sleep(Duration::from_millis(ms)));
    input.signal_on(&writer, 1).unwrap();
    input.wait_on(&reader, 1).unwrap();
    let read = pool.record(&reader).unwrap();
    pool.free(&freer, a, &[Wait::Point(&read)]).unwrap();
    Handed {
        pool,
        writer,
        reader,
        freer,
        input,
        addr,
    }
}

/// The last reader of a block waits, on a timeline, for its slow writer; the free waits on
/// the reader's point. Upstream then fails the timeline while the writer still writes: the
/// reader's wait is released early, and so is the free's point. The block is never handed
/// out again (leaked and counted), not even on the free's own stream.
#[test]
fn a_free_behind_a_point_whose_wait_a_failure_released_never_frees() {
    let Handed {
        pool: p,
        writer,
        reader: _reader,
        freer,
        input,
        addr,
    } = handed_over(200);
    assert_eq!(p.stats().quarantined, 1, "held until `input` reaches 1");
    input.fail(Error::Cancelled("upstream cancelled".into()));
    freer.synchronize().unwrap();
    for _ in 0..3 {
        let b = p.alloc(&freer, 1024, &[]).unwrap().block;
        assert_ne!(b.addr(), addr, "handed out under its writer");
        p.free(&freer, b, &[]).unwrap();
    }
    let st = p.stats();
    assert_eq!((st.quarantined, st.leaked), (0, 1), "{st:?}");
    writer.synchronize().unwrap();
}

/// The same with the value reached: the held block comes back once the host sees it, and is
/// reused on the free's stream; a block allocated and freed on a stream after its earlier
/// waits stands on none of them.
#[test]
fn a_free_behind_a_point_whose_wait_is_reached_frees_once_the_host_sees_it() {
    let Handed {
        pool: p,
        reader,
        freer,
        input,
        addr,
        ..
    } = handed_over(50);
    assert_eq!(p.stats().quarantined, 1);
    input.wait(1, Duration::from_secs(10)).unwrap();
    let b = p.alloc(&freer, 1024, &[]).unwrap().block;
    assert_eq!(b.addr(), addr, "reused once the value was reached");
    // The reader's wait is reached and behind it: a block allocated there now and freed
    // there is reused at once.
    let c = p.alloc(&reader, 1024, &[]).unwrap().block;
    p.free(&reader, c, &[]).unwrap();
    let d = p.alloc(&reader, 1024, &[]).unwrap().block;
    assert_eq!(d.addr(), c.addr());
    let st = p.stats();
    assert_eq!((st.quarantined, st.leaked), (0, 0), "{st:?}");
}

/// A stream poisoned by a failure long ago: blocks allocated on it afterwards and freed there
/// stand on no wait from before their allocation, and are reused as usual.
#[test]
fn blocks_allocated_after_a_failure_are_reused_on_the_poisoned_stream() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let p = Pool::new(&host, "p", PoolConfig::fixed_blocks(4096, 1)).unwrap();
    let t = Timeline::new(&host, "t", 0).unwrap();
    t.wait_on(&s, 1).unwrap();
    t.fail(Error::Cancelled("gone".into()));
    for _ in 0..5 {
        let b = p.alloc(&s, 4096, &[]).unwrap().block;
        p.free(&s, b, &[]).unwrap();
    }
    let st = p.stats();
    assert_eq!((st.reuse, st.leaked, st.quarantined), (4, 0, 0), "{st:?}");
    s.synchronize().unwrap();
}

/// On that poisoned stream, a wait enqueued after the allocation and released by a new
/// failure does count: the block is not handed out again (its writer may still write).
#[test]
fn a_failure_after_the_allocation_on_a_poisoned_stream_still_holds_the_block() {
    let host = HostBackend::new();
    let (s, w) = (host.new_stream("s").unwrap(), host.new_stream("w").unwrap());
    let p = Pool::new(&host, "p", PoolConfig::fixed_blocks(4096, 2)).unwrap();
    let old = Timeline::new(&host, "old", 0).unwrap();
    old.wait_on(&s, 1).unwrap();
    old.fail(Error::Cancelled("long ago".into()));
    let x = p.alloc(&s, 4096, &[]).unwrap().block;
    let t = Timeline::new(&host, "written", 0).unwrap();
    w.launch(|| std::thread::sleep(std::time::Duration::from_millis(50)));
    t.signal_on(&w, 1).unwrap();
    t.wait_on(&s, 1).unwrap();
    p.free(&s, x, &[]).unwrap();
    t.fail(Error::Cancelled("the writer's watchdog".into()));
    // Gone too: its waits no longer say the failure; the stream's ledger must.
    drop(t);
    // The failure released `s`: it has passed the free by the time this returns.
    let _ = s.synchronize();
    assert_eq!(
        p.trim_to(0).unwrap(),
        0,
        "its slab was given back under its writer"
    );
    let y = p.alloc(&s, 4096, &[]).unwrap().block;
    assert_ne!(y.addr(), x.addr(), "handed out under its writer");
    let st = p.stats();
    assert_eq!((st.leaked, st.quarantined), (1, 0), "{st:?}");
    w.synchronize().unwrap();
    s.synchronize().unwrap();
}

/// A timeline wait pending on the freeing stream (enqueued ahead of its signal, not in the
/// free's wait list) that a failure could still release early holds the block back until it
/// is reached, unless the block was allocated on that stream after the wait (then its every
/// user came after the wait too): a block allocated elsewhere is not handed out again while
/// the wait is pending, and is once it is reached.
#[test]
fn a_pending_wait_on_the_freeing_stream_holds_a_free_back_until_reached() {
    let host = HostBackend::new();
    let (a, s) = (host.new_stream("a").unwrap(), host.new_stream("s").unwrap());
    let p = Pool::new(&host, "p", PoolConfig::default()).unwrap();
    let t = Timeline::new(&host, "t", 0).unwrap();
    t.wait_on(&s, 1).unwrap();
    // Allocated on the freeing stream after its wait: reused at once.
    let b = p.alloc(&s, 1024, &[]).unwrap().block;
    p.free(&s, b, &[]).unwrap();
    let c = p.alloc(&s, 1024, &[]).unwrap().block;
    assert_eq!(
        c.addr(),
        b.addr(),
        "not reused at once on the freeing stream"
    );
    p.free(&s, c, &[]).unwrap();
    // Allocated on another stream: held while the wait is pending.
    let d = p.alloc(&a, 2048, &[]).unwrap().block;
    p.free(&s, d, &[]).unwrap();
    let e = p.alloc(&s, 2048, &[]).unwrap().block;
    assert_ne!(
        e.addr(),
        d.addr(),
        "handed out under a wait a failure could release"
    );
    p.free(&s, e, &[]).unwrap();
    t.signal(1).unwrap();
    s.synchronize().unwrap();
    let f = p.alloc(&s, 2048, &[]).unwrap().block;
    let g = p.alloc(&s, 2048, &[]).unwrap().block;
    assert!(
        [f.addr(), g.addr()].contains(&d.addr()),
        "not reused once its stream's wait was reached"
    );
    p.free(&s, f, &[]).unwrap();
    p.free(&s, g, &[]).unwrap();
    assert_eq!(p.stats().leaked, 0);
    s.synchronize().unwrap();
}

/// A block freed past a timeline wait that a failure releases only after the block was handed
/// out again would be written by its new user while its old one still writes: it is not handed
/// out while that wait is pending (the failure then leaks it instead).
#[test]
fn a_free_behind_a_pending_wait_is_not_reused_before_a_later_failure() {
    let host = HostBackend::new();
    let (w, r) = (host.new_stream("w").unwrap(), host.new_stream("r").unwrap());
    let p = Pool::new(&host, "p", PoolConfig::default()).unwrap();
    let t = Timeline::new(&host, "written", 0).unwrap();
    let x = p
        .alloc_with(&w, 4096, &[], AllocFlags::default().signal())
        .unwrap();
    // The writer: at work on the block for a while, then its signal.
    w.launch(|| std::thread::sleep(Duration::from_millis(200)));
    t.signal_on(&w, 1).unwrap();
    p.wait(&r, x.ready.as_ref().unwrap()).unwrap();
    t.wait_on(&r, 1).unwrap();
    p.free(&r, x.block, &[]).unwrap();
    let y = p.alloc(&r, 4096, &[]).unwrap();
    assert_ne!(
        y.block.addr(),
        x.block.addr(),
        "reused under a pending wait"
    );
    t.fail(Error::Cancelled("the watchdog".into()));
    let z = p.alloc(&r, 4096, &[]).unwrap();
    assert_ne!(
        z.block.addr(),
        x.block.addr(),
        "reused after its wait failed"
    );
    w.synchronize().ok();
    r.synchronize().ok();
    assert_eq!(p.stats().leaked, 1, "{:?}", p.stats());
}

/// An alignment so large that a slab of one block and its alignment passes the address space:
/// refused by name, not reported as an exhausted pool (which would ask to free blocks).
#[test]
fn an_alignment_beyond_the_address_space_is_refused_not_exhausted() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let cfg = PoolConfig {
        alignment: 1usize << (usize::BITS - 1),
        ..PoolConfig::default()
    };
    let p = Pool::new(&host, "huge", cfg).unwrap();
    let e = p.alloc(&s, 1, &[]).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { message, .. } if message.contains("address space")),
        "{e}"
    );
    assert_eq!(p.stats().allocs, 0);
}

/// The native pool: a free of a block allocated on another stream, on a stream with a timeline
/// wait still pending, is held back (the driver would hand the block out again in the stream's
/// order at once) until the wait is reached, then freed; if a failure releases the wait, before
/// the free or after it, the block is leaked.
#[test]
fn the_native_pool_holds_a_free_behind_a_pending_wait() {
    use seqsync::internal::memory::NativePool;
    for (fail, before) in [(false, false), (true, false), (true, true)] {
        let host = HostBackend::new();
        let (a, s) = (host.new_stream("a").unwrap(), host.new_stream("s").unwrap());
        let p = NativePool::new(&host, "native", u64::MAX).unwrap();
        let t = Timeline::new(&host, "t", 0).unwrap();
        t.wait_on(&s, 1).unwrap();
        let b = p.alloc(&a, 1024, &[]).unwrap().block;
        if before {
            t.fail(Error::Cancelled("the watchdog".into()));
        }
        p.free(&s, b, &[]).unwrap();
        assert_eq!(p.stats().quarantined, 1, "freed under a pending wait");
        if fail && !before {
            t.fail(Error::Cancelled("the watchdog".into()));
        } else if !fail {
            t.signal(1).unwrap();
        }
        s.synchronize().unwrap_or(());
        let c = p.alloc(&s, 1024, &[]).unwrap().block;
        let st = p.stats();
        assert_eq!((st.quarantined, st.leaked), (0, u64::from(fail)), "{st:?}");
        p.free(&a, c, &[]).unwrap();
        a.synchronize().unwrap();
    }
}
