//! Derivation: the seed's numbers, flags, lags and op sequence; overrides;
//! and each malformed-spec error with its line.

use crate::seed_spec;

use seed_spec::{grid, line_of, seed_builder, seed_toml};
use seqsync::internal::pipeline::{derive_unchecked, NamedOp};
use seqsync::pipeline::{
    derive, ConsumerKind, Op, PipelineSpec, Place, Plan, PlanError, StageSpec,
};

/// (nconsumers, max_size) of ring `name`.
fn params(plan: &Plan, name: &str) -> (u32, u64) {
    let r = plan.ring(name).expect("ring exists");
    (r.nconsumers, r.max_size)
}

fn assert_seed_numbers(plan: &Plan, (nin, nx, ny, nout): (u64, u64, u64, u64)) {
    let at = format!("nin={nin} nx={nx} ny={ny} nout={nout}");
    assert_eq!(params(plan, "h2g"), (2, 1), "h2g at {at}");
    assert_eq!(params(plan, "f"), (2, nin), "f at {at}");
    assert_eq!(params(plan, "g"), (2, nin), "g at {at}");
    assert_eq!(params(plan, "h"), (3, nx.max(ny).max(nout)), "h at {at}");
    assert_eq!(params(plan, "g2h"), (2, nout), "g2h at {at}");
}

#[test]
fn seed_numbers_from_builder_over_grid() {
    for p in grid(1..=4) {
        let plan = derive(&seed_builder(p.0, p.1, p.2, p.3)).unwrap();
        assert_seed_numbers(&plan, p);
    }
}

#[test]
fn seed_numbers_from_toml_over_grid() {
    for p in grid(1..=4) {
        let plan = derive(&seed_toml(p.0, p.1, p.2, p.3)).unwrap();
        assert_seed_numbers(&plan, p);
    }
}

#[test]
fn seed_toml_and_builder_give_the_same_plan() {
    for p in [(2, 4, 3, 2), (1, 1, 1, 1), (5, 2, 7, 3)] {
        let a = derive(&seed_builder(p.0, p.1, p.2, p.3)).unwrap();
        let b = derive(&seed_toml(p.0, p.1, p.2, p.3)).unwrap();
        assert_eq!(a, b);
    }
}

#[test]
fn seed_blocking_flags() {
    let plan = derive(&seed_builder(2, 4, 3, 2)).unwrap();
    let blocking_records: Vec<&str> = plan
        .rings()
        .iter()
        .filter(|r| r.record_blocking)
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(blocking_records, ["h", "g2h"]);
    let mut blocking_waits = Vec::new();
    for r in plan.rings() {
        for c in r.consumers.iter().filter(|c| c.blocking) {
            blocking_waits.push((c.stage.as_str(), r.name.as_str()));
        }
    }
    // g2h waits on h; h waits on g2h.
    assert_eq!(blocking_waits, [("g2h", "h"), ("h", "g2h")]);
}

#[test]
fn seed_consumer_lags() {
    let plan = derive(&seed_builder(2, 4, 3, 5)).unwrap();
    let lags = |ring: &str| -> Vec<(String, i64, ConsumerKind)> {
        plan.ring(ring)
            .unwrap()
            .consumers
            .iter()
            .map(|c| (c.stage.clone(), c.lag, c.kind))
            .collect()
    };
    use ConsumerKind::{Synchronize, Wait};
    let s = |x: &str| x.to_string();
    assert_eq!(lags("h2g"), [(s("f"), 0, Wait), (s("g"), 0, Wait)]);
    assert_eq!(lags("f"), [(s("h2g"), 2, Wait), (s("h"), 0, Wait)]);
    assert_eq!(lags("g"), [(s("h2g"), 2, Wait), (s("h"), 0, Wait)]);
    assert_eq!(
        lags("h"),
        [(s("f"), 4, Wait), (s("g"), 3, Wait), (s("g2h"), 0, Wait)]
    );
    assert_eq!(lags("g2h"), [(s("h"), 5, Wait), (s("g2h"), 0, Synchronize)]);
}

