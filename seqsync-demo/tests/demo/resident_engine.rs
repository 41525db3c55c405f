//! The resident engine (`--engine resident`) on the host backend: every batch verified with
//! and without chaos, saturated and paced, on one slot and many; each of its three orderings
//! dropped is caught; its switches are checked. On the GPU: every element of every batch.

use seqsync::BackendKind;
use seqsync_demo::demo::{
    auto_resident_slots, run, CopyBy, DemoConfig, DeviceBoundBy, Engine, GraphEdge,
};

fn config() -> DemoConfig {
    DemoConfig {
        backend: BackendKind::Host,
        engine: Engine::Resident,
        batches: 60,
        batch_bytes: Some(16 << 10),
        baselines: false,
        ..DemoConfig::default()
    }
}

#[test]
fn resident_engine_verifies_every_batch_on_host() {
    let r = run(&config()).unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!(r.verified, 60);
    // Slots: the automatic count, in every buffer.
    let slots = auto_resident_slots(16 << 10);
    assert_eq!((r.nin, r.nx, r.ny, r.nout), (slots, slots, slots, slots));
    // Latency is measured from each batch's issue, and where it went: no launch.
    assert!(r.latency_p99_us.is_some(), "{r:?}");
    let phases = r.phases.expect("the resident engine reports phases");
    let launch = phases.iter().find(|p| p.phase == "launch").unwrap();
    assert!(launch.max_us < 0.01, "{phases:?}");
}

#[test]
fn resident_engine_at_a_rate_it_cannot_keep_counts_get_datas_lateness_before_the_release() {
    // One slot, batches due every microsecond: each waits for the one before it to be checked,
    // so get_data releases it late, and the phases say so (the arrival to the fill's start,
    // get_data's wait for the slot), not the device.
    let r = run(&DemoConfig {
        batches: 40,
        rate: Some(1e6),
        slots: Some(1),
        ..config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    let phases = r.phases.expect("the resident engine reports phases");
    let p50 = |name: &str| phases.iter().find(|p| p.phase == name).unwrap().p50_us;
    assert!(p50("before_launch") > 5.0, "{phases:?}");
    assert!(p50("slot_wait") > 1.0, "{phases:?}");
    // The release comes after the lateness: the device's phase is shorter than the latency.
    assert!(p50("on_device") < r.latency_p50_us.unwrap(), "{phases:?}");
}

#[test]
fn resident_engine_verifies_every_batch_under_chaos_on_one_slot_and_many() {
    for (seed, slots, threads) in [(1, 1, 1), (2, 2, 3), (3, 5, 2), (4, 64, 4)] {
        let r = run(&DemoConfig {
            chaos: Some(seed),
            batches: 80,
            slots: Some(slots),
            process_threads: Some(threads),
            ..config()
        })
        .unwrap();
        assert!(r.all_verified(), "seed {seed}, {slots} slots: {r:?}");
        assert_eq!((r.nin, r.process_threads), (slots, Some(threads)));
    }
}

#[test]
fn resident_engine_verifies_every_batch_under_chaos_at_a_rate() {
    let r = run(&DemoConfig {
        chaos: Some(7),
        batches: 80,
        rate: Some(3000.0),
        slots: Some(4),
        ..config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!(r.rate, Some(3000.0));
}

#[test]
fn resident_engine_copying_on_streams_verifies_every_batch_under_chaos() {
    // Copies by the copy engines: the kernel works on device slots that a copy-in stream fills
    // (then writes the arrival) and a copy-out stream empties (after waiting for done).
    for (seed, slots, threads, rate) in [
        (21, 1, 1, None),
        (22, 2, 3, None),
        (23, 5, 2, Some(3000.0)),
        (24, 64, 4, None),
    ] {
        let r = run(&DemoConfig {
            chaos: Some(seed),
            batches: 80,
            slots: Some(slots),
            process_threads: Some(threads),
            rate,
            copy_by: Some(CopyBy::Memcpy),
            ..config()
        })
        .unwrap();
        assert!(r.all_verified(), "seed {seed}, {slots} slots: {r:?}");
        assert_eq!(r.copy_by, Some(CopyBy::Memcpy));
    }
    // The automatic copies: in place below 4 MiB batches, on streams from it.
    for (bytes, copies) in [
        (16 << 10, CopyBy::Kernel),
        ((4 << 20) - 4, CopyBy::Kernel),
        (4 << 20, CopyBy::Memcpy),
    ] {
        let r = run(&DemoConfig {
            batch_bytes: Some(bytes),
            batches: 6,
            ..config()
        })
        .unwrap();
        assert!(r.all_verified(), "{r:?}");
        assert_eq!(r.copy_by, Some(copies), "{bytes} B");
    }
}

/// Batches with chaos, one worker (as below), copies on streams, `drop` left out: how many
/// were wrong over seeds `seeds`.
fn wrong_copying_on_streams(drop: Option<GraphEdge>, seeds: std::ops::Range<u64>) -> i64 {
    seeds
        .map(|seed| {
            run(&DemoConfig {
                chaos: Some(seed),
                batches: 100,
                slots: Some(2),
                process_threads: Some(1),
                copy_by: Some(CopyBy::Memcpy),
                drop_edge: drop,
                ..config()
            })
            .unwrap()
            .wrong
        })
        .sum()
}

#[test]
fn resident_engine_with_an_arrival_not_after_its_copy_in_reads_inputs_not_yet_copied() {
    assert_eq!(wrong_copying_on_streams(None, 31..33), 0);
    let wrong = wrong_copying_on_streams(Some(GraphEdge::CopyInF), 31..35);
    assert!(wrong > 0, "arrival before the copy in, yet all verified");
}

#[test]
fn resident_engine_copying_out_without_waiting_for_the_kernel_reads_wrong() {
    let wrong = wrong_copying_on_streams(Some(GraphEdge::HCopyOut), 41..45);
    assert!(wrong > 0, "copy out before done, yet all verified");
}

#[test]
fn resident_engine_copying_on_streams_ends_when_a_thread_fails_mid_run() {
    // A process_data thread fails (its progress report panics) with batches on the device and
    // copies out waiting for them: the run ends with that error instead of hanging (the copies
    // out are let go once the kernel ended), on one slot and on several. The kernel stopping
    // while a copy in it waits for is still in a chaos pause is the case that would hang: a
    // few seeds in thirty.
    let cases = [(1, 1), (8, 2), (24, 4)];
    for (seed, (slots, threads)) in (51..81).zip(cases.into_iter().cycle()) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = run(&DemoConfig {
                batches: 400,
                slots: Some(slots),
                process_threads: Some(threads),
                copy_by: Some(CopyBy::Memcpy),
                chaos: Some(seed),
                progress: Some(std::sync::Arc::new(|done, _| {
                    if done >= 30 {
                        panic!("a checker failed");
                    }
                })),
                ..config()
            });
            let _ = tx.send(r.map(|_| ()).map_err(|e| e.to_string()));
        });
        match rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(r) => {
                let e = r.unwrap_err();
                assert!(e.contains("a checker failed"), "seed {seed}: {e}");
            }
            Err(_) => panic!("seed {seed}, {slots} slots: the run hung after a thread failed"),
        }
    }
}

