//! The adaptive engine (`--engine adaptive`) on the host backend: every batch verified with
//! and without chaos; a dropped body edge or the dropped waits before slot reuse are caught;
//! saturated it launches K batches at once, at a low rate one batch as it arrives. And the
//! two bounds of every report (device bound, isolated latency).

use seqsync::BackendKind;
use seqsync_demo::demo::{
    auto_adaptive_depth, run, CopyBy, DemoConfig, Engine, GraphEdge, Release, SlotWait,
    DEVICE_RELEASE_BELOW, KERNEL_COPY_BELOW,
};

fn config(k: usize) -> DemoConfig {
    DemoConfig {
        backend: BackendKind::Host,
        engine: Engine::Adaptive,
        graph_batches: Some(k),
        batches: 50,
        batch_bytes: Some(16 << 10),
        baselines: false,
        ..DemoConfig::default()
    }
}

#[test]
fn adaptive_engine_verifies_every_batch_on_host() {
    let r = run(&config(4)).unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!((r.verified, r.graph_batches), (50, Some(4)));
    // Slots: the automatic depth of 16 KiB batches, K 4, groups of 4.
    let depth = auto_adaptive_depth(16 << 10, 4);
    assert_eq!(r.nin, depth * 4);
    // K rounds down to a power of two.
    let r = run(&config(6)).unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!((r.graph_batches, r.nin), (Some(4), depth * 4));
}

#[test]
fn adaptive_engine_verifies_every_batch_under_chaos() {
    for (seed, k) in [(1, 1), (2, 4), (3, 8)] {
        let r = run(&DemoConfig {
            chaos: Some(seed),
            batches: 80,
            ..config(k)
        })
        .unwrap();
        assert!(r.all_verified(), "seed {seed}, k {k}: {r:?}");
    }
}

