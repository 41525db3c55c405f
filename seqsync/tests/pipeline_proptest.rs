//! Property: every acyclic pipeline the planner accepts gets a plan that the
//! deadlock checker proves deadlock-free, with the same-thread bounds honoured;
//! and one below a ring's bound always gets stuck.

use proptest::prelude::*;
use seqsync::pipeline::{
    check_deadlock_with, derive, derive_unchecked, CheckOptions, PipelineSpec, StageSpec, Verdict,
};

/// One generated stage: thread, place (stream index or host), slots of the
/// buffer it writes (0 = writes nothing), which earlier buffers it reads, sync.
#[derive(Debug, Clone)]
struct Gen {
    thread: usize,
    place: Option<usize>,
    slots: u64,
    reads: Vec<usize>,
    sync: bool,
}

fn gen_stage() -> impl Strategy<Value = Gen> {
    (
        0..3usize,
        prop::option::weighted(0.8, 0..3usize),
        0..4u64,
        prop::collection::vec(0..8usize, 0..3),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(thread, place, slots, reads, sync)| Gen {
            thread,
            place,
            slots,
            reads,
            sync,
        })
}

/// Builds a spec whose stages only read buffers written by earlier stages
/// (so no lag-0 cycle exists).
fn build(stages: &[Gen]) -> PipelineSpec {
    let mut b = PipelineSpec::builder();
    let mut written: Vec<String> = Vec::new();
    for (i, g) in stages.iter().enumerate() {
        if g.slots > 0 {
            b = b.buffer(format!("b{i}"), g.slots);
        }
    }
    let mut per_thread: Vec<Vec<(String, StageSpec)>> = vec![Vec::new(); 3];
    for (i, g) in stages.iter().enumerate() {
        let mut s = match g.place {
            Some(p) => StageSpec::on_stream(format!("t{}s{p}", g.thread)),
            None => StageSpec::on_host(),
        };
        let mut reads: Vec<&String> = g
            .reads
            .iter()
            .filter(|_| !written.is_empty())
            .map(|r| &written[r % written.len()])
            .collect();
        reads.sort();
        reads.dedup();
        for r in reads {
            s = s.reads(r.clone());
        }
        if g.slots > 0 {
            s = s.writes(format!("b{i}"));
        }
        if g.sync {
            s = s.sync();
        }
        per_thread[g.thread].push((format!("st{i}"), s));
        if g.slots > 0 {
            written.push(format!("b{i}"));
        }
    }
    for (t, stages) in per_thread.into_iter().enumerate() {
        if stages.is_empty() {
            continue;
        }
        b = b.thread(format!("T{t}"));
        for (name, s) in stages {
            b = b.stage(name, s);
        }
    }
    b.build().expect("generated spec is valid")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn derived_plans_are_deadlock_free(stages in prop::collection::vec(gen_stage(), 1..6)) {
        let spec = build(&stages);
        let plan = derive(&spec).expect("derives");
        for r in &plan.rings {
            prop_assert!(r.max_size >= r.bound);
            prop_assert_eq!(r.nconsumers as usize, r.consumers.len());
        }
        let verdict = check_deadlock_with(&plan, CheckOptions { max_states: 200_000 }).unwrap();
        prop_assert!(
            matches!(verdict, Verdict::DeadlockFree { .. } | Verdict::Inconclusive { .. }),
            "{}\n{}", plan, verdict
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn one_below_a_bound_always_gets_stuck(stages in prop::collection::vec(gen_stage(), 1..6)) {
        let base = build(&stages);
        let plan = derive(&base).expect("derives");
        for r in plan.rings.iter().filter(|r| r.bound >= 2) {
            let mut spec = base.clone();
            spec.set(&format!("{}.max_size", r.name), r.bound - 1).unwrap();
            let small = derive_unchecked(&spec).expect("derives unchecked");
            let verdict = check_deadlock_with(&small, CheckOptions { max_states: 200_000 }).unwrap();
            prop_assert!(
                matches!(verdict, Verdict::Deadlock { .. } | Verdict::WouldFail { .. }),
                "ring {} at {}: {}\n{}", r.name, r.bound - 1, small, verdict
            );
        }
    }
}
