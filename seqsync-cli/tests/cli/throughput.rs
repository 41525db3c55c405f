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

/// A chain of `n` stages on one thread over four streams, each reading the last one's
/// one-slot buffer, and a time for each stage (one per line, for `--times @FILE`).
fn long_chain(n: usize) -> (String, String) {
    let mut spec = String::from("[buffers]\n");
    let mut times = String::new();
    for i in 0..n - 1 {
        spec += &format!("b{i} = 1\n");
    }
    spec += "[[thread]]\nname = \"t\"\n";
    for i in 0..n {
        spec += &format!(
            "[[thread.stage]]\nname = \"s{i}\"\nstream = \"q{}\"\n",
            i % 4
        );
        if i > 0 {
            spec += &format!("reads = [\"b{}\"]\n", i - 1);
        }
        if i < n - 1 {
            spec += &format!("writes = [\"b{i}\"]\n");
        }
        times += &format!("s{i}=10us\n");
    }
    (spec, times)
}

/// `check --times @FILE` of 30 000 stages in one thread is near-linear: well under 30 s even in
/// a debug build. The graph's lookups of each stream's next work scanned the thread's launches
/// (quadratic), and the cycle search, started on each node's first edge, took a round per few
/// stages (10 s at 16 000 stages in a release build).
#[test]
fn check_times_of_a_long_chain_is_near_linear() {
    let (spec, times) = long_chain(30_000);
    let spec = common::spec_file("times-chain-30000.toml", &spec);
    let times = common::spec_file("times-chain-30000.txt", &times);
    let start = std::time::Instant::now();
    let (code, out, err) = seqsync(&["check", &spec, "--times", &format!("@{times}")]);
    let took = start.elapsed();
    assert_eq!(code, 0, "{err}");
    // Each stage's work waits for the one before it (one slot): the cycle runs through the
    // works up to the last one on s0's stream, back to s0 in the next batch (29 997 works).
    assert!(
        out.contains("period 299970.0 µs per batch"),
        "{}",
        &out[out.len().saturating_sub(2000)..]
    );
    assert!(
        out.contains("more steps (--json lists them all)"),
        "{}",
        &out[out.len().saturating_sub(2000)..]
    );
    assert!(took < std::time::Duration::from_secs(30), "took {took:?}");
}

/// `--times @FILE` reads the times from a file; a missing one is one line, exit 2.
#[test]
fn check_times_from_a_file() {
    let times = common::spec_file("chain-times.txt", "make=200us\nfilter=300us\nsink=100us\n");
    let (code, out, err) = seqsync(&["check", &chain(), "--times", &format!("@{times}")]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2000 batches/s"), "{out}");
    let (code, _, err) = seqsync(&["check", &chain(), "--times", "@/nonexistent/times.txt"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--times @/nonexistent/times.txt"), "{err}");
}
