//! `seqsync graph`: the report's JSON keys, both lowerings, --run, and one-line errors.

use crate::common;

use common::seqsync;

/// `specs/graph-example.toml`, embedded and written to a temp file (runs from the GPU bundle).
fn example() -> &'static str {
    static P: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        common::spec_file(
            "graph-example.toml",
            include_str!("../../../specs/graph-example.toml"),
        )
    })
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = seqsync(args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().count(),
        1,
        "stdout must hold the JSON alone: {out}"
    );
    serde_json::from_str(&out).unwrap()
}

#[test]
fn graph_json_has_the_keys_and_no_false_dependencies() {
    let v = json(&["graph", example(), "--json"]);
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut want = [
        "commands",
        "width",
        "streams",
        "events",
        "events_lower_bound",
        "false_dependencies",
        "assignment",
        "waits",
    ];
    want.sort();
    assert_eq!(keys, want);
    assert_eq!(v["commands"], 11);
    assert_eq!(v["width"], 3);
    assert_eq!(v["false_dependencies"], 0);
    assert_eq!(v["events"], v["events_lower_bound"]);
    let a = &v["assignment"][0];
    assert_eq!(
        (
            a["name"].as_str(),
            a["stream"].as_u64(),
            a["index"].as_u64()
        ),
        (Some("upload_a"), Some(0), Some(0))
    );
    assert!(v["waits"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w["from"] == "upload_b" && w["to"] == "c1"));
}

#[test]
fn levels_lowering_reports_false_dependencies() {
    let v = json(&["graph", example(), "--lower", "levels", "--json"]);
    assert!(v["false_dependencies"].as_u64().unwrap() > 0, "{v}");
}

/// The makespan lies between the critical path (every attempt: work only sleeps longer on a
/// loaded machine) and the serial sum (the streams overlap: 25.5 ms of work in about 12 ms).
/// The upper bound is a timing: a loaded machine can stall the stream threads past it, so
/// a miss is measured again (the median of 3 runs, at most 3 times); a lowering that put
/// everything on one stream misses it every time.
#[test]
fn graph_run_on_host_reports_a_makespan_above_the_critical_path() {
    let mut misses = Vec::new();
    for _ in 0..3 {
        let v = json(&[
            "graph",
            example(),
            "--run",
            "--runs",
            "3",
            "--backend",
            "host",
            "--json",
        ]);
        assert_eq!(v["backend"], "host");
        assert_eq!(v["critical_path_us"], 10500);
        let (makespan, serial) = (
            v["makespan_us"].as_f64().unwrap(),
            v["serial_us"].as_f64().unwrap(),
        );
        assert!(makespan >= 10500.0, "{v}");
        if makespan < serial {
            return;
        }
        misses.push(v);
    }
    panic!("the makespan was never below the serial sum: {misses:#?}");
}

#[test]
fn malformed_graph_files_are_one_line_naming_the_entry() {
    let dir = std::env::temp_dir().join(format!("seqsync-graph-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("unknown", "[[command]]\nname='a'\nkind='kernel'\nafter=['zz']\n", "entry 1 (`a`): after names unknown command `zz`"),
        ("cycle", "[[command]]\nname='a'\nkind='kernel'\nafter=['b']\n[[command]]\nname='b'\nkind='host'\nafter=['a']\n", "entry 1 (`a`): dependency cycle `a` -> `b` -> `a`"),
        ("dup", "[[command]]\nname='a'\nkind='kernel'\n[[command]]\nname='a'\nkind='fill'\n", "entry 2 (`a`): duplicate name, first used by entry 1"),
        // A command that would run 36 minutes a submission is refused, with the limit.
        ("long", "[[command]]\nname='k'\nkind='kernel'\nus=2147483648\n", "entry 1 (`k`): us = 2147483648 is above the 10000000 µs (10 s) a command may run"),
        // An escape in a name never reaches the terminal.
        ("escape", "[[command]]\nname=\"a\\u001b[31m\"\nkind='kernel'\n", "entry 1 (`a\\u{1b}[31m`): bad name: it holds the control character '\\u{1b}', which cannot be printed"),
        // A TOML syntax error is one line too.
        ("syntax", "[[command]\nname='a'\n", "(line 1)"),
    ];
    for (name, text, want) in cases {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let (code, out, err) = seqsync(&["graph", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}");
        assert!(out.is_empty(), "{name}: {out}");
        assert_eq!(err.lines().count(), 1, "{name}: {err}");
        assert!(err.trim_end().ends_with(want), "{name}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn graph_trace_has_one_span_per_command() {
    let path =
        std::env::temp_dir().join(format!("seqsync-graph-trace-{}.json", std::process::id()));
    let (code, _, err) = seqsync(&[
        "graph",
        example(),
        "--run",
        "--runs",
        "1",
        "--backend",
        "host",
        "--trace",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let spans: Vec<&serde_json::Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert_eq!(spans.len(), 11);
    // The reduction starts after c2 ends (the barrier).
    let span = |n: &str| spans.iter().find(|e| e["name"] == n).unwrap();
    let end = |e: &serde_json::Value| e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
    assert!(span("reduce")["ts"].as_f64().unwrap() >= end(span("c2")));
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn bench_graph_reports_every_lowering() {
    let (code, out, err) = seqsync(&[
        "bench",
        "graph",
        "--backend",
        "host",
        "--graph-reps",
        "1",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["submit"].as_array().unwrap().len(), 2);
    assert_eq!(v["submit"][1]["commands"], 1000);
    let lowerings: Vec<&str> = v["makespan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["lowering"].as_str().unwrap())
        .collect();
    assert_eq!(lowerings, ["streams", "cuda-graph", "levels"]);
    assert_eq!(v["makespan"][0]["false_dependencies"], 0);
    assert!(v["makespan"][2]["false_dependencies"].as_u64().unwrap() > 0);
}

/// Graph files past the limits are one line, at once, in little memory: more commands than a
/// graph may hold (20 000 barriers used 9–10 GB and aborted; 5 000 ran past 60 s), and a file
/// larger than a graph file may be (a 50 MB file aborted).
#[test]
fn graph_files_past_the_limits_are_refused_at_once() {
    let dir = std::env::temp_dir().join(format!("seqsync-graph-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut many = String::new();
    for i in 0..20_000 {
        many += &format!(
            "[[command]]\nname = \"k{i}\"\nkind = \"kernel\"\n[[command]]\nbarrier = true\n"
        );
    }
    let big = "# padding\n".repeat(5 << 20);
    for (name, text, want) in [
        ("many", many, "a graph holds at most 4096 commands"),
        (
            "big",
            big,
            "more than the 4194304 (4 MiB) a graph file may be",
        ),
    ] {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        let start = std::time::Instant::now();
        let (code, out, err) = seqsync(&["graph", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {out}{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "{name}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