#[test]
fn resident_engine_verifies_batches_of_odd_sizes_and_a_single_batch() {
    // Not a multiple of 16 bytes; one batch; every element checked.
    for (bytes, batches) in [((16 << 10) + 4, 30), (64, 1), (4 << 10, 1)] {
        let r = run(&DemoConfig {
            batch_bytes: Some(bytes),
            batches,
            verify_samples: 0,
            ..config()
        })
        .unwrap();
        assert!(r.all_verified(), "{bytes} B x {batches}: {r:?}");
    }
}

#[test]
fn resident_engine_without_the_wait_for_arrivals_reads_batches_not_yet_filled_in() {
    // Paced arrivals: the kernel runs ahead of get_data and reads input slots before they are
    // filled in (and marks them done, so the check reads them too). One worker: several would
    // check batches a ring apart out of order, and the in-order report could stop short (a
    // stall, not the wrong results this test is after). Arrivals 4 ms apart and small batches
    // of light work: the kernel outruns them even in a debug build on a busy machine.
    let paced = |drop| DemoConfig {
        batches: 40,
        batch_bytes: Some(4 << 10),
        intensity: 1,
        rate: Some(250.0),
        slots: Some(4),
        process_threads: Some(1),
        drop_edge: drop,
        ..config()
    };
    let r = run(&paced(None)).unwrap();
    assert!(r.all_verified(), "{r:?}");
    let r = run(&paced(Some(GraphEdge::ArrivalWait))).unwrap();
    assert!(r.wrong > 0, "arrival wait dropped, yet {r:?}");
}

#[test]
fn resident_engine_without_the_wait_before_slot_reuse_reads_wrong() {
    // Two slots, chaos: get_data refills a slot while the batch a ring before is still being
    // computed or checked.
    let many = |seed, drop| DemoConfig {
        chaos: Some(seed),
        batches: 120,
        slots: Some(2),
        // One worker, as above.
        process_threads: Some(1),
        drop_edge: drop,
        ..config()
    };
    let r = run(&many(5, None)).unwrap();
    assert!(r.all_verified(), "{r:?}");
    let wrong: i64 = (1..4)
        .map(|seed| run(&many(seed, Some(GraphEdge::GroupWaits))).unwrap().wrong)
        .sum();
    assert!(wrong > 0, "slot waits dropped, yet all verified");
}

#[test]
fn resident_engine_reporting_batches_processed_out_of_order_reads_wrong() {
    // Several workers, two slots: a batch reported processed before the ones before it frees
    // their slots too early. Light work and every element checked: the checks, not the
    // kernel, take the time (in a debug build too), so a slot refilled early is caught.
    let many = |seed, drop| DemoConfig {
        chaos: Some(seed),
        batches: 150,
        slots: Some(2),
        process_threads: Some(4),
        intensity: 1,
        verify_samples: 0,
        drop_edge: drop,
        ..config()
    };
    let r = run(&many(11, None)).unwrap();
    assert!(r.all_verified(), "{r:?}");
    let wrong: i64 = (11..15)
        .map(|seed| {
            run(&many(seed, Some(GraphEdge::ProcessedInOrder)))
                .unwrap()
                .wrong
        })
        .sum();
    assert!(wrong > 0, "out-of-order reports, yet all verified");
}

