//! On the GPU: a stream wait on the ring really orders device work. A slow kernel fills a
//! buffer on the producer stream; the consumer stream waits on the ring and copies the buffer;
//! the copy must see the kernel's result. The control case, without the wait, shows the test
//! can fail: the copy then runs while the kernel still spins and sees zeros.
#![cfg(feature = "cuda")]

use crate::common;

use std::time::Duration;

use seqsync::cudarc::driver::{LaunchConfig, PushKernelArg};
use seqsync::{Blocking, EventRingbuf};

const N: usize = 1 << 20;
const VALUE: f32 = 42.0;

/// Fill `a` slowly on the producer, then copy it on the consumer (after the ring's wait if
/// `with_wait`); returns what the copy saw.
fn copy_after_slow_fill(with_wait: bool) -> Option<Vec<f32>> {
    let g = common::gpu::gpu()?;
    let (producer, consumer) = (
        g.backend.new_stream("s").unwrap(),
        g.backend.new_stream("s").unwrap(),
    );
    let mut a = producer.alloc_zeros::<f32>(N).unwrap();
    let mut b = producer.alloc_zeros::<f32>(N).unwrap();
    producer.synchronize().unwrap();
    let ring = EventRingbuf::new(&g.backend, "fill", 1, 1).unwrap();

    let (n, value, ns) = (N as i32, VALUE, Duration::from_millis(50).as_nanos() as u64);
    let mut launch = producer.launch_builder(&g.slow_fill);
    launch.arg(&mut a).arg(&n).arg(&value).arg(&ns);
    let cfg = LaunchConfig {
        grid_dim: (64, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: slow_fill(float*, int, float, u64) writes the n floats of `a`, which is live.
    unsafe { launch.launch(cfg) }.unwrap();
    ring.record(&producer, 0, Blocking::No).unwrap();
    if with_wait {
        ring.wait(&consumer, 0, Blocking::No).unwrap();
    }
    consumer.memcpy_dtod(&a, &mut b).unwrap();
    let seen = consumer.clone_dtoh(&b).unwrap();
    producer.synchronize().unwrap();
    consumer.synchronize().unwrap();
    Some(seen)
}

crate::gpu_required!();

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn stream_wait_orders_a_copy_after_a_slow_kernel() {
    let Some(seen) = copy_after_slow_fill(true) else {
        return;
    };
    let wrong = seen.iter().filter(|&&v| v != VALUE).count();
    assert_eq!(
        wrong, 0,
        "{wrong} of {N} elements copied before the kernel wrote them"
    );
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn without_the_wait_the_copy_races_the_kernel() {
    let Some(seen) = copy_after_slow_fill(false) else {
        return;
    };
    let wrong = seen.iter().filter(|&&v| v != VALUE).count();
    assert!(
        wrong > 0,
        "the copy saw the kernel's result even without the wait"
    );
}
