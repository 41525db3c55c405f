//! `SharedBuffer` on the host backend, across processes: what a creator writes an importer
//! reads (ordered by a shared ring), addresses are checked, and the free rule: the creator
//! frees only once no living process maps it, refuses new importers meanwhile, and is not
//! held up by a killed one.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use seqsync::backend::Backend;
use seqsync::ipc::{SharedBuffer, SharedRing, SharedTimeline};
use seqsync::{Blocking, Error, HostBackend};

use crate::harness::{self, await_ready, exit_code, kill_later, unique, RING};

const WORDS: usize = 1 << 16;
const SEQS: i64 = 20;
const SLOTS: usize = 2;

fn child(name: &str, buffer: &str) -> std::process::Child {
    harness::child(&format!("shared_buffer::{name}"), buffer, None)
}

/// Word `i` of slot `slot` of the buffer at `base` (host addresses on the host backend).
fn word(base: u64, slot: usize, i: usize) -> &'static AtomicU32 {
    let addr = base as usize + (slot * WORDS + i) * 4;
    // SAFETY: inside a live SharedBuffer of SLOTS * WORDS u32s (the tests keep it alive while
    // they touch it), 4-aligned (page-aligned base); both processes use atomics only.
    unsafe { &*(addr as *const AtomicU32) }
}

fn value(seq: i64, i: usize) -> u32 {
    (seq as u32).wrapping_mul(2_654_435_761) ^ i as u32
}

#[test]
fn sizes_names_and_addresses_are_checked() {
    let host = HostBackend::new();
    let e = SharedBuffer::create(&host, &unique("buf-zero"), 0).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = SharedBuffer::create(&host, &unique("buf-huge"), 1 << 41).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = SharedBuffer::create(&host, "bad/name", 16).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = SharedBuffer::open(&host, &unique("buf-missing")).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let name = unique("buf-at");
    let b = SharedBuffer::create(&host, &name, 100).unwrap();
    assert!(b.is_creator() && b.len() == 100 && !b.is_empty());
    let e = SharedBuffer::create(&host, &name, 100).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }),
        "a second creator: {e}"
    );
    assert_eq!(b.at(0, 100).unwrap(), b.ptr());
    assert_eq!(b.at(60, 40).unwrap(), b.ptr() + 60);
    for (off, len) in [(0, 101), (100, 1), (usize::MAX, 2)] {
        let e = b.at(off, len).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { .. }),
            "{off}+{len}: {e}"
        );
    }
    // A ring of the same name is another thing: a buffer's name does not open it.
    let e = SharedRing::open(&host, &name).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    b.free(Duration::from_secs(1)).unwrap();
    // Freed: the name is free again.
    SharedBuffer::create(&host, &name, 8).unwrap();
}

#[test]
fn an_importer_process_reads_every_element_the_creator_wrote_for_each_seq() {
    let host = HostBackend::new();
    let name = unique("buf-data");
    let buf = SharedBuffer::create(&host, &name, SLOTS * WORDS * 4).unwrap();
    let ring = SharedRing::create(&host, &format!("{name}-r"), 1, SLOTS).unwrap();
    // The child signals seq + 1 once it has read seq: slot seq % SLOTS is free again.
    let read = SharedTimeline::create(&host, &format!("{name}-t"), 0).unwrap();
    let mut c = child("child_reads_every_element", &name);
    await_ready(&mut c);
    let s = host.new_stream("writes").unwrap();
    let base = buf.ptr();
    for seq in 0..SEQS {
        if seq >= SLOTS as i64 {
            read.wait_on(&s, (seq - SLOTS as i64 + 1) as u64).unwrap();
        }
        host.launch_host(
            &s,
            Box::new(move || {
                for i in 0..WORDS {
                    word(base, seq as usize % SLOTS, i).store(value(seq, i), Ordering::Relaxed);
                }
            }),
        )
        .unwrap();
        ring.record(&s, seq, Blocking::Yes).unwrap();
    }
    host.synchronize_stream(&s).unwrap();
    assert_eq!(exit_code(c, Duration::from_secs(60)), 0);
    buf.free(Duration::from_secs(5)).unwrap();
}