fn wait<'a>(
    stage: &'a str,
    ring: &'a str,
    lag: u64,
    blocking: bool,
    stream: &'a str,
) -> NamedOp<'a> {
    NamedOp::Wait {
        stage,
        ring,
        lag: lag as i64,
        blocking,
        stream,
    }
}

fn launch_record<'a>(stage: &'a str, blocking: bool, stream: &'a str) -> [NamedOp<'a>; 2] {
    [
        NamedOp::Launch { stage },
        NamedOp::Record {
            stage,
            ring: stage,
            blocking,
            stream: Some(stream),
        },
    ]
}

/// Thread `name`'s ops, with names.
fn named_ops<'p>(plan: &'p Plan, name: &str) -> Vec<NamedOp<'p>> {
    plan.thread(name)
        .unwrap()
        .ops
        .iter()
        .map(|op| plan.named(op))
        .collect()
}

#[test]
fn seed_op_sequence_matches_the_seed_code() {
    let (nin, nx, ny, nout) = (2, 4, 3, 5);
    let plan = derive(&seed_builder(nin, nx, ny, nout)).unwrap();
    let mut h2g = vec![
        wait("h2g", "f", nin, false, "s_h2g"),
        wait("h2g", "g", nin, false, "s_h2g"),
    ];
    h2g.extend(launch_record("h2g", false, "s_h2g"));
    h2g.push(wait("f", "h2g", 0, false, "s_f"));
    h2g.push(wait("f", "h", nx, false, "s_f"));
    h2g.extend(launch_record("f", false, "s_f"));
    h2g.push(wait("g", "h2g", 0, false, "s_g"));
    h2g.push(wait("g", "h", ny, false, "s_g"));
    h2g.extend(launch_record("g", false, "s_g"));
    h2g.push(wait("h", "f", 0, false, "s_h"));
    h2g.push(wait("h", "g", 0, false, "s_h"));
    h2g.push(wait("h", "g2h", nout, true, "s_h"));
    h2g.extend(launch_record("h", true, "s_h"));
    assert_eq!(named_ops(&plan, "h2g"), h2g);

    let mut g2h = vec![wait("g2h", "h", 0, true, "s_g2h")];
    g2h.extend(launch_record("g2h", true, "s_g2h"));
    g2h.push(NamedOp::Synchronize {
        stage: "g2h",
        ring: "g2h",
        lag: 0,
        blocking: false,
    });
    assert_eq!(named_ops(&plan, "g2h"), g2h);
}

/// The ops carry resolved indices: stage `i` produces ring `i`, every stream index names a
/// stream of the plan, and each stage's stream is the one its ops use.
#[test]
fn plan_ops_carry_resolved_indices() {
    let plan = derive(&seed_builder(2, 4, 3, 5)).unwrap();
    assert_eq!(plan.streams(), ["s_h2g", "s_f", "s_g", "s_h", "s_g2h"]);
    for (i, (stage, ring)) in plan.stages().iter().zip(plan.rings()).enumerate() {
        assert_eq!(stage.name, ring.name, "stage {i} produces ring {i}");
        assert_eq!(plan.threads()[stage.thread].name, ring.thread);
    }
    let h = plan.stage_index("h").unwrap();
    assert_eq!(plan.stages()[h].stream, Some(3));
    let ops = &plan.thread("h2g").unwrap().ops;
    assert!(ops.contains(&Op::Wait {
        stage: h,
        ring: plan.ring_index("g2h").unwrap(),
        lag: 5,
        blocking: true,
        stream: 3,
    }));
    assert!(ops.contains(&Op::Record {
        stage: h,
        ring: h,
        blocking: true,
        stream: Some(3),
    }));
}

#[test]
fn size_reasons_are_sentences() {
    let plan = derive(&seed_builder(2, 4, 3, 3)).unwrap();
    let h = plan.ring("h").unwrap();
    assert_eq!(
        h.reason,
        "f waits at lag nx=4 on the same thread, earlier in the loop"
    );
    assert_eq!(h.bound, 4);
    let g2h = plan.ring("g2h").unwrap();
    assert_eq!(
        g2h.reason,
        "h on thread h2g: slack = slots of `out` (nout=3)"
    );
    let h2g = plan.ring("h2g").unwrap();
    assert!(h2g.reason.contains("later in the loop"), "{}", h2g.reason);
    let table = plan.to_string();
    assert!(table.contains("max_size"), "{table}");
    assert!(table.contains("g2h@0 blocking"), "{table}");
    assert!(table.contains("thread h2g: for s in 0.. {"), "{table}");
}

