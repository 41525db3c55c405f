//! Deadlock check: the seed is deadlock-free; an undersized ring deadlocks
//! with a readable trace; a non-blocking call that would fail is reported.

use crate::seed_spec;

use seed_spec::{grid, seed_builder};
use seqsync::internal::pipeline::{derive_unchecked, with_waits_blocking};
use seqsync::pipeline::{
    check_deadlock, check_deadlock_with, derive, CheckOptions, PipelineSpec, StageSpec, Verdict,
};

#[test]
fn seed_is_deadlock_free_over_grid() {
    for p in grid(1..=4) {
        let plan = derive(&seed_builder(p.0, p.1, p.2, p.3)).unwrap();
        let verdict = check_deadlock(&plan);
        assert!(verdict.is_deadlock_free(), "{p:?}: {verdict}");
    }
}

#[test]
fn seed_with_h_one_below_bound_deadlocks_in_record_h() {
    for (nin, nx, ny, nout) in [(2, 4, 3, 2), (1, 2, 2, 1), (3, 2, 4, 5), (2, 3, 1, 3)] {
        let mut spec = seed_builder(nin, nx, ny, nout);
        spec.set("h.max_size", nx.max(ny) - 1).unwrap();
        let plan = derive_unchecked(&spec).unwrap();
        let verdict = check_deadlock(&plan);
        let Verdict::Deadlock { trace } = &verdict else {
            panic!("expected a deadlock, got {verdict}");
        };
        let text = trace.to_string();
        let h2g = trace
            .stuck
            .iter()
            .find(|s| s.thread == "h2g")
            .expect("h2g stuck");
        assert!(h2g.text.starts_with("BLOCKED: record h seq "), "{text}");
        assert!(h2g.text.contains("ring full"), "{text}");
        let g2h = trace
            .stuck
            .iter()
            .find(|s| s.thread == "g2h")
            .expect("g2h stuck");
        assert!(
            g2h.text.starts_with("BLOCKED: wait on ring h at seq "),
            "{text}"
        );
        assert!(
            trace
                .summary
                .starts_with("deadlock: every thread is blocked: h2g waits for room in ring h"),
            "{text}"
        );
        // The trace ends with h2g blocked in record h (the stuck lines follow the steps).
        let last = text.lines().rev().nth(1).unwrap_or("");
        assert!(
            last.starts_with("g2h: BLOCKED") || last.starts_with("h2g: BLOCKED"),
            "{text}"
        );
        assert!(text.contains("(no-op)"), "{text}");
    }
}

#[test]
fn deadlock_trace_is_readable() {
    let mut spec = seed_builder(2, 4, 3, 2);
    spec.set("h.max_size", 3).unwrap();
    let verdict = check_deadlock(&derive_unchecked(&spec).unwrap());
    let trace = verdict.trace().expect("a trace");
    let text = verdict.to_string();
    assert!(text.starts_with("DEADLOCK:\n"), "{text}");
    assert!(
        text.contains("h2g: stage f waits on ring h at seq -4 (no-op)"),
        "{text}"
    );
    assert!(
        text.contains("h2g: stage h records seq 0 on ring h"),
        "{text}"
    );
    assert!(
        text.contains("h2g: BLOCKED: record h seq 3, ring full (3 of max_size 3 unreleased; oldest 0 waits for f on thread h2g)"),
        "{text}"
    );
    assert!(
        text.contains("g2h: BLOCKED: wait on ring h at seq 3, not yet recorded"),
        "{text}"
    );
    // Every step line is "thread: text" for one of the two threads.
    for s in &trace.steps {
        assert!(s.thread == "h2g" || s.thread == "g2h");
    }
}

#[test]
fn non_blocking_cross_thread_wait_is_reported() {
    // Two threads: a producer and a consumer that (wrongly) waits non-blocking.
    let spec = PipelineSpec::builder()
        .buffer("buf", 2)
        .thread("producer")
        .stage("p", StageSpec::on_stream("s_p").writes("buf"))
        .thread("consumer")
        .stage("c", StageSpec::on_stream("s_c").reads("buf"))
        .build()
        .unwrap();
    let plan = derive(&spec).unwrap();
    assert!(check_deadlock(&plan).is_deadlock_free());
    let plan = with_waits_blocking(plan, "consumer", false).unwrap();
    let verdict = check_deadlock(&plan);
    let Verdict::WouldFail { trace } = &verdict else {
        panic!("expected a failure, got {verdict}");
    };
    assert_eq!(trace.stuck[0].thread, "consumer");
    assert!(
        trace.stuck[0]
            .text
            .starts_with("FAILS: non-blocking wait on ring p at seq 0, not yet recorded"),
        "{verdict}"
    );
    assert!(trace.stuck[0].text.ends_with("NotYetProduced"), "{verdict}");
    assert!(
        trace.summary.contains("thread consumer would fail"),
        "{verdict}"
    );
    assert!(verdict.to_string().starts_with("WOULD FAIL:"));
}

#[test]
fn non_blocking_record_on_full_ring_is_reported() {
    let mut spec = seed_builder(3, 2, 2, 2);
    spec.set("f.max_size", 2).unwrap();
    let verdict = check_deadlock(&derive_unchecked(&spec).unwrap());
    let Verdict::WouldFail { trace } = &verdict else {
        panic!("expected a failure, got {verdict}");
    };
    assert!(
        trace.stuck[0]
            .text
            .starts_with("FAILS: non-blocking record f seq 2, ring full"),
        "{verdict}"
    );
    assert!(trace.stuck[0].text.ends_with("Overflow"), "{verdict}");
}

