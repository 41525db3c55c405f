//! `SharedPool` on CUDA: a driver pool with POSIX file descriptor handles, its descriptor
//! handed over the name's socket, allocations imported by `cuMemPoolImportPointer` in another
//! process. The importer reads every element the exporter's slow kernel wrote (ordered by a
//! shared ring), and its negative control (no wait) reads them early; the exporter's free
//! waits for the importer's, and a killed importer does not hold it up.
#![cfg(feature = "cuda")]

use std::process::Child;
use std::time::{Duration, Instant};

use seqsync::cudarc::driver::{LaunchConfig, PushKernelArg};
use seqsync::ipc::{ExportId, SharedPool, SharedRing};
use seqsync::{Blocking, Error};

use crate::common;
use crate::harness::{self, await_ready, exit_code, kill_later, unique, RING};

crate::gpu_required!();

const N: usize = 1 << 20;
const VALUE: f32 = 42.0;

/// `POOL:ID`: what a child is told.
fn child(name: &str, pool: &str, id: ExportId) -> Child {
    harness::child(
        &format!("cuda_pool::{name}"),
        &format!("{pool}:{}", id.to_u64()),
        None,
    )
}

fn told() -> Option<(String, ExportId)> {
    let v = std::env::var(RING).ok()?;
    let (name, id) = v.split_once(':')?;
    Some((name.to_owned(), ExportId::from_u64(id.parse().ok()?)))
}

