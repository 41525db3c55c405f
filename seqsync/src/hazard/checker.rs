//! [`HazardChecker`]: the happens-before tracker. Actors (streams, host threads) carry vector
//! clocks; events carry snapshots; every buffer slot remembers its last write and the reads
//! since (one per actor, FastTrack-style), and each new access is checked against them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;

use super::report::{AccessSite, ActorKind, Hazard, HazardKind};
pub use crate::happens_before::AccessKind;
use crate::happens_before::{ActorId, Epoch, VectorClock};

/// One access to one slot of a buffer, by one stage, for one seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The stage making the access (`"f"`).
    pub stage: Arc<str>,
    /// The buffer accessed (`"x"`).
    pub buffer: Arc<str>,
    /// The slot of the buffer (`seq % slots` for a ring buffer).
    pub slot: usize,
    /// The batch the access is for.
    pub seq: i64,
    /// Read or write.
    pub kind: AccessKind,
}

impl Access {
    /// `stage` reads `buffer[slot]` for `seq`.
    pub fn read(stage: &str, buffer: &str, slot: usize, seq: i64) -> Self {
        Self::new(stage, buffer, slot, seq, AccessKind::Read)
    }

    /// `stage` writes `buffer[slot]` for `seq`.
    pub fn write(stage: &str, buffer: &str, slot: usize, seq: i64) -> Self {
        Self::new(stage, buffer, slot, seq, AccessKind::Write)
    }

    /// An access of the given kind.
    pub fn new(stage: &str, buffer: &str, slot: usize, seq: i64, kind: AccessKind) -> Self {
        Access {
            stage: stage.into(),
            buffer: buffer.into(),
            slot,
            seq,
            kind,
        }
    }
}

/// An event of the model: a snapshot of a stream's clock, taken by a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventId(pub(crate) u32);

/// Tracks happens-before across streams and host threads and reports every unordered pair of
/// conflicting accesses to a buffer slot. Thread-safe (one lock); share it with `Arc`.
///
/// The model (CUDA's ordering, which the host backend keeps too):
/// - every stream and host thread is an actor with a `VectorClock`;
/// - a call by host thread `T` that enqueues on stream `S` ([`access`](Self::access),
///   [`record`](Self::record), [`stream_wait`](Self::stream_wait)) first joins `T`'s clock into
///   `S`'s: work enqueued by `T` comes after what `T` did before;
/// - an access ticks its actor's own entry and is checked against the slot's last write and the
///   reads since; it is ordered after an earlier access iff that access's epoch is covered by the
///   actor's clock;
/// - `record(event, S)` snapshots `S`'s clock (a re-record replaces the snapshot; earlier waits
///   keep what they joined); `stream_wait(S, event)` joins the snapshot into `S`;
///   `host_synchronize(event)` by `T` joins it into `T`. A never-recorded event is empty;
/// - `host_record(T, event)` (a ring's `record_host`: work `T` did itself, published with no
///   stream) joins `T`'s clock into the event's snapshot.
///
/// Calls that name a host thread `by` take it explicitly, so the checker can be driven without
/// real threads; [`current_thread`](Self::current_thread) gives the calling OS thread's actor.
/// [`ValidatingBackend`](super::ValidatingBackend) makes all these calls itself.
///
/// ```
/// use seqsync::hazard::{Access, HazardChecker};
///
/// let checker = HazardChecker::new();
/// let t = checker.add_thread("main");
/// let (a, b) = (checker.add_stream("s_a"), checker.add_stream("s_b"));
/// let ev = checker.new_event();
/// checker.access(t, a, Access::write("produce", "buf", 0, 0));
/// checker.record(t, ev, a);
/// checker.stream_wait(t, b, ev);
/// checker.access(t, b, Access::read("consume", "buf", 0, 0)); // ordered by the wait
/// assert!(checker.is_clean());
/// checker.access(t, a, Access::write("produce", "buf", 0, 1)); // b's read is not waited for
/// assert_eq!(
///     checker.hazards()[0].to_string(),
///     "stage produce (stream s_a) writes buf[0] for seq 1, \
///      not ordered after stage consume (stream s_b) reading buf[0] for seq 0"
/// );
/// ```
#[derive(Debug, Default)]
pub struct HazardChecker {
    state: Mutex<State>,
}

