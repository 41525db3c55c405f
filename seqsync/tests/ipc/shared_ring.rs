//! `SharedRing` across processes on the host backend: the contract's rows, the multi-process
//! cases (a child process runs a `child_*` test: `harness`), the kill tests.

use std::process::Child;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use seqsync::ipc::{Mechanism, SharedRing};
use seqsync::{Blocking, Error, HostBackend};

use crate::harness::{
    self, await_ready, data_path, exit_code, kill_later, unique, Data, DATA, RING, SLOTS,
};

const SEQS: i64 = 40;

/// This binary again, running this module's test `name` as the other process.
fn child(name: &str, ring: &str, data: Option<&std::path::Path>) -> Child {
    harness::child(&format!("shared_ring::{name}"), ring, data)
}

/// The producer: each seq's stream work sleeps, then writes seq into its slot of the data.
fn produce(ring: &SharedRing<HostBackend>, host: &HostBackend, data: Arc<Data>) {
    let s = host.new_stream("producer").unwrap();
    for seq in 0..SEQS {
        let d = data.clone();
        s.launch(move || {
            std::thread::sleep(Duration::from_millis(2));
            d.word(seq).store(seq, Ordering::SeqCst);
        });
        ring.record(&s, seq, Blocking::Yes).unwrap();
    }
    s.synchronize().unwrap();
}

fn ordered_run(child_test: &str) -> i32 {
    let name = unique(child_test);
    let path = data_path(child_test);
    let data = Arc::new(Data::create(&path));
    for seq in 0..SLOTS as i64 {
        data.word(seq).store(-1, Ordering::SeqCst);
    }
    let host = HostBackend::new();
    let ring = SharedRing::create(&host, &name, 1, SLOTS).unwrap();
    assert_eq!(ring.mechanism(), Mechanism::HostWord);
    let mut c = child(child_test, &name, Some(&path));
    await_ready(&mut c);
    produce(&ring, &host, data);
    let code = exit_code(c, Duration::from_secs(30));
    let _ = std::fs::remove_file(&path);
    code
}

#[test]
fn a_consumer_process_reads_each_seq_only_after_the_producers_work() {
    assert_eq!(ordered_run("child_consumer_in_order"), 0);
}

#[test]
#[ignore = "run as the child process of a_consumer_process_reads_each_seq_only_after_the_producers_work"]
fn child_consumer_in_order() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let data = Arc::new(Data::open(std::path::Path::new(
        &std::env::var(DATA).unwrap(),
    )));
    let host = HostBackend::new();
    let ring = SharedRing::open(&host, &name).unwrap();
    println!("{}", harness::READY);
    let stream = host.new_stream("consumer").unwrap();
    let wrong = Arc::new(AtomicI64::new(0));
    for seq in 0..SEQS {
        if seq % 2 == 0 {
            ring.synchronize(seq, Blocking::Yes).unwrap();
            if data.word(seq).load(Ordering::SeqCst) != seq {
                wrong.fetch_add(1, Ordering::SeqCst);
            }
        } else {
            // A stream wait: the check runs on the stream, after the wait.
            ring.wait(&stream, seq, Blocking::Yes).unwrap();
            let (d, w) = (data.clone(), wrong.clone());
            stream.launch(move || {
                if d.word(seq).load(Ordering::SeqCst) != seq {
                    w.fetch_add(1, Ordering::SeqCst);
                }
            });
            // The slot is reused after max_size seqs: check before the producer gets there.
            stream.synchronize().unwrap();
        }
    }
    std::process::exit(if wrong.load(Ordering::SeqCst) == 0 {
        0
    } else {
        1
    });
}

#[test]
fn negative_control_a_consumer_that_reads_when_recorded_not_done_reads_wrong() {
    assert_eq!(ordered_run("child_consumer_skips_its_wait"), 1);
}

#[test]
#[ignore = "run as the child process of negative_control_a_consumer_that_reads_when_recorded_not_done_reads_wrong"]
fn child_consumer_skips_its_wait() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let data = Data::open(std::path::Path::new(&std::env::var(DATA).unwrap()));
    let host = HostBackend::new();
    let ring = SharedRing::open(&host, &name).unwrap();
    println!("{}", harness::READY);
    let mut wrong = 0;
    for seq in 0..SEQS {
        // Recorded is not done: reading here, before synchronize, races the producer's work.
        ring.synchronize_with_producer(seq).unwrap();
        if data.word(seq).load(Ordering::SeqCst) != seq {
            wrong += 1;
        }
        ring.synchronize(seq, Blocking::Yes).unwrap();
    }
    std::process::exit(if wrong > 0 { 1 } else { 0 });
}