/// The exporter: allocate N floats, tell the child, fill them with a 300 ms kernel and record
/// the ring; returns the child's exit code (the elements it read wrong), after checking the
/// free rule.
fn exported_run(child_test: &str, still_imported: bool) -> i32 {
    let g = common::gpu::gpu().expect("gpu");
    let b = &g.backend;
    let name = unique(child_test);
    let pool = SharedPool::create(b, &name, 64 << 20).unwrap();
    let s = b.new_stream("s").unwrap();
    let a = pool.alloc(&s, N * 4).unwrap();
    // Zeros first (the pool may hand back memory that held VALUE already).
    let (n, zero, none) = (N as i32, 0f32, 0u64);
    let cfg = LaunchConfig {
        grid_dim: (64, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut clear = s.launch_builder(&g.slow_fill);
    clear.arg(&a.ptr).arg(&n).arg(&zero).arg(&none);
    // SAFETY: slow_fill(float*, int, float, u64) writes the N floats of the live allocation.
    unsafe { clear.launch(cfg) }.unwrap();
    s.synchronize().unwrap();
    let ring = SharedRing::create(b, &format!("{name}-r"), 1, 1).unwrap();
    let mut c = child(child_test, &name, a.id);
    await_ready(&mut c);
    assert_eq!(pool.importers(&a), 1);
    let (value, ns) = (VALUE, Duration::from_millis(300).as_nanos() as u64);
    let mut launch = s.launch_builder(&g.slow_fill);
    launch.arg(&a.ptr).arg(&n).arg(&value).arg(&ns);
    // SAFETY: slow_fill(float*, int, float, u64) writes the N floats of the allocation, which
    // stays allocated until the free below (after the stream).
    unsafe { launch.launch(cfg) }.unwrap();
    ring.record(&s, 0, Blocking::Yes).unwrap();
    // The child holds its import 200 ms past the ring's seq 0: a free then waits, and says so.
    if still_imported {
        let e = pool.free(&a, &s, Duration::from_millis(10)).unwrap_err();
        assert!(
            matches!(e, Error::StillImported { importers: 1, .. }),
            "{e}"
        );
    }
    pool.free(&a, &s, Duration::from_secs(30)).unwrap();
    exit_code(c, Duration::from_secs(30))
}

/// The importer: read the allocation (after the ring's seq 0 unless `skip`), count the wrong
/// elements, hold the import 200 ms more, then free it.
fn import_and_read(skip: bool) {
    let Some((name, id)) = told() else { return };
    let g = common::gpu::gpu().expect("gpu");
    let b = &g.backend;
    let pool = SharedPool::open(b, &name).unwrap();
    // One handle on a device pool per process: the driver shares one import.
    let again = SharedPool::open(b, &name).unwrap_err();
    assert!(matches!(again, Error::InvalidArgument { .. }), "{again}");
    let got = pool.import(id).unwrap();
    assert_eq!(got.len(), N * 4);
    let ring = SharedRing::open(b, &format!("{name}-r")).unwrap();
    println!("{}", harness::READY);
    if skip {
        std::thread::sleep(Duration::from_millis(20));
    } else {
        ring.synchronize(0, Blocking::Yes).unwrap();
    }
    b.context().bind_to_thread().unwrap();
    let mut seen = vec![0f32; N];
    // SAFETY: the import is N floats of device memory of this context, alive until `got` drops.
    unsafe { seqsync::cudarc::driver::result::memcpy_dtoh_sync(&mut seen, got.ptr()) }.unwrap();
    let wrong = seen.iter().filter(|&&v| v != VALUE).count();
    std::thread::sleep(Duration::from_millis(200));
    drop(got);
    std::process::exit(wrong.min(100) as i32);
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_pool_an_importer_process_reads_what_the_exporters_kernel_wrote() {
    if common::gpu::gpu().is_none() {
        return;
    }
    assert_eq!(exported_run("child_cuda_pool_reads", true), 0);
}

#[test]
#[ignore = "run as the child process of cuda_pool_an_importer_process_reads_what_the_exporters_kernel_wrote"]
fn child_cuda_pool_reads() {
    import_and_read(false);
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_pool_negative_control_an_importer_that_skips_its_wait_reads_wrong() {
    if common::gpu::gpu().is_none() {
        return;
    }
    // 1..=100 wrong (capped): a child that failed otherwise exits 101 (a panic).
    let wrong = exported_run("child_cuda_pool_skips", false);
    assert!((1..=100).contains(&wrong), "exit code {wrong}");
}

#[test]
#[ignore = "run as the child process of cuda_pool_negative_control_an_importer_that_skips_its_wait_reads_wrong"]
fn child_cuda_pool_skips() {
    import_and_read(true);
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn cuda_pool_a_killed_importer_does_not_hold_up_the_free() {
    let Some(g) = common::gpu::gpu() else { return };
    let b = &g.backend;
    let name = unique("cuda-pool-kill");
    let pool = SharedPool::create(b, &name, 1 << 20).unwrap();
    let s = b.new_stream("s").unwrap();
    let a = pool.alloc(&s, 4096).unwrap();
    let mut c = child("child_cuda_pool_imports_and_sleeps", &name, a.id);
    await_ready(&mut c);
    assert_eq!(pool.importers(&a), 1);
    // The exporter's process uses its allocations directly: it opens no import of its pool.
    let e = SharedPool::open(b, &name).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let (killed, mut c) = kill_later(c, Duration::from_millis(100)).join().unwrap();
    c.wait().unwrap();
    let start = Instant::now();
    pool.free(&a, &s, Duration::from_secs(5)).unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?} (free {:?})",
        killed.elapsed(),
        start.elapsed()
    );
    // The pool allocates again after it.
    let again = pool.alloc(&s, 4096).unwrap();
    pool.free(&again, &s, Duration::from_secs(1)).unwrap();
}

#[test]
#[ignore = "run as the child process of cuda_pool_a_killed_importer_does_not_hold_up_the_free"]
fn child_cuda_pool_imports_and_sleeps() {
    let Some((name, id)) = told() else { return };
    let g = common::gpu::gpu().expect("gpu");
    let pool = SharedPool::open(&g.backend, &name).unwrap();
    let _got = pool.import(id).unwrap();
    println!("{}", harness::READY);
    std::thread::sleep(Duration::from_secs(60));
}