#[test]
fn plan_serializes_to_the_documented_json() {
    let plan = derive(&seed_builder(2, 4, 3, 2)).unwrap();
    let v = serde_json::to_value(&plan).unwrap();
    let h = &v["rings"][3];
    assert_eq!(h["name"], "h");
    assert_eq!(h["nconsumers"], 3);
    assert_eq!(h["max_size"], 4);
    assert_eq!(h["record_blocking"], true);
    assert_eq!(h["consumers"][2]["stage"], "g2h");
    assert_eq!(h["consumers"][2]["lag"], 0);
    assert_eq!(h["consumers"][2]["blocking"], true);
    assert_eq!(v["threads"][1]["ops"][0]["op"], "Wait");
    assert!(plan.to_json().contains("\"rings\""));
}

#[test]
fn max_size_override_at_or_above_bound_is_used() {
    let mut spec = seed_builder(2, 4, 3, 2);
    spec.set("h.max_size", 4).unwrap();
    spec.apply_assignment("g2h.max_size=7").unwrap();
    let plan = derive(&spec).unwrap();
    assert_eq!(params(&plan, "h"), (3, 4));
    assert_eq!(params(&plan, "g2h"), (2, 7));
    assert!(plan
        .ring("g2h")
        .unwrap()
        .reason
        .starts_with("set to 7 by the user"));
}