#[derive(Debug)]
struct ActorInfo {
    name: String,
    kind: ActorKind,
    clock: VectorClock,
}

/// A past access as a slot remembers it.
#[derive(Debug, Clone)]
struct Stamp {
    epoch: Epoch,
    stage: Arc<str>,
    seq: i64,
    kind: AccessKind,
}

#[derive(Debug, Default)]
struct SlotState {
    last_write: Option<Stamp>,
    /// The last read of each actor since `last_write` (a read by the same actor earlier is
    /// ordered before its later one).
    reads: HashMap<ActorId, Stamp>,
}

/// One report per (slot, earlier stage, later stage, kind).
type HazardKey = (Arc<str>, usize, Arc<str>, Arc<str>, HazardKind);

#[derive(Debug, Default)]
struct State {
    actors: Vec<ActorInfo>,
    os_threads: HashMap<ThreadId, ActorId>,
    /// `None`: never recorded.
    events: Vec<Option<VectorClock>>,
    slots: HashMap<(Arc<str>, usize), SlotState>,
    hazards: Vec<Hazard>,
    reported: HashMap<HazardKey, usize>,
}

impl HazardChecker {
    /// A checker with no actors, events or accesses.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves at worst a partly updated clock; the checker
        // stays usable for reporting.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register a stream actor named `name` (names need not be unique; they only appear in
    /// reports).
    pub fn add_stream(&self, name: &str) -> ActorId {
        self.lock().add_actor(name, ActorKind::Stream)
    }

    /// Register a host-thread actor named `name`, not tied to any OS thread (for driving the
    /// checker by hand).
    pub fn add_thread(&self, name: &str) -> ActorId {
        self.lock().add_actor(name, ActorKind::Thread)
    }

    /// The actor of the calling OS thread, registered on first use under the thread's name (or
    /// its id, for an unnamed thread).
    pub fn current_thread(&self) -> ActorId {
        let me = std::thread::current();
        let mut state = self.lock();
        if let Some(&id) = state.os_threads.get(&me.id()) {
            return id;
        }
        let name = me
            .name()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{:?}", me.id()));
        let id = state.add_actor(&name, ActorKind::Thread);
        state.os_threads.insert(me.id(), id);
        id
    }

    /// The name an actor was registered with.
    ///
    /// # Panics
    /// If `actor` comes from another checker and is out of range here.
    pub fn actor_name(&self, actor: ActorId) -> String {
        self.lock().actor(actor).name.clone()
    }

    /// A new, never-recorded event (its snapshot is empty). The checker keeps every event's
    /// snapshot for its own lifetime.
    pub fn new_event(&self) -> EventId {
        let mut state = self.lock();
        state.events.push(None);
        EventId(u32::try_from(state.events.len() - 1).expect("more than 2^32 events"))
    }

    /// Host thread `by` makes an access on actor `on`: work it enqueues on stream `on`, or its
    /// own access when `on == by`. Reports every earlier conflicting access to the slot that
    /// the access is not ordered after.
    ///
    /// # Panics
    /// If `by` is not a host thread, or `on` is another host thread.
    pub fn access(&self, by: ActorId, on: ActorId, access: Access) {
        let mut state = self.lock();
        state.enqueue(by, on, "access", true);
        state.check(on, access);
    }

    /// Host thread `by` records `event` on stream `stream`: its snapshot becomes the stream's
    /// clock (after joining `by`'s).
    ///
    /// # Panics
    /// If `by` is not a host thread or `stream` not a stream.
    pub fn record(&self, by: ActorId, event: EventId, stream: ActorId) {
        let mut state = self.lock();
        state.enqueue(by, stream, "record", false);
        let snapshot = state.actor(stream).clock.clone();
        *state.event_mut(event) = Some(snapshot);
    }

