//! `SharedRing` on CUDA, for each device mechanism (memops, the default; IPC events): in one
//! process, then between two: a consumer process's stream ordered after the producer's
//! kernels (and its negative control), a killed producer.
#![cfg(feature = "cuda")]

use std::process::Child;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seqsync::backend::cuda::CudaBackend;
use seqsync::backend::Backend;
use seqsync::ipc::{Mechanism, SharedRing};
use seqsync::{Blocking, Error};

use crate::common;
use crate::harness::{
    self, await_ready, data_path, exit_code, kill_later, unique, Data, DATA, RING, SLOTS,
};

crate::gpu_required!();

const SEQS: i64 = 30;
const MECHANISMS: [Mechanism; 2] = [Mechanism::MemOps, Mechanism::IpcEvent];

/// This binary again, running this module's test `name` as the other process.
fn child(name: &str, ring: &str, data: Option<&std::path::Path>) -> Child {
    harness::child(&format!("cuda_ring::{name}"), ring, data)
}

fn create(
    b: &CudaBackend,
    name: &str,
    n: u32,
    size: usize,
    m: Mechanism,
) -> SharedRing<CudaBackend> {
    let r = SharedRing::create_with(b, name, n, size, m).unwrap();
    assert_eq!(r.mechanism(), m);
    r
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_create_picks_memops_and_host_words_are_refused() {
    let Some(g) = common::gpu::gpu() else { return };
    let ring = SharedRing::create(&g.backend, &unique("cuda-auto"), 1, 2).unwrap();
    assert_eq!(ring.mechanism(), Mechanism::MemOps);
    let e = SharedRing::create_with(&g.backend, &unique("cuda-hw"), 1, 2, Mechanism::HostWord)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_a_consumer_in_the_same_process_waits_for_the_producers_kernel() {
    let Some(g) = common::gpu::gpu() else { return };
    let b = &g.backend;
    for m in MECHANISMS {
        let name = unique(&format!("cuda-here-{m:?}"));
        let ring = create(b, &name, 1, 2, m);
        let consumer = SharedRing::open(b, &name).unwrap();
        assert_eq!(consumer.mechanism(), m);
        let (p, c) = (b.new_stream("p").unwrap(), b.new_stream("c").unwrap());
        for seq in 0..6 {
            g.spin(&p, Duration::from_millis(20));
            ring.record(&p, seq, Blocking::Yes).unwrap();
            let start = Instant::now();
            if seq % 2 == 0 {
                consumer.synchronize(seq, Blocking::Yes).unwrap();
            } else {
                consumer.wait(&c, seq, Blocking::Yes).unwrap();
                b.synchronize_stream(&c).unwrap();
            }
            // The consumer's wait covered the 20 ms kernel recorded before it.
            let took = start.elapsed();
            assert!(
                took >= Duration::from_millis(15),
                "{m:?} seq {seq}: {took:?}"
            );
        }
        // A host record completes at once.
        ring.record_host(6, Blocking::Yes).unwrap();
        consumer.synchronize(6, Blocking::Yes).unwrap();
        let e = consumer.synchronize(6, Blocking::No).unwrap_err();
        assert!(
            matches!(e, Error::OverConsumed { seq: 6, .. }),
            "{m:?}: {e}"
        );
        b.synchronize_stream(&p).unwrap();
    }
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_stop_wakes_a_host_wait_and_memops_lets_a_stream_wait_go() {
    let Some(g) = common::gpu::gpu() else { return };
    let b = &g.backend;
    for m in MECHANISMS {
        let name = unique(&format!("cuda-stop-{m:?}"));
        let ring = create(b, &name, 2, 2, m);
        let consumer = SharedRing::open(b, &name).unwrap();
        let (p, c) = (b.new_stream("p").unwrap(), b.new_stream("c").unwrap());
        g.spin(&p, Duration::from_secs(2));
        ring.record(&p, 0, Blocking::Yes).unwrap();
        consumer.wait(&c, 0, Blocking::Yes).unwrap();
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                ring.stop("operator");
            });
            let e = consumer.synchronize(0, Blocking::Yes).unwrap_err();
            assert!(matches!(e, Error::Stopped { .. }), "{m:?}: {e}");
        });
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{m:?}: {:?}",
            start.elapsed()
        );
        if m == Mechanism::MemOps {
            // The stream wait was let go: `c` drains before the producer's kernel ends.
            b.synchronize_stream(&c).unwrap();
            assert!(
                start.elapsed() < Duration::from_secs(1),
                "{:?}",
                start.elapsed()
            );
        }
        b.synchronize_stream(&p).unwrap();
        b.synchronize_stream(&c).unwrap();
    }
}

