//! The graph engine (`--engine graph`) on the host backend, through the graph layer's host
//! lowering: every batch verified with and without chaos; an edge dropped from the recorded
//! graph is caught; the rings between graph replays skip no seq and reuse no slot early.

use seqsync::{BackendKind, Error};
use seqsync_demo::demo::{run, DemoConfig, Engine, GraphEdge, GRAPH_DEPTH};

fn config(k: usize) -> DemoConfig {
    DemoConfig {
        backend: BackendKind::Host,
        engine: Engine::Graph,
        graph_batches: Some(k),
        batches: 50,
        batch_bytes: Some(16 << 10),
        baselines: false,
        ..DemoConfig::default()
    }
}

#[test]
fn graph_engine_verifies_every_batch_on_host() {
    // 50 = 16 groups of 3 and a short last group of 2 (a graph of its own).
    let r = run(&config(3)).unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!((r.verified, r.graph_batches), (50, Some(3)));
    // The graph engine's own slot counts: DEPTH groups of K batches.
    assert_eq!(r.nin, GRAPH_DEPTH * 3);
}

#[test]
fn graph_engine_verifies_every_batch_under_chaos() {
    for (seed, k) in [(1, 1), (2, 4), (3, 7)] {
        let r = run(&DemoConfig {
            chaos: Some(seed),
            ..config(k)
        })
        .unwrap();
        assert!(r.all_verified(), "seed {seed}, k {k}: {r:?}");
    }
}

#[test]
fn dropping_an_edge_from_the_lowered_graph_fails_verification() {
    // The host lowering runs one topological order, smallest recording index first, and the
    // bodies are recorded consumers first: without the edge the consumer runs before its
    // producer and reads a stale slot. (g -> h: g is recorded after f, so the order without
    // that edge still runs g first on the host; the CUDA graph would race.)
    for edge in [
        GraphEdge::CopyInF,
        GraphEdge::CopyInG,
        GraphEdge::FH,
        GraphEdge::HCopyOut,
    ] {
        let r = run(&DemoConfig {
            drop_edge: Some(edge),
            ..config(4)
        })
        .unwrap();
        assert!(
            !r.all_verified(),
            "{edge:?} dropped, yet every batch verified"
        );
        assert!(r.wrong > 0, "{edge:?}: {r:?}");
    }
}

#[test]
fn ring_contract_holds_across_graph_replays() {
    // 120 batches in groups of 2: each of the DEPTH graphs is replayed 20 times.
    let many = |seed, drop| DemoConfig {
        chaos: Some(seed),
        batches: 120,
        drop_edge: drop,
        ..config(2)
    };
    for seed in [4, 5] {
        let r = run(&many(seed, None)).unwrap();
        // No seq skipped or processed twice, none read from a slot reused early.
        assert_eq!((r.missing, r.duplicated, r.wrong), (0, 0, 0), "{r:?}");
        assert_eq!(r.verified, 120);
    }
    // Without the waits between replays, slot groups are reused early: caught.
    let r = run(&many(1, Some(GraphEdge::GroupWaits))).unwrap();
    assert!(r.wrong > 0, "group waits dropped, yet {r:?}");
}

#[test]
fn every_engine_reports_batch_latency() {
    for engine in Engine::ALL {
        let r = run(&DemoConfig {
            engine,
            graph_batches: engine.uses_graphs().then_some(2),
            ..config(1)
        })
        .unwrap();
        let (p50, p99) = (r.latency_p50_us.unwrap(), r.latency_p99_us.unwrap());
        assert!(p50 > 0.0 && p50 <= p99, "{engine:?}: p50 {p50} p99 {p99}");
    }
}

fn invalid(c: DemoConfig) -> String {
    match run(&c) {
        Err(e @ Error::InvalidArgument { .. }) => e.to_string(),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn graph_batches_out_of_range_is_an_error() {
    assert!(invalid(config(0)).contains("--graph-batches 0 is outside 1..=64"));
    assert!(invalid(config(65)).contains("--graph-batches 65"));
}

#[test]
fn graph_switches_need_the_graph_engine() {
    let e = invalid(DemoConfig {
        engine: Engine::HandWritten,
        ..config(2)
    });
    assert!(e.contains("--graph-batches needs --engine graph"), "{e}");
    let e = invalid(DemoConfig {
        engine: Engine::HandWritten,
        graph_batches: None,
        drop_edge: Some(GraphEdge::FH),
        ..config(2)
    });
    assert!(e.contains("--drop-edge"), "{e}");
}

#[test]
fn sweep_runs_every_engine_at_every_size_and_plots_them() {
    use seqsync_demo::demo::{sweep, sweep_svg};
    let c = DemoConfig {
        batches: 24,
        graph_batches: None,
        ..config(1)
    };
    let mut seen = 0;
    let r = sweep(&c, &[16 << 10, 64 << 10], |_| seen += 1).unwrap();
    let engines = Engine::ALL.len();
    assert_eq!((r.rows.len(), seen), (2 * engines, 2 * engines));
    assert!(r.rows.iter().all(|row| row.verified), "{r:?}");
    // The bound is measured once per size and carried by every engine's row.
    for size in [16 << 10, 64 << 10] {
        let bounds: Vec<_> = r
            .rows
            .iter()
            .filter(|row| row.batch_bytes == size)
            .map(|row| row.resource_bound_gbps.unwrap())
            .collect();
        assert!(bounds.windows(2).all(|w| w[0] == w[1]), "{bounds:?}");
        // So are the device bound and the isolated latency, and each row's ratios are its own.
        let rows: Vec<_> = r
            .rows
            .iter()
            .filter(|row| row.batch_bytes == size)
            .collect();
        let (device, iso) = (
            rows[0].device_bound_gbps.unwrap(),
            rows[0].isolated_latency_us.unwrap(),
        );
        for row in rows {
            assert_eq!(row.device_bound_gbps, Some(device));
            assert_eq!(row.isolated_latency_us, Some(iso));
            assert_eq!(row.ratio_to_device_bound, Some(row.gbps / device));
            assert_eq!(
                row.p99_over_isolated,
                Some(row.latency_p99_us.unwrap() / iso)
            );
        }
    }
    let svg = sweep_svg(&r);
    // Two panels: throughput (a line per engine, the device and resource bounds) and p99
    // latency (a line per engine, the isolated latency); a point per row and bound value.
    assert_eq!(svg.matches("<polyline").count(), engines + 2 + engines + 1);
    assert_eq!(svg.matches("<circle").count(), 2 * (2 * engines) + 3 * 2);
    for name in [
        "handwritten",
        "pipeline",
        "graph",
        "adaptive",
        "resident",
        "resource bound",
    ] {
        assert!(svg.contains(name), "{name}");
    }
    for name in ["device bound", "isolated latency", "p99 latency"] {
        assert!(svg.contains(name), "{name}");
    }
}

/// On the GPU: CUDA graphs (memcpy nodes to and from pinned memory, kernel nodes), every batch
/// verified, with a short last group (100 = 7 x 13 + 9) and with one batch per graph.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn graph_engine_verifies_every_batch_on_cuda() {
    for (k, bytes) in [(13, 256 << 10), (1, 4 << 20)] {
        let r = run(&DemoConfig {
            backend: BackendKind::Cuda,
            batches: 100,
            batch_bytes: Some(bytes),
            ..config(k)
        })
        .unwrap();
        assert!(r.all_verified(), "k {k}: {r:?}");
        assert_eq!((r.backend, r.graph_batches), ("cuda", Some(k)));
    }
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