    /// Host thread `by` publishes work it did itself under `event`, with no stream
    /// ([`EventRingbuf::record_host`](crate::EventRingbuf::record_host)): `by`'s clock is
    /// joined into the event's snapshot (the real event is left as it is, so it still stands
    /// for what it stood for before).
    ///
    /// # Panics
    /// If `by` is not a host thread.
    pub fn host_record(&self, by: ActorId, event: EventId) {
        let mut state = self.lock();
        state.expect_thread(by, "host record");
        let clock = state.actor(by).clock.clone();
        match state.event_mut(event) {
            Some(snapshot) => snapshot.join(&clock),
            none => *none = Some(clock),
        }
    }

    /// Host thread `by` makes stream `stream` wait for `event` as recorded now.
    ///
    /// # Panics
    /// If `by` is not a host thread or `stream` not a stream.
    pub fn stream_wait(&self, by: ActorId, stream: ActorId, event: EventId) {
        let mut state = self.lock();
        state.enqueue(by, stream, "stream wait", false);
        if let Some(snapshot) = state.event_mut(event).clone() {
            state.actor_mut(stream).clock.join(&snapshot);
        }
    }

    /// Host thread `by` makes stream `stream` wait for whichever of several points comes
    /// first: it is ordered after what all of their `snapshot`s cover (their meet).
    pub(crate) fn stream_wait_after(&self, by: ActorId, stream: ActorId, snapshot: &VectorClock) {
        let mut state = self.lock();
        state.enqueue(by, stream, "stream wait", false);
        state.actor_mut(stream).clock.join(snapshot);
    }

    /// Host thread `by` has synchronized on `event` (as recorded now): it is ordered after
    /// everything the event's snapshot covers.
    pub fn host_synchronize(&self, by: ActorId, event: EventId) {
        let snapshot = self.snapshot(event);
        self.join_thread(by, snapshot.as_ref());
    }

    /// Host thread `by` is ordered after everything host thread `other` did so far: `by`
    /// joined `other`'s OS thread, or received a message it sent.
    ///
    /// # Panics
    /// If either is not a host thread.
    pub fn join_actor(&self, by: ActorId, other: ActorId) {
        let mut state = self.lock();
        state.expect_thread(by, "join");
        state.expect_thread(other, "join");
        let clock = state.actor(other).clock.clone();
        state.actor_mut(by).clock.join(&clock);
    }

    /// The event's snapshot now (`None`: never recorded).
    pub(crate) fn snapshot(&self, event: EventId) -> Option<VectorClock> {
        self.lock().event_mut(event).clone()
    }

    /// Stream `stream`'s clock now: what a synchronize of the whole stream orders a thread
    /// after.
    pub(crate) fn stream_snapshot(&self, stream: ActorId) -> VectorClock {
        self.lock().actor(stream).clock.clone()
    }

    /// Host thread `by` completed a synchronize on a snapshot taken earlier.
    pub(crate) fn join_thread(&self, by: ActorId, snapshot: Option<&VectorClock>) {
        let mut state = self.lock();
        state.expect_thread(by, "synchronize");
        if let Some(snapshot) = snapshot {
            state.actor_mut(by).clock.join(snapshot);
        }
    }

    /// Every hazard found so far, in the order first seen (one per slot, pair of stages and
    /// kind; [`Hazard::count`] says how often).
    pub fn hazards(&self) -> Vec<Hazard> {
        self.lock().hazards.clone()
    }

    /// No hazard found so far?
    pub fn is_clean(&self) -> bool {
        self.lock().hazards.is_empty()
    }

    /// Every hazard, one sentence a line (empty when clean).
    pub fn report(&self) -> String {
        self.lock()
            .hazards
            .iter()
            .map(|h| format!("{h}\n"))
            .collect()
    }
}

impl State {
    fn add_actor(&mut self, name: &str, kind: ActorKind) -> ActorId {
        let id = ActorId(u32::try_from(self.actors.len()).expect("more than 2^32 actors"));
        self.actors.push(ActorInfo {
            name: name.to_owned(),
            kind,
            clock: VectorClock::new(),
        });
        id
    }

    fn actor(&self, id: ActorId) -> &ActorInfo {
        let n = self.actors.len();
        self.actors.get(id.index()).unwrap_or_else(|| {
            panic!(
                "hazard checker: actor #{} is not registered here ({n} actors)",
                id.0
            )
        })
    }