/// Producer: per seq, a 2 ms kernel, then host work on the same stream that writes seq into
/// the shared data, then the record, on a ring of `nconsumers` (0 for a consumer that does
/// not wait: nothing waits for it to release a slot). Returns the child consumer's exit code.
fn ordered_run(child_test: &str, m: Mechanism, nconsumers: u32) -> i32 {
    let g = common::gpu::gpu().expect("gpu");
    let b = &g.backend;
    let name = unique(&format!("{child_test}-{m:?}"));
    let path = data_path(&format!("{child_test}-{m:?}"));
    let data = Arc::new(Data::create(&path));
    for k in 0..SLOTS as i64 {
        data.word(k).store(-1, Ordering::SeqCst);
    }
    let ring = create(b, &name, nconsumers, SLOTS, m);
    let mut c = child(child_test, &name, Some(&path));
    await_ready(&mut c);
    let p = b.new_stream("producer").unwrap();
    for seq in 0..SEQS {
        g.spin(&p, Duration::from_millis(2));
        let d = data.clone();
        b.launch_host(
            &p,
            Box::new(move || d.word(seq).store(seq, Ordering::SeqCst)),
        )
        .unwrap();
        ring.record(&p, seq, Blocking::Yes).unwrap();
    }
    b.synchronize_stream(&p).unwrap();
    let code = exit_code(c, Duration::from_secs(60));
    let _ = std::fs::remove_file(&path);
    code
}

