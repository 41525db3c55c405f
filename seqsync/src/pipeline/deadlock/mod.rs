//! Deadlock check: a proof from the cycles of the dependencies where every call blocks
//! (`marked.rs`: polynomial, any size), else a search over every interleaving of the threads'
//! loops.
//!
//! A group of linked threads whose calls all block, or whose non-blocking calls are the kind the
//! derivation makes (the ring's other end on the same thread, never unready), is decided by
//! `marked.rs`; a deadlock it proves is then shown as the search's shortest interleaving when
//! the search finds one within the state cap, else as the cycle itself. Other groups with a
//! non-blocking call are searched (and may be inconclusive). The search also cross-checks the
//! proof in the tests.
//!
//! It may use: the derived [`Plan`] and the spec's limits only: it runs nothing,
//! so no ring and no backend.
//!
//! A state is, per thread, its iteration (batch number) and its index into its
//! loop body. Every ring counter follows from these: the producer's thread
//! position says how many seqs are recorded; a consumer at lag `L` that has
//! executed its op in iteration `t` has released every seq `< t - L + 1`
//! (negative seqs never count). A thread cannot step when it is in a blocking
//! wait on an unrecorded seq or a blocking record on a full ring; a
//! *non-blocking* call in that situation is an error state (the program would
//! throw), reported like a deadlock but with its own wording.
//!
//! Iterations are unbounded, but threads linked by rings stay within bounded
//! distance of each other, so states are keyed by (indices, iterations minus
//! the smallest, min(smallest iteration, largest lag)): beyond the largest lag
//! no seq is negative any more and behaviour is translation-invariant. Threads
//! not linked by any ring are checked separately. The search is breadth-first,
//! so a reported trace is a shortest interleaving reaching the stuck state.
//!
//! # Runs end
//!
//! The runtime runs `0..batches`, not an endless loop, and the end of a run can deadlock a
//! schedule whose endless loops cannot: a consumer at lag `L` releases seq `s` in its
//! iteration `s + L`, so it never releases the last `L` seqs of a run. A producer then waits
//! at the end for releases that never come when its ring holds fewer than `L` entries
//! (`max_size < L`): recording seq `n - 1` needs seq `n - 1 - max_size` released, and the
//! consumer's last release is seq `n - 1 - L`.
//!
//! That is the only way a run can end stuck when the endless loops cannot get stuck: in a
//! stuck finite run, a thread still running waits either for a record (every seq below `n`
//! is recorded by a thread that finished, so its producer is still running) or for room in a
//! ring (a finished consumer has released every seq below `n - L`, which is all a record of a
//! seq below `n` needs when `max_size >= L`). So with `max_size >= L` for every consumer, the
//! threads still running are blocked only by each other; the same state is reachable in the
//! endless loops, where the finished threads, linked to the blocked ones by rings, run on
//! until they block too — a deadlock the endless search finds. So [`check_deadlock`] searches
//! the endless loops, then, for every ring with a consumer whose lag exceeds the ring's
//! `max_size`, searches a run of `max_size + 1` batches (the shortest run that ends stuck) to
//! show the interleaving. The derivation never gives a ring less than the lag of any of its
//! consumers; only a `max_size` override can.
//!
//! | file | what it is |
//! |---|---|
//! | `lower.rs` | the plan lowered to the model, checked for consistency |
//! | `marked.rs` | the proof for threads whose calls all block: every dependency cycle positive |
//! | `model.rs` | the model: a state's ring counters and what each thread does next |
//! | `search.rs` | the breadth-first search over states |
//! | `replay.rs` | a stuck state's interleaving, replayed into words |
//! | `verdict.rs` | the outcome: [`Verdict`], [`Trace`], [`Step`] |

mod lower;
mod marked;
mod model;
mod replay;
mod search;
mod verdict;

pub use verdict::{Step, Trace, Verdict};

use super::plan::Plan;
use model::Model;
use search::Search;

/// Default cap on explored states before the check gives up as inconclusive.
pub const DEFAULT_MAX_STATES: usize = 2_000_000;

/// Options of [`check_deadlock_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// Give up (inconclusive) after this many distinct states.
    pub max_states: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            max_states: DEFAULT_MAX_STATES,
        }
    }
}

