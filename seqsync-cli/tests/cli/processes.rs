//! `seqsync demo --processes 2`: the seed pipeline across two processes on the host backend,
//! every element of every batch checked, under chaos; its negative control (the consumer's
//! wait left out) fails verification; bad combinations are one-line errors.

use crate::common::seqsync;

fn two(extra: &[&str]) -> (i32, String, String) {
    let base = [
        "demo",
        "--processes",
        "2",
        "--backend",
        "host",
        "--batches",
        "60",
        "--batch-bytes",
        "16384",
        "--verify-samples",
        "0",
    ];
    seqsync(&[&base[..], extra].concat())
}

#[test]
fn two_processes_verify_every_batch_under_chaos() {
    for seed in ["1", "7"] {
        let (code, out, err) = two(&["--chaos", seed, "--nout", "3", "--json"]);
        assert_eq!(code, 0, "seed {seed}: {err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["consumer"]["verified"], 60, "{v}");
        assert_eq!(v["consumer"]["wrong"], 0, "{v}");
        assert_ne!(v["consumer_pid"], std::process::id(), "{v}");
        assert!(v["ratio_to_one_process"].as_f64().unwrap() > 0.0, "{v}");
    }
}

#[test]
fn two_processes_negative_control_a_consumer_that_skips_its_wait_reads_wrong() {
    let (code, _, err) = two(&["--chaos", "3", "--drop-wait", "copy-out-waits-h"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("verification failed across processes"),
        "{err}"
    );
}

#[test]
fn two_processes_refuse_other_engines_and_waits() {
    for extra in [
        &["--engine", "graph"][..],
        &["--variant", "keep-input"][..],
        &["--drop-wait", "f-waits-copy"][..],
    ] {
        let (code, _, err) = two(extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("--processes 2"), "{err}");
    }
    let (code, _, err) = seqsync(&["demo", "--processes", "3"]);
    assert_eq!(code, 2, "{err}");
}
