//! The polynomial proof, for threads whose calls all block: the model is a marked graph.
//!
//! Every op of a thread runs once per batch, and every reason an op waits says "op `v` at
//! batch `s` needs op `u` done at batch `s - d`":
//!
//! | dependency | `u` → `v` | `d` |
//! |---|---|---|
//! | program order inside one batch | op `k - 1` → op `k` of a thread | 0 |
//! | from one batch to the next | a thread's last op → its first | 1 |
//! | a wait (or synchronize) at lag `L` | the ring's record → the wait | `L` |
//! | a record needs the slot `max_size` back released by a consumer at lag `L` | the consumer's op → the record | `max_size - L` |
//!
//! (The start relaxes some of these: seqs below 0 need nothing, and a ring is not full before
//! `max_size` records. A relaxation only lets ops run earlier.)
//!
//! **Claim**: the endless loops cannot get stuck exactly when every cycle of these
//! dependencies has a positive total `d`.
//!
//! - If every cycle is positive, op `v` at batch `s` depends, through any chain, only on ops at
//!   batches before `s` or on ops of the same batch reached by a chain of total 0, which is
//!   acyclic: so every op at every batch has finitely many prerequisites, none of them itself,
//!   and the threads can run them in an order that respects all of them. Blocking calls are
//!   conflict-free (a record or a release only ever makes other calls ready, never unready), so
//!   if one interleaving runs forever, no interleaving gets stuck (a stuck state would be a
//!   set of ready ops nobody runs).
//! - If a cycle has total `D <= 0`, op `v` at batch `s` needs itself at batch `s - D >= s`
//!   once `s` is past the start's relaxations: its thread stops there, and every thread linked
//!   to it by a ring stops too (a producer fills the ring, a consumer runs out of records), so
//!   the search finds every thread of the group blocked.
//!
//! A cycle with total `<= 0` is a negative cycle once each edge weighs `d * (n + 1) - 1` (`n`
//! ops, so a cycle has at most `n` edges): Bellman–Ford, `O(ops × dependencies)`, in `i128` (a
//! lag can be near `2^63`). The cycle found is the counterexample.
//!
//! **Non-blocking calls.** One that never finds its ring unready behaves as the blocking call
//! would (it never waits), so it joins the graph. [`decidable`] proves that much for the calls
//! the derivation makes non-blocking, whose ring's other end is on the same thread: a wait at
//! lag `L` on a record made earlier in the batch (program order, total 0) or later in it (the
//! previous batch's, total 1) is always recorded when `L` is at least that total; a record
//! whose consumers are on its thread finds room when `max_size - L` is at least that total for
//! each. Those paths hold from the first batch on, so the start's relaxations do not matter. A
//! group with any other non-blocking call is left to the search.

use std::collections::{HashMap, HashSet, VecDeque};

use super::model::{MOp, Model};

/// One dependency: op `to` at batch `s` needs op `from` done at batch `s - d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Edge {
    /// `(thread, op index)`.
    pub(super) from: (usize, usize),
    pub(super) to: (usize, usize),
    pub(super) d: i64,
    pub(super) why: Why,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    Program,
    NextBatch,
    /// A wait on the ring (index).
    Wait(usize),
    /// A record on the ring (index) waiting for room.
    Room(usize),
}

/// Does every call of `component` block, or is a non-blocking one proved never to find its ring
/// unready (see the module docs)?
pub(super) fn decidable(model: &Model, component: &[usize]) -> bool {
    // The total `d` of the path through program order from op `from` to op `to` of a thread.
    let same_thread = |from: usize, to: usize| i64::from(from >= to);
    component.iter().all(|&t| {
        model.threads[t]
            .1
            .iter()
            .enumerate()
            .all(|(k, op)| match op {
                MOp::Consume { blocking: true, .. }
                | MOp::Record { blocking: true, .. }
                | MOp::Launch { .. } => true,
                MOp::Consume {
                    ring,
                    lag,
                    blocking: false,
                    ..
                } => model.rings[*ring]
                    .producer
                    .as_ref()
                    .is_some_and(|(pt, pk, _)| *pt == t && same_thread(*pk, k) <= *lag),
                MOp::Record {
                    ring,
                    blocking: false,
                    ..
                } => {
                    let r = &model.rings[*ring];
                    r.consumers
                        .iter()
                        .all(|c| c.thread == t && same_thread(c.op, k) <= r.max_size - c.lag)
                }
            })
    })
}