/// Checks `plan` with the default state cap. It cannot fail: [`derive`](super::derive) made
/// the plan, so it is consistent; a search that reaches the cap says so
/// ([`Verdict::Inconclusive`]).
pub fn check_deadlock(plan: &Plan) -> Verdict {
    check_deadlock_with(plan, CheckOptions::default())
}

/// Checks `plan` with explicit options.
pub fn check_deadlock_with(plan: &Plan, options: CheckOptions) -> Verdict {
    check_lowered(Model::new(plan), options)
}

/// [`check_deadlock_with`] on the lowered plan.
fn check_lowered(model: Model, options: CheckOptions) -> Verdict {
    let mut total = 0;
    let mut inconclusive = false;
    for component in model.components() {
        if marked::decidable(&model, &component) {
            let edges = marked::edges(&model, &component);
            if let Err(cycle) = marked::nonpositive_cycle(&edges) {
                return match Search::new(&model, component, options.max_states).run() {
                    stuck @ (Verdict::Deadlock { .. } | Verdict::WouldFail { .. }) => stuck,
                    _ => Verdict::Deadlock {
                        trace: cycle_trace(&model, &cycle),
                    },
                };
            }
            continue;
        }
        match Search::new(&model, component, options.max_states).run() {
            Verdict::DeadlockFree { states } => total += states,
            Verdict::Inconclusive { states } => {
                total += states;
                inconclusive = true;
            }
            stuck => return stuck,
        }
    }
    // The end of a run (see the module docs): a consumer lagging by more than its ring holds.
    let mut ends: Vec<i64> = model
        .rings
        .iter()
        .filter(|r| r.consumers.iter().any(|c| c.lag > r.max_size))
        .map(|r| r.max_size + 1)
        .collect();
    ends.sort_unstable();
    ends.dedup();
    for n in ends {
        let finite = Model {
            end: Some(n),
            ..model.clone()
        };
        for component in finite.components() {
            if marked::decidable(&finite, &component) {
                // Decided (see "Runs end"): the endless loops are live and every call blocks,
                // so the run ends stuck exactly on a ring a consumer lags past.
                let Some(r) = finite.rings.iter().find(|r| {
                    r.max_size + 1 == n
                        && r.consumers.iter().any(|c| c.lag > r.max_size)
                        && r.producer
                            .as_ref()
                            .is_some_and(|(p, _, _)| component.contains(p))
                }) else {
                    continue;
                };
                return match Search::new(&finite, component, options.max_states).run() {
                    stuck @ (Verdict::Deadlock { .. } | Verdict::WouldFail { .. }) => stuck,
                    _ => Verdict::Deadlock {
                        trace: end_trace(r),
                    },
                };
            }
            match Search::new(&finite, component, options.max_states).run() {
                Verdict::DeadlockFree { states } => total += states,
                Verdict::Inconclusive { states } => {
                    total += states;
                    inconclusive = true;
                }
                stuck => return stuck,
            }
        }
    }
    if inconclusive {
        Verdict::Inconclusive { states: total }
    } else {
        Verdict::DeadlockFree { states: total }
    }
}

/// The smallest `max_size` a ring may have, every other size as it is, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SizeBound {
    /// The ring.
    pub ring: String,
    /// The smallest `max_size` that keeps its threads from deadlocking (and its non-blocking
    /// record from overflowing), or `None` when the proof does not decide its threads or no
    /// size of this ring helps.
    pub max_size: Option<u64>,
    /// The cycle (or the run's end) that forces it, in words.
    pub because: String,
}

/// Every ring's smallest `max_size`, from the cycles of the dependencies (see `marked.rs`):
/// one below it, the plan can get stuck; at it, the ring's cycles are all positive.
///
/// ```
/// use seqsync::pipeline::{derive, minimum_sizes, PipelineSpec, StageSpec};
///
/// let spec = PipelineSpec::builder()
///     .buffer("x", 2)
///     .thread("t")
///     .stage("p", StageSpec::on_stream("s").writes("x"))
///     .thread("u")
///     .stage("c", StageSpec::on_stream("s2").reads("x"))
///     .build()?;
/// let bounds = minimum_sizes(&derive(&spec)?);
/// assert_eq!(bounds[0].ring, "p");
/// assert_eq!(bounds[0].max_size, Some(1));
/// # Ok::<(), seqsync::pipeline::PlanError>(())
/// ```
pub fn minimum_sizes(plan: &Plan) -> Vec<SizeBound> {
    let model = Model::new(plan);
    let components = model.components();
    // One shortest-path search per ring over its group's dependencies: a bounded amount of
    // work in all, so that a plan of tens of thousands of stages is still checked at once.
    let ops: usize = model.threads.iter().map(|(_, ops)| ops.len()).sum();
    let work = model.rings.len().saturating_mul(ops.saturating_mul(3));
    if work > MINIMUM_SIZES_WORK {
        return model
            .rings
            .iter()
            .map(|r| SizeBound {
                ring: r.name.clone(),
                max_size: None,
                because: format!(
                    "not computed: {} rings over {ops} ops is past the {MINIMUM_SIZES_WORK} \
                     steps the per-ring search may take",
                    model.rings.len()
                ),
            })
            .collect();
    }
    let groups: Vec<marked::Group> = components
        .iter()
        .map(|c| marked::Group::new(&model, c))
        .collect();
    (0..model.rings.len())
        .map(|r| size_bound(&model, &components, &groups, r))
        .collect()
}

