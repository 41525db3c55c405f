//! `SharedPool` on the host backend, across processes: an importer reads every element of each
//! allocation the exporter wrote (ordered by a shared ring); sizes, names and ids are checked;
//! the exporter frees only once no living process holds an import, refuses new imports
//! meanwhile, is not held up by a killed importer, and a freed allocation's id names nothing.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use seqsync::backend::Backend;
use seqsync::ipc::{ExportId, SharedPool, SharedRing, SharedTimeline, MAX_EXPORTS};
use seqsync::{Blocking, Error, HostBackend};

use crate::harness::{self, await_ready, exit_code, kill_later, unique, RING};

const WORDS: usize = 1 << 14;
const ALLOCS: usize = 4;
const SEQS: i64 = 16;

/// `POOL:ID,ID,...`: what a child is told.
fn child(name: &str, pool: &str, ids: &[ExportId]) -> std::process::Child {
    let ids: Vec<String> = ids.iter().map(|i| i.to_u64().to_string()).collect();
    harness::child(
        &format!("shared_pool::{name}"),
        &format!("{pool}:{}", ids.join(",")),
        None,
    )
}

/// The pool's name and the ids, in a child.
fn told() -> Option<(String, Vec<ExportId>)> {
    let v = std::env::var(RING).ok()?;
    let (name, ids) = v.split_once(':')?;
    let ids = ids
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| ExportId::from_u64(s.parse().unwrap()))
        .collect();
    Some((name.to_owned(), ids))
}

fn word(base: u64, i: usize) -> &'static AtomicU32 {
    // SAFETY: inside a live allocation of WORDS u32s (the tests hold it while they touch it),
    // 4-aligned (allocations are 256-aligned); both processes use atomics only.
    unsafe { &*((base as usize + i * 4) as *const AtomicU32) }
}

fn value(seq: i64, i: usize) -> u32 {
    (seq as u32).wrapping_mul(2_654_435_761) ^ i as u32
}

#[test]
fn pool_sizes_names_and_ids_are_checked() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let e = SharedPool::create(&host, &unique("pool-zero"), 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = SharedPool::create(&host, &unique("pool-huge"), 1 << 41).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = SharedPool::create(&host, "bad/name", 16).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = SharedPool::open(&host, &unique("pool-missing")).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let name = unique("pool-checks");
    let pool = SharedPool::create(&host, &name, 4096).unwrap();
    assert!(pool.is_exporter() && pool.capacity() == 4096);
    let e = SharedPool::create(&host, &name, 4096).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }),
        "a second creator: {e}"
    );
    let e = pool.alloc(&s, 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let a = pool.alloc(&s, 3000).unwrap();
    let e = pool.alloc(&s, 2000).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Exhausted {
                requested: 2000,
                reserved: 3000,
                max: 4096,
                ..
            }
        ),
        "{e}"
    );
    // The exporter does not import its own, and an importer neither allocates nor frees.
    let e = pool.import(a.id).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let seen = SharedPool::open(&host, &name).unwrap();
    assert!(!seen.is_exporter() && seen.capacity() == 4096);
    let e = seen.alloc(&s, 16).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // Ids that name nothing: another index, another generation, any number.
    for v in [a.id.to_u64() + 1, a.id.to_u64() + (1 << 8), u64::MAX, 0] {
        let e = seen.import(ExportId::from_u64(v)).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{v}: {e}");
    }
    let got = seen.import(a.id).unwrap();
    assert_eq!((got.len(), got.id()), (3000, a.id));
    // Its own mapping of the same bytes: what one writes, the other reads.
    word(a.ptr, 9).store(77, Ordering::Relaxed);
    assert_eq!(word(got.ptr(), 9).load(Ordering::Relaxed), 77);
    let e = seen.import(a.id).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }),
        "imported twice here: {e}"
    );
    drop(got);
    // A ring of the same name is another thing.
    let e = SharedRing::open(&host, &name).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    pool.free(&a, &s, Duration::from_secs(1)).unwrap();
    let e = pool.free(&a, &s, Duration::from_secs(1)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }),
        "freed twice: {e}"
    );
    let e = seen.import(a.id).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }),
        "a freed id: {e}"
    );
    // Its range is reused, under a new id.
    let b = pool.alloc(&s, 4096).unwrap();
    assert_eq!(b.ptr, a.ptr);
    assert_ne!(b.id, a.id);
    pool.free(&b, &s, Duration::from_secs(1)).unwrap();
}

#[test]
fn a_pool_exports_at_most_max_exports_allocations_at_once() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let pool = SharedPool::create(&host, &unique("pool-many"), (MAX_EXPORTS + 1) * 256).unwrap();
    let all: Vec<_> = (0..MAX_EXPORTS)
        .map(|_| pool.alloc(&s, 1).unwrap())
        .collect();
    let e = pool.alloc(&s, 1).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { .. }) && e.to_string().contains("256 allocations"),
        "{e}"
    );
    pool.free(&all[7], &s, Duration::from_secs(1)).unwrap();
    pool.alloc(&s, 1).unwrap();
}

