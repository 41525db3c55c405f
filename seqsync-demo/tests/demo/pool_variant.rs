//! `--variant pool`: the seed's pipeline with per-batch device buffers from a stream-ordered
//! pool. Every batch verified (under chaos on the host backend, and on the GPU), every
//! allocation of a timed run served by zero-synchronization reuse, no host synchronization by
//! the pool.

use seqsync::{BackendKind, Error};
use seqsync_demo::demo::{run, DemoConfig, DroppedWait, Engine, Variant};

fn config() -> DemoConfig {
    DemoConfig {
        backend: BackendKind::Host,
        variant: Variant::Pool,
        batches: 60,
        batch_bytes: Some(32 << 10),
        baselines: false,
        ..DemoConfig::default()
    }
}

fn assert_zero_sync_reuse(r: &seqsync_demo::demo::DemoReport) {
    let p = r.pool.expect("the pool variant reports its pool");
    assert_eq!(p.allocs, 4 * r.batches as u64, "{p:?}");
    assert_eq!(
        (p.reuse, p.fresh, p.waits, p.exhausted),
        (p.allocs, 0, 0, 0),
        "{p:?}"
    );
    assert_eq!((p.host_syncs, p.slab_allocs), (0, 0), "{p:?}");
    assert_eq!(p.used_current, 0, "{p:?}");
}

#[test]
fn variant_pool_verifies_under_chaos() {
    for (seed, (nin, nx, ny, nout)) in [(1, (2, 2, 2, 2)), (2, (3, 1, 4, 2)), (3, (1, 1, 1, 1))] {
        let r = run(&DemoConfig {
            chaos: Some(seed),
            nin,
            nx,
            ny,
            nout,
            ..config()
        })
        .unwrap();
        assert!(r.all_verified(), "seed {seed}: {r:?}");
        assert_zero_sync_reuse(&r);
        let p = r.pool.unwrap();
        // Never more than the rings' slots (blocks of one size serve every buffer).
        assert!(
            p.reserved_high <= (nin + nx + ny + nout) * (32 << 10),
            "{p:?}"
        );
    }
}

/// With baselines, the fixed-ring pipeline (the seed variant) runs in the same run for the
/// throughput ratio.
#[test]
fn variant_pool_is_measured_against_fixed_rings() {
    let r = run(&DemoConfig {
        baselines: true,
        batches: 30,
        ..config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert!(
        r.handwritten_gbps.is_some() && r.ratio_to_handwritten.is_some(),
        "{r:?}"
    );
    assert_zero_sync_reuse(&r);
}

#[test]
fn variant_pool_refuses_dropped_waits_and_the_pipeline_engine() {
    let e = run(&DemoConfig {
        drop_wait: Some(DroppedWait::FWaitsCopy),
        ..config()
    })
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = run(&DemoConfig {
        engine: Engine::Pipeline,
        ..config()
    })
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
}

/// On the GPU: 64 batches of 4 MiB, every batch verified, zero-sync reuse only.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn variant_pool_verifies_on_cuda() {
    let r = run(&DemoConfig {
        backend: BackendKind::Cuda,
        batches: 64,
        batch_bytes: Some(4 << 20),
        baselines: true,
        ..config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!(r.backend, "cuda");
    assert_zero_sync_reuse(&r);
}

/// Fails when `SEQSYNC_REQUIRE_GPU=1` and no GPU is usable (so the GPU test above cannot pass
/// by not running).
#[test]
fn gpu_required() {
    if std::env::var("SEQSYNC_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        if let Err(e) = seqsync::AnyBackend::new(BackendKind::Cuda) {
            panic!("SEQSYNC_REQUIRE_GPU=1 but no usable GPU: {e}");
        }
    }
}
