//! The fork-join-levels lowering, kept as a baseline: what IREE's CUDA command buffers record.
//!
//! Each command's level is the length of the longest dependency path to it. All commands of a
//! level run concurrently, each on its own stream (the `i`-th command of a level on stream
//! `i`); every command of the next level waits for every command of this one, as an execution
//! barrier between levels does (the first for each, the others for its join). Every dependency
//! is honoured, but a command of level `l + 1` also waits for the commands of level `l` it
//! does not depend on: those are its false dependencies, which [`Schedule::compare`] counts.

use super::dag::Dag;
use super::reduce::Analysis;
use super::schedule::{Schedule, Wait};

/// Each command's level (longest dependency path from a command without dependencies).
pub fn levels(dag: &Dag) -> Vec<usize> {
    let mut level = vec![0; dag.len()];
    for &c in dag.topo() {
        level[c] = dag
            .preds(c)
            .iter()
            .map(|&p| level[p] + 1)
            .max()
            .unwrap_or(0);
    }
    level
}

/// Lower `dag` to fork-join levels (see the module docs).
pub fn lower_levels(dag: &Dag, _analysis: &Analysis) -> Schedule {
    let level = levels(dag);
    let nlevels = level.iter().map(|&l| l + 1).max().unwrap_or(0);
    let mut by_level = vec![Vec::new(); nlevels];
    for &c in dag.topo() {
        by_level[level[c]].push(c);
    }
    let mut stream_of = vec![0; dag.len()];
    for cmds in &by_level {
        for (i, &c) in cmds.iter().enumerate() {
            stream_of[c] = i;
        }
    }
    // The first command of each level waits for every command of the level before (on other
    // streams); the others wait for its join: `a + b` waits between levels of `a` and `b`.
    let mut waits = Vec::new();
    let mut joins = Vec::new();
    for pair in by_level.windows(2) {
        let Some((&first, rest)) = pair[1].split_first() else {
            continue;
        };
        for &p in &pair[0] {
            if stream_of[p] != stream_of[first] {
                waits.push(Wait { from: p, to: first });
            }
        }
        for &c in rest {
            if pair[0].len() < 2 {
                // One command before: its event is the join.
                if let Some(&p) = pair[0].first().filter(|&&p| stream_of[p] != stream_of[c]) {
                    waits.push(Wait { from: p, to: c });
                }
            } else {
                joins.push(Wait { from: first, to: c });
            }
        }
    }
    let order = by_level.concat();
    Schedule::new(order, stream_of, waits).with_joins(joins)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_of_two_unequal_chains_add_false_dependencies() {
        // a -> b -> c and x -> y: y (level 1) is ordered after a, c after x.
        let d = Dag::from_preds(&[vec![], vec![0], vec![1], vec![], vec![3]]).unwrap();
        let a = Analysis::of(&d);
        let s = lower_levels(&d, &a);
        let (false_deps, missing) = s.compare(&a);
        assert_eq!(missing, 0);
        // Levels a x | b y | c: b after x, y after a, c after x and y.
        assert_eq!(false_deps, 4);
    }
}
