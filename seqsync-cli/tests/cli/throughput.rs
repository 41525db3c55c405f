//! `check --times` and `run --measure`: the prediction as a user reads it, and the comparison
//! with a run.

use crate::common;

use common::seqsync;

fn chain() -> String {
    format!("{}/../specs/chain.toml", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn check_times_names_the_cycle_and_what_a_larger_buffer_gives() {
    let (code, out, err) = seqsync(&[
        "check",
        &chain(),
        "--times",
        "make=200us,filter=300us,sink=100us",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("period 500.0 µs per batch: 2000 batches/s"),
        "{out}"
    );
    assert!(
        out.contains("work of make on s_make") && out.contains("work of filter"),
        "{out}"
    );
    assert!(out.contains("(buffer raw)"), "{out}");
    assert!(
        out.contains("with --set nraw=2: 3333 batches/s (+66.7 %)"),
        "{out}"
    );
}

#[test]
fn check_times_in_json_carries_the_prediction() {
    let (code, out, err) = seqsync(&[
        "check",
        common::seed(),
        "--json",
        "--times",
        "h2g=1ms,f=10us,g=10us,h=10us,g2h=10us",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let bps = v["throughput"]["prediction"]["batches_per_second"]
        .as_f64()
        .unwrap();
    assert!((bps - 1000.0).abs() < 1e-6, "{bps}");
}

#[test]
fn bad_times_are_one_line_and_exit_2() {
    for (times, says) in [
        ("h2g=1us", "no time given"),
        ("h2g=1", "has no unit"),
        (
            "h2g=1us,f=1us,g=1us,h=1us,g2h=1us,nope=1us",
            "no stage of this name",
        ),
        ("h2g=1us,f=1us,g=1us,h=1us,g2h=2h", "unknown unit"),
    ] {
        let (code, out, err) = seqsync(&["check", common::seed(), "--times", times]);
        assert_eq!(code, 2, "{times}: {out}{err}");
        assert!(
            err.contains(says) && err.lines().count() == 1,
            "{times}: {err}"
        );
    }
}

#[test]
fn run_measure_compares_the_run_with_its_prediction() {
    let (code, out, err) = seqsync(&[
        "run",
        &chain(),
        "--batches",
        "200",
        "--measure",
        "--times",
        "make=300us,filter=400us,sink=100us",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("measured stage times (means): "), "{out}");
    let ratio: f64 = out
        .split("measured / predicted = ")
        .nth(1)
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ratio in {out}"));
    // The prediction takes the handoffs between streams for free: a run is a little slower.
    assert!((0.5..=1.1).contains(&ratio), "{ratio}: {out}");
}

#[test]
fn run_times_pads_only_built_in_stages() {
    let (code, _, err) = seqsync(&[
        "run",
        common::seed(),
        "--backend",
        "host",
        "--times",
        "h2g=1us",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--times pads the built-in stages"), "{err}");
    let (code, _, err) = seqsync(&["run", &chain(), "--measure", "--batches", "100001"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at most 100000"), "{err}");
}