/// The dependencies among the ops of `component` (a [`decidable`] one).
pub(super) fn edges(model: &Model, component: &[usize]) -> Vec<Edge> {
    let mut out = Vec::new();
    for &t in component {
        let ops = &model.threads[t].1;
        for k in 1..ops.len() {
            out.push(Edge {
                from: (t, k - 1),
                to: (t, k),
                d: 0,
                why: Why::Program,
            });
        }
        if let Some(last) = ops.len().checked_sub(1) {
            out.push(Edge {
                from: (t, last),
                to: (t, 0),
                d: 1,
                why: Why::NextBatch,
            });
        }
        for (k, op) in ops.iter().enumerate() {
            match op {
                MOp::Consume { ring, lag, .. } => {
                    if let Some((pt, pk, _)) = &model.rings[*ring].producer {
                        out.push(Edge {
                            from: (*pt, *pk),
                            to: (t, k),
                            d: *lag,
                            why: Why::Wait(*ring),
                        });
                    }
                }
                MOp::Record { ring, .. } => {
                    let r = &model.rings[*ring];
                    for c in &r.consumers {
                        out.push(Edge {
                            from: (c.thread, c.op),
                            to: (t, k),
                            d: r.max_size - c.lag,
                            why: Why::Room(*ring),
                        });
                    }
                }
                MOp::Launch { .. } => {}
            }
        }
    }
    out
}