/// The most rings × dependencies [`minimum_sizes`] searches (a plan of 1000 stages is far
/// below it).
pub const MINIMUM_SIZES_WORK: usize = 20_000_000;

fn size_bound(
    model: &Model,
    components: &[Vec<usize>],
    groups: &[marked::Group],
    r: usize,
) -> SizeBound {
    let ring = &model.rings[r];
    let bound = |max_size: Option<i64>, because: String| SizeBound {
        ring: ring.name.clone(),
        max_size: max_size.and_then(|m| u64::try_from(m).ok()),
        because,
    };
    let Some((pt, _, _)) = &ring.producer else {
        return bound(None, "nobody records it".into());
    };
    let Some(at) = components.iter().position(|c| c.contains(pt)) else {
        return bound(Some(1), "nobody waits on it".into());
    };
    let component = &components[at];
    if !marked::decidable(model, component) {
        return bound(
            None,
            "its threads make a non-blocking call on another thread's ring: the proof does not \
             decide them (the search does)"
                .into(),
        );
    }
    let Some((size, path)) = marked::minimum_size(model, r, &groups[at]) else {
        return bound(
            None,
            "no size of this ring helps: a cycle that does not go through it already sums to \
             0 or less, or another ring of its threads is smaller than a consumer's lag"
                .into(),
        );
    };
    let because = if let (Some(first), Some(last)) = (path.first(), path.last()) {
        let lags: i64 = path.iter().map(|e| e.d).sum();
        let c = ring
            .consumers
            .iter()
            .find(|c| (c.thread, c.op) == last.to)
            .expect("the path ends at a consumer");
        format!(
            "the cycle from {} to {} (lags summing to {lags}), back through the room {} \
             releases (max_size - {}): positive from max_size {size}",
            op_words(model, first.from),
            op_words(model, last.to),
            c.stage,
            c.lag
        )
    } else if let Some(c) = ring
        .consumers
        .iter()
        .max_by_key(|c| c.lag)
        .filter(|c| c.lag == size)
    {
        format!(
            "stage {} lags by {}: a smaller ring deadlocks at the end of a run",
            c.stage, c.lag
        )
    } else if size > 1 {
        format!(
            "its non-blocking record (on thread {}) must never find it full",
            model.thread_name(*pt)
        )
    } else {
        "one slot is enough".into()
    };
    bound(Some(size), because)
}

/// A deadlock shown by its cycle of dependencies (the search gave up before reaching it).
fn cycle_trace(model: &Model, cycle: &[marked::Edge]) -> Trace {
    let op_name = |at| op_words(model, at);
    let stuck = cycle
        .iter()
        .map(|e| Step {
            thread: model.thread_name(e.to.0).to_string(),
            text: format!(
                "BLOCKED: {} at batch s needs {} (thread {}) done at batch s - {} ({})",
                op_name(e.to),
                op_name(e.from),
                model.thread_name(e.from.0),
                e.d,
                match e.why {
                    marked::Why::Program => "program order".to_string(),
                    marked::Why::NextBatch => "the previous batch".to_string(),
                    marked::Why::Wait(r) =>
                        format!("the wait's lag on ring {}", model.rings[r].name),
                    marked::Why::Room(r) => format!(
                        "room in ring {}: max_size {} minus the consumer's lag",
                        model.rings[r].name, model.rings[r].max_size
                    ),
                }
            ),
        })
        .collect();
    let total: i128 = cycle.iter().map(|e| i128::from(e.d)).sum();
    Trace {
        steps: Vec::new(),
        stuck,
        summary: format!(
            "deadlock: these {} dependencies form a cycle whose lags sum to {total} (<= 0): \
             each op on it waits, through the cycle, for itself at the same batch or a later \
             one (too many states to show an interleaving)",
            cycle.len()
        ),
    }
}