#[test]
fn independent_threads_are_checked_separately() {
    let spec = PipelineSpec::builder()
        .buffer("a", 2)
        .buffer("b", 3)
        .thread("one")
        .stage("p1", StageSpec::on_stream("s1").writes("a"))
        .stage("c1", StageSpec::on_stream("s2").reads("a"))
        .thread("two")
        .stage("p2", StageSpec::on_stream("s3").writes("b"))
        .stage("c2", StageSpec::on_host().reads("b").sync())
        .build()
        .unwrap();
    let verdict = check_deadlock(&derive(&spec).unwrap());
    assert!(verdict.is_deadlock_free(), "{verdict}");
}

/// A derived plan is proved from its dependency cycles: no search, so no state cap applies.
#[test]
fn a_derived_plan_is_proved_whatever_the_state_cap() {
    let plan = derive(&seed_builder(4, 4, 4, 4)).unwrap();
    let verdict = check_deadlock_with(&plan, CheckOptions { max_states: 10 });
    assert_eq!(verdict, Verdict::DeadlockFree { states: 0 }, "{verdict}");
}

/// The search still decides what the proof does not take (a non-blocking wait on another
/// thread's ring, which no derivation makes): with a tiny state cap, inconclusive.
#[test]
fn state_cap_gives_inconclusive() {
    let plan = derive(&seed_builder(4, 4, 4, 4)).unwrap();
    // h2g's blocking waits are on g2h's ring (the slot it overwrites): another thread's.
    let plan = with_waits_blocking(plan, "h2g", false).unwrap();
    let verdict = check_deadlock_with(&plan, CheckOptions { max_states: 10 });
    assert!(matches!(verdict, Verdict::Inconclusive { .. }), "{verdict}");
}

#[test]
fn compact_trace_folds_runs_but_keeps_order() {
    let mut spec = seed_builder(2, 4, 3, 2);
    spec.set("h.max_size", 3).unwrap();
    let verdict = check_deadlock(&derive_unchecked(&spec).unwrap());
    let trace = verdict.trace().unwrap();
    let lines = trace.compact(3);
    assert!(lines.len() < trace.steps.len(), "{lines:#?}");
    assert!(
        lines[0].starts_with("h2g: 48 steps: stage h2g waits on ring f at seq -2 (no-op) … "),
        "{lines:#?}"
    );
    assert_eq!(lines.last(), Some(&trace.summary));
    assert!(trace.summary.contains("it never will"), "{}", trace.summary);
}

/// A deadlock the proof finds while the search gives up is shown as its cycle of
/// dependencies, with lags summing to at most 0.
#[test]
fn a_deadlock_too_far_to_search_is_shown_as_its_cycle() {
    let mut spec = seed_builder(5, 4, 4, 4);
    spec.set("h.max_size", 3).unwrap();
    let plan = derive_unchecked(&spec).unwrap();
    let verdict = check_deadlock_with(&plan, CheckOptions { max_states: 3 });
    let Verdict::Deadlock { trace } = &verdict else {
        panic!("{verdict}");
    };
    assert!(trace.summary.contains("form a cycle"), "{verdict}");
    assert!(trace.steps.is_empty(), "{verdict}");
    assert!(
        trace.stuck.iter().any(|s| s.text.contains("ring h")),
        "{verdict}"
    );
    // With room to search, the same plan shows the interleaving instead.
    let searched = check_deadlock(&plan);
    assert!(
        searched.trace().is_some_and(|t| !t.steps.is_empty()),
        "{searched}"
    );
}

/// The proof's smallest size of every ring of the seed is the seed's deadlock bound: h2g 1,
/// f and g `nin`, h `max(nx, ny)`, g2h `nout` (the lag of h's wait, which a smaller ring never
/// releases at the end of a run); one below it the check finds the plan stuck, at it free.
#[test]
fn the_proof_finds_the_seeds_bounds() {
    let (nin, nx, ny, nout) = (3, 4, 2, 5);
    let spec = seed_builder(nin, nx, ny, nout);
    let plan = derive(&spec).unwrap();
    let sizes = seqsync::internal::pipeline::minimum_sizes(&plan);
    let got: Vec<(String, Option<u64>)> =
        sizes.iter().map(|s| (s.ring.clone(), s.max_size)).collect();
    let want = [
        ("h2g", 1),
        ("f", nin),
        ("g", nin),
        ("h", nx.max(ny)),
        ("g2h", nout),
    ]
    .map(|(r, m)| (r.to_string(), Some(m)));
    assert_eq!(got, want, "{sizes:#?}");
    for (ring, size) in plan.rings().iter().zip(&sizes) {
        let m = size.max_size.unwrap();
        assert!(
            ring.bound <= m && m <= ring.max_size,
            "{}: {size:?}",
            ring.name
        );
        assert!(!size.because.is_empty());
        let at = |max_size: u64| {
            let mut s = spec.clone();
            s.set(&format!("{}.max_size", ring.name), max_size).unwrap();
            check_deadlock(&derive_unchecked(&s).unwrap())
        };
        assert!(at(m).is_deadlock_free(), "{} at {m}", ring.name);
        if m > 1 {
            let v = at(m - 1);
            assert!(!v.is_deadlock_free(), "{} at {}: {v}", ring.name, m - 1);
        }
    }
}