/// `Ok` if every cycle of `edges` has a positive total `d`, else one whose total is `<= 0`
/// (its edges in order, each one's `to` the next one's `from`).
pub(super) fn nonpositive_cycle(edges: &[Edge]) -> Result<(), Vec<Edge>> {
    let mut nodes: Vec<(usize, usize)> = edges.iter().flat_map(|e| [e.from, e.to]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let n = nodes.len();
    let id = |x: (usize, usize)| nodes.binary_search(&x).expect("every endpoint is a node");
    let scale = n as i128 + 1;
    let weighted: Vec<(usize, usize, i128)> = edges
        .iter()
        .map(|e| (id(e.from), id(e.to), i128::from(e.d) * scale - 1))
        .collect();
    // Bellman–Ford from a virtual source joined to every node by a 0 edge.
    let mut dist = vec![0i128; n];
    let mut parent: Vec<Option<usize>> = vec![None; n];
    let mut last = None;
    for _ in 0..=n {
        last = None;
        for (i, &(u, v, w)) in weighted.iter().enumerate() {
            if dist[u] + w < dist[v] {
                dist[v] = dist[u] + w;
                parent[v] = Some(i);
                last = Some(v);
            }
        }
        if last.is_none() {
            return Ok(());
        }
    }
    // Still relaxing after n rounds: a negative cycle; walk back n steps to stand on it.
    let mut v = last.expect("relaxed in the last round");
    for _ in 0..n {
        v = weighted[parent[v].expect("a relaxed node has a parent")].0;
    }
    let start = v;
    let mut cycle = Vec::new();
    loop {
        let i = parent[v].expect("a node on the cycle has a parent");
        cycle.push(edges[i]);
        v = weighted[i].0;
        if v == start {
            break;
        }
    }
    cycle.reverse();
    Err(cycle)
}

/// The smallest `max_size` of ring `ring` that keeps every cycle through its room positive,
/// every other size as it is, and the run's end unstuck (`>=` every consumer's lag); with the
/// dependency path that binds it (empty when the end of a run or 1 binds it). `None` when a
/// cycle that does not go through the ring's room is not positive already, or another ring of
/// the group is smaller than a consumer's lag: no size of this ring helps.
///
/// A cycle through the room a consumer at lag `L` gives back is that dependency (`max_size -
/// L`) and a path from the record to the consumer's op (total `D`): positive exactly when
/// `max_size >= L - D + 1`. (A cycle through the room twice is the sum of two such cycles.)
/// A group's dependencies, prepared once for the [`minimum_size`] of each of its rings.
pub(super) struct Group {
    edges: Vec<Edge>,
    /// Per op, the edges of lag 0 out of it.
    zero_out: HashMap<(usize, usize), Vec<usize>>,
    /// Every cycle positive with the sizes as they are.
    live: bool,
    /// The group's rings that a consumer lags past (each ends every long run stuck).
    short: Vec<usize>,
}

impl Group {
    pub(super) fn new(model: &Model, component: &[usize]) -> Self {
        let edges = edges(model, component);
        let mut zero_out: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
        for (i, e) in edges.iter().enumerate() {
            if e.d == 0 {
                zero_out.entry(e.from).or_default().push(i);
            }
        }
        let live = nonpositive_cycle(&edges).is_ok();
        let short = (0..model.rings.len())
            .filter(|&i| {
                let r = &model.rings[i];
                r.producer
                    .as_ref()
                    .is_some_and(|(p, _, _)| component.contains(p))
                    && r.consumers.iter().any(|c| c.lag > r.max_size)
            })
            .collect();
        Group {
            edges,
            zero_out,
            live,
            short,
        }
    }
}

pub(super) fn minimum_size(model: &Model, ring: usize, group: &Group) -> Option<(i64, Vec<Edge>)> {
    let rest = |e: &Edge| e.why != Why::Room(ring);
    // Fewer edges, no new cycle: a live group stays live without this ring's room.
    if !group.live {
        let rest: Vec<Edge> = group.edges.iter().copied().filter(rest).collect();
        nonpositive_cycle(&rest).ok()?;
    }
    // Another ring of the group that a consumer lags past ends every long run stuck.
    if group.short.iter().any(|&i| i != ring) {
        return None;
    }
    let r = &model.rings[ring];
    let (pt, pk, _) = r.producer.as_ref()?;
    let from = (*pt, *pk);
    // Every `d` but this ring's room is now `>= 0` (only a room smaller than a lag is
    // negative), so a cycle through the room binds more than the run's end exactly when a
    // path of total 0 leads from the record to the consumer: a search over the edges of lag 0.
    let mut parent: HashMap<(usize, usize), usize> = HashMap::new();
    let mut queue = VecDeque::from([from]);
    let mut seen = HashSet::from([from]);
    while let Some(u) = queue.pop_front() {
        for &i in group.zero_out.get(&u).map_or(&[][..], |v| &v[..]) {
            let e = &group.edges[i];
            if rest(e) && seen.insert(e.to) {
                parent.insert(e.to, i);
                queue.push_back(e.to);
            }
        }
    }
    let dist = |to: (usize, usize)| seen.contains(&to).then_some(0i128);
    let record_blocks = matches!(
        model.threads[*pt].1[*pk],
        MOp::Record { blocking: true, .. }
    );
    // (size, the consumer whose cycle binds it, if a cycle does).
    let mut best: (i128, Option<(usize, usize)>) = (1, None);
    for c in &r.consumers {
        let lag = i128::from(c.lag);
        let mut need = lag;
        if !record_blocks {
            // A non-blocking record must never find the ring full (see `decidable`).
            need = need.max(lag + i128::from(c.op >= *pk));
        }
        if need > best.0 {
            best = (need, None);
        }
        let to = (c.thread, c.op);
        if let Some(d) = dist(to) {
            // The cycle binds when it asks for more than the run's end does (ties go to it).
            let cycle = lag - d + 1;
            if cycle > lag && (cycle > best.0 || (cycle == best.0 && best.1.is_none())) {
                best = (cycle, Some(to));
            }
        }
    }
    let size = i64::try_from(best.0).ok()?;
    let mut path = Vec::new();
    if let Some(mut at) = best.1 {
        while at != from {
            let e = group.edges[*parent.get(&at)?];
            path.push(e);
            at = e.from;
        }
        path.reverse();
    }
    Some((size, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(from: (usize, usize), to: (usize, usize), d: i64) -> Edge {
        Edge {
            from,
            to,
            d,
            why: Why::Program,
        }
    }

    #[test]
    fn positive_cycles_are_live() {
        let edges = [e((0, 0), (0, 1), 0), e((0, 1), (0, 0), 1)];
        assert_eq!(nonpositive_cycle(&edges), Ok(()));
    }

    #[test]
    fn a_zero_cycle_is_found_with_its_edges_in_order() {
        // 0 -> 1 -> 2 -> 0 with d 0, 2, -2: total 0.
        let edges = [
            e((0, 0), (1, 0), 0),
            e((1, 0), (2, 0), 2),
            e((2, 0), (0, 0), -2),
            e((2, 0), (2, 0), 1),
        ];
        let cycle = nonpositive_cycle(&edges).unwrap_err();
        assert_eq!(cycle.iter().map(|e| e.d).sum::<i64>(), 0);
        assert_eq!(cycle.len(), 3);
        for w in cycle.windows(2) {
            assert_eq!(w[0].to, w[1].from);
        }
        assert_eq!(cycle.last().unwrap().to, cycle[0].from);
    }

    #[test]
    fn huge_lags_do_not_overflow() {
        let big = (1i64 << 62) + 5;
        let edges = [e((0, 0), (1, 0), big), e((1, 0), (0, 0), -big)];
        assert!(nonpositive_cycle(&edges).is_err());
        let edges = [e((0, 0), (1, 0), big), e((1, 0), (0, 0), 1 - big)];
        assert_eq!(nonpositive_cycle(&edges), Ok(()));
    }
}