fn invalid(c: DemoConfig) -> String {
    run(&c).unwrap_err().to_string()
}

#[test]
fn resident_engine_switches_are_checked() {
    let e = invalid(DemoConfig {
        slots: Some(0),
        ..config()
    });
    assert!(e.contains("--slots 0 is outside 1..="), "{e}");
    let e = invalid(DemoConfig {
        slots: Some(1 << 20),
        ..config()
    });
    assert!(e.contains("--slots 1048576 is outside 1..=65536"), "{e}");
    // The drop switches are the host backend's, for the engines that have them.
    let e = invalid(DemoConfig {
        drop_edge: Some(GraphEdge::GroupWaits),
        engine: Engine::HandWritten,
        ..config()
    });
    assert!(e.contains("--drop-edge is a test switch for --engine graph, adaptive or resident on the host backend"), "{e}");
    let e = invalid(DemoConfig {
        slots: Some(4),
        engine: Engine::Adaptive,
        ..config()
    });
    assert!(e.contains("--slots needs --engine resident"), "{e}");
    // Its stages run in one thread: no edge between them to drop.
    let e = invalid(DemoConfig {
        drop_edge: Some(GraphEdge::FH),
        ..config()
    });
    assert!(
        e.contains("--engine resident runs a batch's stages in one thread"),
        "{e}"
    );
    // The copies' orderings exist only where the copies are on streams.
    let e = invalid(DemoConfig {
        drop_edge: Some(GraphEdge::HCopyOut),
        copy_by: Some(CopyBy::Kernel),
        ..config()
    });
    assert!(
        e.contains(
            "--drop-edge copy-in-f and h-copy-out with --engine resident need --copy memcpy"
        ),
        "{e}"
    );
    let e = invalid(DemoConfig {
        copy_by: Some(CopyBy::Kernel),
        engine: Engine::HandWritten,
        ..config()
    });
    assert!(
        e.contains("--copy needs --engine graph, adaptive or resident"),
        "{e}"
    );
    // Graph switches are not its.
    let e = invalid(DemoConfig {
        graph_batches: Some(4),
        ..config()
    });
    assert!(
        e.contains("--graph-batches needs --engine graph or adaptive"),
        "{e}"
    );
    let e = invalid(DemoConfig {
        process_threads: Some(2),
        engine: Engine::Graph,
        ..config()
    });
    assert!(
        e.contains("--process-threads needs --engine adaptive or resident"),
        "{e}"
    );
}

#[test]
fn every_report_with_baselines_weighs_the_resident_kernel_in_its_bounds() {
    let r = run(&DemoConfig {
        baselines: true,
        batches: 20,
        ..config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert!(
        matches!(
            r.device_bound_by,
            Some(DeviceBoundBy::Graph | DeviceBoundBy::Resident)
        ),
        "{r:?}"
    );
    assert!(r.device_bound_gbps.is_some_and(|g| g > 0.0), "{r:?}");
    assert!(r.isolated_latency_us.is_some_and(|l| l > 0.0), "{r:?}");
}

/// On the GPU: every element of every batch checked, saturated and paced, on the automatic
/// slots and on one, with batches not a multiple of 16 bytes and with the bounds (which run
/// the resident kernel too, every batch verified), copying in place and on streams.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn resident_engine_verifies_every_element_on_cuda() {
    let (kernel, memcpy) = (Some(CopyBy::Kernel), Some(CopyBy::Memcpy));
    for (bytes, rate, slots, baselines, copy_by) in [
        (64 << 10, None, None, true, None),
        (256 << 10, Some(20_000.0), None, false, None),
        (1 << 20, None, None, false, None),
        (1 << 20, None, None, true, kernel),
        (64 << 10, None, Some(1), false, None),
        (64 << 10, None, Some(1), false, memcpy),
        ((64 << 10) + 4, None, Some(3), false, None),
        ((64 << 10) + 4, None, Some(3), false, memcpy),
        (256 << 10, Some(20_000.0), None, false, memcpy),
        (4 << 20, None, None, false, None),
    ] {
        let r = run(&DemoConfig {
            backend: BackendKind::Cuda,
            batches: 300,
            batch_bytes: Some(bytes),
            verify_samples: 0,
            rate,
            slots,
            baselines,
            copy_by,
            ..config()
        })
        .unwrap();
        assert!(
            r.all_verified(),
            "{bytes} B, rate {rate:?}, {slots:?} slots, {copy_by:?}: {r:?}"
        );
        assert_eq!(r.backend, "cuda");
        if baselines {
            assert!(r.device_bound_by.is_some(), "{r:?}");
        }
    }
}