#[test]
fn stop_in_one_process_wakes_a_call_blocked_in_another() {
    let name = unique("stop");
    let host = HostBackend::new();
    let ring = SharedRing::create(&host, &name, 1, 2).unwrap();
    let mut c = child("child_blocks_until_stopped", &name, None);
    await_ready(&mut c);
    std::thread::sleep(Duration::from_millis(150));
    ring.stop("the run is over");
    assert_eq!(exit_code(c, Duration::from_secs(2)), 0);
    assert!(matches!(
        ring.record_host(0, Blocking::No),
        Err(Error::Stopped { .. })
    ));
}

#[test]
#[ignore = "run as the child process of stop_in_one_process_wakes_a_call_blocked_in_another"]
fn child_blocks_until_stopped() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let host = HostBackend::new();
    let ring = SharedRing::open(&host, &name).unwrap();
    println!("{}", harness::READY);
    match ring.synchronize(0, Blocking::Yes) {
        Err(Error::Stopped { reason, .. }) if &*reason == "the run is over" => {
            std::process::exit(0)
        }
        other => {
            eprintln!("got {other:?}");
            std::process::exit(1)
        }
    }
}

/// Kills `c` after `after` from another thread; returns when it was killed.
#[test]
fn a_killed_consumer_wakes_the_blocked_producer_with_peer_lost_within_a_second() {
    let name = unique("kill-consumer");
    let host = HostBackend::new();
    let ring = SharedRing::create(&host, &name, 1, 1).unwrap();
    let mut c = child("child_opens_and_hangs", &name, None);
    await_ready(&mut c);
    let pid = c.id();
    ring.record_host(0, Blocking::No).unwrap();
    let killer = kill_later(c, Duration::from_millis(200));
    // Seq 0's slot is never released: this blocks until the consumer is found dead.
    let e = ring.record_host(1, Blocking::Yes).unwrap_err();
    let (killed, mut c) = killer.join().unwrap();
    let late = killed.elapsed();
    assert!(
        matches!(&e, Error::PeerLost { pid: p, role: "consumer", .. } if *p == pid),
        "{e}"
    );
    assert!(
        late < Duration::from_secs(1),
        "PeerLost {late:?} after the kill"
    );
    assert!(ring.is_stopped());
    c.wait().unwrap();
    drop(ring);
    // The name is free again once its creator closed it.
    SharedRing::create(&host, &name, 1, 1).unwrap();
}

#[test]
#[ignore = "run as the child process of the kill tests"]
fn child_opens_and_hangs() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let host = HostBackend::new();
    let _ring = SharedRing::open(&host, &name).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_producer_wakes_a_blocked_consumer_with_peer_lost_and_frees_the_name() {
    let name = unique("kill-producer");
    let host = HostBackend::new();
    let mut c = child("child_creates_and_hangs", &name, None);
    await_ready(&mut c);
    let pid = c.id();
    let ring = SharedRing::open(&host, &name).unwrap();
    let killer = kill_later(c, Duration::from_millis(200));
    let e = ring.synchronize(0, Blocking::Yes).unwrap_err();
    let (killed, mut c) = killer.join().unwrap();
    let late = killed.elapsed();
    assert!(
        matches!(&e, Error::PeerLost { pid: p, role: "producer", .. } if *p == pid),
        "{e}"
    );
    assert!(
        late < Duration::from_secs(1),
        "PeerLost {late:?} after the kill"
    );
    c.wait().unwrap();
    // The dead creator's name is free: a new process (this one) creates the ring again.
    SharedRing::create(&host, &name, 1, 1).unwrap();
}

#[test]
#[ignore = "run as the child process of the kill tests"]
fn child_creates_and_hangs() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let host = HostBackend::new();
    let _ring = SharedRing::create(&host, &name, 1, 1).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_secs(60));
}

// The contract's rows, producer and consumer in one process (the same code paths).

fn pair(
    what: &str,
    nconsumers: u32,
    max_size: usize,
) -> (SharedRing<HostBackend>, SharedRing<HostBackend>) {
    let host = HostBackend::new();
    let name = unique(what);
    let p = SharedRing::create(&host, &name, nconsumers, max_size).unwrap();
    let c = SharedRing::open(&host, &name).unwrap();
    (p, c)
}

