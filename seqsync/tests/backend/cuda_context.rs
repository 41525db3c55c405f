//! On the GPU: the CUDA backend is right whatever other code did to the thread's current
//! context. Another context (a second, non-primary one on the same device, as another library
//! would create) is made current between ring calls; records and waits on the legacy default
//! stream (a NULL handle, which names no context) must still land on the ring's context, and
//! calls on ordinary streams must work with any context, or none, current. An error that
//! cudarc deferred from a `Drop` must not fail a later, unrelated call.
//!
//! Each ordering case checks data, not return codes: a slow kernel fills a buffer, the ring
//! orders a copy after it, and the copy must see the kernel's result (`cuda_ordering.rs` shows
//! that without the ordering the copy sees zeros).
#![cfg(feature = "cuda")]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use seqsync::cudarc::driver::{sys, DriverError, LaunchConfig, PushKernelArg};
use seqsync::internal::backend::cuda::{CudaContext, CudaStream};
use seqsync::{Blocking, Error, EventRingbuf};

const N: usize = 1 << 20;
const VALUE: f32 = 7.0;

crate::gpu_required!();

/// The tests here change the thread's current context and the context's error slot, which
/// cudarc calls of a test running beside them would see: one at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A second context on device 0, as another library would create it.
fn other_context() -> Arc<CudaContext> {
    CudaContext::new_non_primary(0, 0).expect("a second CUDA context")
}

fn make_current(ctx: Option<&CudaContext>) {
    let raw = ctx.map_or(std::ptr::null_mut(), |c| c.cu_ctx());
    // SAFETY: `raw` is a live context (kept alive by the borrowed CudaContext) or NULL, which
    // unbinds the thread.
    unsafe { sys::cuCtxSetCurrent(raw) }
        .result()
        .expect("cuCtxSetCurrent");
}

/// Enqueue on `stream` a kernel that spins 50 ms, then fills `a` with VALUE.
fn slow_fill(
    g: &common::gpu::Gpu,
    stream: &Arc<CudaStream>,
    a: &mut seqsync::cudarc::driver::CudaSlice<f32>,
) {
    let (n, value, ns) = (N as i32, VALUE, Duration::from_millis(50).as_nanos() as u64);
    let mut launch = stream.launch_builder(&g.slow_fill);
    launch.arg(a).arg(&n).arg(&value).arg(&ns);
    let cfg = LaunchConfig {
        grid_dim: (64, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: slow_fill(float*, int, float, u64) writes the n floats of `a`, which is live.
    unsafe { launch.launch(cfg) }.expect("launch slow_fill");
}

fn wrong(seen: &[f32]) -> usize {
    seen.iter().filter(|&&v| v != VALUE).count()
}

/// The case: `cuStreamWaitEvent(NULL, event)` with another context current used to
/// land on that context's default stream and order nothing.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn legacy_stream_wait_orders_its_own_context_with_another_current() {
    let _serial = one_at_a_time();
    let Some(g) = common::gpu::gpu() else { return };
    let other = other_context();
    let producer = g.backend.new_stream("s").unwrap();
    let legacy = g.backend.context().default_stream();
    let mut a = producer.alloc_zeros::<f32>(N).unwrap();
    let mut b = producer.alloc_zeros::<f32>(N).unwrap();
    producer.synchronize().unwrap();
    let ring = EventRingbuf::new(&g.backend, "fill", 1, 2).unwrap();

    slow_fill(&g, &producer, &mut a);
    ring.record(&producer, 0, Blocking::No).unwrap();
    make_current(Some(&other));
    ring.wait(&legacy, 0, Blocking::No).unwrap();
    legacy.memcpy_dtod(&a, &mut b).unwrap();
    let seen = legacy.clone_dtoh(&b).unwrap();
    producer.synchronize().unwrap();
    assert_eq!(
        wrong(&seen),
        0,
        "the copy on the legacy stream ran before the kernel"
    );
}

/// A record on the legacy default stream with another context current must mark the end of
/// the ring's context's default stream, not the other context's (empty) one.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn legacy_stream_record_marks_its_own_context_with_another_current() {
    let _serial = one_at_a_time();
    let Some(g) = common::gpu::gpu() else { return };
    let other = other_context();
    let legacy = g.backend.context().default_stream();
    let consumer = g.backend.new_stream("s").unwrap();
    let mut a = consumer.alloc_zeros::<f32>(N).unwrap();
    let mut b = consumer.alloc_zeros::<f32>(N).unwrap();
    consumer.synchronize().unwrap();
    let ring = EventRingbuf::new(&g.backend, "fill", 1, 2).unwrap();
    // A first round binds the ring's context on this thread.
    ring.record(&consumer, 0, Blocking::No).unwrap();
    ring.wait(&consumer, 0, Blocking::No).unwrap();

    slow_fill(&g, &legacy, &mut a);
    make_current(Some(&other));
    ring.record(&legacy, 1, Blocking::No).unwrap();
    make_current(Some(&other));
    ring.wait(&consumer, 1, Blocking::No).unwrap();
    consumer.memcpy_dtod(&a, &mut b).unwrap();
    let seen = consumer.clone_dtoh(&b).unwrap();
    legacy.synchronize().unwrap();
    assert_eq!(
        wrong(&seen),
        0,
        "the record on the legacy stream did not cover the kernel"
    );
}

