//! The prediction against hand-worked periods, and against a simulation of the same graph.

use std::time::Duration;

use super::graph::Graph;
use super::*;
use crate::pipeline::{derive, PipelineSpec, StageSpec};

fn seed(set: &[&str]) -> Plan {
    let mut spec = PipelineSpec::from_toml(include_str!("../../../../specs/seed.toml")).unwrap();
    for a in set {
        spec.apply_assignment(a).unwrap();
    }
    derive(&spec).unwrap()
}

fn fanout() -> Plan {
    let spec = PipelineSpec::from_toml(include_str!("../../../../specs/fanout.toml")).unwrap();
    derive(&spec).unwrap()
}

fn us(text: &str) -> StageTimes {
    StageTimes::parse(text).unwrap()
}

/// The graph run for `batches` batches from its recurrences (every node done at the latest of
/// its dependencies plus its duration): the mean time per batch over the second half.
fn simulate(plan: &Plan, times: &StageTimes, batches: usize) -> f64 {
    let g = Graph::new(plan, times).unwrap();
    let n = g.nodes.len();
    let mut t = vec![vec![0u64; n]; batches];
    for s in 0..batches {
        // Lag-0 edges are acyclic: relax them to the fixpoint (at most n rounds).
        for _ in 0..=n {
            let mut changed = false;
            for e in &g.edges {
                let Some(src) = s.checked_sub(e.lag as usize) else {
                    continue;
                };
                let at = t[src][e.from] + g.weight[e.to];
                if at > t[s][e.to] {
                    t[s][e.to] = at;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        for (at, w) in t[s].iter_mut().zip(&g.weight) {
            *at = (*at).max(*w);
        }
    }
    let last = |s: usize| *t[s].iter().max().unwrap() as f64;
    (last(batches - 1) - last(batches / 2 - 1)) / (batches - batches / 2) as f64
}

#[test]
fn the_seed_waits_on_its_copy_out_and_process_in_turn() {
    let p = predict(
        &seed(&[]),
        &us("h2g=100us,f=50us,g=50us,h=80us,g2h=120us,g2h.after=30us"),
    )
    .unwrap();
    assert_eq!(p.period, Duration::from_micros(150));
    assert_eq!(p.critical.lag, 1);
    let nodes: Vec<&str> = p.critical.steps.iter().map(|s| s.node.as_str()).collect();
    assert!(
        nodes.iter().any(|n| n.starts_with("work of g2h")),
        "{nodes:?}"
    );
    assert!(nodes.iter().any(|n| n.contains("synchronize")), "{nodes:?}");
}

#[test]
fn a_slow_copy_in_bounds_the_seed_alone() {
    let p = predict(&seed(&[]), &us("h2g=1ms,f=5us,g=5us,h=5us,g2h=5us")).unwrap();
    assert_eq!(p.period, Duration::from_millis(1));
    assert!((p.batches_per_second - 1000.0).abs() < 1e-6);
    assert!(p.critical.ring_sizes.is_empty() && p.critical.buffers.is_empty());
}

#[test]
fn one_input_slot_serializes_the_copy_in_with_f_and_a_second_halves_it() {
    let times = us("h2g=100us,f=100us,g=10us,h=10us,g2h=10us");
    let one = predict(&seed(&["nin=1"]), &times).unwrap();
    assert_eq!(one.period, Duration::from_micros(200));
    assert_eq!(one.critical.buffers, vec!["in".to_string()]);
    let two = predict(&seed(&["nin=2"]), &times).unwrap();
    assert_eq!(two.period, Duration::from_micros(100));
}

#[test]
fn a_stream_two_threads_share_runs_their_works_in_turn() {
    let spec = PipelineSpec::builder()
        .param("n", 4)
        .buffer("b", "n")
        .thread("a")
        .stage("p", StageSpec::on_stream("s").writes("b"))
        .thread("c")
        .stage("q", StageSpec::on_stream("s").reads("b"))
        .build()
        .unwrap();
    let plan = derive(&spec).unwrap();
    let p = predict(&plan, &us("p=100us,q=60us")).unwrap();
    assert_eq!(p.period, Duration::from_micros(160));
    assert!(p.critical.steps[0].then.contains("stream s"));
}

#[test]
fn stages_that_share_a_resource_add_up() {
    let times = us("load=300us,left=500us,right=400us,merge=200us");
    assert_eq!(
        predict(&fanout(), &times).unwrap().period,
        Duration::from_micros(500)
    );
    let one = times
        .clone()
        .one_at_a_time("the host-function thread", ["load", "left", "right"]);
    let p = predict(&fanout(), &one).unwrap();
    assert_eq!(p.period, Duration::from_micros(1200));
    assert!(p.critical.steps[0]
        .then
        .contains("the host-function thread"));
    let bad = times.one_at_a_time("x", ["nope"]);
    assert!(predict(&fanout(), &bad).is_err());
}

#[test]
fn a_host_stage_takes_its_time_on_its_thread() {
    let p = predict(&fanout(), &us("load=10us,left=10us,right=10us,merge=70us")).unwrap();
    assert_eq!(p.period, Duration::from_micros(70));
    let host_calls = us("load=10us,left=10us,right=10us,merge=70us,host=5us");
    // merge's thread: two synchronizes and the record, 5 µs each, and the launch, which is
    // the host stage's own work (70 µs).
    assert_eq!(
        predict(&fanout(), &host_calls).unwrap().period,
        Duration::from_micros(85)
    );
}

#[test]
fn times_must_name_every_stage_and_only_stages() {
    let plan = seed(&[]);
    let err = |t: &str| predict(&plan, &us(t)).unwrap_err();
    let missing = err("h2g=1us,f=1us,g=1us,h=1us");
    assert!(
        matches!(&missing, PlanError::StageTime { entry, .. } if entry == "`g2h`"),
        "{missing}"
    );
    let unknown = err("h2g=1us,f=1us,g=1us,h=1us,g2h=1us,k=1us");
    assert!(
        unknown.to_string().contains("no stage of this name"),
        "{unknown}"
    );
    let after = err("h2g=1us,f=1us,g=1us,h=1us,g2h=1us,f.after=1us");
    assert!(after.to_string().contains("synchronizes"), "{after}");
    let host = predict(
        &fanout(),
        &us("load=1us,left=1us,right=1us,merge=1us,merge.launch=1us"),
    );
    assert!(host
        .unwrap_err()
        .to_string()
        .contains("needs a stage on a stream"));
}

#[test]
fn the_prediction_is_the_period_the_graph_runs_at() {
    // Random times and sizes for the seed and the fan-out: the period the recurrences settle
    // to is the one predicted.
    let mut rng = 0x2545f4914f6cdd1du64;
    let mut next = |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    for case in 0..60 {
        let (plan, names): (Plan, &[&str]) = if case % 2 == 0 {
            let set = [
                format!("nin={}", 1 + next(3)),
                format!("nx={}", 1 + next(4)),
                format!("ny={}", 1 + next(4)),
                format!("nout={}", 1 + next(3)),
            ];
            let set: Vec<&str> = set.iter().map(String::as_str).collect();
            (seed(&set), &["h2g", "f", "g", "h", "g2h"])
        } else {
            (fanout(), &["load", "left", "right", "merge"])
        };
        let mut times = StageTimes::new().host_call(Duration::from_nanos(next(3000)));
        for n in names {
            times = times.stage(*n, Duration::from_nanos(1 + next(100_000)));
            if *n != "merge" && next(2) == 0 {
                times = times.launch(*n, Duration::from_nanos(next(50_000)));
            }
        }
        if case % 2 == 0 {
            times = times.after_sync("g2h", Duration::from_nanos(next(100_000)));
        }
        let p = predict(&plan, &times).unwrap();
        let sim = simulate(&plan, &times, 400);
        let want = p.period.as_nanos() as f64;
        assert!(
            (sim - want).abs() <= 0.02 * want + 2.0,
            "case {case}: simulated {sim} ns per batch, predicted {want} ({times:?})"
        );
    }
}