#[test]
fn an_importer_process_reads_every_element_of_each_allocation() {
    let host = HostBackend::new();
    let name = unique("pool-data");
    let pool = SharedPool::create(&host, &name, ALLOCS * WORDS * 4 + ALLOCS * 256).unwrap();
    let s = host.new_stream("writes").unwrap();
    let allocs: Vec<_> = (0..ALLOCS)
        .map(|_| pool.alloc(&s, WORDS * 4).unwrap())
        .collect();
    let ring = SharedRing::create(&host, &format!("{name}-r"), 1, ALLOCS).unwrap();
    let read = SharedTimeline::create(&host, &format!("{name}-t"), 0).unwrap();
    let ids: Vec<_> = allocs.iter().map(|a| a.id).collect();
    let mut c = child("child_reads_every_allocation", &name, &ids);
    await_ready(&mut c);
    for seq in 0..SEQS {
        let slot = seq as usize % ALLOCS;
        if seq >= ALLOCS as i64 {
            read.wait_on(&s, (seq - ALLOCS as i64 + 1) as u64).unwrap();
        }
        let base = allocs[slot].ptr;
        host.launch_host(
            &s,
            Box::new(move || {
                for i in 0..WORDS {
                    word(base, i).store(value(seq, i), Ordering::Relaxed);
                }
            }),
        )
        .unwrap();
        ring.record(&s, seq, Blocking::Yes).unwrap();
    }
    host.synchronize_stream(&s).unwrap();
    assert_eq!(exit_code(c, Duration::from_secs(60)), 0);
    for a in &allocs {
        pool.free(a, &s, Duration::from_secs(5)).unwrap();
    }
}

#[test]
#[ignore = "run as the child process of an_importer_process_reads_every_element_of_each_allocation"]
fn child_reads_every_allocation() {
    let Some((name, ids)) = told() else { return };
    let host = HostBackend::new();
    let pool = SharedPool::open(&host, &name).unwrap();
    let got: Vec<_> = ids.iter().map(|&id| pool.import(id).unwrap()).collect();
    let ring = SharedRing::open(&host, &format!("{name}-r")).unwrap();
    let read = SharedTimeline::open(&host, &format!("{name}-t")).unwrap();
    println!("{}", harness::READY);
    let mut wrong = 0;
    for seq in 0..SEQS {
        ring.synchronize(seq, Blocking::Yes).unwrap();
        let base = got[seq as usize % ids.len()].ptr();
        wrong += (0..WORDS)
            .filter(|&i| word(base, i).load(Ordering::Relaxed) != value(seq, i))
            .count();
        read.signal(seq as u64 + 1).unwrap();
    }
    std::process::exit(wrong.min(100) as i32);
}

#[test]
fn pool_free_waits_for_an_importer_and_refuses_new_imports_meanwhile() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let name = unique("pool-free");
    let pool = SharedPool::create(&host, &name, 1 << 16).unwrap();
    let a = pool.alloc(&s, 4096).unwrap();
    let mut c = child("child_imports_it_for_a_while", &name, &[a.id]);
    await_ready(&mut c);
    assert_eq!(pool.importers(&a), 1);
    let start = Instant::now();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            // While the free waits, nobody else imports it.
            std::thread::sleep(Duration::from_millis(100));
            let other = SharedPool::open(&host, &name).unwrap();
            let e = other.import(a.id).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        });
        pool.free(&a, &s, Duration::from_secs(10)).unwrap();
    });
    // The child held it for 400 ms after it was ready.
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(exit_code(c, Duration::from_secs(10)), 0);
}

#[test]
#[ignore = "run as the child process of the pool free tests"]
fn child_imports_it_for_a_while() {
    let Some((name, ids)) = told() else { return };
    let host = HostBackend::new();
    let pool = SharedPool::open(&host, &name).unwrap();
    let got = pool.import(ids[0]).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_millis(400));
    drop(got);
}

#[test]
fn a_pool_free_that_times_out_is_still_imported_frees_nothing_and_may_be_imported_again() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let name = unique("pool-still");
    let pool = SharedPool::create(&host, &name, 1 << 16).unwrap();
    let a = pool.alloc(&s, 4096).unwrap();
    let mut c = child("child_imports_it_for_a_while", &name, &[a.id]);
    await_ready(&mut c);
    let e = pool.free(&a, &s, Duration::from_millis(50)).unwrap_err();
    assert!(
        matches!(e, Error::StillImported { importers: 1, .. }),
        "{e}"
    );
    // Nothing was freed: it is exported still, and another process may import it.
    let other = SharedPool::open(&host, &name).unwrap();
    let got = other.import(a.id).unwrap();
    word(a.ptr, 0).store(5, Ordering::Relaxed);
    assert_eq!(word(got.ptr(), 0).load(Ordering::Relaxed), 5);
    drop(got);
    assert_eq!(exit_code(c, Duration::from_secs(10)), 0);
    pool.free(&a, &s, Duration::from_secs(5)).unwrap();
}

