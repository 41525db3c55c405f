//! Deadlock check: explores every interleaving of the threads' loops.
//!
//! It may use: the derived [`Plan`](super::Plan) and the spec's limits only: it runs nothing,
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

use super::error::PlanError;
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
    Ok(if inconclusive {
        Verdict::Inconclusive { states: total }
    } else {
        Verdict::DeadlockFree { states: total }
    })
}