/// Ordinary streams carry their context: record, wait, query and synchronize work with another
/// context current, and with none current at all.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn created_streams_work_with_any_context_or_none_current() {
    let _serial = one_at_a_time();
    let Some(g) = common::gpu::gpu() else { return };
    let other = other_context();
    let (producer, consumer) = (
        g.backend.new_stream("s").unwrap(),
        g.backend.new_stream("s").unwrap(),
    );
    let mut a = producer.alloc_zeros::<f32>(N).unwrap();
    let mut b = producer.alloc_zeros::<f32>(N).unwrap();
    producer.synchronize().unwrap();
    let ring = EventRingbuf::new(&g.backend, "fill", 2, 2).unwrap();
    for (seq, ctx) in [(0, Some(&*other)), (1, None)] {
        slow_fill(&g, &producer, &mut a);
        make_current(ctx);
        ring.record(&producer, seq, Blocking::No).unwrap();
        make_current(ctx);
        ring.wait(&consumer, seq, Blocking::No).unwrap();
        consumer.memcpy_dtod(&a, &mut b).unwrap();
        make_current(ctx);
        ring.synchronize(seq, Blocking::No).unwrap();
        let seen = consumer.clone_dtoh(&b).unwrap();
        assert_eq!(wrong(&seen), 0, "seq {seq}: the copy ran before the kernel");
        producer.memset_zeros(&mut a).unwrap();
        producer.synchronize().unwrap();
    }
}

/// Recording on a stream of another context is a named error, not a driver failure later.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn record_on_a_stream_of_another_context_is_invalid() {
    let _serial = one_at_a_time();
    let Some(g) = common::gpu::gpu() else { return };
    let other = other_context();
    let foreign = other.new_stream().unwrap();
    let ring = EventRingbuf::new(&g.backend, "fill", 1, 2).unwrap();
    let e = ring.record(&foreign, 0, Blocking::No).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("on a stream of context"), "{e}");
}

/// An error that cudarc (or other code) deferred into the context's error slot is not the
/// failure of seqsync's next calls; it is handed out by `take_deferred_errors`, once.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_deferred_drop_error_is_not_a_later_calls_failure() {
    let _serial = one_at_a_time();
    let Some(g) = common::gpu::gpu() else { return };
    let _ = g.backend.take_deferred_errors();
    g.backend
        .context()
        .record_err::<()>(Err(DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE)));
    let ring = EventRingbuf::new(&g.backend, "after-drop", 1, 2).expect("create_event");
    let stream = g.backend.new_stream("s").expect("new_stream");
    ring.record(&stream, 0, Blocking::No).expect("record");
    ring.wait(&stream, 0, Blocking::No).expect("wait");
    g.backend
        .stream_synchronize(&stream)
        .expect("stream synchronize");
    let deferred = g.backend.take_deferred_errors();
    assert_eq!(deferred.len(), 1, "{deferred:?}");
    match &deferred[0] {
        Error::Backend(b) => {
            assert_eq!(b.code, Some(sys::CUresult::CUDA_ERROR_INVALID_VALUE as i64))
        }
        e => panic!("expected a backend error, got {e}"),
    }
    assert!(g.backend.take_deferred_errors().is_empty());
}