/// The consumer process: per seq, a stream wait (unless `skip`), then host work on its stream
/// that reads the seq's word: below seq means it ran before the producer's work.
fn consume(skip: bool) {
    let (Ok(name), Ok(path)) = (std::env::var(RING), std::env::var(DATA)) else {
        return;
    };
    let g = common::gpu::gpu().expect("gpu");
    let b = &g.backend;
    let ring = SharedRing::open(b, &name).unwrap();
    let data = Arc::new(Data::open(std::path::Path::new(&path)));
    let s = b.new_stream("consumer").unwrap();
    let wrong = Arc::new(std::sync::atomic::AtomicI32::new(0));
    println!("{}", harness::READY);
    for seq in 0..SEQS {
        if skip {
            ring.synchronize_with_producer(seq).unwrap();
        } else {
            ring.wait(&s, seq, Blocking::Yes).unwrap();
        }
        let (d, w) = (data.clone(), wrong.clone());
        b.launch_host(
            &s,
            Box::new(move || {
                if d.word(seq).load(Ordering::SeqCst) < seq {
                    w.fetch_add(1, Ordering::SeqCst);
                }
            }),
        )
        .unwrap();
    }
    b.synchronize_stream(&s).unwrap();
    std::process::exit(wrong.load(Ordering::SeqCst).min(100));
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_a_consumer_process_runs_each_seq_after_the_producers_kernel() {
    if common::gpu::gpu().is_none() {
        return;
    }
    for m in MECHANISMS {
        assert_eq!(ordered_run("child_cuda_consumer", m, 1), 0, "{m:?}");
    }
}

#[test]
#[ignore = "run as the child process of cuda_a_consumer_process_runs_each_seq_after_the_producers_kernel"]
fn child_cuda_consumer() {
    consume(false);
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_negative_control_a_consumer_that_skips_its_wait_reads_wrong() {
    if common::gpu::gpu().is_none() {
        return;
    }
    for m in MECHANISMS {
        assert!(ordered_run("child_cuda_consumer_skips", m, 0) > 0, "{m:?}");
    }
}

#[test]
#[ignore = "run as the child process of cuda_negative_control_a_consumer_that_skips_its_wait_reads_wrong"]
fn child_cuda_consumer_skips() {
    consume(true);
}

/// Open ring `name` (its producer: `c`, whose seq 0 is a 5 s kernel), make a stream wait for
/// seq 0, kill the producer, and check that a host wait on seq 0 returns `PeerLost` within a
/// second; with memops, that the waiting stream was let go too.
fn consumer_of_a_killed_producer(b: &CudaBackend, name: &str, mut c: Child, m: Mechanism) {
    await_ready(&mut c);
    let pid = c.id();
    let ring = SharedRing::open(b, name).unwrap();
    assert_eq!(ring.mechanism(), m);
    let s = b.new_stream("waits").unwrap();
    // This stream waits for seq 0, and this thread too (its second consumer).
    ring.wait(&s, 0, Blocking::Yes).unwrap();
    let killer = kill_later(c, Duration::from_millis(200));
    let e = ring.synchronize(0, Blocking::Yes).unwrap_err();
    let (killed, mut c) = killer.join().unwrap();
    assert!(
        matches!(&e, Error::PeerLost { pid: p, role: "producer", .. } if *p == pid),
        "{m:?}: {e}"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(1),
        "{m:?}: {:?}",
        killed.elapsed()
    );
    c.wait().unwrap();
    if m == Mechanism::MemOps {
        // The stream that waited on the dead producer was let go.
        b.synchronize_stream(&s).unwrap();
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "{:?}",
            killed.elapsed()
        );
    }
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_memops_a_killed_producer_wakes_a_host_wait_and_lets_a_stream_wait_go() {
    let Some(g) = common::gpu::gpu() else { return };
    let name = unique("cuda-kill-MemOps");
    let c = child("child_cuda_records_a_long_kernel", &name, None);
    consumer_of_a_killed_producer(&g.backend, &name, c, Mechanism::MemOps);
}

/// With IPC events the stream that waited on the dead producer waits for good (the driver
/// never completes a dead process's event: seen on the H200), and then every call that waits
/// for the device to drain hangs in that process: the consumer is a child process of its own.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_ipc_events_a_killed_producer_wakes_a_host_wait_with_peer_lost() {
    if common::gpu::gpu().is_none() {
        return;
    }
    let name = unique("cuda-kill-IpcEvent");
    let c = child("child_cuda_consumer_of_a_killed_producer", &name, None);
    assert_eq!(exit_code(c, Duration::from_secs(60)), 0);
}

#[test]
#[ignore = "run as the child process of cuda_ipc_events_a_killed_producer_wakes_a_host_wait_with_peer_lost"]
fn child_cuda_consumer_of_a_killed_producer() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    println!("{}", harness::READY);
    let g = common::gpu::gpu().expect("gpu");
    let c = child("child_cuda_records_a_long_kernel", &name, None);
    let ok = std::panic::catch_unwind(|| {
        consumer_of_a_killed_producer(&g.backend, &name, c, Mechanism::IpcEvent)
    })
    .is_ok();
    // Exit at once: the stream stuck on the dead event would hang any teardown.
    std::process::exit(if ok { 0 } else { 1 });
}

#[test]
#[ignore = "run as the producer process of the kill tests"]
fn child_cuda_records_a_long_kernel() {
    let Ok(name) = std::env::var(RING) else {
        return;
    };
    let m = if name.contains("IpcEvent") {
        Mechanism::IpcEvent
    } else {
        Mechanism::MemOps
    };
    let g = common::gpu::gpu().expect("gpu");
    let b = &g.backend;
    let ring = create(b, &name, 2, 2, m);
    let p = b.new_stream("p").unwrap();
    g.spin(&p, Duration::from_secs(5));
    ring.record(&p, 0, Blocking::Yes).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_secs(60));
}
