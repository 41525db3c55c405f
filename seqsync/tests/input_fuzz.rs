//! A mutation fuzzer over the files users hand to seqsync, on stable Rust (proptest): the seed
//! corpus is `specs/` (pipeline specs and a graph file) plus a few generated shapes; each case
//! applies random edits — lines dropped, repeated or swapped, numbers replaced by extreme
//! values, names replaced by hostile ones (control characters, 65 536 bytes), bytes cut —
//! and runs the text through everything a file goes through before anything runs: the
//! pipeline spec parser, validation, derivation and the deadlock check (with a small state
//! budget), and the graph file parser, the analysis and every lowering.
//!
//! The property: every input is an answer — `Ok` or a named error — within a time bound; never
//! a panic (proptest reports one with the input, shrunk). `SEQSYNC_FUZZ_CASES` sets the number
//! of cases (256 by default; CI runs more).

use std::time::{Duration, Instant};

use proptest::prelude::*;
use seqsync::graph::Lowering;
use seqsync::internal::graph;
use seqsync::internal::graph::Analysis;
use seqsync::pipeline::{check_deadlock_with, derive, CheckOptions, PipelineSpec};

const SEED_SPEC: &str = include_str!("../../specs/seed.toml");
const FANOUT_SPEC: &str = include_str!("../../specs/fanout.toml");
const GRAPH_FILE: &str = include_str!("../../specs/graph-example.toml");

/// How long one input may take, parse to check (a debug build on a loaded 2-core machine).
const BOUND: Duration = Duration::from_secs(10);

fn corpus() -> Vec<&'static str> {
    vec![SEED_SPEC, FANOUT_SPEC, GRAPH_FILE]
}

/// Values that break careless arithmetic.
const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "1",
    "4294967296",
    "1073741824",
    "1073741825",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551615",
    "99999999999999999999999",
    "1e308",
    "nan",
    "\"x\"",
    "[]",
    "true",
];

/// Names that break careless printing and passing on.
fn hostile_names() -> Vec<String> {
    vec![
        String::new(),
        "a\\u0000b".into(),
        "a\\nb".into(),
        "\\u001b[31mred".into(),
        " padded ".into(),
        "x".repeat(65_536),
        "h2g".into(),
        "f".into(),
        "in".into(),
    ]
}