#[test]
fn adaptive_engine_verifies_every_batch_under_chaos_at_a_rate() {
    // Arrivals paced: launches of every size, whatever waits.
    let r = run(&DemoConfig {
        chaos: Some(6),
        batches: 80,
        rate: Some(4000.0),
        ..config(8)
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
}

#[test]
fn adaptive_engine_verifies_every_batch_released_on_the_host_and_on_the_device() {
    for release in Release::ALL {
        for (seed, rate) in [(11, None), (12, Some(3000.0))] {
            let r = run(&DemoConfig {
                chaos: Some(seed),
                batches: 80,
                rate,
                release: Some(release),
                ..config(4)
            })
            .unwrap();
            assert!(r.all_verified(), "{release:?}, rate {rate:?}: {r:?}");
            assert_eq!(r.release, Some(release));
        }
    }
    // The device release is the default below DEVICE_RELEASE_BELOW, the host release from it;
    // the slots are waited for where the release is.
    let r = run(&config(4)).unwrap();
    assert_eq!(
        (r.release, r.slot_wait),
        (Some(Release::Device), Some(SlotWait::Device))
    );
    let large = DemoConfig {
        batches: 8,
        batch_bytes: Some(DEVICE_RELEASE_BELOW),
        ..config(4)
    };
    let r = run(&large).unwrap();
    assert_eq!(
        (r.release, r.slot_wait),
        (Some(Release::Host), Some(SlotWait::Host))
    );
}

#[test]
fn adaptive_engine_verifies_every_batch_with_its_slots_waited_for_on_the_device_or_the_host() {
    for slot_wait in SlotWait::ALL {
        for (seed, k, rate) in [(31, 4, None), (32, 2, Some(3000.0)), (33, 1, None)] {
            let r = run(&DemoConfig {
                chaos: Some(seed),
                batches: 80,
                rate,
                release: Some(Release::Device),
                slot_wait: Some(slot_wait),
                graph_depth: Some(2),
                ..config(k)
            })
            .unwrap();
            assert!(
                r.all_verified(),
                "{slot_wait:?}, k {k}, rate {rate:?}: {r:?}"
            );
            assert_eq!(r.slot_wait, Some(slot_wait));
        }
    }
    // On the device only with the device release; only for the adaptive engine.
    let e = run(&DemoConfig {
        release: Some(Release::Host),
        slot_wait: Some(SlotWait::Device),
        ..config(4)
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--slot-wait device needs --release device"),
        "{e}"
    );
    let e = run(&DemoConfig {
        engine: Engine::Graph,
        slot_wait: Some(SlotWait::Host),
        ..config(4)
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("--slot-wait needs --engine adaptive"), "{e}");
}

#[test]
fn adaptive_engine_without_the_device_wait_for_arrivals_reads_batches_not_yet_filled_in() {
    // Paced arrivals: launches are enqueued ahead of their batches, so without the wait on
    // `arrived` the copy-in reads a host input slot before get_data fills it in.
    let paced = |drop| DemoConfig {
        batches: 60,
        rate: Some(2000.0),
        drop_edge: drop,
        ..config(4)
    };
    let r = run(&paced(None)).unwrap();
    assert!(r.all_verified(), "{r:?}");
    let r = run(&paced(Some(GraphEdge::ArrivalWait))).unwrap();
    assert!(r.wrong > 0, "arrival waits dropped, yet {r:?}");
    // The switch and the host release are refused together, and --release needs the engine.
    let e = run(&DemoConfig {
        release: Some(Release::Host),
        ..paced(Some(GraphEdge::ArrivalWait))
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("arrival-wait needs --engine adaptive with --release device"),
        "{e}"
    );
    let e = run(&DemoConfig {
        engine: Engine::Graph,
        release: Some(Release::Device),
        ..config(4)
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("--release needs --engine adaptive"), "{e}");
}

#[test]
fn adaptive_engine_dropping_an_edge_from_its_graphs_fails_verification() {
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
            r.wrong > 0,
            "{edge:?} dropped, yet every batch verified: {r:?}"
        );
    }
}

#[test]
fn adaptive_engine_without_the_waits_before_slot_reuse_reads_wrong() {
    // Three launch groups of two (the automatic depth of 16 KiB batches has 16 slots, which
    // 120 batches reuse too rarely for the race to show every time), three chaos seeds.
    // Both slot waits: on the host before the launch, and on the launch's stream (the
    // default with the device release).
    for slot_wait in SlotWait::ALL {
        let many = |seed, drop| DemoConfig {
            chaos: Some(seed),
            batches: 120,
            drop_edge: drop,
            graph_depth: Some(3),
            release: Some(Release::Device),
            slot_wait: Some(slot_wait),
            ..config(2)
        };
        let r = run(&many(4, None)).unwrap();
        assert_eq!((r.missing, r.duplicated, r.wrong), (0, 0, 0), "{r:?}");
        let wrong: i64 = (1..4)
            .map(|seed| run(&many(seed, Some(GraphEdge::GroupWaits))).unwrap().wrong)
            .sum();
        assert!(
            wrong > 0,
            "{slot_wait:?}: slot waits dropped, yet all verified"
        );
    }
}

#[test]
fn adaptive_engine_processes_on_several_threads_and_reports_in_order() {
    for (seed, threads, rate) in [(21, 1, None), (22, 3, None), (23, 4, Some(3000.0))] {
        let r = run(&DemoConfig {
            chaos: Some(seed),
            batches: 120,
            rate,
            process_threads: Some(threads),
            ..config(2)
        })
        .unwrap();
        assert!(r.all_verified(), "{threads} threads, seed {seed}: {r:?}");
        assert_eq!(r.process_threads, Some(threads));
    }
    // By default: the cores left beside the engine's three threads, 1 to 6 (small batches:
    // the check reads every line).
    let r = run(&config(4)).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(
        r.process_threads,
        Some(cores.saturating_sub(3).clamp(1, 6)),
        "{r:?}"
    );
}

#[test]
fn adaptive_engine_reports_where_each_batchs_latency_went() {
    const ADD_UP: [&str; 5] = [
        "before_launch",
        "launch",
        "on_device",
        "before_check",
        "check",
    ];
    for (release, threads) in [(Release::Host, 1), (Release::Device, 3)] {
        let r = run(&DemoConfig {
            chaos: Some(41),
            batches: 90,
            release: Some(release),
            process_threads: Some(threads),
            ..config(4)
        })
        .unwrap();
        assert!(r.all_verified(), "{r:?}");
        let phases = r
            .phases
            .as_ref()
            .expect("the adaptive engine reports phases");
        let names: Vec<&str> = phases.iter().map(|p| p.phase).collect();
        assert_eq!(names[..5], ADD_UP, "{release:?}");
        assert_eq!(names[5..], ["in_order", "slot_wait"]);
        assert!(phases.iter().all(|p| p.count == 90), "{phases:?}");
        // Per batch the five add up to its latency (up to the clock read after the check, and
        // a preemption between the two reads: 1 ms of slack on a loaded machine): each is at
        // most the longest latency, and together they reach it.
        let max = r.latency_max_us.unwrap();
        let sum: f64 = phases[..5].iter().map(|p| p.max_us).sum();
        assert!(
            sum >= max * 0.99 - 1000.0,
            "{release:?}: {sum} < {max}: {phases:?}"
        );
        for p in &phases[..5] {
            assert!(
                p.max_us <= max * 1.01 + 1000.0,
                "{release:?}: {p:?} > {max}"
            );
        }
        // The work of a launch (chaos pauses, a host stream) shows on the device.
        assert!(phases[2].p50_us > 0.0, "{phases:?}");
    }
    // Saturated on three launch groups of two whose work takes far longer than a launch,
    // launches wait for slots (the ring of launches has room for six): the round trip shows
    // there. A timing, on a machine other tests load too: in one of three runs.
    let slot_waits: Vec<_> = (0..3)
        .map(|_| {
            let r = run(&DemoConfig {
                release: Some(Release::Host),
                graph_depth: Some(3),
                batch_bytes: Some(256 << 10),
                intensity: 64,
                batches: 30,
                ..config(2)
            })
            .unwrap();
            let slot_wait = r.phases.as_ref().unwrap()[6].clone();
            assert_eq!(slot_wait.phase, "slot_wait");
            slot_wait
        })
        .collect();
    assert!(slot_waits.iter().any(|w| w.p50_us > 1.0), "{slot_waits:?}");
    // The other engines report none.
    let r = run(&DemoConfig {
        engine: Engine::Graph,
        ..config(4)
    })
    .unwrap();
    assert!(r.phases.is_none(), "{r:?}");
}

#[test]
fn adaptive_engine_reporting_batches_processed_out_of_order_reads_wrong() {
    // Several process_data threads, each reporting its own batch as processed: a later batch
    // frees the slots of an earlier one still being checked, and the next launch overwrites
    // them under the check.
    let out_of_order = |seed, drop| DemoConfig {
        chaos: Some(seed),
        batches: 200,
        process_threads: Some(4),
        drop_edge: drop,
        ..config(1)
    };
    let r = run(&out_of_order(31, None)).unwrap();
    assert!(r.all_verified(), "{r:?}");
    let wrong: i64 = (31..34)
        .map(|seed| {
            run(&out_of_order(seed, Some(GraphEdge::ProcessedInOrder)))
                .unwrap()
                .wrong
        })
        .sum();
    assert!(wrong > 0, "batches reported out of order, yet all verified");
}

#[test]
fn adaptive_engine_process_threads_are_checked() {
    let err = |c: DemoConfig| run(&c).unwrap_err().to_string();
    for n in [0, 65] {
        let e = err(DemoConfig {
            process_threads: Some(n),
            ..config(4)
        });
        assert!(
            e.contains(&format!("--process-threads {n} is outside 1..=64")),
            "{e}"
        );
    }
    let e = err(DemoConfig {
        engine: Engine::Graph,
        process_threads: Some(2),
        ..config(4)
    });
    assert!(
        e.contains("--process-threads needs --engine adaptive"),
        "{e}"
    );
    let e = err(DemoConfig {
        engine: Engine::Graph,
        drop_edge: Some(GraphEdge::ProcessedInOrder),
        ..config(4)
    });
    assert!(
        e.contains("--drop-edge processed-in-order needs --engine adaptive"),
        "{e}"
    );
}

#[test]
fn adaptive_engine_saturated_launches_k_batches_at_once() {
    // Every batch has arrived at the start: 64 = 8 launches of 8.
    let r = run(&DemoConfig {
        batches: 64,
        ..config(8)
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!(r.batches_per_launch, Some(8.0), "{r:?}");
}

#[test]
fn adaptive_engine_at_a_low_rate_launches_each_batch_as_it_arrives() {
    // 200 batches a second, K = 8: the graph engine holds each batch until its group of 8 has
    // arrived (3.5 arrivals, 17.5 ms, on average); the adaptive engine launches it at once.
    let paced = |engine| DemoConfig {
        engine,
        batches: 40,
        rate: Some(200.0),
        ..config(8)
    };
    let a = run(&paced(Engine::Adaptive)).unwrap();
    let g = run(&paced(Engine::Graph)).unwrap();
    assert!(a.all_verified() && g.all_verified(), "{a:?} {g:?}");
    // Mostly one batch a launch (a stall of the h2g thread may let two or more wait).
    let per_launch = a.batches_per_launch.unwrap();
    assert!(per_launch <= 1.5, "{per_launch} batches a launch: {a:?}");
    let (ap50, gp50) = (a.latency_p50_us.unwrap(), g.latency_p50_us.unwrap());
    assert!(gp50 > 10_000.0, "graph engine p50 {gp50} us");
    assert!(ap50 < 8_000.0, "adaptive p50 {ap50} us (graph {gp50} us)");
}

#[test]
fn every_report_with_baselines_has_the_device_bound_and_the_isolated_latency() {
    for engine in Engine::ALL {
        let r = run(&DemoConfig {
            engine,
            graph_batches: engine.uses_graphs().then_some(4),
            baselines: true,
            batches: 30,
            ..config(4)
        })
        .unwrap();
        assert!(r.all_verified(), "{engine:?}: {r:?}");
        let device = r.device_bound_gbps.unwrap();
        assert!(device > 0.0 && device.is_finite(), "{engine:?}: {device}");
        // Every batch of the run (30 < the cap) went into the bound's graph.
        assert_eq!(r.device_bound_batches, Some(30));
        // The faster of a node set per batch and one per 4 batches (the adaptive engine's
        // automatic K at this size).
        assert!(
            matches!(r.device_bound_span, Some(1 | 4)),
            "{:?}",
            r.device_bound_span
        );
        assert_eq!(r.ratio_to_device_bound, Some(r.gbps / device));
        let iso = r.isolated_latency_us.unwrap();
        assert!(iso > 0.0, "{engine:?}: isolated {iso}");
        assert_eq!(r.p99_over_isolated, Some(r.latency_p99_us.unwrap() / iso));
        assert_eq!(r.p50_over_isolated, Some(r.latency_p50_us.unwrap() / iso));
    }
    // Without baselines, no bounds.
    let r = run(&config(4)).unwrap();
    assert!(r.device_bound_gbps.is_none() && r.isolated_latency_us.is_none());
}

#[test]
fn adaptive_engine_graph_depth_sets_the_slots_and_is_checked() {
    let r = run(&DemoConfig {
        graph_depth: Some(2),
        chaos: Some(8),
        batches: 60,
        ..config(4)
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!(r.nin, 2 * 4, "depth 2 of K = 4");
    let err = |c: DemoConfig| run(&c).unwrap_err().to_string();
    let e = err(DemoConfig {
        graph_depth: Some(1),
        ..config(4)
    });
    assert!(e.contains("--graph-depth 1 is outside 2..=16"), "{e}");
    // Checked before the slot count (depth x K) is computed from it: no overflow.
    let e = err(DemoConfig {
        graph_depth: Some(usize::MAX),
        ..config(64)
    });
    assert!(
        e.contains(&format!("--graph-depth {} is outside 2..=16", usize::MAX)),
        "{e}"
    );
    let e = err(DemoConfig {
        engine: Engine::Graph,
        graph_depth: Some(2),
        ..config(4)
    });
    assert!(e.contains("--graph-depth needs --engine adaptive"), "{e}");
}

#[test]
fn adaptive_engine_with_nodes_over_fewer_batches_than_a_launch_verifies_every_batch() {
    // K 8 in nodes of 2: a saturated launch is four runs of five nodes; under chaos, paced
    // too (launches of every size, each cut into runs of at most 2).
    for (seed, rate) in [(11, None), (12, Some(4000.0))] {
        let r = run(&DemoConfig {
            chaos: Some(seed),
            batches: 80,
            graph_span: Some(2),
            rate,
            ..config(8)
        })
        .unwrap();
        assert!(r.all_verified(), "seed {seed}: {r:?}");
        assert_eq!((r.graph_batches, r.graph_span), (Some(8), Some(2)), "{r:?}");
    }
    // Saturated: still K batches a launch.
    let r = run(&DemoConfig {
        batches: 64,
        graph_span: Some(2),
        ..config(8)
    })
    .unwrap();
    assert_eq!(r.batches_per_launch, Some(8.0), "{r:?}");
}

#[test]
fn adaptive_engine_dropping_an_edge_from_nodes_of_a_shorter_span_fails_verification() {
    // Every run of the span has its own edges: dropping one from each must show.
    for edge in [GraphEdge::CopyInF, GraphEdge::FH, GraphEdge::HCopyOut] {
        let r = run(&DemoConfig {
            drop_edge: Some(edge),
            graph_span: Some(2),
            ..config(8)
        })
        .unwrap();
        assert!(
            r.wrong > 0,
            "{edge:?} dropped, yet every batch verified: {r:?}"
        );
    }
}

#[test]
fn adaptive_engine_graph_span_is_a_power_of_two_within_k_and_is_checked() {
    // Rounded down to a power of two, at most K.
    let r = run(&DemoConfig {
        graph_span: Some(3),
        ..config(8)
    })
    .unwrap();
    assert_eq!(r.graph_span, Some(2), "{r:?}");
    let r = run(&DemoConfig {
        graph_span: Some(64),
        ..config(4)
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!(r.graph_span, Some(4), "{r:?}");
    // By default the span is the automatic K (4 at 16 KiB), whatever K, at most K.
    assert_eq!(run(&config(8)).unwrap().graph_span, Some(4));
    assert_eq!(run(&config(2)).unwrap().graph_span, Some(2));
    let err = |c: DemoConfig| run(&c).unwrap_err().to_string();
    let e = err(DemoConfig {
        graph_span: Some(0),
        ..config(4)
    });
    assert!(e.contains("--graph-span 0 is outside 1..=64"), "{e}");
    let e = err(DemoConfig {
        graph_span: Some(usize::MAX),
        ..config(4)
    });
    assert!(e.contains("is outside 1..=64"), "{e}");
    let e = err(DemoConfig {
        engine: Engine::Graph,
        graph_span: Some(2),
        ..config(4)
    });
    assert!(e.contains("--graph-span needs --engine adaptive"), "{e}");
}

#[test]
fn the_device_bound_merges_over_the_adaptive_engines_span() {
    // K 16 in nodes of 8: the bound's graph merges over 8 (above the automatic 4 of 16 KiB
    // batches), not over K, whichever of its two graphs is faster.
    let r = run(&DemoConfig {
        graph_span: Some(8),
        baselines: true,
        batches: 32,
        ..config(16)
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert!(matches!(r.device_bound_span, Some(1 | 8)), "{r:?}");
}

#[test]
fn graph_engines_copying_by_kernels_verify_every_batch_and_report_it() {
    for engine in [Engine::Adaptive, Engine::Graph] {
        for seed in [21, 22] {
            let r = run(&DemoConfig {
                engine,
                chaos: Some(seed),
                batches: 60,
                copy_by: Some(CopyBy::Kernel),
                ..config(4)
            })
            .unwrap();
            assert!(r.all_verified(), "{engine:?}, seed {seed}: {r:?}");
            assert_eq!(r.copy_by, Some(CopyBy::Kernel), "{r:?}");
        }
    }
    // The bound: the faster with memcpy nodes and with the run's own copies, named.
    let r = run(&DemoConfig {
        copy_by: Some(CopyBy::Kernel),
        baselines: true,
        batches: 30,
        ..config(4)
    })
    .unwrap();
    assert!(r.device_bound_gbps.is_some(), "{r:?}");
    assert!(r.device_bound_copy.is_some(), "{r:?}");
    // By default: kernels below 1 MiB batches, memcpy from it; no copy mode for the engines
    // without graphs.
    assert_eq!(run(&config(4)).unwrap().copy_by, Some(CopyBy::Kernel));
    let big = run(&DemoConfig {
        batch_bytes: Some(KERNEL_COPY_BELOW),
        batches: 8,
        ..config(4)
    })
    .unwrap();
    assert!(big.all_verified(), "{big:?}");
    assert_eq!(big.copy_by, Some(CopyBy::Memcpy));
    let hand = run(&DemoConfig {
        engine: Engine::HandWritten,
        graph_batches: None,
        ..config(4)
    })
    .unwrap();
    assert_eq!(hand.copy_by, None);
    let e = run(&DemoConfig {
        engine: Engine::HandWritten,
        copy_by: Some(CopyBy::Kernel),
        graph_batches: None,
        ..config(4)
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--copy needs --engine graph, adaptive or resident"),
        "{e}"
    );
}

/// On the GPU: copies by kernels over the pinned host buffers, every element of every batch
/// checked (saturated, paced, with the device bound, which verifies every batch of both its
/// copies). (Dropped edges are a host-backend test switch: the chaos there makes them show.)
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn adaptive_engine_copying_by_kernels_verifies_every_element_on_cuda() {
    for (bytes, rate, baselines) in [
        (64 << 10, None, true),
        (256 << 10, Some(20_000.0), false),
        (1 << 20, None, false),
        // Not a multiple of 16 bytes a batch: the copy kernel's word-by-word path.
        ((64 << 10) + 4, None, false),
    ] {
        let r = run(&DemoConfig {
            backend: BackendKind::Cuda,
            batches: 300,
            batch_bytes: Some(bytes),
            verify_samples: 0,
            rate,
            baselines,
            copy_by: Some(CopyBy::Kernel),
            graph_batches: None,
            ..config(4)
        })
        .unwrap();
        assert!(r.all_verified(), "{bytes} B, rate {rate:?}: {r:?}");
        assert_eq!(r.copy_by, Some(CopyBy::Kernel));
        if baselines {
            assert!(r.device_bound_copy.is_some(), "{r:?}");
        }
    }
}

/// On the GPU: both releases, saturated and paced, every element of every batch checked.
/// With the events mechanism (`SEQSYNC_TIMELINE_MECHANISM=events`), whose stream waits do
/// not hold graph launches, the device release is refused with a named error and the default
/// is the host release.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn adaptive_engine_verifies_every_element_on_cuda() {
    let events = std::env::var("SEQSYNC_TIMELINE_MECHANISM").as_deref() == Ok("events");
    for release in [Some(Release::Device), Some(Release::Host), None] {
        for (bytes, rate) in [
            (64 << 10, None),
            (256 << 10, Some(20_000.0)),
            (1 << 20, None),
        ] {
            let r = run(&DemoConfig {
                backend: BackendKind::Cuda,
                batches: 300,
                batch_bytes: Some(bytes),
                verify_samples: 0,
                rate,
                release,
                graph_batches: None,
                ..config(4)
            });
            if events && release == Some(Release::Device) {
                let e = r.unwrap_err();
                assert!(
                    matches!(e, seqsync::Error::WaitBeforeSignalUnsupported { .. }),
                    "{e}"
                );
                continue;
            }
            let r = r.unwrap();
            assert!(
                r.all_verified(),
                "{release:?}, {bytes} B, rate {rate:?}: {r:?}"
            );
            let expected = match release {
                Some(asked) => asked,
                None if events || bytes >= DEVICE_RELEASE_BELOW => Release::Host,
                None => Release::Device,
            };
            assert_eq!((r.backend, r.release), ("cuda", Some(expected)));
        }
    }
}