/// The end of a run stuck on ring `r` (see "Runs end"), shown in words.
fn end_trace(r: &model::MRing) -> Trace {
    let c = r
        .consumers
        .iter()
        .max_by_key(|c| c.lag)
        .expect("a consumer lags past the ring");
    Trace {
        steps: Vec::new(),
        stuck: vec![Step {
            thread: r
                .producer
                .as_ref()
                .map_or(String::new(), |(_, _, s)| format!("stage {s}")),
            text: format!(
                "BLOCKED: record on ring {} at the last batch: the ring holds {} but stage {} \
                 lags by {} and never releases the last {} seqs of a run",
                r.name, r.max_size, c.stage, c.lag, c.lag
            ),
        }],
        summary: format!(
            "deadlock at the end of a run of {} batches (or more): ring {} needs max_size >= {}",
            r.max_size + 1,
            r.name,
            c.lag
        ),
    }
}

/// Op `k` of thread `t`, in words.
fn op_words(model: &Model, (t, k): (usize, usize)) -> String {
    match &model.threads[t].1[k] {
        model::MOp::Consume {
            stage, ring, sync, ..
        } => format!(
            "stage {stage}'s {} on ring {}",
            if *sync { "synchronize" } else { "wait" },
            model.rings[*ring].name
        ),
        model::MOp::Record { stage, ring, .. } => {
            format!("stage {stage}'s record on ring {}", model.rings[*ring].name)
        }
        model::MOp::Launch { stage } => format!("stage {stage}'s launch"),
    }
}

/// The proof against the search, on random models (some calls non-blocking): they agree on
/// every group of threads the proof takes and the search decides, and the whole check agrees
/// with the search alone.
#[cfg(test)]
mod cross_check {
    use super::model::{MConsumer, MOp, MRing, Model};
    use super::*;
    use proptest::prelude::*;

    /// Per ring: (producer thread, max_size); per consumer: (ring, thread, lag); per thread,
    /// launches to put between; positions are shuffled by `order`.
    fn model(
        threads: usize,
        rings: &[(usize, i64, bool)],
        consumers: &[(usize, usize, i64, bool)],
        order: &[usize],
        end: Option<i64>,
    ) -> Model {
        let mut ops: Vec<Vec<MOp>> = vec![Vec::new(); threads];
        let mut places: Vec<(usize, MOp)> = Vec::new();
        for (r, &(t, _, blocking)) in rings.iter().enumerate() {
            places.push((
                t % threads,
                MOp::Record {
                    ring: r,
                    blocking,
                    stage: format!("p{r}"),
                },
            ));
        }
        for (i, &(r, t, lag, blocking)) in consumers.iter().enumerate() {
            places.push((
                t % threads,
                MOp::Consume {
                    ring: r % rings.len(),
                    lag,
                    blocking,
                    stage: format!("c{i}"),
                    sync: i % 2 == 0,
                },
            ));
        }
        // A deterministic shuffle of where each op goes in its thread.
        for (i, (t, op)) in places.into_iter().enumerate() {
            let at = order.get(i).copied().unwrap_or(0) % (ops[t].len() + 1);
            ops[t].insert(at, op);
        }
        let mut mrings: Vec<MRing> = rings
            .iter()
            .enumerate()
            .map(|(r, &(_, max_size, _))| MRing {
                name: format!("r{r}"),
                max_size,
                producer: None,
                consumers: Vec::new(),
            })
            .collect();
        let mut max_lag = 0;
        for (t, body) in ops.iter().enumerate() {
            for (k, op) in body.iter().enumerate() {
                match op {
                    MOp::Record { ring, stage, .. } => {
                        mrings[*ring].producer = Some((t, k, stage.clone()))
                    }
                    MOp::Consume {
                        ring, lag, stage, ..
                    } => {
                        max_lag = max_lag.max(*lag);
                        mrings[*ring].consumers.push(MConsumer {
                            thread: t,
                            op: k,
                            lag: *lag,
                            stage: stage.clone(),
                        });
                    }
                    MOp::Launch { .. } => {}
                }
            }
        }
        Model {
            threads: ops
                .into_iter()
                .enumerate()
                .map(|(t, body)| (format!("t{t}"), body))
                .collect(),
            rings: mrings,
            max_lag,
            end,
        }
    }

