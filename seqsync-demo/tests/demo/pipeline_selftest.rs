//! `seqsync run` for specs of any shape: built-in stages check every buffer read; the intact
//! schedule reads nothing wrong under chaos, and a schedule missing a wait is caught.

use seqsync::backend::host::Chaos;
use seqsync::pipeline::{derive, PipelineSpec, Plan};
use seqsync::HostBackend;
use seqsync_demo::selftest;

const FANOUT: &str = include_str!("../../../specs/fanout.toml");

fn fanout_plan() -> (seqsync::pipeline::PipelineSpec, Plan) {
    let spec = PipelineSpec::from_toml(FANOUT).unwrap();
    let plan = derive(&spec).unwrap();
    (spec, plan)
}

#[test]
fn fanout_spec_reads_nothing_wrong_under_chaos() {
    let (spec, plan) = fanout_plan();
    for seed in [1, 2, 3] {
        let host = HostBackend::with_chaos(Chaos::new(seed));
        let r = selftest::run(&spec, &plan, &host, 150, 64).unwrap();
        assert_eq!(r.wrong_reads, 0, "seed {seed}: {:?}", r.first_wrong);
        // left and right read raw, merge reads l and r: 4 reads per batch.
        assert_eq!(r.reads_checked, 4 * 150);
    }
}

#[test]
fn seed_spec_reads_nothing_wrong_under_chaos() {
    let spec = PipelineSpec::from_toml(include_str!("../../../specs/seed.toml")).unwrap();
    let plan = derive(&spec).unwrap();
    let r = selftest::run(
        &spec,
        &plan,
        &HostBackend::with_chaos(Chaos::new(5)),
        150,
        64,
    )
    .unwrap();
    assert_eq!(r.wrong_reads, 0, "{:?}", r.first_wrong);
}

/// The plan without `stage`'s wait on `ring` (and one consumer off the ring).
fn without_wait(plan: Plan, stage: &str, ring: &str) -> Plan {
    seqsync::internal::pipeline::without_wait(plan, stage, ring)
        .unwrap_or_else(|| panic!("no wait of {stage} on {ring}"))
}

#[test]
fn a_missing_wait_is_caught() {
    let (spec, plan) = fanout_plan();
    // left no longer waits for load's copy of the batch it reads.
    let broken = without_wait(plan, "left", "load");
    let mut wrong = 0;
    for seed in [1, 2, 3, 4] {
        let host = HostBackend::with_chaos(Chaos::new(seed));
        wrong += selftest::run(&spec, &broken, &host, 150, 64)
            .unwrap()
            .wrong_reads;
    }
    assert!(
        wrong > 0,
        "a schedule without left's wait on load read nothing wrong"
    );
}
