//! The command's flags, fuzzed: random command lines (each subcommand's flags, in any order
//! and number, with values from the edges of their types: zero, one, the limits, one past
//! them, past `u64`, negative, empty, not a number) must each end with an answer, never a
//! panic: exit 0, a named error (1) or a usage error (2), within a time bound.
//!
//! Values that would legitimately run for long (many batches, heavy kernels, long sweeps,
//! many timed runs) are drawn small: a long run is not a hang. Sizes are drawn whole, because
//! the command must refuse what memory cannot hold before it allocates it.
//! `SEQSYNC_FUZZ_CASES` sets the number of command lines (48 by default).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;

use crate::common;

/// A run that takes longer than this is a hang (the debug build, on a 2-core machine).
const BOUND: Duration = Duration::from_secs(60);

/// Numbers from the edges of the flags' types.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "7",
    "64",
    "1023",
    "1024",
    "65536",
    "1048576",
    "1048577",
    "4294967296",
    "1099511627776",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "1e3",
    "",
    "x",
    "0x10",
    " 5",
];
/// Values that bound how long a valid run takes.
const SMALL: &[&str] = &["0", "1", "2", "5", "-1", "x", "18446744073709551616", ""];
const WORDS: &[&str] = &[
    "host",
    "cuda",
    "auto",
    "pipeline",
    "graph",
    "pool",
    "fanout",
    "streams",
    "cuda-graph",
    "levels",
    "",
    "\u{1b}[2J",
    "é",
];
const SET_NAMES: &[&str] = &[
    "nin", "nx", "ny", "nout", "in", "x", "out", "nope", "", "nin=3",
];

#[derive(Debug, Clone, Copy)]
enum Value {
    None,
    Number,
    Small,
    Word,
    Set,
    Path,
}

/// Each subcommand's flags and the kind of value each takes.
fn flags(sub: &str) -> &'static [(&'static str, Value)] {
    use Value::*;
    match sub {
        "demo" => &[
            ("--batches", Small),
            ("--batch-bytes", Number),
            ("--nin", Number),
            ("--nx", Number),
            ("--ny", Number),
            ("--nout", Number),
            ("--intensity", Small),
            ("--backend", Word),
            ("--chaos", Number),
            ("--variant", Word),
            ("--engine", Word),
            ("--graph-batches", Number),
            ("--host-slots", Number),
            ("--verify-samples", Number),
            ("--no-baselines", None),
            ("--repeat", Small),
            ("--json", None),
            ("--trace", Path),
        ],
        "check" => &[("--set", Set), ("--json", None), ("--max-states", Number)],
        "run" => &[
            ("--set", Set),
            ("--batches", Small),
            ("--backend", Word),
            ("--batch-bytes", Number),
            ("--chaos", Number),
            ("--json", None),
            ("--engine", Word),
            ("--graph-batches", Number),
            ("--max-states", Number),
        ],
        "graph" => &[
            ("--lower", Word),
            ("--backend", Word),
            ("--json", None),
            ("--run", None),
            ("--runs", Small),
            ("--trace", Path),
        ],
        _ => &[],
    }
}

/// One command line: a subcommand, its spec (for those that take one), flags with values.
fn command_line() -> impl Strategy<Value = Vec<String>> {
    let sub = prop::sample::select(vec!["demo", "check", "run", "graph"]);
    sub.prop_flat_map(|sub| {
        let n = flags(sub).len();
        let flag = (
            0..n,
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
        );
        (
            Just(sub),
            prop::sample::select(vec!["seed", "fanout", "graph", "missing", "empty"]),
            prop::collection::vec(flag, 0..6),
        )
    })
    .prop_map(|(sub, spec, picks)| {
        let mut args = vec![sub.to_string()];
        if sub != "demo" {
            args.push(match spec {
                "seed" => common::seed().to_string(),
                "fanout" => common::fanout().to_string(),
                "graph" => common::spec_file("graph-example.toml", GRAPH_TEXT),
                "empty" => common::spec_file("empty.toml", ""),
                _ => "/nonexistent/seqsync.toml".to_string(),
            });
        }
        for (i, a, b) in picks {
            let (name, kind) = flags(sub)[i];
            let pick =
                |list: &[&str], ix: &prop::sample::Index| list[ix.index(list.len())].to_string();
            args.push(name.to_string());
            match kind {
                Value::None => {}
                Value::Number => args.push(pick(NUMBERS, &a)),
                Value::Small => args.push(pick(SMALL, &a)),
                Value::Word => args.push(pick(WORDS, &a)),
                Value::Set => args.push(format!("{}={}", pick(SET_NAMES, &a), pick(NUMBERS, &b))),
                Value::Path => args.push(trace_path()),
            }
        }
        // CI has no GPU, and a GPU run of a fuzzed line proves nothing more about parsing;
        // the default batch counts (400, 100) are long runs in a debug build.
        for (flag, value) in [("--backend", "host"), ("--batches", "2")] {
            if flags(sub).iter().any(|(f, _)| *f == flag) && !args.iter().any(|a| a == flag) {
                args.extend([flag.to_string(), value.to_string()]);
            }
        }
        args
    })
}

const GRAPH_TEXT: &str = include_str!("../../../specs/graph-example.toml");

fn trace_path() -> String {
    std::env::temp_dir()
        .join(format!("seqsync-flag-fuzz-{}.json", std::process::id()))
        .to_string_lossy()
        .into_owned()
}

/// Run `seqsync args` to its end or the bound: (exit code, stderr), or why it did not end.
fn answer(args: &[String]) -> Result<(i32, String), String> {
    let mut child = Command::new(common::exe())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start: {e}"))?;
    let stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            let err = reader.join().unwrap_or_default();
            return match status.code() {
                Some(code) => Ok((code, err)),
                None => Err(format!("killed by a signal ({status}); stderr: {err}")),
            };
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no answer within {BOUND:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn cases() -> u32 {
    std::env::var("SEQSYNC_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn any_command_line_is_an_answer_in_bounded_time(args in command_line()) {
        let shown = args.join(" ");
        match answer(&args) {
            Ok((code, err)) => {
                prop_assert!(!err.contains("panicked"), "seqsync {shown}: a panic:\n{err}");
                prop_assert!(matches!(code, 0..=2), "seqsync {shown}: exit {code}:\n{err}");
            }
            Err(why) => prop_assert!(false, "seqsync {shown}: {why}"),
        }
    }
}

/// The fuzzer's own check: a panic is caught (a command line that is known to end in one
/// would do; none is, so the exit codes stand in: 101 is what a panic exits with).
#[test]
fn the_fuzzer_reads_exit_codes_and_signals() {
    let ok = answer(&["--help".to_string()]).unwrap();
    assert_eq!(ok.0, 0);
    let usage = answer(&["--no-such-flag".to_string()]).unwrap();
    assert_eq!(usage.0, 2, "{}", usage.1);
}
