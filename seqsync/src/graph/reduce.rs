//! The transitive closure and transitive reduction of a [`Dag`], and its width.
//!
//! The reduction keeps an edge `p -> c` only if no other path leads from `p` to `c`: exactly
//! the orderings a lowering must make itself (every other one follows from them). XLA's
//! `ExecutionGraph` does the same before it schedules.

use std::collections::VecDeque;

use super::bitset::BitSet;
use super::dag::Dag;

/// What every lowering needs to know of a graph's order.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// `ancestors[c]`: every command that must finish before `c` starts.
    pub ancestors: Vec<BitSet>,
    /// `reduced[c]`: the direct dependencies of `c` that no other path implies (ascending).
    pub reduced: Vec<Vec<usize>>,
    /// The most commands that can run at once (the largest antichain).
    pub width: usize,
}

impl Analysis {
    /// Analyse `dag`.
    pub fn of(dag: &Dag) -> Analysis {
        let ancestors = ancestors(dag);
        let reduced = reduction(dag, &ancestors);
        let width = width(&ancestors);
        Analysis {
            ancestors,
            reduced,
            width,
        }
    }

    /// Edges of the transitive reduction.
    pub fn reduced_edges(&self) -> usize {
        self.reduced.iter().map(Vec::len).sum()
    }

    /// Ordered pairs `(a, b)`, `a` before `b`, of the transitive closure.
    pub fn ordered_pairs(&self) -> usize {
        self.ancestors.iter().map(BitSet::len).sum()
    }

    /// The commands that depend on `p` through a reduction edge (ascending).
    pub fn reduced_succs(&self) -> Vec<Vec<usize>> {
        let mut s = vec![Vec::new(); self.reduced.len()];
        for (c, ps) in self.reduced.iter().enumerate() {
            for &p in ps {
                s[p].push(c);
            }
        }
        s
    }
}

/// `ancestors(dag)[c]`: every command ordered before `c`.
pub fn ancestors(dag: &Dag) -> Vec<BitSet> {
    let mut anc = vec![BitSet::new(dag.len()); dag.len()];
    for &c in dag.topo() {
        let mut a = BitSet::new(dag.len());
        for &p in dag.preds(c) {
            a.insert(p);
            a.union_with(&anc[p]);
        }
        anc[c] = a;
    }
    anc
}

/// The transitive reduction: for each command, its direct dependencies that are not also an
/// ancestor of another of its direct dependencies.
///
/// A dependency `a` of `c` is redundant exactly when it is an ancestor of another dependency of
/// `c`; since the graph is acyclic, `a` is never its own ancestor, so the union of the
/// dependencies' ancestor sets holds exactly the redundant ones: `O(deg · n / 64)` per command
/// (a barrier between two halves of 2 048 commands took 14 s pair by pair, `O(deg²)`).
pub fn reduction(dag: &Dag, ancestors: &[BitSet]) -> Vec<Vec<usize>> {
    let n = dag.len();
    (0..n)
        .map(|c| {
            let p = dag.preds(c);
            if p.len() < 2 {
                return p.to_vec();
            }
            let mut covered = BitSet::new(n);
            for &b in p {
                covered.union_with(&ancestors[b]);
            }
            p.iter()
                .copied()
                .filter(|&a| !covered.contains(a))
                .collect()
        })
        .collect()
}

/// The largest set of pairwise unordered commands (Dilworth: `n` minus a maximum matching of
/// the closure's bipartite graph; Hopcroft–Karp).
pub fn width(ancestors: &[BitSet]) -> usize {
    let n = ancestors.len();
    // adj[u]: every v with u before v.
    let mut adj = vec![Vec::new(); n];
    for (v, a) in ancestors.iter().enumerate() {
        for u in a.iter() {
            adj[u].push(v);
        }
    }
    n - max_matching(&adj, n)
}

/// Hopcroft–Karp on the bipartite graph left `0..n` -> right `0..n` given by `adj`.
fn max_matching(adj: &[Vec<usize>], n: usize) -> usize {
    const NONE: usize = usize::MAX;
    let mut match_l = vec![NONE; n];
    let mut match_r = vec![NONE; n];
    let mut dist = vec![0usize; n];
    let mut matched = 0;
    loop {
        // BFS from free left vertices, layering by alternating paths.
        let mut queue = VecDeque::new();
        for u in 0..n {
            if match_l[u] == NONE {
                dist[u] = 0;
                queue.push_back(u);
            } else {
                dist[u] = NONE;
            }
        }
        let mut found = false;
        while let Some(u) = queue.pop_front() {
            for &v in &adj[u] {
                let w = match_r[v];
                if w == NONE {
                    found = true;
                } else if dist[w] == NONE {
                    dist[w] = dist[u] + 1;
                    queue.push_back(w);
                }
            }
        }
        if !found {
            return matched;
        }
        // DFS along the layers (iteratively: graphs of thousands of commands).
        let mut it = vec![0usize; n];
        for root in 0..n {
            if match_l[root] != NONE {
                continue;
            }
            let mut stack = vec![root];
            while let Some(&u) = stack.last() {
                if it[u] == adj[u].len() {
                    dist[u] = NONE; // dead end
                    stack.pop();
                    continue;
                }
                let v = adj[u][it[u]];
                it[u] += 1;
                let w = match_r[v];
                if w == NONE {
                    // Augment along the stack: each stack entry takes the vertex it tried last.
                    for &x in stack.iter().rev() {
                        let y = adj[x][it[x] - 1];
                        match_l[x] = y;
                        match_r[y] = x;
                    }
                    matched += 1;
                    break;
                } else if dist[w] == dist[u] + 1 {
                    stack.push(w);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_of_small_graphs() {
        // diamond a -> {b, c} -> d
        let d = Dag::from_preds(&[vec![], vec![0], vec![0], vec![1, 2]]).unwrap();
        assert_eq!(Analysis::of(&d).width, 2);
        // 5 independent
        let d = Dag::from_preds(&vec![vec![]; 5]).unwrap();
        assert_eq!(Analysis::of(&d).width, 5);
        // chain
        let d = Dag::from_preds(&[vec![], vec![0], vec![1], vec![2]]).unwrap();
        assert_eq!(Analysis::of(&d).width, 1);
        // two chains of 3 and a node after the first of each: width 3
        let d = Dag::from_preds(&[
            vec![],
            vec![0],
            vec![1],
            vec![],
            vec![3],
            vec![4],
            vec![0, 3],
        ])
        .unwrap();
        assert_eq!(Analysis::of(&d).width, 3);
    }
}
