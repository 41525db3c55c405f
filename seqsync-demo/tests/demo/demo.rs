//! The seed's pipeline on the host backend: every batch verified, with and without chaos, in
//! every variant; a dropped wait is caught; bad configs are named errors.

use seqsync::{BackendKind, Error};
use seqsync_demo::demo::{run, DemoConfig, DroppedWait, Variant};

fn config() -> DemoConfig {
    DemoConfig {
        backend: BackendKind::Host,
        batches: 60,
        batch_bytes: Some(32 << 10),
        baselines: false,
        ..DemoConfig::default()
    }
}

#[test]
fn every_batch_verifies_on_host() {
    let r = run(&DemoConfig {
        baselines: true,
        ..config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    assert_eq!(r.verified, 60);
    assert!(r.bound_gbps.is_some() && r.serialized_gbps.is_some() && r.handrolled_gbps.is_some());
}

#[test]
fn every_batch_verifies_under_chaos() {
    for seed in [1, 2] {
        let r = run(&DemoConfig {
            chaos: Some(seed),
            ..config()
        })
        .unwrap();
        assert!(r.all_verified(), "seed {seed}: {r:?}");
    }
}

#[test]
fn odd_ring_sizes_verify_under_chaos() {
    let r = run(&DemoConfig {
        chaos: Some(9),
        nin: 3,
        nx: 1,
        ny: 4,
        nout: 2,
        ..config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
}

#[test]
fn variant_keep_input_verifies_under_chaos() {
    let r = run(&DemoConfig {
        chaos: Some(4),
        variant: Variant::KeepInput,
        ..config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
}

#[test]
fn variant_host_ring_verifies_under_chaos() {
    let r = run(&DemoConfig {
        chaos: Some(5),
        variant: Variant::HostRing,
        host_slots: 3,
        ..config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
}

/// The check can fail: without the g2h copy's wait on h, the copy reads `out` before h wrote it.
#[test]
fn dropping_a_wait_fails_verification_under_chaos() {
    let r = run(&DemoConfig {
        chaos: Some(3),
        batches: 200,
        drop_wait: Some(DroppedWait::CopyOutWaitsH),
        ..config()
    })
    .unwrap();
    assert!(
        !r.all_verified(),
        "a pipeline without the copy's wait on h verified: {r:?}"
    );
    assert!(r.wrong > 0);
}

#[test]
fn dropping_the_process_synchronize_fails_verification() {
    let r = run(&DemoConfig {
        chaos: Some(3),
        drop_wait: Some(DroppedWait::ProcessSyncs),
        ..config()
    })
    .unwrap();
    assert!(r.wrong > 0, "{r:?}");
}

#[test]
fn trace_has_stream_and_thread_tracks() {
    let r = run(&DemoConfig {
        trace: true,
        batches: 8,
        ..config()
    })
    .unwrap();
    let t = r.trace.expect("trace requested");
    let events = t["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    for lane in [
        "s_h2g",
        "s_f",
        "s_g",
        "s_h",
        "s_g2h",
        "thread h2g",
        "thread g2h",
    ] {
        assert!(names.contains(&lane), "no track {lane} in {names:?}");
    }
    let spans = events.iter().filter(|e| e["ph"] == "X").count();
    assert!(spans >= 8 * 5, "{spans} spans");
}

fn invalid(c: DemoConfig) -> String {
    match run(&c) {
        Err(e @ Error::InvalidArgument { .. }) => e.to_string(),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn zero_slot_count_is_an_error() {
    assert!(invalid(DemoConfig { nx: 0, ..config() }).contains("--nx must be at least 1"));
}

#[test]
fn partial_element_batch_is_an_error() {
    assert!(invalid(DemoConfig {
        batch_bytes: Some(4097),
        ..config()
    })
    .contains("whole number"));
}

#[test]
fn chaos_needs_the_host_backend() {
    let e = run(&DemoConfig {
        backend: BackendKind::Cuda,
        chaos: Some(1),
        ..config()
    })
    .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. } | Error::NoDevice(_)),
        "{e}"
    );
}

#[test]
fn drop_wait_is_refused_off_the_host_backend() {
    let e = run(&DemoConfig {
        backend: BackendKind::Cuda,
        drop_wait: Some(DroppedWait::ProcessSyncs),
        ..config()
    })
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("--drop-wait"), "{e}");
}

#[test]
fn huge_slot_count_is_an_error_not_an_abort() {
    assert!(invalid(DemoConfig {
        nin: 2_000_000_000,
        ..config()
    })
    .contains("exceeds"));
}

#[test]
fn batches_beyond_host_memory_are_an_error_not_an_abort() {
    let msg = invalid(DemoConfig {
        batch_bytes: Some(1 << 40),
        ..config()
    });
    assert!(msg.contains("GiB of host memory"), "{msg}");
}

#[test]
fn pipeline_engine_trace_has_host_thread_tracks() {
    let r = run(&DemoConfig {
        engine: seqsync_demo::demo::Engine::Pipeline,
        trace: true,
        batches: 8,
        ..config()
    })
    .unwrap();
    let t = r.trace.expect("trace requested");
    let events = t["traceEvents"].as_array().unwrap();
    let track = |name: &str| {
        events
            .iter()
            .find(|e| e["name"] == "thread_name" && e["args"]["name"] == name)
            .map(|e| (e["pid"].clone(), e["tid"].clone()))
            .unwrap_or_else(|| panic!("no track {name}"))
    };
    let (pid, tid) = track("thread g2h");
    // g2h's blocking calls (its wait on h and its record of g2h) and its launch of the copy
    // out, every batch.
    let on_g2h = |label: &str| {
        events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["tid"] == tid)
            .filter(|e| {
                e["args"]["stage"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with(label)
            })
            .count()
    };
    assert_eq!(on_g2h("wait h") + on_g2h("record g2h"), 2 * 8);
    assert_eq!(on_g2h("launch g2h"), 8);
    // process_data after every synchronize, on a track of its own.
    let (ppid, ptid) = track("process");
    let process = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == ppid && e["tid"] == ptid)
        .count();
    assert_eq!(process, 8);
}

#[test]
fn pipeline_engine_refuses_other_variants_and_dropped_waits() {
    let pipeline = || DemoConfig {
        engine: seqsync_demo::demo::Engine::Pipeline,
        ..config()
    };
    let msg = invalid(DemoConfig {
        variant: Variant::HostRing,
        ..pipeline()
    });
    assert!(msg.contains("--variant seed only"), "{msg}");
    let msg = invalid(DemoConfig {
        drop_wait: Some(DroppedWait::FWaitsCopy),
        ..pipeline()
    });
    assert!(
        msg.contains("--drop-wait needs --engine handwritten"),
        "{msg}"
    );
}
