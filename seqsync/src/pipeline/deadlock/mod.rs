//! Deadlock check: explores every interleaving of the threads' loops.
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
//! | `model.rs` | the model: a state's ring counters and what each thread does next |
//! | `search.rs` | the breadth-first search over states |
//! | `replay.rs` | a stuck state's interleaving, replayed into words |
//! | `verdict.rs` | the outcome: [`Verdict`], [`Trace`], [`Step`] |

mod lower;
mod model;
mod replay;
mod search;
mod verdict;

pub use verdict::{Step, Trace, Verdict};

use super::plan::Plan;
use crate::error::PlanError;
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

/// Checks `plan` with the default state cap.
///
/// # Errors
/// [`PlanError::InvalidPlan`] if the plan is inconsistent (a ring recorded
/// twice or never, nconsumers not matching the ops, a max_size of 0).
pub fn check_deadlock(plan: &Plan) -> Result<Verdict, PlanError> {
    check_deadlock_with(plan, CheckOptions::default())
}

/// Checks `plan` with explicit options.
///
/// # Errors
/// As [`check_deadlock`].
pub fn check_deadlock_with(plan: &Plan, options: CheckOptions) -> Result<Verdict, PlanError> {
    let model = Model::new(plan)?;
    let mut total = 0;
    let mut inconclusive = false;
    for component in model.components() {
        match Search::new(&model, component, options.max_states).run() {
            Verdict::DeadlockFree { states } => total += states,
            Verdict::Inconclusive { states } => {
                total += states;
                inconclusive = true;
            }
            stuck => return Ok(stuck),
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
            match Search::new(&finite, component, options.max_states).run() {
                Verdict::DeadlockFree { states } => total += states,
                Verdict::Inconclusive { states } => {
                    total += states;
                    inconclusive = true;
                }
                stuck => return Ok(stuck),
            }
        }
    }
    Ok(if inconclusive {
        Verdict::Inconclusive { states: total }
    } else {
        Verdict::DeadlockFree { states: total }
    })
}
