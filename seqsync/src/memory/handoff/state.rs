//! The epoch model, without a backend: streams' epochs and ordered-after clocks, events'
//! snapshots, the completed clock, and every tracked buffer's uses. [`TrackingBackend`]
//! (super::TrackingBackend) makes the backend calls and keeps this state in step, under one
//! lock.
//!
//! Clocks are the hazard checker's [`VectorClock`]s, indexed by stream (an [`ActorId`] here
//! names a tracked stream): a stream's *epoch* is its own entry, and a snapshot covers a use
//! stamped `(stream, epoch)` iff its entry for that stream is at least `epoch`.

use std::sync::Arc;

use super::task::{Task, Users};
use crate::happens_before::{AccessKind, ActorId, VectorClock};

/// What the tracker decided, counted over its lifetime. Every earlier use on another stream
/// that a new use must come after is counted once, under the reason it needed no wait, or as
/// needing one; [`waits`](Self::waits) counts the stream waits inserted (one per earlier
/// stream, however many buffers it covers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandoffStats {
    /// Stream waits the tracker inserted.
    pub waits: u64,
    /// Earlier uses covered by the *completed* fact (the host saw them finish).
    pub completed: u64,
    /// Earlier uses covered by the *ordered* fact (the new stream waited for an event that
    /// covers them).
    pub ordered: u64,
    /// Earlier uses that needed a wait because the buffer's raw pointer was taken on their
    /// stream (no shortcut applies; included in the waits).
    pub raw: u64,
}

/// What an event (or a closed epoch) covers: `stream` up to `epoch`, and everything that
/// stream was ordered after when the epoch closed.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    stream: ActorId,
    epoch: u64,
    ordered: VectorClock,
}

impl Snapshot {
    fn join_into(&self, clock: &mut VectorClock) {
        clock.advance(self.stream, self.epoch);
        clock.join(&self.ordered);
    }
}

#[derive(Debug)]
struct StreamState {
    /// The open epoch: a use now is stamped with it; a record or synchronize closes it.
    epoch: u64,
    /// The *ordered* fact: how far this stream's work from now on comes after every other
    /// stream's epochs (joined from the events it waited for).
    ordered: VectorClock,
    /// Bumped whenever `ordered` changes: a record whose event already holds this version of
    /// it copies nothing (the snapshot is O(1) while the stream waits for nothing new).
    ordered_version: u64,
    users: Users,
}

impl StreamState {
    /// Join `snapshot` into the *ordered* fact (a new version of it).
    fn order_after(&mut self, snapshot: &Snapshot) {
        snapshot.join_into(&mut self.ordered);
        self.ordered_version += 1;
    }
}

#[derive(Debug)]
struct EventState {
    /// Bumped by every record: a host wait that saw another generation counts for nothing.
    generation: u64,
    /// What the last record covers, if `covers` (else: never recorded, or recorded where it
    /// covers nothing). Kept in place: a record copies into it without allocating.
    snapshot: Snapshot,
    /// Which stream's `ordered`, at which `ordered_version`, `snapshot.ordered` is a copy of.
    ordered_from: Option<(ActorId, u64)>,
    covers: bool,
}

/// The last read and last write of a buffer on one stream (epochs; 0: none).
#[derive(Debug, Clone, Copy)]
struct StreamUse {
    stream: ActorId,
    read: u64,
    write: u64,
}

#[derive(Debug, Default)]
struct BufferState {
    uses: Vec<StreamUse>,
    /// A raw pointer was taken on this stream: no shortcut until the buffer moves.
    raw: Option<ActorId>,
}

impl BufferState {
    fn entry(&mut self, stream: ActorId) -> &mut StreamUse {
        let i = match self.uses.iter().position(|u| u.stream == stream) {
            Some(i) => i,
            None => {
                self.uses.push(StreamUse {
                    stream,
                    read: 0,
                    write: 0,
                });
                self.uses.len() - 1
            }
        };
        &mut self.uses[i]
    }

