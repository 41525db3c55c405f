//! Random DAGs of Taskflow's test families (peer-suites §4.1) and a seeded generator.
#![allow(dead_code)]

/// SplitMix64, seeded.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Taskflow's `Tree(degree, level)`: level l has degree^l nodes; node i's children are
/// i·d … i·d+d−1 of the next level. Returns `preds`.
pub fn tree(degree: usize, levels: usize) -> Vec<Vec<usize>> {
    let mut preds = vec![vec![]];
    let mut level_start = 0;
    let mut level_len = 1;
    for _ in 1..levels {
        let next_start = preds.len();
        for i in 0..level_len * degree {
            preds.push(vec![level_start + i / degree]);
        }
        level_start = next_start;
        level_len *= degree;
    }
    preds
}

/// Taskflow's `RandomDAG(levels, max_nodes_per_level, max_edges_per_node)`: the root level has
/// one node; each node links to 1..=max_edges random distinct nodes of the next level.
pub fn random_dag(
    rng: &mut Rng,
    levels: usize,
    max_nodes: usize,
    max_edges: usize,
) -> Vec<Vec<usize>> {
    let mut sizes = vec![1];
    for _ in 1..levels {
        sizes.push(rng.below(max_nodes as u64) as usize + 1);
    }
    let starts: Vec<usize> = sizes
        .iter()
        .scan(0, |acc, &s| {
            let st = *acc;
            *acc += s;
            Some(st)
        })
        .collect();
    let n: usize = sizes.iter().sum();
    let mut preds = vec![Vec::new(); n];
    for l in 0..levels.saturating_sub(1) {
        for u in starts[l]..starts[l] + sizes[l] {
            let k = (rng.below(max_edges as u64) as usize + 1).min(sizes[l + 1]);
            let mut targets: Vec<usize> = (0..sizes[l + 1]).collect();
            for j in 0..k {
                let pick = j + rng.below((targets.len() - j) as u64) as usize;
                targets.swap(j, pick);
                preds[starts[l + 1] + targets[j]].push(u);
            }
        }
    }
    preds
}

/// Taskflow's `Diamond(partitions, iterations)`: levels 0, 2, 4, … are one node; odd levels
/// have `partitions` nodes; edges fan out and in. Returns `preds` and each node's level.
pub fn diamond(partitions: usize, iterations: usize) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut preds = vec![vec![]];
    let mut level = vec![0];
    let mut join = 0;
    for it in 0..iterations {
        let start = preds.len();
        for _ in 0..partitions {
            preds.push(vec![join]);
            level.push(2 * it + 1);
        }
        preds.push((start..start + partitions).collect());
        level.push(2 * it + 2);
        join = preds.len() - 1;
    }
    (preds, level)
}

/// Every node depends on each earlier node with probability `percent`%: many redundant edges.
pub fn dense(rng: &mut Rng, n: usize, percent: u64) -> Vec<Vec<usize>> {
    (0..n)
        .map(|i| (0..i).filter(|_| rng.below(100) < percent).collect())
        .collect()
}

/// Groups of 1 to 8 commands, each command depending on every command of the group before (an
/// execution barrier between groups), and now and then also on an earlier one of its own
/// group: many commands with the same dependencies, which the lowerings join.
pub fn barriers(rng: &mut Rng, groups: usize) -> Vec<Vec<usize>> {
    let mut preds: Vec<Vec<usize>> = Vec::new();
    let mut before: Vec<usize> = Vec::new();
    for _ in 0..groups {
        let size = rng.below(8) as usize + 1;
        let start = preds.len();
        for k in 0..size {
            let mut p = before.clone();
            if k > 0 && rng.below(4) == 0 {
                p.push(start + rng.below(k as u64) as usize);
            }
            preds.push(p);
        }
        before = (start..preds.len()).collect();
    }
    preds
}

/// The 13-graph families used by the traversal tests, seeded.
pub fn families(seed: u64) -> Vec<(String, Vec<Vec<usize>>)> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for i in 0..13 {
        let (d, l) = (rng.below(3) as usize + 1, rng.below(5) as usize + 1);
        out.push((format!("tree{i}({d},{l})"), tree(d, l)));
        let (a, b, c) = (
            rng.below(10) as usize + 1,
            rng.below(10) as usize + 1,
            rng.below(10) as usize + 1,
        );
        out.push((
            format!("random_dag{i}({a},{b},{c})"),
            random_dag(&mut rng, a, b, c),
        ));
        let (p, it) = (rng.below(10) as usize + 1, rng.below(10) as usize + 1);
        out.push((format!("diamond{i}({p},{it})"), diamond(p, it).0));
        let n = rng.below(60) as usize + 1;
        out.push((format!("dense{i}({n})"), dense(&mut rng, n, 15)));
        let g = rng.below(5) as usize + 1;
        out.push((format!("barriers{i}({g})"), barriers(&mut rng, g)));
    }
    out
}
