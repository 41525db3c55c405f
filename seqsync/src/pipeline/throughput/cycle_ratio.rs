//! The maximum cycle ratio of a graph (the largest `weight(C) / lag(C)` over its cycles `C`) by
//! Howard's policy iteration, as Cochet-Terrasson, Cohen, Gaubert, McGettrick and Quadrat
//! describe it for max-plus linear systems (and Dasdan's "Experimental analysis of the fastest
//! optimum cycle ratio and mean algorithms", 2004, compares with the others).
//!
//! A *policy* picks one out-edge per node; the policy graph then has one cycle per component.
//! Each node gets the ratio of the cycle its policy path ends in (`eta`) and a potential `x`
//! (its path's weight less `eta` times its lag). A node switches to an edge that leads to a
//! larger ratio, else to one that raises its potential; when none does, the largest `eta` is
//! the maximum cycle ratio, and its policy cycle is a critical cycle. Each round is linear in
//! the edges; the number of rounds is small in practice once each node starts on its heaviest
//! out-edge (starting on the first one instead took a round per few stages along a chain of
//! one thread: quadratic), and is bounded here by [`MAX_ROUNDS`] and [`MAX_WORK`].

/// Policy rounds before the search gives up ([`Outcome::RoundLimit`]).
pub(super) const MAX_ROUNDS: usize = 100_000;

/// Nodes and arcs visited, over all rounds, before the search gives up
/// ([`Outcome::RoundLimit`]): a bound on its time (seconds, BENCHMARKS.md §8).
pub(super) const MAX_WORK: usize = 2_000_000_000;

/// One edge: `from → to`, its weight and its lag (`> 0` on every cycle, else
/// [`Outcome::ZeroLag`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Arc {
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) weight: f64,
    pub(super) lag: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome {
    /// The critical cycle: its arcs in order.
    Critical(Vec<usize>),
    /// The graph has no cycle.
    Acyclic,
    /// A cycle whose lags sum to 0 (its arcs): its ratio is unbounded.
    ZeroLag(Vec<usize>),
    /// No convergence within [`MAX_ROUNDS`] rounds or [`MAX_WORK`] nodes and arcs visited.
    RoundLimit,
}

