//! Command graphs on the host backend: random DAGs of Taskflow's families through every
//! lowering (results, 0 false dependencies for the exact lowering, events against the lower
//! bound), IREE's ordering cases, barriers, queue affinity, the queues, and the hazard
//! checker on the streams + events lowering.

use crate::graph_support;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use graph_support::{diamond, families, Rng};
use seqsync::backend::host::Chaos;
use seqsync::backend::{CommandBackend, CopyOp, FillOp};
use seqsync::graph::{Affinity, CommandBuffer, Graph, GraphError, Lowering, Queues};
use seqsync::hazard::ValidatingBackend;
use seqsync::internal::backend::host::HostKernel;
use seqsync::internal::graph::lower_levels;
use seqsync::internal::graph::{lower, Command, Dag, Schedule, Wait};
use seqsync::internal::hazard::{Access, ValidatingKernel};
use seqsync::HostBackend;

fn chaos(seed: u64) -> HostBackend {
    HostBackend::with_chaos(Chaos {
        seed,
        max_delay: Duration::from_micros(200),
    })
}

/// Each command c computes `value[c] = c + 1 + Σ value[p]` over its direct dependencies and
/// counts the dependencies that had not finished when it ran.
struct Observed {
    value: Arc<Vec<AtomicU64>>,
    done: Arc<Vec<AtomicBool>>,
    early: Arc<AtomicUsize>,
}

