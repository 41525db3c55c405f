//! Lowering to streams + events with no false dependency.
//!
//! Commands are placed in topological order. A command continues the stream of one of its
//! transitive-reduction predecessors when that predecessor is the last command on its stream
//! (stream order then makes that edge, with no event); otherwise it starts a new stream. Every
//! other reduction edge whose ends are on different streams becomes one wait.
//!
//! Why no false dependency: each stream is a chain of reduction edges, and each wait is a
//! reduction edge, so everything the schedule orders the graph orders too; every reduction edge
//! is a stream neighbour pair or a wait, so everything the graph orders the schedule orders
//! ([`Schedule::compare`] checks both directions). Why no wasted event: a wait is made only
//! for a reduction edge that is not a stream neighbour pair, which is exactly the
//! [`lower_bound`](super::schedule::lower_bound) for the streams used.
//!
//! **Joins.** A command whose reduction predecessors are exactly those of a command placed
//! before it, two or more on other streams, waits for that command's *join* (the event its
//! stream records once it has waited for them all) instead of for each: the commands after a
//! barrier between `a` and `b` commands make `a - 1 + b - 1` waits, not about `a × b`. The
//! join orders exactly the shared predecessors and what they follow, all of which the
//! command's predecessors already order before it, so it adds no false dependency.

use std::collections::hash_map::{Entry, HashMap};

use super::dag::Dag;
use super::reduce::Analysis;
use super::schedule::{Schedule, Wait};

/// Lower `dag` to streams + events (see the module docs).
pub fn lower_streams(dag: &Dag, analysis: &Analysis) -> Schedule {
    let n = dag.len();
    let succs = analysis.reduced_succs();
    // Reduction successors not yet placed: a stream is best continued by the successor of a
    // command that has the fewest others waiting to be placed.
    let mut unplaced: Vec<usize> = succs.iter().map(Vec::len).collect();
    let mut stream_of = vec![usize::MAX; n];
    let mut last: Vec<usize> = Vec::new(); // last command of each stream
    let mut waits = Vec::new();
    let mut joins = Vec::new();
    // The first command placed with each set of reduction predecessors that needed two or
    // more waits: later commands with the same set wait for its join.
    let mut first_with: HashMap<&[usize], usize> = HashMap::new();
    for &c in dag.topo() {
        let preds = &analysis.reduced[c];
        let cont = preds
            .iter()
            .copied()
            .filter(|&p| last[stream_of[p]] == p)
            .min_by_key(|&p| (unplaced[p], stream_of[p]));
        let s = match cont {
            Some(p) => stream_of[p],
            None => {
                last.push(c);
                last.len() - 1
            }
        };
        stream_of[c] = s;
        last[s] = c;
        for &p in preds {
            unplaced[p] -= 1;
        }
        let cross = preds.iter().filter(|&&p| stream_of[p] != s).count();
        // With two or more waits to make, the first command with these predecessors makes
        // them; the later ones wait for its join.
        let join = match cross {
            0 | 1 => None,
            _ => match first_with.entry(preds.as_slice()) {
                Entry::Occupied(j) => Some(*j.get()),
                Entry::Vacant(v) => {
                    v.insert(c);
                    None
                }
            },
        };
        match join {
            Some(j) => joins.push(Wait { from: j, to: c }),
            None => waits.extend(
                preds
                    .iter()
                    .filter(|&&p| stream_of[p] != s)
                    .map(|&p| Wait { from: p, to: c }),
            ),
        }
    }
    Schedule::new(dag.topo().to_vec(), stream_of, waits).with_joins(joins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diamond_uses_two_streams_and_two_waits() {
        let d = Dag::from_preds(&[vec![], vec![0], vec![0], vec![1, 2]]).unwrap();
        let a = Analysis::of(&d);
        let s = lower_streams(&d, &a);
        let r = s.report(&d, &a);
        assert_eq!((r.streams, r.events, r.events_lower_bound), (2, 2, 2));
        assert_eq!((r.false_dependencies, r.missing_dependencies), (0, 0));
    }
}