/// The critical cycle of the graph of `n` nodes and `arcs`.
pub(super) fn critical_cycle(n: usize, arcs: &[Arc]) -> Outcome {
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, a) in arcs.iter().enumerate() {
        out[a.from].push(i);
    }
    // Only nodes that can reach a cycle matter: drop those with no way on, repeatedly.
    let mut alive = vec![true; n];
    let mut degree: Vec<usize> = out.iter().map(Vec::len).collect();
    let mut into: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, a) in arcs.iter().enumerate() {
        into[a.to].push(i);
    }
    let mut dead: Vec<usize> = (0..n).filter(|&v| degree[v] == 0).collect();
    while let Some(v) = dead.pop() {
        if !std::mem::replace(&mut alive[v], false) {
            continue;
        }
        for &i in &into[v] {
            let u = arcs[i].from;
            degree[u] -= 1;
            if degree[u] == 0 && alive[u] {
                dead.push(u);
            }
        }
    }
    for list in &mut out {
        list.retain(|&i| alive[arcs[i].to]);
    }
    if !alive.iter().any(|&a| a) {
        return Outcome::Acyclic;
    }
    let total: f64 = arcs.iter().map(|a| a.weight).sum();
    let eps = 1e-12 * (total + 1.0);

    let mut policy: Vec<usize> = (0..n)
        // The heaviest out-edge, the one of least lag among those (the first among equals).
        .map(|v| {
            out[v]
                .iter()
                .copied()
                .reduce(|best, i| {
                    let (a, b) = (&arcs[i], &arcs[best]);
                    if a.weight > b.weight || (a.weight == b.weight && a.lag < b.lag) {
                        i
                    } else {
                        best
                    }
                })
                .unwrap_or(0)
        })
        .collect();
    let mut eta = vec![0.0f64; n];
    let mut x = vec![0.0f64; n];
    // Each round visits every node and arc once: stop at MAX_WORK of them in all.
    let rounds = (MAX_WORK / (n + arcs.len()).max(1)).clamp(1, MAX_ROUNDS);
    for _ in 0..rounds {
        // Value determination: each component's cycle, then the trees leading into it.
        let mut cycles: Vec<(f64, Vec<usize>)> = Vec::new();
        let mut done = vec![false; n];
        let mut stamp = vec![usize::MAX; n];
        for start in (0..n).filter(|&v| alive[v]) {
            if done[start] {
                continue;
            }
            let mut path = Vec::new();
            let mut v = start;
            while !done[v] && stamp[v] != start {
                stamp[v] = start;
                path.push(v);
                v = arcs[policy[v]].to;
            }
            if !done[v] {
                // `v` is on this walk: the cycle is the walk from `v` on.
                let pos = path.iter().position(|&p| p == v).unwrap_or(0);
                let mut cyc: Vec<usize> = path.split_off(pos);
                // The cycle's potentials are measured from its smallest node: the same root
                // for the same cycle in every round, else potentials shift between rounds and
                // the improvement steps can go round forever.
                let root = (0..cyc.len()).min_by_key(|&k| cyc[k]).unwrap_or(0);
                cyc.rotate_left(root);
                let w: f64 = cyc.iter().map(|&c| arcs[policy[c]].weight).sum();
                let t: f64 = cyc.iter().map(|&c| arcs[policy[c]].lag).sum();
                let edges: Vec<usize> = cyc.iter().map(|&c| policy[c]).collect();
                if t <= 0.0 {
                    return Outcome::ZeroLag(edges);
                }
                let lambda = w / t;
                x[cyc[0]] = 0.0;
                eta[cyc[0]] = lambda;
                done[cyc[0]] = true;
                for &c in cyc[1..].iter().rev() {
                    let a = &arcs[policy[c]];
                    eta[c] = lambda;
                    x[c] = a.weight - lambda * a.lag + x[a.to];
                    done[c] = true;
                }
                cycles.push((lambda, edges));
            }
            for &c in path.iter().rev() {
                let a = &arcs[policy[c]];
                eta[c] = eta[a.to];
                x[c] = a.weight - eta[c] * a.lag + x[a.to];
                done[c] = true;
            }
        }
        // Improvement: first towards larger ratios, then towards larger potentials.
        let mut changed = false;
        for u in (0..n).filter(|&v| alive[v]) {
            let (mut best, mut best_eta) = (policy[u], eta[u]);
            for &i in &out[u] {
                if eta[arcs[i].to] > best_eta + eps {
                    (best, best_eta) = (i, eta[arcs[i].to]);
                }
            }
            if best != policy[u] {
                policy[u] = best;
                changed = true;
            }
        }
        if !changed {
            for u in (0..n).filter(|&v| alive[v]) {
                let (mut best, mut best_x) = (policy[u], x[u]);
                for &i in &out[u] {
                    let a = &arcs[i];
                    if (eta[a.to] - eta[u]).abs() <= eps {
                        let val = a.weight - eta[u] * a.lag + x[a.to];
                        if val > best_x + eps {
                            (best, best_x) = (i, val);
                        }
                    }
                }
                if best != policy[u] {
                    policy[u] = best;
                    changed = true;
                }
            }
        }
        if !changed {
            return cycles
                .into_iter()
                .max_by(|a, b| a.0.total_cmp(&b.0))
                .map_or(Outcome::Acyclic, |(_, c)| Outcome::Critical(c));
        }
    }
    Outcome::RoundLimit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arc(from: usize, to: usize, weight: f64, lag: f64) -> Arc {
        Arc {
            from,
            to,
            weight,
            lag,
        }
    }

    fn ratio(arcs: &[Arc], cycle: &[usize]) -> f64 {
        let w: f64 = cycle.iter().map(|&i| arcs[i].weight).sum();
        let t: f64 = cycle.iter().map(|&i| arcs[i].lag).sum();
        w / t
    }

    /// Every simple cycle's ratio, by brute force (small graphs).
    fn brute_max(n: usize, arcs: &[Arc]) -> Option<f64> {
        fn walk(
            arcs: &[Arc],
            start: usize,
            v: usize,
            seen: &mut Vec<bool>,
            w: f64,
            t: f64,
            best: &mut Option<f64>,
        ) {
            for a in arcs.iter().filter(|a| a.from == v) {
                if a.to == start {
                    let r = (w + a.weight) / (t + a.lag);
                    *best = Some(best.map_or(r, |b: f64| b.max(r)));
                } else if a.to > start && !seen[a.to] {
                    seen[a.to] = true;
                    walk(arcs, start, a.to, seen, w + a.weight, t + a.lag, best);
                    seen[a.to] = false;
                }
            }
        }
        let mut best = None;
        for s in 0..n {
            walk(arcs, s, s, &mut vec![false; n], 0.0, 0.0, &mut best);
        }
        best
    }

    #[test]
    fn the_cycle_with_the_largest_ratio_is_found() {
        // 0 -> 1 -> 0 weighs 5 over 1 batch; 0 -> 2 -> 0 weighs 9 over 2; the self loop on 1
        // weighs 4 over 1.
        let arcs = [
            arc(0, 1, 2.0, 0.0),
            arc(1, 0, 3.0, 1.0),
            arc(0, 2, 4.0, 1.0),
            arc(2, 0, 5.0, 1.0),
            arc(1, 1, 4.0, 1.0),
        ];
        let Outcome::Critical(c) = critical_cycle(3, &arcs) else {
            panic!("no cycle")
        };
        assert_eq!(ratio(&arcs, &c), 5.0);
    }

    #[test]
    fn a_cycle_of_lag_zero_is_named() {
        let arcs = [arc(0, 1, 1.0, 0.0), arc(1, 0, 1.0, 0.0)];
        assert!(matches!(critical_cycle(2, &arcs), Outcome::ZeroLag(_)));
        assert_eq!(
            critical_cycle(2, &[arc(0, 1, 1.0, 1.0)]),
            Outcome::Acyclic,
            "a path is no cycle"
        );
    }

    /// Two cycles meet at node 2; with the root of a cycle's potentials taken where the walk
    /// happened to enter it, the potentials moved between rounds and the policies went round
    /// until the round limit (found by the property below).
    #[test]
    fn the_search_ends_where_cycles_share_nodes() {
        let raw = [
            (2, 1, 38.0, 1.0),
            (3, 2, 13.0, 2.0),
            (0, 3, 28.0, 1.0),
            (1, 2, 22.0, 3.0),
            (0, 4, 42.0, 2.0),
            (4, 4, 45.0, 3.0),
        ];
        let arcs: Vec<Arc> = raw.iter().map(|&(f, t, w, l)| arc(f, t, w, l)).collect();
        let Outcome::Critical(c) = critical_cycle(6, &arcs) else {
            panic!("{:?}", critical_cycle(6, &arcs))
        };
        assert_eq!(Some(ratio(&arcs, &c)), brute_max(6, &arcs));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]
        #[test]
        fn it_agrees_with_brute_force(
            raw in proptest::collection::vec((0usize..6, 0usize..6, 0u32..50, 1u32..4), 1..14)
        ) {
            let arcs: Vec<Arc> = raw
                .iter()
                .map(|&(f, t, w, l)| arc(f, t, f64::from(w), f64::from(l)))
                .collect();
            let want = brute_max(6, &arcs);
            match critical_cycle(6, &arcs) {
                Outcome::Critical(c) => {
                    let got = ratio(&arcs, &c);
                    let want = want.expect("a cycle exists");
                    proptest::prop_assert!((got - want).abs() <= 1e-9 * want.max(1.0), "{got} vs {want}");
                }
                Outcome::Acyclic => proptest::prop_assert!(want.is_none()),
                other => proptest::prop_assert!(false, "{other:?}"),
            }
        }
    }
}