    fn stamp(&mut self, stream: ActorId, epoch: u64, kind: AccessKind) {
        let e = self.entry(stream);
        match kind {
            AccessKind::Read => e.read = e.read.max(epoch),
            AccessKind::Write => e.write = e.write.max(epoch),
        }
    }
}

/// Slots reused after removal.
#[derive(Debug)]
struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    fn insert(&mut self, item: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.items[i] = Some(item);
                i
            }
            None => {
                self.items.push(Some(item));
                self.items.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) {
        if self.items.get_mut(i).and_then(Option::take).is_some() {
            self.free.push(i);
        }
    }

    fn get_mut(&mut self, i: usize) -> &mut T {
        self.items[i]
            .as_mut()
            .expect("tracked object used after removal")
    }
}

/// The whole model. Every method is one step of the tracker, called under its lock.
#[derive(Debug, Default)]
pub(crate) struct State {
    streams: Vec<StreamState>,
    events: Slab<EventState>,
    buffers: Slab<BufferState>,
    /// The *completed* fact: epochs the host saw finish.
    completed: VectorClock,
    /// Ids of streams dropped (every epoch of theirs completed), for the next streams: the
    /// clocks stay as long as the most streams alive at once, not all ever made. A new stream
    /// on an old id goes on counting its epochs from there, so the old id's stamps and
    /// snapshots all stay covered by `completed` and say nothing about the new stream's work.
    free_streams: Vec<ActorId>,
    pub(crate) stats: HandoffStats,
    /// Ignore both facts: every move waits for everything on the old stream (the behaviour
    /// this module improves on; a baseline for tests and benchmarks).
    pub(crate) no_shortcuts: bool,
}

/// A new use of a buffer, planned: the earlier streams to wait for.
pub(crate) struct Plan {
    pub(crate) waits: Vec<ActorId>,
}

impl State {
    pub(crate) fn add_stream(&mut self) -> ActorId {
        if let Some(id) = self.free_streams.pop() {
            let s = &mut self.streams[id.index()];
            s.ordered = VectorClock::new();
            s.ordered_version += 1;
            s.users = Users::default();
            return id;
        }
        self.streams.push(StreamState {
            epoch: 1,
            ordered: VectorClock::new(),
            ordered_version: 0,
            users: Users::default(),
        });
        ActorId(u32::try_from(self.streams.len() - 1).expect("more than 2^32 streams"))
    }

    pub(crate) fn add_event(&mut self) -> usize {
        self.events.insert(EventState {
            generation: 0,
            snapshot: Snapshot {
                stream: ActorId(0),
                epoch: 0,
                ordered: VectorClock::new(),
            },
            ordered_from: None,
            covers: false,
        })
    }

    pub(crate) fn remove_event(&mut self, id: usize) {
        self.events.remove(id);
    }

    pub(crate) fn add_buffer(&mut self) -> usize {
        self.buffers.insert(BufferState::default())
    }

    pub(crate) fn remove_buffer(&mut self, id: usize) {
        self.buffers.remove(id);
    }

    fn stream(&mut self, s: ActorId) -> &mut StreamState {
        &mut self.streams[s.index()]
    }

    /// `task` submits to `s`; is it the only live task doing so (do its closes count)?
    fn enter(&mut self, s: ActorId, task: Option<&Arc<Task>>) -> bool {
        self.stream(s).users.enter(task)
    }

    /// `task` enqueues work on `s` that uses no tracked value.
    pub(crate) fn enter_stream(&mut self, s: ActorId, task: Option<&Arc<Task>>) {
        self.enter(s, task);
    }

    /// Close `s`'s open epoch; what the closed part covers, if the close counts.
    fn close(&mut self, s: ActorId, counts: bool) -> Option<Snapshot> {
        let st = self.stream(s);
        let snapshot = counts.then(|| Snapshot {
            stream: s,
            epoch: st.epoch,
            ordered: st.ordered.clone(),
        });
        st.epoch += 1;
        snapshot
    }