#[test]
#[ignore = "run as the child process of an_importer_process_reads_every_element_the_creator_wrote_for_each_seq"]
fn child_reads_every_element() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let host = HostBackend::new();
    let buf = SharedBuffer::open(&host, &name).unwrap();
    assert!(!buf.is_creator());
    let ring = SharedRing::open(&host, &format!("{name}-r")).unwrap();
    let read = SharedTimeline::open(&host, &format!("{name}-t")).unwrap();
    println!("{}", harness::READY);
    let base = buf.ptr();
    let mut wrong = 0;
    for seq in 0..SEQS {
        ring.synchronize(seq, Blocking::Yes).unwrap();
        wrong += (0..WORDS)
            .filter(|&i| {
                word(base, seq as usize % SLOTS, i).load(Ordering::Relaxed) != value(seq, i)
            })
            .count();
        read.signal(seq as u64 + 1).unwrap();
    }
    std::process::exit(wrong.min(100) as i32);
}

#[test]
fn free_waits_for_an_importer_and_refuses_new_ones_meanwhile() {
    let host = HostBackend::new();
    let name = unique("buf-free");
    let buf = SharedBuffer::create(&host, &name, 4096).unwrap();
    let mut c = child("child_maps_it_for_a_while", &name);
    await_ready(&mut c);
    assert_eq!(buf.importers(), 1);
    let start = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| {
            // While the free waits, the name is withdrawn: nobody else maps it.
            std::thread::sleep(Duration::from_millis(100));
            let e = SharedBuffer::open(&host, &name).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        });
        buf.free(Duration::from_secs(10)).unwrap();
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
#[ignore = "run as the child process of the free tests"]
fn child_maps_it_for_a_while() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let host = HostBackend::new();
    let buf = SharedBuffer::open(&host, &name).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_millis(400));
    drop(buf);
}

#[test]
fn a_free_that_times_out_is_still_imported_and_frees_nothing() {
    let host = HostBackend::new();
    let name = unique("buf-still");
    let buf = SharedBuffer::create(&host, &name, 4096).unwrap();
    let mut c = child("child_maps_it_for_a_while", &name);
    await_ready(&mut c);
    let e = buf.free(Duration::from_millis(50)).unwrap_err();
    assert!(
        matches!(&e, Error::StillImported { buffer, importers: 1 } if *buffer == name),
        "{e}"
    );
    assert_eq!(exit_code(c, Duration::from_secs(10)), 0);
}

#[test]
fn a_killed_importer_does_not_hold_up_the_free() {
    let host = HostBackend::new();
    let name = unique("buf-kill");
    let buf = SharedBuffer::create(&host, &name, 4096).unwrap();
    let mut c = child("child_maps_it_and_sleeps", &name);
    await_ready(&mut c);
    let (killed, mut c) = kill_later(c, Duration::from_millis(100)).join().unwrap();
    c.wait().unwrap();
    buf.free(Duration::from_secs(5)).unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(1),
        "{:?}",
        killed.elapsed()
    );
}

#[test]
#[ignore = "run as the child process of a_killed_importer_does_not_hold_up_the_free"]
fn child_maps_it_and_sleeps() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let _buf = SharedBuffer::open(&HostBackend::new(), &name).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_secs(60));
}

/// A killed importer holds nothing, its entry in the peer table included: after more killed
/// importers than the table has entries, the buffer still opens.
#[test]
fn shared_buffer_killed_importers_do_not_use_up_its_peer_table() {
    let host = HostBackend::new();
    let name = unique("buf-kills");
    let buf = SharedBuffer::create(&host, &name, 4096).unwrap();
    for _ in 0..15 {
        let mut c = harness::child("shared_buffer::child_maps_it_and_sleeps", &name, None);
        await_ready(&mut c);
        c.kill().unwrap();
        c.wait().unwrap();
    }
    assert_eq!(buf.importers(), 0);
    let again = SharedBuffer::open(&host, &name).unwrap();
    drop(again);
    buf.free(Duration::from_secs(1)).unwrap();
}