#[test]
fn max_size_override_below_bound_is_rejected() {
    let mut spec = seed_builder(2, 4, 3, 2);
    spec.set("h.max_size", 3).unwrap();
    let err = derive(&spec).unwrap_err();
    match &err {
        PlanError::MaxSizeBelowBound {
            ring,
            requested,
            bound,
            reason,
        } => {
            assert_eq!((ring.as_str(), *requested, *bound), ("h", 3, 4));
            assert!(reason.contains("f waits at lag nx=4"), "{reason}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("max_size 3 is below the bound 4"));
    // The unchecked path accepts it (for the deadlock demo).
    let plan = derive_unchecked(&spec).unwrap();
    assert_eq!(params(&plan, "h"), (3, 3));
    assert!(plan.ring("h").unwrap().reason.contains("BELOW"));
}

#[test]
fn parameter_override_changes_the_numbers() {
    let mut spec = seed_builder(2, 4, 3, 2);
    spec.apply_assignment("nin=5").unwrap();
    assert_eq!(params(&derive(&spec).unwrap(), "f"), (2, 5));
}

#[test]
fn unknown_override_is_an_error() {
    let mut spec = seed_builder(2, 4, 3, 2);
    assert!(matches!(
        spec.set("nz", 1),
        Err(PlanError::UnknownOverride { .. })
    ));
    assert!(matches!(
        spec.set("q.max_size", 1),
        Err(PlanError::UnknownOverride { .. })
    ));
    assert!(matches!(
        spec.set("h.max_size", 0),
        Err(PlanError::InvalidValue { .. })
    ));
    assert!(matches!(
        spec.apply_assignment("nin"),
        Err(PlanError::BadAssignment { .. })
    ));
    assert!(matches!(
        spec.apply_assignment("nin=-1"),
        Err(PlanError::BadAssignment { .. })
    ));
}

#[test]
fn parameter_set_to_zero_is_caught_by_derive() {
    let mut spec = seed_builder(2, 4, 3, 2);
    spec.set("nx", 0).unwrap();
    let err = derive(&spec).unwrap_err();
    assert!(matches!(err, PlanError::ZeroSlots { ref buffer, .. } if buffer == "x"));
    assert_eq!(
        err.to_string(),
        "buffer `x` has 0 slots (parameter `nx` is 0)"
    );
}

#[test]
fn host_stage_synchronizes_instead_of_waiting() {
    let spec = PipelineSpec::builder()
        .buffer("a", 2)
        .thread("t")
        .stage("p", StageSpec::on_stream("s").writes("a"))
        .stage("c", StageSpec::on_host().reads("a"))
        .build()
        .unwrap();
    let plan = derive(&spec).unwrap();
    let ops = named_ops(&plan, "t");
    assert!(ops.contains(&NamedOp::Synchronize {
        stage: "c",
        ring: "p",
        lag: 0,
        blocking: false
    }));
    assert!(ops.contains(&NamedOp::Record {
        stage: "c",
        ring: "c",
        blocking: false,
        stream: None
    }));
    assert_eq!(plan.ring("c").unwrap().place, Place::Host);
    // p waits on c at lag 2 (different places), earlier in the loop: needs 2.
    assert_eq!(params(&plan, "c"), (1, 2));
    assert_eq!(params(&plan, "p"), (1, 1));
}

#[test]
fn same_stream_reader_needs_no_slot_wait() {
    let spec = PipelineSpec::builder()
        .buffer("a", 2)
        .thread("t")
        .stage("p", StageSpec::on_stream("s").writes("a"))
        .stage("c", StageSpec::on_stream("s").reads("a"))
        .build()
        .unwrap();
    let plan = derive(&spec).unwrap();
    assert_eq!(params(&plan, "c"), (0, 1));
    assert!(plan.ring("c").unwrap().reason.starts_with("no consumers"));
    // p's ring is read by c on the same stream: waited at lag 0, later in the loop.
    assert_eq!(params(&plan, "p"), (1, 1));
}

#[test]
fn builder_stage_before_thread_is_an_error() {
    let err = PipelineSpec::builder()
        .stage("p", StageSpec::on_stream("s"))
        .build()
        .unwrap_err();
    assert!(matches!(err, PlanError::StageOutsideThread { .. }));
}

#[test]
fn errors_are_send_sync_static() {
    fn check<T: std::error::Error + Send + Sync + 'static>() {}
    check::<PlanError>();
}

// ---- malformed specs: variant and line ----

/// A two-thread spec skeleton; `extra_stage` is appended to thread `a`.
const BASE: &str = r#"
[params]
n = 2

[buffers]
b = "n"
c = 3

[[thread]]
name = "a"

[[thread.stage]]
name = "p"
stream = "s1"
writes = ["b"]

[[thread.stage]]
name = "q"
stream = "s2"
reads = ["b"]
writes = ["c"]

[[thread]]
name = "z"

[[thread.stage]]
name = "r"
stream = "s3"
reads = ["c"]
"#;

fn parse_err(src: &str) -> PlanError {
    PipelineSpec::from_toml(src).expect_err("spec should be rejected")
}

#[test]
fn base_spec_is_valid() {
    let plan = derive(&PipelineSpec::from_toml(BASE).unwrap()).unwrap();
    assert_eq!(params(&plan, "q"), (2, 3));
}

#[test]
fn unknown_buffer_names_line() {
    let src = BASE.replace("reads = [\"c\"]", "reads = [\"nope\"]");
    let err = parse_err(&src);
    assert!(
        matches!(&err, PlanError::UnknownBuffer { buffer, stage, .. } if buffer == "nope" && stage == "r"),
        "{err:?}"
    );
    assert_eq!(err.line(), Some(line_of(&src, "\"nope\"")));
    assert!(err
        .to_string()
        .starts_with(&format!("line {}: ", line_of(&src, "\"nope\""))));
}

#[test]
fn buffer_read_but_never_written_names_line() {
    let src = BASE
        .replace("c = 3", "c = 3\nd = 1")
        .replace("reads = [\"c\"]", "reads = [\"c\", \"d\"]");
    let err = parse_err(&src);
    assert!(
        matches!(&err, PlanError::NeverWritten { buffer, reader, .. } if buffer == "d" && reader == "r"),
        "{err:?}"
    );
    assert_eq!(err.line(), Some(line_of(&src, "\"c\", \"d\"")));
}

#[test]
fn lag0_cycle_within_a_thread_names_line() {
    // p reads c, which q (later in the same thread) writes.
    let src = BASE.replace("writes = [\"b\"]", "writes = [\"b\"]\nreads = [\"c\"]");
    let err = parse_err(&src);
    match &err {
        PlanError::LagZeroCycle { cycle, .. } => {
            assert!(cycle.contains(&"p".to_string()) && cycle.contains(&"q".to_string()))
        }
        other => panic!("unexpected {other:?}"),
    }
    let line = src
        .lines()
        .position(|l| l == "reads = [\"c\"]")
        .map(|i| i + 1);
    assert_eq!(err.line(), line);
}

#[test]
fn lag0_cycle_across_threads_names_line() {
    // z: r reads c (from q), then t writes e; a: p reads e at lag 0 before q.
    let src = BASE
        .replace("c = 3", "c = 3\ne = 1")
        .replace("writes = [\"b\"]", "writes = [\"b\"]\nreads = [\"e\"]")
        + "\n[[thread.stage]]\nname = \"t\"\nstream = \"s4\"\nwrites = [\"e\"]\n";
    let err = parse_err(&src);
    assert!(matches!(err, PlanError::LagZeroCycle { .. }), "{err:?}");
    assert_eq!(err.line(), Some(line_of(&src, "reads = [\"e\"]")));
    assert!(err.to_string().contains("runs after"), "{err}");
}

#[test]
fn stage_reading_its_own_output_is_a_cycle() {
    let src = BASE.replace("reads = [\"b\"]", "reads = [\"b\", \"c\"]");
    let err = parse_err(&src);
    assert!(
        matches!(&err, PlanError::LagZeroCycle { cycle, .. } if cycle == &["q".to_string()]),
        "{err:?}"
    );
    assert_eq!(err.line(), Some(line_of(&src, "\"b\", \"c\"")));
}

#[test]
fn zero_slot_buffer_names_line() {
    let src = BASE.replace("c = 3", "c = 0");
    let err = parse_err(&src);
    assert!(matches!(&err, PlanError::ZeroSlots { buffer, param: None, .. } if buffer == "c"));
    assert_eq!(err.line(), Some(line_of(&src, "c = 0")));

    let src = BASE.replace("n = 2", "n = 0");
    let err = parse_err(&src);
    assert!(
        matches!(&err, PlanError::ZeroSlots { buffer, param: Some(p), .. } if buffer == "b" && p == "n")
    );
    assert_eq!(err.line(), Some(line_of(&src, "b = \"n\"")));
}

#[test]
fn duplicate_thread_names_line() {
    let src = BASE.replace("name = \"z\"", "name = \"a\"");
    let err = parse_err(&src);
    assert!(
        matches!(&err, PlanError::DuplicateName { kind: "thread", name, first_line: Some(_), .. } if name == "a"),
        "{err:?}"
    );
    let second = src
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == "name = \"a\"")
        .nth(1)
        .map(|(i, _)| i + 1);
    assert_eq!(err.line(), second);
}

#[test]
fn duplicate_stage_names_line() {
    let src = BASE.replace("name = \"r\"", "name = \"p\"");
    let err = parse_err(&src);
    assert!(
        matches!(&err, PlanError::DuplicateName { kind: "stage", name, .. } if name == "p"),
        "{err:?}"
    );
    let second = src
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == "name = \"p\"")
        .nth(1)
        .map(|(i, _)| i + 1);
    assert_eq!(err.line(), second);
}

#[test]
fn duplicate_buffer_key_names_line() {
    let src = BASE.replace("c = 3", "c = 3\nb = 4");
    let err = parse_err(&src);
    assert!(matches!(err, PlanError::Toml { .. }), "{err:?}");
    assert_eq!(err.line(), Some(line_of(&src, "b = 4")));
}

#[test]
fn duplicate_buffer_in_builder_is_an_error() {
    let err = PipelineSpec::builder()
        .buffer("a", 1)
        .buffer("a", 2)
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        PlanError::DuplicateName { kind: "buffer", .. }
    ));
}