    /// `t` waited for `snapshot`: its later work comes after everything it covers.
    fn order(&mut self, t: ActorId, snapshot: &Snapshot) {
        self.streams[t.index()].order_after(snapshot);
    }

    /// `task` recorded `event` on `s` (after the backend's record). The hot path: no
    /// allocation, no atomic read-modify-write.
    pub(crate) fn record(&mut self, event: usize, s: ActorId, task: Option<&Arc<Task>>) {
        let counts = self.enter(s, task);
        let st = &mut self.streams[s.index()];
        let ev = self.events.get_mut(event);
        ev.generation += 1;
        ev.covers = counts;
        if counts {
            ev.snapshot.stream = s;
            ev.snapshot.epoch = st.epoch;
            let from = Some((s, st.ordered_version));
            if ev.ordered_from != from {
                ev.snapshot.ordered.clone_from(&st.ordered);
                ev.ordered_from = from;
            }
        }
        st.epoch += 1;
    }

    /// `task` made `t` wait for `event` (after the backend's wait, under the same lock).
    #[inline]
    pub(crate) fn stream_wait(&mut self, t: ActorId, event: usize, task: Option<&Arc<Task>>) {
        self.enter(t, task);
        let ev = self.events.get_mut(event);
        if ev.covers {
            self.streams[t.index()].order_after(&ev.snapshot);
        }
    }

    /// The event as recorded now, for a host wait made without the lock.
    pub(crate) fn event_view(&mut self, event: usize) -> (u64, Option<Snapshot>) {
        let ev = self.events.get_mut(event);
        (ev.generation, ev.covers.then(|| ev.snapshot.clone()))
    }

    /// The host saw `event` complete, as it was at `generation`: counts only if it was not
    /// recorded again meanwhile.
    pub(crate) fn event_completed(&mut self, event: usize, view: (u64, Option<Snapshot>)) {
        let (generation, snapshot) = view;
        if self.events.get_mut(event).generation == generation {
            if let Some(s) = snapshot {
                self.completed(&s);
            }
        }
    }

    pub(crate) fn completed(&mut self, snapshot: &Snapshot) {
        snapshot.join_into(&mut self.completed);
    }

    /// `task` starts a host synchronize of `s`: closes its epoch; the snapshot to mark
    /// completed once the synchronize returns (if the close counts).
    pub(crate) fn start_stream_sync(
        &mut self,
        s: ActorId,
        task: Option<&Arc<Task>>,
    ) -> Option<Snapshot> {
        let counts = self.enter(s, task);
        self.close(s, counts)
    }

    /// A tracked stream is gone after a synchronize: all its stamps are complete, and its id
    /// is free for a new stream.
    pub(crate) fn stream_dropped(&mut self, s: ActorId) {
        let epoch = self.stream(s).epoch;
        self.completed.advance(s, epoch);
        self.stream(s).epoch += 1;
        // A raw pointer taken on it is over with it: the next stream on this id owes nothing.
        for b in self.buffers.items.iter_mut().flatten() {
            if b.raw == Some(s) {
                b.raw = None;
            }
        }
        self.free_streams.push(s);
    }

    /// `task` is about to submit work on `t` using `uses`: the earlier streams it must wait
    /// for, and the counts. Nothing is stamped yet: [`stamp_planned`](Self::stamp_planned)
    /// does that once the waits are enqueued (a submission whose waits fail leaves the
    /// buffers' histories as they were, so a retry waits again).
    pub(crate) fn plan(
        &mut self,
        t: ActorId,
        uses: impl Iterator<Item = (usize, AccessKind)> + Clone,
        task: Option<&Arc<Task>>,
    ) -> Plan {
        self.enter(t, task);
        let mut waits: Vec<ActorId> = Vec::new();
        for (id, kind) in uses {
            let ordered = &self.streams[t.index()].ordered;
            let b = self.buffers.get_mut(id);
            for u in &b.uses {
                if u.stream == t {
                    continue; // stream order
                }
                let need = match kind {
                    AccessKind::Read => u.write, // read after read needs nothing
                    AccessKind::Write => u.read.max(u.write),
                };
                if need == 0 {
                    continue;
                }
                if b.raw == Some(u.stream) {
                    self.stats.raw += 1;
                } else if self.no_shortcuts {
                    // the baseline: always wait
                } else if self.completed.get(u.stream) >= need {
                    self.stats.completed += 1;
                    continue;
                } else if ordered.get(u.stream) >= need {
                    self.stats.ordered += 1;
                    continue;
                }
                if !waits.contains(&u.stream) {
                    waits.push(u.stream);
                }
            }
        }
        self.stats.waits += waits.len() as u64;
        Plan { waits }
    }

