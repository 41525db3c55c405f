//! Property: every acyclic pipeline the planner accepts gets a plan that the
//! deadlock checker proves deadlock-free, with the same-thread bounds honoured;
//! and one below a ring's bound always gets stuck.

use proptest::prelude::*;
use seqsync::internal::pipeline::derive_unchecked;
use seqsync::pipeline::{
    check_deadlock_with, derive, CheckOptions, PipelineSpec, StageSpec, Verdict,
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
        for r in plan.rings() {
            prop_assert!(r.max_size >= r.bound);
            prop_assert_eq!(r.nconsumers as usize, r.consumers.len());
        }
        let verdict = check_deadlock_with(&plan, CheckOptions { max_states: 200_000 });
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
        for r in plan.rings().iter().filter(|r| r.bound >= 2) {
            let mut spec = base.clone();
            spec.set(&format!("{}.max_size", r.name), r.bound - 1).unwrap();
            let small = derive_unchecked(&spec).expect("derives unchecked");
            let verdict = check_deadlock_with(&small, CheckOptions { max_states: 200_000 });
            prop_assert!(
                matches!(verdict, Verdict::Deadlock { .. } | Verdict::WouldFail { .. }),
                "ring {} at {}: {}\n{}", r.name, r.bound - 1, small, verdict
            );
        }
    }
}

// ---- the verdict holds for real, finite runs -----------------------------------------------

mod finite_runs {
    use super::*;
    use seqsync::backend::host::Chaos;
    use seqsync::backend::Backend;
    use seqsync::pipeline::Plan;
    use seqsync::pipeline::{self, RunConfig, Stages};
    use seqsync::HostBackend;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Runs `plan` for `batches` on a chaos host backend with do-nothing stages (stream stages
    /// enqueue an empty host function); `None` if it did not finish within `limit`.
    pub(super) fn run_with_timeout(
        plan: &Plan,
        batches: i64,
        seed: u64,
        limit: Duration,
    ) -> Option<seqsync::Result<()>> {
        let plan = plan.clone();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let host = HostBackend::with_chaos(Chaos {
                seed,
                max_delay: Duration::from_micros(50),
            });
            let streams = pipeline::new_streams(&host, &plan).unwrap();
            let mut stages = Stages::<HostBackend>::new();
            for s in plan.stages() {
                let h = host.clone();
                stages = stages.stage(s.name.clone(), move |cx| match cx.stream {
                    Some(stream) => h.launch_host(stream, Box::new(|| {})),
                    None => Ok(()),
                });
            }
            let r = pipeline::run(RunConfig {
                plan: &plan,
                backend: &host,
                streams: &streams,
                stages: &stages,
                batches,
                stall_timeout: Some(Duration::from_secs(5)),
            })
            .map(|_| ());
            let _ = tx.send(r);
        });
        rx.recv_timeout(limit).ok()
    }

    /// A random subset of rings with a random max_size in `1..=bound + 3`.
    fn overrides() -> impl Strategy<Value = Vec<Option<u64>>> {
        prop::collection::vec(prop::option::weighted(0.5, 1u64..8), 0..8)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Random derived plans and random size overrides, run through the runtime on the host
        /// backend under chaos for a random number of batches: every plan the checker calls
        /// deadlock-free finishes. (`Inconclusive` counts as nothing.)
        #[test]
        fn deadlock_free_plans_finish_their_runs(
            stages in prop::collection::vec(gen_stage(), 1..6),
            sizes in overrides(),
            batches in 1i64..12,
            seed in any::<u64>(),
        ) {
            let base = build(&stages);
            let derived = derive(&base).expect("derives");
            // The derivation gives every ring at least the lag of each of its consumers, so
            // derived plans never hang at the end of a run.
            for r in derived.rings() {
                for c in &r.consumers {
                    prop_assert!(r.max_size as i64 >= c.lag, "ring {} consumer {} lag {} > max_size {}", r.name, c.stage, c.lag, r.max_size);
                }
            }
            let mut spec = base.clone();
            for (r, size) in derived.rings().iter().zip(&sizes) {
                if let Some(v) = size {
                    spec.set(&format!("{}.max_size", r.name), *v).unwrap();
                }
            }
            let plan = derive_unchecked(&spec).expect("derives unchecked");
            let verdict = check_deadlock_with(&plan, CheckOptions { max_states: 200_000 });
            if let Verdict::DeadlockFree { .. } = verdict {
                let outcome = run_with_timeout(&plan, batches, seed, Duration::from_secs(20));
                prop_assert!(
                    matches!(outcome, Some(Ok(()))),
                    "deadlock-free by the checker, but a run of {} batches {}:\n{}",
                    batches,
                    match outcome { None => "hung".to_string(), Some(r) => format!("{r:?}") },
                    plan
                );
            }
        }
    }
}