#[test]
fn record_out_of_order_is_named_and_stops_the_ring_everywhere() {
    let (p, c) = pair("ooo", 1, 2);
    let e = p.record_host(1, Blocking::No).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfOrder {
                expected: 0,
                got: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(c.is_stopped());
    assert!(matches!(
        c.synchronize(0, Blocking::No),
        Err(Error::Stopped { .. })
    ));
}

#[test]
fn overflow_names_the_oldest_unreleased_seq() {
    let (p, _c) = pair("overflow", 1, 2);
    p.record_host(0, Blocking::No).unwrap();
    p.record_host(1, Blocking::No).unwrap();
    let e = p.record_host(2, Blocking::No).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Overflow {
                seq: 2,
                oldest: 0,
                max_size: 2,
                nconsumers: 1,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn not_yet_produced_stale_and_over_consumed() {
    let (p, c) = pair("rows", 1, 2);
    let e = c.synchronize(0, Blocking::No).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotYetProduced {
                seq: 0,
                next: 0,
                ..
            }
        ),
        "{e}"
    );
    let (p, c) = {
        drop((p, c));
        pair("rows2", 1, 2)
    };
    p.record_host(0, Blocking::No).unwrap();
    c.synchronize(0, Blocking::No).unwrap();
    let e = c.synchronize(0, Blocking::No).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OverConsumed {
                seq: 0,
                nconsumers: 1,
                ..
            }
        ),
        "{e}"
    );
    let (p, c) = pair("rows3", 1, 2);
    for seq in 0..3 {
        p.record_host(seq, Blocking::No).unwrap();
        if seq < 2 {
            c.synchronize(seq, Blocking::No).unwrap();
        }
    }
    // Seq 0 was released and its slot holds seq 2 now.
    let e = c.synchronize(0, Blocking::No).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Stale {
                seq: 0,
                current: 2,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn negative_seqs_are_no_ops_and_a_consumerless_ring_counts() {
    let (p, c) = pair("counter", 0, 1);
    c.synchronize(-1, Blocking::No).unwrap();
    for seq in 0..5 {
        p.record_host(seq, Blocking::No).unwrap(); // never overflows
    }
    assert_eq!(c.next_seq(), 5);
    let e = c.synchronize(0, Blocking::No).unwrap_err();
    assert!(
        matches!(e, Error::OverConsumed { nconsumers: 0, .. }),
        "{e}"
    );
}

#[test]
fn bad_names_sizes_and_missing_rings_are_named_errors() {
    let host = HostBackend::new();
    for bad in ["", "a/b", "with space", &"x".repeat(65)] {
        let e = SharedRing::create(&host, bad, 1, 2).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{bad:?}: {e}");
    }
    let e = SharedRing::create(&host, &unique("zero"), 1, 0).unwrap_err();
    assert!(e.to_string().contains("max_size 0"), "{e}");
    let e = SharedRing::create(&host, &unique("many"), 5000, 2).unwrap_err();
    assert!(e.to_string().contains("nconsumers 5000"), "{e}");
    let e = SharedRing::open(&host, &unique("absent")).unwrap_err();
    assert!(e.to_string().contains("no shared ring of this name"), "{e}");
    let name = unique("twice");
    let _first = SharedRing::create(&host, &name, 1, 2).unwrap();
    let e = SharedRing::create(&host, &name, 1, 2).unwrap_err();
    assert!(e.to_string().contains("exists"), "{e}");
}

#[test]
fn a_ring_takes_sixteen_processes_and_names_the_limit() {
    let host = HostBackend::new();
    let name = unique("peers");
    let _p = SharedRing::create(&host, &name, 1, 2).unwrap();
    // Each handle takes an entry of the peer table, as a process does.
    let _consumers: Vec<_> = (0..15)
        .map(|_| SharedRing::open(&host, &name).unwrap())
        .collect();
    let e = SharedRing::open(&host, &name).unwrap_err();
    assert!(
        e.to_string().contains("16 processes share it already"),
        "{e}"
    );
}

#[test]
fn only_the_creator_records() {
    let (_p, c) = pair("consumer-records", 1, 2);
    let e = c.record_host(0, Blocking::No).unwrap_err();
    assert!(e.to_string().contains("only its creator records"), "{e}");
}

#[test]
fn a_failed_producer_stream_stops_the_ring_instead_of_hanging_its_consumers() {
    let host = HostBackend::new();
    let (p, c) = pair("failed-stream", 1, 2);
    let s = host.new_stream("producer").unwrap();
    s.launch(|| panic!("the copy failed"));
    p.record(&s, 0, Blocking::No).unwrap();
    let e = c.synchronize(0, Blocking::Yes).unwrap_err();
    assert!(matches!(e, Error::Stopped { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("stream failed before recording seq 0"),
        "{e}"
    );
}

#[test]
fn a_closed_producer_ends_a_consumer_waiting_for_a_seq_that_will_not_come() {
    let (p, c) = pair("closed", 1, 2);
    p.record_host(0, Blocking::No).unwrap();
    drop(p);
    c.synchronize(0, Blocking::Yes).unwrap(); // recorded before the close: still there
    let e = c.synchronize(1, Blocking::Yes).unwrap_err();
    assert!(
        e.to_string()
            .contains("closed the ring before recording seq 1"),
        "{e}"
    );
}

#[test]
fn a_blocked_record_resumes_when_a_consumer_releases() {
    let (p, c) = pair("resume", 1, 1);
    p.record_host(0, Blocking::No).unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        c.synchronize(0, Blocking::Yes).unwrap();
        c
    });
    p.record_host(1, Blocking::Yes).unwrap();
    let _c = t.join().unwrap();
    assert_eq!(p.next_seq(), 2);
}