    /// The waits [`plan`](Self::plan) asked for are enqueued: stamp the uses on `t` (the first
    /// stamp).
    pub(crate) fn stamp_planned(
        &mut self,
        t: ActorId,
        uses: impl Iterator<Item = (usize, AccessKind)>,
    ) {
        let epoch = self.streams[t.index()].epoch;
        for (id, kind) in uses {
            let b = self.buffers.get_mut(id);
            if b.raw.is_some_and(|r| r != t) {
                b.raw = None; // it moves: the wait covers everything on the old stream
            }
            if kind == AccessKind::Write {
                // Everything before is ordered before this write (waited for or covered), and
                // anything after must come after this write: the older uses are redundant.
                b.uses.retain(|u| u.stream == t);
            }
            b.stamp(t, epoch, kind);
        }
    }

    /// The tracker recorded its own event on `s` and made `t` wait for it (the fallback: `t`
    /// waits for everything submitted to `s` so far). If `task` is the only live task on
    /// `s`, that closes an epoch of `s` that `t` is now ordered after.
    pub(crate) fn waited_for_stream(&mut self, t: ActorId, s: ActorId, task: Option<&Arc<Task>>) {
        let counts = self.enter(s, task);
        if let Some(snapshot) = self.close(s, counts) {
            self.order(t, &snapshot);
        }
    }

    /// The second stamp, once the work is submitted (`t`'s epoch may have moved meanwhile).
    pub(crate) fn stamp_submitted(
        &mut self,
        t: ActorId,
        uses: impl Iterator<Item = (usize, AccessKind)>,
    ) {
        let epoch = self.streams[t.index()].epoch;
        for (id, kind) in uses {
            self.buffers.get_mut(id).stamp(t, epoch, kind);
        }
    }

    /// A raw pointer of buffer `id` was taken on `t` (after the plan of a write): no shortcut
    /// for it until it moves.
    pub(crate) fn taint(&mut self, id: usize, t: ActorId) {
        self.buffers.get_mut(id).raw = Some(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams made and dropped one after another reuse ids: the model keeps as many streams
    /// (and clock entries) as were alive at once, not one per stream ever made.
    /// A raw pointer taken on a stream that is then dropped does not taint the next stream
    /// made on its id: a write elsewhere needs no wait for it.
    #[test]
    fn a_dropped_stream_s_raw_taint_goes_with_it() {
        let mut st = State::default();
        let b = st.buffers.insert(BufferState::default());
        let x = st.add_stream();
        let plan = st.plan(x, std::iter::once((b, AccessKind::Write)), None);
        assert!(plan.waits.is_empty());
        st.stamp_planned(x, std::iter::once((b, AccessKind::Write)));
        st.taint(b, x);
        st.stream_dropped(x);
        let y = st.add_stream();
        assert_eq!(y, x, "the id is reused");
        let z = st.add_stream();
        let plan = st.plan(z, std::iter::once((b, AccessKind::Write)), None);
        assert!(
            plan.waits.is_empty(),
            "waited for the new stream on the old id"
        );
    }

    #[test]
    fn dropped_streams_ids_are_reused() {
        let mut st = State::default();
        let keep = st.add_stream();
        for _ in 0..1000 {
            let s = st.add_stream();
            st.stream_dropped(s);
        }
        assert_eq!(st.streams.len(), 2);
        assert!(st.completed.get(keep) == 0);
    }
}