    /// A model of 1 to 3 threads, 1 to 3 rings and up to 4 consumers, most calls blocking.
    fn random_model() -> impl Strategy<Value = Model> {
        (
            1..4usize,
            prop::collection::vec((0..4usize, 1..4i64, prop::bool::weighted(0.7)), 1..4),
            prop::collection::vec(
                (0..4usize, 0..4usize, 0..4i64, prop::bool::weighted(0.7)),
                0..5,
            ),
            prop::collection::vec(0..8usize, 0..10),
        )
            .prop_map(|(threads, rings, consumers, order)| {
                model(threads, &rings, &consumers, &order, None)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("SEQSYNC_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400)
        ))]

        #[test]
        fn the_proof_agrees_with_the_search(
            m in random_model(),
        ) {
            for component in m.components() {
                if !marked::decidable(&m, &component) {
                    continue;
                }
                let proof = marked::nonpositive_cycle(&marked::edges(&m, &component));
                let search = Search::new(&m, component.clone(), 200_000).run();
                match search {
                    Verdict::Inconclusive { .. } => {}
                    Verdict::DeadlockFree { .. } => prop_assert!(
                        proof.is_ok(), "the search finds no deadlock, the proof a cycle {:?}: {:?}",
                        proof, m
                    ),
                    other => prop_assert!(
                        proof.is_err(), "the search is stuck, the proof finds no cycle: {}\n{:?}",
                        other, m
                    ),
                }
            }
            // The whole check (the proof, the runs' end) against the search alone.
            let searched = {
                let mut verdict = Verdict::DeadlockFree { states: 1 };
                'all: for end in [None].into_iter().chain(
                    m.rings.iter().filter(|r| r.consumers.iter().any(|c| c.lag > r.max_size))
                        .map(|r| Some(r.max_size + 1))
                ) {
                    let mm = Model { end, ..m.clone() };
                    for component in mm.components() {
                        let v = Search::new(&mm, component, 200_000).run();
                        if !matches!(v, Verdict::DeadlockFree { .. }) {
                            verdict = v;
                            break 'all;
                        }
                    }
                }
                verdict
            };
            let checked = check_model(&m);
            if !matches!(searched, Verdict::Inconclusive { .. }) {
                prop_assert_eq!(
                    searched.is_deadlock_free(), checked.is_deadlock_free(),
                    "search: {}\ncheck: {}\n{:?}", searched, checked, m
                );
            }
        }

        /// At a ring's minimum size the check proves the model free (the search agrees where
        /// it decides); one below, it is stuck.
        #[test]
        fn a_rings_minimum_size_is_exact(
            m in random_model(),
        ) {
            let components = m.components();
            let groups: Vec<marked::Group> =
                components.iter().map(|c| marked::Group::new(&m, c)).collect();
            for r in 0..m.rings.len() {
                let b = size_bound(&m, &components, &groups, r);
                let Some(min) = b.max_size else { continue };
                // The ring's own group of threads only (another group may be stuck anyway).
                let Some(group) = components
                    .iter()
                    .find(|c| m.rings[r].producer.as_ref().is_some_and(|(p, _, _)| c.contains(p)))
                else {
                    continue;
                };
                let sized = |size: i64| {
                    let mut mm = m.clone();
                    mm.rings[r].max_size = size;
                    for (t, (_, ops)) in mm.threads.iter_mut().enumerate() {
                        if !group.contains(&t) {
                            ops.clear();
                        }
                    }
                    mm
                };
                let at = sized(min as i64);
                let v = check_model(&at);
                prop_assert!(v.is_deadlock_free(), "ring {} at {}: {}\n{:?}", r, min, v, at);
                if min > 1 {
                    let below = sized(min as i64 - 1);
                    let v = check_model(&below);
                    prop_assert!(
                        !v.is_deadlock_free(),
                        "ring {} at {} ({}): {}\n{:?}", r, min - 1, b.because, v, below
                    );
                }
            }
        }
    }

    fn check_model(m: &Model) -> Verdict {
        check_lowered(m.clone(), CheckOptions::default())
    }
}
