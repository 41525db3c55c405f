//! On the GPU: work of the caller's that waits on the device for a host store
//! ([`OpenWait`](seqsync::backend::cuda::OpenWait): a kernel spinning on a pinned word) holds
//! seqsync's frees back. A buffer dropped meanwhile must return at once (held, freed later):
//! freeing it then would wait for the spinning kernel, whose store the dropping thread was to
//! make.
#![cfg(feature = "cuda")]

use crate::common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use seqsync::cudarc::driver::{LaunchConfig, PushKernelArg};

const SPIN: &str = r#"
extern "C" __global__ void spin_until(volatile unsigned *flag) {
    while (flag[0] == 0) {}
}
"#;

/// How long the test's backstop waits before it makes the store itself (so that a free that
/// is not held fails the test instead of hanging it).
const BACKSTOP: Duration = Duration::from_secs(3);

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn an_open_wait_holds_frees_back_until_released() {
    let Some(g) = common::gpu::gpu() else { return };
    let b = &g.backend;
    let spin = b.load_kernels(SPIN, &["spin_until"]).unwrap().remove(0);
    let flag = Arc::new(b.alloc_pinned(1).unwrap());
    let buffer = b.alloc_device(1 << 20).unwrap();
    let stream = b.new_stream("spin").unwrap();
    let wait = b.open_wait();
    assert!(!wait.is_released());
    let at = flag.as_ptr() as u64;
    let mut launch = stream.launch_builder(&spin);
    launch.arg(&at);
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: spin_until(volatile unsigned*) reads one u32 of pinned memory (unified
    // addressing: its host address) that `flag` keeps alive past the stream's synchronize.
    unsafe { launch.launch(one) }.unwrap();
    let store = |flag: &seqsync::backend::cuda::PinnedBuffer| {
        // SAFETY: one u32 of live pinned memory; the kernel only reads it (volatile).
        unsafe { flag.as_ptr().write_volatile(1) }
    };
    let (done, backstop_wait) = mpsc::channel::<()>();
    let backstop_flag = flag.clone();
    let backstop = std::thread::spawn(move || {
        if backstop_wait.recv_timeout(BACKSTOP).is_err() {
            store(&backstop_flag);
        }
    });
    let t = Instant::now();
    drop(buffer);
    let took = t.elapsed();
    let _ = done.send(());
    store(&flag);
    wait.release();
    assert!(wait.is_released());
    stream.synchronize().unwrap();
    backstop.join().unwrap();
    assert!(
        took < Duration::from_secs(1),
        "the free waited {took:?} for the kernel spinning on the host's store"
    );
}