#[test]
fn unknown_parameter_names_line() {
    let src = BASE.replace("b = \"n\"", "b = \"m\"");
    let err = parse_err(&src);
    assert!(
        matches!(&err, PlanError::UnknownParam { param, buffer, .. } if param == "m" && buffer == "b"),
        "{err:?}"
    );
    assert_eq!(err.line(), Some(line_of(&src, "b = \"m\"")));
}

#[test]
fn buffer_written_twice_names_line() {
    let src = BASE.replace("reads = [\"c\"]", "reads = [\"c\"]\nwrites = [\"b\"]");
    let err = parse_err(&src);
    assert!(
        matches!(&err, PlanError::MultipleWriters { buffer, first, second, .. } if buffer == "b" && first == "p" && second == "r"),
        "{err:?}"
    );
    let line = src
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == "writes = [\"b\"]")
        .nth(1)
        .map(|(i, _)| i + 1);
    assert_eq!(err.line(), line);
}

#[test]
fn undeclared_stream_names_line() {
    let src = format!("streams = [\"s1\", \"s2\"]\n{BASE}");
    let err = parse_err(&src);
    assert!(
        matches!(&err, PlanError::UnknownStream { stream, .. } if stream == "s3"),
        "{err:?}"
    );
    assert_eq!(err.line(), Some(line_of(&src, "stream = \"s3\"")));
}