#[derive(Debug, Clone)]
enum Edit {
    DropLine(usize),
    RepeatLine(usize, usize),
    SwapLines(usize, usize),
    /// Replace the `k`-th number of line `l` with an extreme value.
    Number(usize, usize, usize),
    /// Replace the `k`-th quoted string of line `l` with a hostile name.
    Name(usize, usize, usize),
    /// Cut the text at a fraction (per mille) of its length.
    Cut(u16),
    /// Insert a byte at a fraction of the text.
    Byte(u16, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    let l = 0usize..400;
    prop_oneof![
        3 => l.clone().prop_map(Edit::DropLine),
        2 => (l.clone(), 1usize..2000).prop_map(|(a, n)| Edit::RepeatLine(a, n)),
        2 => (l.clone(), l.clone()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        4 => (l.clone(), 0usize..3, 0..EXTREMES.len()).prop_map(|(a, k, v)| Edit::Number(a, k, v)),
        3 => (l.clone(), 0usize..3, 0usize..9).prop_map(|(a, k, v)| Edit::Name(a, k, v)),
        1 => (0u16..1000).prop_map(Edit::Cut),
        1 => (0u16..1000, any::<u8>()).prop_map(|(at, b)| Edit::Byte(at, b)),
    ]
}

/// Apply `edits` to `text`.
fn mutate(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let names = hostile_names();
    for e in edits {
        let n = lines.len().max(1);
        match *e {
            Edit::DropLine(a) if !lines.is_empty() => {
                lines.remove(a % n);
            }
            Edit::RepeatLine(a, times) if !lines.is_empty() => {
                let line = lines[a % n].clone();
                // A repeated `[[thread.stage]]` block grows the spec; keep the file bounded.
                let times = times.min(200_000 / line.len().max(1));
                for _ in 0..times {
                    lines.insert(a % n, line.clone());
                }
            }
            Edit::SwapLines(a, b) if !lines.is_empty() => lines.swap(a % n, b % n),
            Edit::Number(a, k, v) if !lines.is_empty() => {
                let line = &lines[a % n];
                let numbers: Vec<(usize, usize)> = spans(line, |c| c.is_ascii_digit());
                if let Some(&(s, e)) = numbers.get(k % numbers.len().max(1)) {
                    lines[a % n] = format!("{}{}{}", &line[..s], EXTREMES[v], &line[e..]);
                }
            }
            Edit::Name(a, k, v) if !lines.is_empty() => {
                let line = &lines[a % n];
                let quoted = quoted_spans(line);
                if let Some(&(s, e)) = quoted.get(k % quoted.len().max(1)) {
                    lines[a % n] = format!("{}{}{}", &line[..s], names[v], &line[e..]);
                }
            }
            Edit::Cut(at) => {
                let mut t = lines.join("\n");
                let cut = floor_char(&t, t.len() * at as usize / 1000);
                t.truncate(cut);
                lines = t.lines().map(str::to_owned).collect();
            }
            Edit::Byte(at, b) => {
                let mut t = lines.join("\n");
                let at = floor_char(&t, t.len() * at as usize / 1000);
                t.insert(at, char::from(b));
                lines = t.lines().map(str::to_owned).collect();
            }
            _ => {}
        }
    }
    lines.join("\n") + "\n"
}

fn floor_char(t: &str, mut at: usize) -> usize {
    while !t.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// Byte ranges of maximal runs of characters matching `f`.
fn spans(line: &str, f: impl Fn(char) -> bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        match (f(c), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, line.len()));
    }
    out
}

/// Byte ranges of the insides of `"…"` strings.
fn quoted_spans(line: &str) -> Vec<(usize, usize)> {
    let q: Vec<usize> = line.match_indices('"').map(|(i, _)| i).collect();
    q.chunks(2)
        .filter(|p| p.len() == 2)
        .map(|p| (p[0] + 1, p[1]))
        .collect()
}

/// Everything a file goes through before anything runs. Returns nothing: a panic is the
/// failure.
fn answer(text: &str) {
    if let Ok(spec) = PipelineSpec::from_toml(text) {
        if let Ok(plan) = derive(&spec) {
            let _ = check_deadlock_with(&plan, CheckOptions { max_states: 20_000 });
            let _ = plan.to_string();
        }
    }
    if let Ok(g) = graph::spec_toml::from_str(text) {
        let analysis = Analysis::of(&g.dag);
        for lowering in [Lowering::Streams, Lowering::Levels, Lowering::CudaGraph] {
            let _ = graph::report(&g.dag, &analysis, lowering);
        }
    }
}

fn cases() -> u32 {
    std::env::var("SEQSYNC_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn any_mutated_input_is_an_answer_in_bounded_time(
        file in 0usize..3,
        edits in prop::collection::vec(edit(), 1..8),
    ) {
        let text = mutate(corpus()[file], &edits);
        let start = Instant::now();
        answer(&text);
        let took = start.elapsed();
        prop_assert!(took < BOUND, "took {took:?} on {} bytes", text.len());
    }
}

/// The corpus itself is an answer, and the mutator changes it (a fuzzer that feeds the same
/// text every time would find nothing).
#[test]
fn the_corpus_parses_and_the_mutator_mutates() {
    for text in corpus() {
        answer(text);
    }
    let edited = mutate(SEED_SPEC, &[Edit::Number(20, 0, 6), Edit::Name(25, 0, 5)]);
    assert_ne!(edited, mutate(SEED_SPEC, &[]));
}
