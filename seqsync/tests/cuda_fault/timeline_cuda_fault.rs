//! A kernel that faults fails the timelines its stream signals afterwards, on CUDA. Alone in its
//! test binary: the fault poisons the whole CUDA context of the process.
#![cfg(feature = "cuda")]

use crate::common;

use std::time::Duration;

use seqsync::backend::cuda::CudaBackend;
use seqsync::cudarc::driver::{LaunchConfig, PushKernelArg};
use seqsync::timeline::Timeline;
use seqsync::Error;

crate::gpu_required!();

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn faulting_kernel_fails_the_timelines_its_stream_signals() {
    let Some(g) = common::gpu::gpu() else {
        return;
    };
    let b: CudaBackend = g.backend;
    let k = b
        .load_kernels(
            "extern \"C\" __global__ void fault(int x) { if (x >= 0) __trap(); }",
            &["fault"],
        )
        .unwrap()
        .remove(0);
    let s = b.new_stream("s").unwrap();
    let t = Timeline::new(&b, "after-fault", 0).unwrap();
    println!("mechanism: {}", t.mechanism());
    let x = 1i32;
    let mut l = s.launch_builder(&k);
    l.arg(&x);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: `fault` takes one int and touches no memory; it traps on purpose.
    unsafe { l.launch(cfg) }.expect("launch fault");
    // Enqueueing may already report the fault; if not, the host wait must find it.
    if t.signal_on(&s, 1).is_err() {
        return;
    }
    let err = t.wait(1, Duration::from_secs(20)).unwrap_err();
    println!("{err}");
    assert!(
        matches!(&err, Error::TimelineFailed { cause, .. } if matches!(**cause, Error::Backend(_))),
        "{err}"
    );
}
