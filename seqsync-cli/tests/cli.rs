//! The `seqsync` command as a user runs it: exit codes and one-line errors.

use std::process::Command;

fn seqsync(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_seqsync"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SMALL: &[&str] = &[
    "--backend",
    "host",
    "--batches",
    "30",
    "--batch-bytes",
    "16384",
];

#[test]
fn demo_json_is_one_object_with_the_fields() {
    let (code, out, _) = seqsync(&[SMALL, &["--json"]].concat());
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().count(),
        1,
        "stdout must hold the JSON alone: {out}"
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "backend",
        "batches",
        "verified",
        "wall_s",
        "gbps",
        "bound_gbps",
        "ratio_to_bound",
        "serialized_gbps",
        "handrolled_gbps",
    ] {
        assert!(!v[key].is_null(), "missing {key} in {v}");
    }
    assert_eq!(v["verified"], 30);
    assert_eq!(v["backend"], "host");
}

#[test]
fn demo_subcommand_and_chaos() {
    let (code, out, _) =
        seqsync(&[&["demo"], SMALL, &["--chaos", "11", "--no-baselines"]].concat());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("verified 30/30"), "{out}");
}

#[test]
fn dropped_wait_exits_nonzero() {
    let (code, _, err) = seqsync(&[
        "--backend",
        "host",
        "--batches",
        "200",
        "--batch-bytes",
        "65536",
        "--chaos",
        "3",
        "--no-baselines",
        "--drop-wait",
        "process-syncs",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("verification failed"), "{err}");
}

fn one_line_error(args: &[&str], needle: &str) {
    let (code, _, err) = seqsync(args);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "not one line: {err}");
    assert!(err.contains(needle), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

#[test]
fn zero_slots_is_one_line() {
    one_line_error(
        &["--backend", "host", "--nin", "0"],
        "--nin must be at least 1",
    );
}

#[test]
fn partial_element_batch_is_one_line() {
    one_line_error(
        &["--backend", "host", "--batch-bytes", "1001"],
        "whole number",
    );
}

#[test]
fn unwritable_trace_path_is_one_line() {
    one_line_error(
        &["--backend", "host", "--trace", "/nonexistent-dir/t.json"],
        "cannot write trace file",
    );
}

#[test]
fn cuda_without_gpu_is_one_line() {
    if seqsync::backend::cuda::CudaBackend::is_available() {
        eprintln!("skipping: a GPU is present");
        return;
    }
    one_line_error(&["--backend", "cuda", "--batches", "2"], "no CUDA device");
}

#[test]
fn trace_file_is_written() {
    let path = std::env::temp_dir().join(format!("seqsync-trace-{}.json", std::process::id()));
    let p = path.to_str().unwrap();
    let (code, out, _) = seqsync(&[SMALL, &["--no-baselines", "--trace", p]].concat());
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(v["traceEvents"].as_array().unwrap().len() > 100);
    std::fs::remove_file(path).ok();
}