    fn actor_mut(&mut self, id: ActorId) -> &mut ActorInfo {
        let n = self.actors.len();
        self.actors.get_mut(id.index()).unwrap_or_else(|| {
            panic!(
                "hazard checker: actor #{} is not registered here ({n} actors)",
                id.0
            )
        })
    }

    fn event_mut(&mut self, id: EventId) -> &mut Option<VectorClock> {
        let n = self.events.len();
        self.events.get_mut(id.0 as usize).unwrap_or_else(|| {
            panic!(
                "hazard checker: event #{} is not registered here ({n} events)",
                id.0
            )
        })
    }

    fn expect_thread(&self, by: ActorId, what: &str) {
        let a = self.actor(by);
        assert!(
            a.kind == ActorKind::Thread,
            "hazard checker: {what} made by stream {}, not by a host thread",
            a.name
        );
    }

    /// Host thread `by` enqueues on `on`: `on` joins `by`'s clock. `on == by` is allowed only
    /// for a thread's own access.
    fn enqueue(&mut self, by: ActorId, on: ActorId, what: &str, own_allowed: bool) {
        self.expect_thread(by, what);
        if by == on && own_allowed {
            return;
        }
        let target = self.actor(on);
        assert!(
            target.kind == ActorKind::Stream,
            "hazard checker: host thread {} makes a {what} on host thread {}; only a stream \
             takes a {what} from a thread (a thread accesses only for itself)",
            self.actor(by).name,
            target.name
        );
        let clock = self.actor(by).clock.clone();
        self.actor_mut(on).clock.join(&clock);
    }

    fn site(&self, stamp: &Stamp) -> AccessSite {
        let actor = self.actor(stamp.epoch.actor);
        AccessSite {
            stage: stamp.stage.to_string(),
            actor: actor.name.clone(),
            actor_kind: actor.kind,
            seq: stamp.seq,
            kind: stamp.kind,
        }
    }

    /// Tick `actor`, check `access` against the slot, then remember it.
    fn check(&mut self, actor: ActorId, access: Access) {
        let epoch = self.actor_mut(actor).clock.tick(actor);
        let now = Stamp {
            epoch,
            stage: access.stage.clone(),
            seq: access.seq,
            kind: access.kind,
        };
        let key = (access.buffer.clone(), access.slot);
        let slot = self.slots.remove(&key).unwrap_or_default();
        let clock = &self.actor(actor).clock;
        let mut unordered = Vec::new();
        if let Some(w) = &slot.last_write {
            if !clock.covers(w.epoch) {
                let kind = match access.kind {
                    AccessKind::Read => HazardKind::ReadAfterWrite,
                    AccessKind::Write => HazardKind::WriteAfterWrite,
                };
                unordered.push((w.clone(), kind));
            }
        }
        let slot = match access.kind {
            AccessKind::Read => {
                let mut slot = slot;
                slot.reads.insert(actor, now.clone());
                slot
            }
            AccessKind::Write => {
                let mut reads: Vec<&Stamp> = slot
                    .reads
                    .values()
                    .filter(|r| !clock.covers(r.epoch))
                    .collect();
                reads.sort_by_key(|r| (r.seq, r.epoch.actor));
                unordered.extend(
                    reads
                        .into_iter()
                        .map(|r| (r.clone(), HazardKind::WriteAfterRead)),
                );
                SlotState {
                    last_write: Some(now.clone()),
                    reads: HashMap::new(),
                }
            }
        };
        self.slots.insert(key, slot);
        for (earlier, kind) in unordered {
            self.report(&access, &earlier, &now, kind);
        }
    }

    fn report(&mut self, access: &Access, earlier: &Stamp, later: &Stamp, kind: HazardKind) {
        let key = (
            access.buffer.clone(),
            access.slot,
            earlier.stage.clone(),
            later.stage.clone(),
            kind,
        );
        if let Some(&i) = self.reported.get(&key) {
            self.hazards[i].count += 1;
            return;
        }
        let hazard = Hazard {
            kind,
            buffer: access.buffer.to_string(),
            slot: access.slot,
            earlier: self.site(earlier),
            later: self.site(later),
            count: 1,
        };
        self.reported.insert(key, self.hazards.len());
        self.hazards.push(hazard);
    }
}