impl Observed {
    fn new(n: usize) -> Self {
        Observed {
            value: Arc::new((0..n).map(|_| AtomicU64::new(0)).collect()),
            done: Arc::new((0..n).map(|_| AtomicBool::new(false)).collect()),
            early: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn kernel(&self, c: usize, preds: Vec<usize>) -> HostKernel {
        let (value, done, early) = (self.value.clone(), self.done.clone(), self.early.clone());
        HostKernel::new(move || {
            let mut v = c as u64 + 1;
            for &p in &preds {
                if !done[p].load(Ordering::Acquire) {
                    early.fetch_add(1, Ordering::Relaxed);
                }
                v = v.wrapping_add(value[p].load(Ordering::Acquire));
            }
            value[c].store(v, Ordering::Release);
            done[c].store(true, Ordering::Release);
        })
    }

    fn expected(dag: &Dag) -> Vec<u64> {
        let mut v = vec![0u64; dag.len()];
        for &c in dag.topo() {
            v[c] = dag
                .preds(c)
                .iter()
                .fold(c as u64 + 1, |a, &p| a.wrapping_add(v[p]));
        }
        v
    }

    fn check(&self, dag: &Dag, what: &str) {
        let got: Vec<u64> = self
            .value
            .iter()
            .map(|x| x.load(Ordering::Acquire))
            .collect();
        assert_eq!(
            self.early.load(Ordering::Relaxed),
            0,
            "{what}: a command ran before a dependency"
        );
        assert_eq!(got, Observed::expected(dag), "{what}: wrong results");
    }
}

fn host_graph(dag: &Dag, obs: &Observed) -> Graph<HostBackend> {
    let ops = (0..dag.len())
        .map(|c| Command::Kernel(obs.kernel(c, dag.preds(c).to_vec())))
        .collect();
    Graph::new(dag.clone(), ops)
}

fn run_family(lowering: Lowering, seed: u64) {
    let host = chaos(seed);
    let mut pool = Queues::new(host);
    for (name, preds) in families(seed) {
        let dag = Dag::from_preds(&preds).unwrap();
        let obs = Observed::new(dag.len());
        let mut exe = host_graph(&dag, &obs).lower(lowering);
        let r = exe.report().clone();
        assert_eq!(r.missing_dependencies, 0, "{name}");
        if lowering == Lowering::Streams {
            // No false dependency: a set of unordered commands needs as many streams.
            assert!(
                r.streams >= r.width,
                "{name}: {} streams < width {}",
                r.streams,
                r.width
            );
            assert_eq!(r.false_dependencies, 0, "{name}");
            assert!(
                r.events as f64 <= 1.2 * r.events_lower_bound as f64,
                "{name}: {} events, lower bound {}",
                r.events,
                r.events_lower_bound
            );
        }
        pool.submit(&mut exe, Affinity::queue(0)).unwrap();
        pool.synchronize().unwrap();
        obs.check(&dag, &name);
    }
}

#[test]
fn cts_traversal_families_streams() {
    run_family(Lowering::Streams, 1);
}

#[test]
fn cts_traversal_families_levels() {
    run_family(Lowering::Levels, 2);
}

/// Taskflow's dependencies<diamond>: map nodes do inputs[i] += 1, join nodes double every
/// input; after `iterations`, every input is r (2, 6, 14, …).
#[test]
fn cts_dependencies_diamond() {
    let host = chaos(3);
    let mut pool = Queues::new(host.clone());
    for partitions in 1..=5 {
        for iterations in 1..=7 {
            let (preds, level) = diamond(partitions, iterations);
            let dag = Dag::from_preds(&preds).unwrap();
            let inputs = host.alloc_words(partitions).unwrap();
            let mut map_index = 0;
            let ops: Vec<Command<HostBackend>> = (0..dag.len())
                .map(|c| {
                    let m = inputs.clone();
                    if level[c] % 2 == 1 {
                        let i = map_index % partitions;
                        map_index += 1;
                        Command::Kernel(HostKernel::new(move || m.lock()[i] += 1))
                    } else {
                        Command::Kernel(HostKernel::new(move || {
                            m.lock().iter_mut().for_each(|v| *v *= 2)
                        }))
                    }
                })
                .collect();
            for lowering in [Lowering::Streams, Lowering::Levels] {
                host.write_words(&inputs, &vec![0; partitions]).unwrap();
                let mut exe = Graph::new(dag.clone(), ops.clone()).lower(lowering);
                pool.submit(&mut exe, Affinity::queue(0)).unwrap();
                pool.synchronize().unwrap();
                let mut r = 2;
                for _ in 1..iterations {
                    r = 2 * r + 2;
                }
                assert_eq!(host.read_words(&inputs).unwrap(), vec![r; partitions]);
            }
        }
    }
}

#[test]
fn exact_lowering_makes_no_false_dependencies_on_larger_random_dags() {
    let mut rng = Rng::new(7);
    for n in [100, 300] {
        let preds = graph_support::dense(&mut rng, n, 3);
        let dag = Dag::from_preds(&preds).unwrap();
        let a = seqsync::internal::graph::Analysis::of(&dag);
        let s = lower(&dag, &a, Lowering::Streams);
        let r = s.report(&dag, &a);
        assert_eq!((r.false_dependencies, r.missing_dependencies), (0, 0));
        // At the bound without joins, or below it where commands share their dependencies.
        assert_eq!(r.events, r.events_lower_bound - joins_saved(&s, &a));
        let l = lower(&dag, &a, Lowering::Levels).report(&dag, &a);
        assert_eq!(l.missing_dependencies, 0);
        assert!(l.false_dependencies > 0, "levels orders unrelated commands");
    }
}

/// A schedule that drops one wait orders fewer pairs than the graph: `compare` sees it, and a
/// run under chaos sees a command run before its dependency.
#[test]
fn a_dropped_wait_is_a_missing_dependency() {
    let (preds, _) = diamond(4, 3);
    let dag = Dag::from_preds(&preds).unwrap();
    let a = seqsync::internal::graph::Analysis::of(&dag);
    let good = lower(&dag, &a, Lowering::Streams);
    let mut waits = good.waits.clone();
    let dropped = waits.remove(0);
    let bad = Schedule::new(good.order.clone(), good.stream_of.clone(), waits);
    assert!(
        bad.compare(&a).1 > 0,
        "dropping {dropped:?} must lose an ordering"
    );
}

#[test]
fn cts_chained_fill_then_copy() {
    let host = HostBackend::new();
    let (src, dst) = (
        host.alloc_words(1024).unwrap(),
        host.alloc_words(1024).unwrap(),
    );
    let mut cb = CommandBuffer::<HostBackend>::new();
    cb.fill(
        "fill",
        FillOp {
            dst: src.clone(),
            offset: 0,
            words: 1024,
            value: 0x1122_3344,
        },
        &[],
    );
    cb.copy(
        "copy",
        CopyOp {
            src,
            src_offset: 0,
            dst: dst.clone(),
            dst_offset: 0,
            words: 1024,
        },
        &["fill"],
    );
    let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
    let mut pool = Queues::new(host.clone());
    pool.submit(&mut exe, Affinity::queue(0)).unwrap();
    pool.synchronize().unwrap();
    assert!(host
        .read_words(&dst)
        .unwrap()
        .iter()
        .all(|&w| w == 0x1122_3344));
}

#[test]
fn cts_barrier_preserves_ordering() {
    let host = chaos(4);
    let (src, dst) = (
        host.alloc_words(256).unwrap(),
        host.alloc_words(256).unwrap(),
    );
    let mut cb = CommandBuffer::<HostBackend>::new();
    cb.fill(
        "fill",
        FillOp {
            dst: src.clone(),
            offset: 0,
            words: 256,
            value: 0xBAAD_F00D,
        },
        &[],
    );
    cb.barrier();
    cb.copy(
        "copy",
        CopyOp {
            src,
            src_offset: 0,
            dst: dst.clone(),
            dst_offset: 0,
            words: 256,
        },
        &[],
    );
    let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
    assert_eq!(exe.graph().dag().preds(1), [0]);
    let mut pool = Queues::new(host.clone());
    pool.submit(&mut exe, Affinity::queue(0)).unwrap();
    pool.synchronize().unwrap();
    assert!(host
        .read_words(&dst)
        .unwrap()
        .iter()
        .all(|&w| w == 0xBAAD_F00D));
}

/// 64 iterations × 64 independent copies into disjoint slices, each iteration a submission on
/// one queue: the last pattern wins.
#[test]
fn cts_burst_copy_submit() {
    let host = chaos(5);
    let target = host.alloc_words(64 * 1024).unwrap();
    let mut pool = Queues::new(host.clone());
    for it in 0..64u32 {
        let src = host.alloc_words(1024).unwrap();
        host.write_words(&src, &[0xC0DE_0000 | it; 1024]).unwrap();
        let mut cb = CommandBuffer::<HostBackend>::new();
        for k in 0..64 {
            let copy = CopyOp {
                src: src.clone(),
                src_offset: 0,
                dst: target.clone(),
                dst_offset: k * 1024,
                words: 1024,
            };
            cb.copy(&format!("copy{k}"), copy, &[]);
        }
        let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
        assert_eq!(exe.report().events, 0);
        pool.submit(&mut exe, Affinity::queue(0)).unwrap();
    }
    pool.synchronize().unwrap();
    assert!(host
        .read_words(&target)
        .unwrap()
        .iter()
        .all(|&w| w == 0xC0DE_0000 | 63));
}

fn scale_kernel(
    m: seqsync::internal::backend::host::HostMemory,
    from: usize,
    to: usize,
    mul: u32,
    add: u32,
) -> HostKernel {
    HostKernel::new(move || {
        let mut w = m.lock();
        for i in 0..4 {
            w[to + i] = w[from + i] * mul + add;
        }
    })
}

/// IREE's ChainedDispatches: A: intermediate = in*2 → barrier → B: out = intermediate*1+10.
#[test]
fn cts_chained_dispatches() {
    let host = chaos(6);
    // in = words 0..4, intermediate = 4..8, out = 8..12
    let m = host.alloc_words(12).unwrap();
    host.write_words(&m, &[1, 2, 3, 4]).unwrap();
    let mut cb = CommandBuffer::<HostBackend>::new();
    cb.kernel("a", scale_kernel(m.clone(), 0, 4, 2, 0), &[]);
    cb.barrier();
    cb.kernel("b", scale_kernel(m.clone(), 4, 8, 1, 10), &[]);
    cb.barrier();
    let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
    let mut pool = Queues::new(host.clone());
    pool.submit(&mut exe, Affinity::queue(0)).unwrap();
    pool.synchronize().unwrap();
    let w = host.read_words(&m).unwrap();
    assert_eq!(w[8..12], [12, 14, 16, 18]);
    assert_eq!(w[4..8], [2, 4, 6, 8]);
}

/// IREE's FillDispatchDispatchPipeline: update in=[10,20,30,40] → barrier → in*3 → barrier → +7.
#[test]
fn cts_fill_dispatch_dispatch_pipeline() {
    let host = chaos(7);
    let m = host.alloc_words(12).unwrap();
    let mut cb = CommandBuffer::<HostBackend>::new();
    let u = m.clone();
    cb.host(
        "update",
        move || u.lock()[..4].copy_from_slice(&[10, 20, 30, 40]),
        &[],
    );
    cb.barrier();
    cb.kernel("times3", scale_kernel(m.clone(), 0, 4, 3, 0), &[]);
    cb.barrier();
    cb.kernel("plus7", scale_kernel(m.clone(), 4, 8, 1, 7), &[]);
    let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
    let mut pool = Queues::new(host.clone());
    pool.submit(&mut exe, Affinity::queue(0)).unwrap();
    pool.synchronize().unwrap();
    assert_eq!(host.read_words(&m).unwrap()[8..12], [37, 67, 97, 127]);
}

/// IREE's LargeFillCommandBuffer: 512 fills in one reusable command buffer, submitted twice.
#[test]
fn cts_large_fill_command_buffer() {
    let host = HostBackend::new();
    let m = host.alloc_words(512 * 4).unwrap();
    let mut cb = CommandBuffer::<HostBackend>::new();
    for i in 0..512u32 {
        let fill = FillOp {
            dst: m.clone(),
            offset: i as usize * 4,
            words: 4,
            value: 0xBD37_0000 | i,
        };
        cb.fill(&format!("fill{i}"), fill, &[]);
    }
    let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
    let mut pool = Queues::new(host.clone());
    for _ in 0..2 {
        host.write_words(&m, &vec![0; 2048]).unwrap();
        pool.submit(&mut exe, Affinity::queue(0)).unwrap();
        pool.synchronize().unwrap();
        let w = host.read_words(&m).unwrap();
        assert!((0..512).all(|i| w[i * 4..i * 4 + 4] == [0xBD37_0000 | i as u32; 4]));
    }
}

/// IREE's RapidFillSubmit: 200 one-shot fills on one queue; the last pattern wins.
#[test]
fn cts_rapid_fill_submit() {
    let host = chaos(8);
    let m = host.alloc_words(64).unwrap();
    let mut pool = Queues::new(host.clone());
    for i in 0..200u32 {
        let mut cb = CommandBuffer::<HostBackend>::new();
        cb.fill(
            "fill",
            FillOp {
                dst: m.clone(),
                offset: 0,
                words: 64,
                value: 0xBEEF_0000 | i,
            },
            &[],
        );
        let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
        pool.submit(&mut exe, Affinity::queue(0)).unwrap();
    }
    pool.synchronize().unwrap();
    assert!(host
        .read_words(&m)
        .unwrap()
        .iter()
        .all(|&w| w == 0xBEEF_0000 | 199));
    assert!(
        pool.len() <= 2,
        "one queue's submissions reuse streams: {}",
        pool.len()
    );
}

/// UR's SerializeInOrOutOfOrderQueue: one command buffer submitted 5 times to one queue.
#[test]
fn cts_serialize_in_order_queue() {
    let host = chaos(9);
    let m = host.alloc_words(1).unwrap();
    let mut cb = CommandBuffer::<HostBackend>::new();
    let (a, b) = (m.clone(), m.clone());
    // Two independent commands per submission, so a submission spans two streams.
    cb.kernel("inc", HostKernel::new(move || a.lock()[0] += 1), &[]);
    cb.kernel("double_check", HostKernel::new(move || drop(b.lock())), &[]);
    let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
    let mut pool = Queues::new(host.clone());
    let mut waits = 0;
    for _ in 0..5 {
        waits += pool
            .submit(&mut exe, Affinity::queue(0))
            .unwrap()
            .queue_waits;
    }
    pool.synchronize().unwrap();
    assert_eq!(host.read_words(&m).unwrap(), [5]);
    assert_eq!(pool.len(), 2, "the pool spans submissions");
    assert_eq!(
        waits, 4,
        "the root on the other stream waits for the previous submission's end (on the \
         queue's anchor); the root on the anchor follows it in stream order"
    );
}

/// IREE's barrier lowering keeps a barrier after a single command as that command: here, the
/// commands after it depend on it alone, one continues its stream and the other waits once.
#[test]
fn barrier_after_a_single_command_adds_no_join() {
    let mut cb = CommandBuffer::<HostBackend>::new();
    cb.host("a", || {}, &[]);
    cb.barrier();
    cb.host("b", || {}, &[]);
    cb.host("c", || {}, &[]);
    let exe = cb.finish().unwrap().lower(Lowering::Streams);
    let r = exe.report();
    assert_eq!((r.commands, r.streams, r.events), (3, 2, 1));
    assert_eq!(exe.analysis().reduced_edges(), 2);
}

#[test]
fn barriers_with_many_commands_on_each_side() {
    let host = chaos(10);
    let before = Arc::new(AtomicUsize::new(0));
    let wrong = Arc::new(AtomicUsize::new(0));
    let mut cb = CommandBuffer::<HostBackend>::new();
    const N: usize = 40;
    for i in 0..N {
        let b = before.clone();
        cb.host(
            &format!("before{i}"),
            move || {
                b.fetch_add(1, Ordering::SeqCst);
            },
            &[],
        );
    }
    cb.barrier();
    for i in 0..N {
        let (b, w) = (before.clone(), wrong.clone());
        cb.host(
            &format!("after{i}"),
            move || {
                if b.load(Ordering::SeqCst) != N {
                    w.fetch_add(1, Ordering::SeqCst);
                }
            },
            &[],
        );
    }
    let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
    let r = exe.report().clone();
    assert_eq!((r.width, r.streams, r.false_dependencies), (N, N, 0));
    // The first command after the barrier waits for the N - 1 on other streams, the other
    // N - 1 for its join: 2N - 2 waits, not the N² - N of one per dependency.
    assert_eq!(r.events, 2 * N - 2);
    assert_eq!(r.events_lower_bound, N * N - N);
    assert_eq!(exe.schedule().joins.len(), N - 1);
    let mut pool = Queues::new(host);
    pool.submit(&mut exe, Affinity::queue(0)).unwrap();
    pool.synchronize().unwrap();
    assert_eq!(wrong.load(Ordering::SeqCst), 0);
}

/// Two submissions with several affinity bits are not ordered: the first waits (up to 10 s)
/// for a flag the second sets. On one queue, the second waits for the first instead.
#[test]
fn queue_affinity_orders_single_bit_submissions_only() {
    for (affinity, expect_seen) in [(Affinity(0b11), true), (Affinity::queue(1), false)] {
        let host = HostBackend::new();
        let flag = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicBool::new(false));
        let timeout = if expect_seen {
            Duration::from_secs(10)
        } else {
            Duration::from_millis(200)
        };
        let mut first = CommandBuffer::<HostBackend>::new();
        let (f, s) = (flag.clone(), seen.clone());
        first.host(
            "wait_for_flag",
            move || {
                let t = Instant::now();
                while t.elapsed() < timeout {
                    if f.load(Ordering::SeqCst) {
                        s.store(true, Ordering::SeqCst);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            },
            &[],
        );
        let mut second = CommandBuffer::<HostBackend>::new();
        let f = flag.clone();
        second.host("set_flag", move || f.store(true, Ordering::SeqCst), &[]);
        let mut pool = Queues::new(host);
        pool.submit(
            &mut first.finish().unwrap().lower(Lowering::Streams),
            affinity,
        )
        .unwrap();
        let sub = pool
            .submit(
                &mut second.finish().unwrap().lower(Lowering::Streams),
                affinity,
            )
            .unwrap();
        pool.synchronize().unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), expect_seen, "{affinity:?}");
        assert_eq!(sub.new_streams, usize::from(expect_seen), "{affinity:?}");
    }
}

/// The hazard checker wrapping the streams + events lowering reports nothing on random DAGs;
/// with a wait dropped it reports the unordered access.
#[test]
fn hazard_checker_finds_nothing_on_the_streams_lowering() {
    let run = |preds: &[Vec<usize>], drop_wait: bool| {
        let vb = ValidatingBackend::new(HostBackend::new());
        let graph = || {
            let dag = Dag::from_preds(preds).unwrap();
            let ops = (0..dag.len())
                .map(|c| {
                    let mut accesses: Vec<Access> = dag
                        .preds(c)
                        .iter()
                        .map(|&p| Access::read(&format!("c{c}"), "slot", p, 0))
                        .collect();
                    accesses.push(Access::write(&format!("c{c}"), "slot", c, 0));
                    Command::Kernel(ValidatingKernel {
                        inner: HostKernel::new(|| {}),
                        accesses,
                    })
                })
                .collect();
            Graph::<ValidatingBackend<HostBackend>>::new(dag, ops)
        };
        let g = graph();
        let mut s = lower(g.dag(), g.analysis(), Lowering::Streams);
        let mut exe = if drop_wait {
            s = Schedule::new(s.order.clone(), s.stream_of.clone(), s.waits[1..].to_vec());
            // A schedule missing a dependency is refused by name...
            let missing = graph().with_schedule(s.clone());
            assert!(
                matches!(missing, Err(seqsync::graph::GraphError::Schedule { .. })),
                "a schedule missing a wait was taken"
            );
            // ... and run anyway (the internal door) for the checker to see.
            seqsync::internal::graph::with_schedule_allowing_missing(g, s).unwrap()
        } else {
            g.with_schedule(s).unwrap()
        };
        let mut pool = Queues::new(vb.clone());
        pool.submit(&mut exe, Affinity::queue(0)).unwrap();
        pool.synchronize().unwrap();
        vb.checker().hazards().len()
    };
    for (name, preds) in families(11) {
        assert_eq!(run(&preds, false), 0, "{name}");
    }
    let (preds, _) = diamond(3, 2);
    assert!(run(&preds, true) > 0, "a dropped wait must be reported");
}

#[test]
fn malformed_graphs_name_the_entry() {
    use seqsync::internal::graph::spec_toml::from_str;
    let err = |t: &str| from_str(t).unwrap_err().to_string();
    assert_eq!(
        err("[[command]]\nname='a'\nkind='kernel'\nafter=['nope']\n"),
        "entry 1 (`a`): after names unknown command `nope`"
    );
    assert_eq!(
        err("[[command]]\nname='a'\nkind='kernel'\n[[command]]\nbarrier=true\n[[command]]\nname='a'\nkind='copy'\n"),
        "entry 3 (`a`): duplicate name, first used by entry 1"
    );
    assert_eq!(
        err("[[command]]\nname='a'\nkind='kernel'\nafter=['c']\n[[command]]\nname='b'\nkind='kernel'\nafter=['a']\n[[command]]\nname='c'\nkind='kernel'\nafter=['b']\n"),
        "entry 1 (`a`): dependency cycle `a` -> `b` -> `c` -> `a`"
    );
    assert_eq!(
        err("[[command]]\nname='a'\nkind='kernel'\nafter=['a']\n"),
        "entry 1 (`a`): dependency cycle `a` -> `a`"
    );
    assert!(matches!(
        from_str("[[command]]\nkind='kernel'\n"),
        Err(GraphError::Entry { entry: 1, .. })
    ));
    assert!(matches!(
        from_str("[[command]]\nname='x'\nkind='kernel'\nfoo=1\n"),
        Err(GraphError::Toml { .. })
    ));
}

#[test]
fn levels_lowering_waits_for_whole_levels() {
    // a -> b -> c, x: level 1 = {b}, x alone in level 0.
    let dag = Dag::from_preds(&[vec![], vec![0], vec![1], vec![]]).unwrap();
    let a = seqsync::internal::graph::Analysis::of(&dag);
    let s = lower_levels(&dag, &a);
    assert!(s.waits.contains(&Wait { from: 3, to: 1 }), "{:?}", s.waits);
}

/// The waits a schedule's joins save: each command waiting for a join would otherwise wait for
/// each of its reduction predecessors on other streams.
fn joins_saved(
    s: &seqsync::internal::graph::Schedule,
    a: &seqsync::internal::graph::Analysis,
) -> usize {
    s.joins
        .iter()
        .map(|j| {
            let cross = a.reduced[j.to]
                .iter()
                .filter(|&&p| s.stream_of[p] != s.stream_of[j.to])
                .count();
            cross - 1
        })
        .sum()
}

/// Every graph of barrier groups, lowered to streams: exact (no false or missing dependency)
/// with joins, the waits those joins save off the bound, and every command run after its
/// dependencies on a chaotic host backend.
#[test]
fn barrier_groups_lower_to_joins_exactly() {
    let mut rng = Rng::new(11);
    let host = chaos(12);
    let mut pool = Queues::new(host);
    let mut joined = 0;
    for round in 0..60 {
        let preds = graph_support::barriers(&mut rng, 2 + round % 5);
        let dag = Dag::from_preds(&preds).unwrap();
        for lowering in [Lowering::Streams, Lowering::Levels] {
            let obs = Observed::new(dag.len());
            let mut exe = host_graph(&dag, &obs).lower(lowering);
            let r = exe.report().clone();
            assert_eq!(r.missing_dependencies, 0, "{round} {lowering:?}");
            if lowering == Lowering::Streams {
                assert_eq!(r.false_dependencies, 0, "{round}");
                let s = exe.schedule();
                assert_eq!(
                    r.events,
                    r.events_lower_bound - joins_saved(s, exe.analysis()),
                    "{round}"
                );
                joined += s.joins.len();
            }
            pool.submit(&mut exe, Affinity::queue(0)).unwrap();
            pool.synchronize().unwrap();
            obs.check(&dag, &format!("barriers {round} {lowering:?}"));
        }
    }
    assert!(joined > 50, "only {joined} joins in 60 graphs");
}

/// A schedule made elsewhere that does not run the graph is refused by name, never run and
/// never a panic: a command left out or twice, one out of range, a stream number past the
/// commands, a wait before the command it waits for (it would wait for an event not recorded
/// yet), a dependency not honoured. The lowering's own schedule is taken.
#[test]
fn a_schedule_that_does_not_run_the_graph_is_refused() {
    let (preds, _) = diamond(3, 2);
    let graph = || {
        let dag = Dag::from_preds(&preds).unwrap();
        let ops = (0..dag.len())
            .map(|_| Command::Kernel(HostKernel::new(|| {})))
            .collect();
        Graph::<HostBackend>::new(dag, ops)
    };
    let good = {
        let g = graph();
        lower(g.dag(), g.analysis(), Lowering::Streams)
    };
    let n = good.order.len();
    assert!(!good.waits.is_empty(), "the diamond needs waits");
    let refused = |s: Schedule, what: &str| match graph().with_schedule(s) {
        Err(seqsync::graph::GraphError::Schedule { message }) => message,
        Err(e) => panic!("{what}: {e}"),
        Ok(_) => panic!("{what}: taken"),
    };
    let mut order = good.order.clone();
    order.pop();
    refused(
        Schedule::new(order, good.stream_of.clone(), good.waits.clone()),
        "a command left out",
    );
    let mut twice = good.order.clone();
    twice[1] = twice[0];
    refused(
        Schedule::new(twice, good.stream_of.clone(), good.waits.clone()),
        "a command twice",
    );
    let mut out = good.clone();
    out.order[0] = n + 5;
    refused(out, "a command out of range");
    let mut far = good.clone();
    far.stream_of[0] = usize::MAX;
    refused(far, "a stream past the commands");
    let mut reversed = good.clone();
    reversed.waits[0] = seqsync::internal::graph::Wait {
        from: good.waits[0].to,
        to: good.waits[0].from,
    };
    refused(reversed, "a wait before what it waits for");
    let dropped = Schedule::new(
        good.order.clone(),
        good.stream_of.clone(),
        good.waits[1..].to_vec(),
    );
    let message = refused(dropped, "a dependency not honoured");
    assert!(message.contains("not honoured"), "{message}");
    graph().with_schedule(good).unwrap();
}