#[test]
fn a_killed_importer_does_not_hold_up_the_pool_free() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let name = unique("pool-kill");
    let pool = SharedPool::create(&host, &name, 1 << 16).unwrap();
    let a = pool.alloc(&s, 4096).unwrap();
    let mut c = child("child_imports_it_and_sleeps", &name, &[a.id]);
    await_ready(&mut c);
    assert_eq!(pool.importers(&a), 1);
    let (killed, mut c) = kill_later(c, Duration::from_millis(100)).join().unwrap();
    c.wait().unwrap();
    pool.free(&a, &s, Duration::from_secs(5)).unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed.elapsed()
    );
}

#[test]
#[ignore = "run as the child process of a_killed_importer_does_not_hold_up_the_pool_free"]
fn child_imports_it_and_sleeps() {
    let Some((name, ids)) = told() else { return };
    let host = HostBackend::new();
    let pool = SharedPool::open(&host, &name).unwrap();
    let _got = pool.import(ids[0]).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn an_id_of_another_pool_names_nothing_and_a_free_of_its_allocation_is_refused() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let (na, nb) = (unique("pool-a"), unique("pool-b"));
    let (a, b) = (
        SharedPool::create(&host, &na, 4096).unwrap(),
        SharedPool::create(&host, &nb, 4096).unwrap(),
    );
    let (xa, xb) = (a.alloc(&s, 64).unwrap(), b.alloc(&s, 64).unwrap());
    // The same table entry in both, under generations of their own.
    assert_ne!(xa.id, xb.id);
    let seen_b = SharedPool::open(&host, &nb).unwrap();
    let e = seen_b.import(xa.id).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = a.free(&xb, &s, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // Both still exported: B's is importable, A's free works.
    drop(seen_b.import(xb.id).unwrap());
    a.free(&xa, &s, Duration::MAX).unwrap();
    b.free(&xb, &s, Duration::MAX).unwrap();
}

#[test]
fn a_leaked_import_keeps_holding_the_allocation_after_its_pool_handle_is_dropped() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let name = unique("pool-leak");
    let pool = SharedPool::create(&host, &name, 4096).unwrap();
    let a = pool.alloc(&s, 64).unwrap();
    let seen = SharedPool::open(&host, &name).unwrap();
    std::mem::forget(seen.import(a.id).unwrap());
    drop(seen);
    // The leaked import still holds the memory: the exporter must not free it.
    let e = pool.free(&a, &s, Duration::from_millis(50)).unwrap_err();
    assert!(
        matches!(e, Error::StillImported { importers: 1, .. }),
        "{e}"
    );
}

#[test]
fn an_import_after_the_exporter_was_killed_is_peer_lost() {
    let host = HostBackend::new();
    let name = unique("pool-dead");
    let path = harness::data_path("pool-dead");
    let data = harness::Data::create(&path);
    let mut c = harness::child(
        "shared_pool::child_exports_and_sleeps",
        &format!("{name}:"),
        Some(&path),
    );
    await_ready(&mut c);
    let id = ExportId::from_u64(data.word(0).load(Ordering::SeqCst) as u64);
    let seen = SharedPool::open(&host, &name).unwrap();
    drop(seen.import(id).unwrap());
    let (_, mut c) = kill_later(c, Duration::from_millis(10)).join().unwrap();
    c.wait().unwrap();
    let e = seen.import(id).unwrap_err();
    assert!(matches!(e, Error::PeerLost { .. }), "{e}");
    let _ = std::fs::remove_file(&path);
}

#[test]
#[ignore = "run as the child process of an_import_after_the_exporter_was_killed_is_peer_lost"]
fn child_exports_and_sleeps() {
    let Some((name, _)) = told() else { return };
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let pool = SharedPool::create(&host, &name, 4096).unwrap();
    let a = pool.alloc(&s, 64).unwrap();
    let data = harness::Data::open(std::path::Path::new(&std::env::var(harness::DATA).unwrap()));
    data.word(0).store(a.id.to_u64() as i64, Ordering::SeqCst);
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_secs(60));
}

/// A killed importer holds nothing, its entry in the peer table and its importer bits
/// included: the buffer still opens, and the free does not wait for the entry's new owner.
#[test]
fn shared_pool_killed_importers_do_not_use_up_its_peer_table() {
    let host = HostBackend::new();
    let s = host.new_stream("s").unwrap();
    let name = unique("pool-kills");
    let pool = SharedPool::create(&host, &name, 1 << 16).unwrap();
    let a = pool.alloc(&s, 4096).unwrap();
    for _ in 0..15 {
        let mut c = harness::child(
            "shared_pool::child_imports_it_and_sleeps",
            &format!("{name}:{}", a.id.to_u64()),
            None,
        );
        await_ready(&mut c);
        c.kill().unwrap();
        c.wait().unwrap();
    }
    assert_eq!(pool.importers(&a), 0);
    let again = SharedPool::open(&host, &name).unwrap();
    // A reclaimed entry must not inherit the dead importer's bit (else this free would wait).
    drop(again);
    pool.free(&a, &s, Duration::ZERO).unwrap();
}
