//! The deadlock check at the size of real pipelines: 1000 stages over 100 threads, every call
//! blocking, decided by the cycles of the dependencies (no search, so never inconclusive).

use std::time::{Duration, Instant};

use seqsync::pipeline::{check_deadlock, derive, PipelineSpec, StageSpec, Verdict};

/// `stages` stages over `threads` threads; stage `i` writes buffer `b{i}` (2 slots) and reads
/// the buffers `reads(i)` names (all written by earlier stages).
fn spec(stages: usize, threads: usize, reads: impl Fn(usize) -> Vec<usize>) -> PipelineSpec {
    let mut b = PipelineSpec::builder();
    for i in 0..stages {
        b = b.buffer(format!("b{i}"), 2u64);
    }
    let mut per_thread: Vec<Vec<(String, StageSpec)>> = vec![Vec::new(); threads];
    for i in 0..stages {
        let mut s = StageSpec::on_stream(format!("s{}", i % threads)).writes(format!("b{i}"));
        for r in reads(i) {
            s = s.reads(format!("b{r}"));
        }
        per_thread[i % threads].push((format!("st{i}"), s));
    }
    for (t, stages) in per_thread.into_iter().enumerate() {
        b = b.thread(format!("T{t}"));
        for (name, s) in stages {
            b = b.stage(name, s);
        }
    }
    b.build().expect("a valid spec")
}

fn decided_fast(what: &str, spec: &PipelineSpec) {
    let plan = derive(spec).expect("derives");
    let start = Instant::now();
    let verdict = check_deadlock(&plan);
    let took = start.elapsed();
    eprintln!("{what}: {verdict} in {took:?}");
    assert_eq!(verdict, Verdict::DeadlockFree { states: 0 }, "{what}");
    // A debug build on two loaded cores: the release figure is in BENCHMARKS.md.
    assert!(took < Duration::from_secs(20), "{what}: {took:?}");
}

#[test]
fn a_chain_of_1000_stages_over_100_threads_is_proved() {
    decided_fast(
        "chain",
        &spec(1000, 100, |i| if i == 0 { vec![] } else { vec![i - 1] }),
    );
}

#[test]
fn a_fan_out_and_in_over_100_threads_is_proved() {
    // Stage 0 feeds stages 1..999; the last stage reads ten of them.
    decided_fast(
        "fan-out",
        &spec(1000, 100, |i| match i {
            0 => vec![],
            999 => (1..999).step_by(100).collect(),
            _ => vec![0],
        }),
    );
}

#[test]
fn a_ladder_across_threads_is_proved() {
    // Each stage reads the two stages before it (on two other threads).
    decided_fast(
        "ladder",
        &spec(1000, 100, |i| (i.saturating_sub(2)..i).collect()),
    );
}