#[test]
fn stage_without_place_names_line() {
    let src = BASE.replace("stream = \"s3\"\n", "");
    let err = parse_err(&src);
    assert!(matches!(err, PlanError::BadPlacement { .. }), "{err:?}");
    assert_eq!(err.line(), Some(line_of(&src, "name = \"r\"")));
}

#[test]
fn unknown_key_and_negative_value_name_line() {
    let src = BASE.replace("stream = \"s3\"", "stream = \"s3\"\nlag = 2");
    let err = parse_err(&src);
    assert!(matches!(err, PlanError::Toml { .. }), "{err:?}");
    assert_eq!(err.line(), Some(line_of(&src, "lag = 2")));

    let src = BASE.replace("n = 2", "n = -2");
    let err = parse_err(&src);
    assert!(matches!(err, PlanError::InvalidValue { .. }), "{err:?}");
    assert_eq!(err.line(), Some(line_of(&src, "n = -2")));
}

#[test]
fn max_size_table_in_toml() {
    let src = format!("{BASE}\n[max_size]\nq = 9\n");
    // A table after [[thread]] arrays is still top-level in TOML.
    let plan = derive(&PipelineSpec::from_toml(&src).unwrap()).unwrap();
    assert_eq!(params(&plan, "q"), (2, 9));

    let src = format!("{BASE}\n[max_size]\nnope = 9\n");
    let err = parse_err(&src);
    assert!(matches!(err, PlanError::UnknownOverride { .. }), "{err:?}");
    assert_eq!(err.line(), Some(line_of(&src, "nope = 9")));
}

/// A buffer with `n` readers (host stages on one thread) behind one writer.
fn readers(n: usize) -> seqsync::pipeline::PipelineSpec {
    let mut b = seqsync::pipeline::PipelineSpec::builder()
        .buffer("x", 2)
        .thread("t")
        .stage(
            "w",
            seqsync::pipeline::StageSpec::on_stream("s").writes("x"),
        );
    for i in 0..n {
        b = b.stage(
            format!("r{i}"),
            seqsync::pipeline::StageSpec::on_host().reads("x"),
        );
    }
    b.build().unwrap()
}

/// The ring's consumer limit (1023) is enforced where the readers are declared: 1024 readers
/// of one buffer are refused by `derive` (so `check` no longer says deadlock-free for a plan
/// `run` then refuses); 1023 derive.
#[test]
fn more_readers_than_a_ring_has_consumers_are_refused_by_derive() {
    let max = seqsync::ring::MAX_CONSUMERS as usize;
    let plan = seqsync::pipeline::derive(&readers(max)).unwrap();
    assert_eq!(
        plan.rings().iter().map(|r| r.nconsumers).max(),
        Some(max as u32)
    );
    let err = seqsync::pipeline::derive(&readers(max + 1)).unwrap_err();
    assert!(
        matches!(&err, seqsync::pipeline::PlanError::InvalidValue { name, value, .. }
            if name == "w.nconsumers" && *value == (max + 1) as i128),
        "{err}"
    );
}
