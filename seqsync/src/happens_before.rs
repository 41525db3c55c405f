//! Happens-before, as the hazard checker and buffer handoff both track it: actors (streams and
//! host threads), their vector clocks (one logical counter per actor), and the two kinds of
//! access.
//!
//! It may use nothing else of the crate.
//!
//! An actor's own entry counts its accesses; the other entries say how much of every other
//! actor's history it is ordered after (through events, stream waits and host synchronizes).
//! An earlier access, identified by its [`Epoch`] (actor, tick), happens before the present of
//! an actor iff `epoch.tick <= clock[epoch.actor]`.

/// An actor of the happens-before model: a stream or a host thread, registered with a
/// hazard checker or a buffer tracker, which hand these out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorId(pub(crate) u32);

impl ActorId {
    /// The actor's dense index (0, 1, 2, … in registration order): its entry in a clock.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One point in one actor's history: its `tick`-th access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Epoch {
    /// Whose history.
    pub actor: ActorId,
    /// The actor's own counter after the access (the first access is tick 1).
    pub tick: u64,
}

/// A vector clock over actors; a missing entry is 0. The empty clock (nothing happened before)
/// is the [`Default`]. Internal to the checker (and buffer handoff).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VectorClock {
    ticks: Vec<u64>,
}

impl VectorClock {
    /// The empty clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// The entry of `actor` (0 when absent).
    pub fn get(&self, actor: ActorId) -> u64 {
        self.ticks.get(actor.index()).copied().unwrap_or(0)
    }

    /// Advance `actor`'s own entry by one; returns the new epoch.
    pub fn tick(&mut self, actor: ActorId) -> Epoch {
        let i = actor.index();
        if self.ticks.len() <= i {
            self.ticks.resize(i + 1, 0);
        }
        self.ticks[i] += 1;
        Epoch {
            actor,
            tick: self.ticks[i],
        }
    }

    /// Entry-wise maximum with `other`: afterwards this clock is ordered after everything
    /// `other` is ordered after.
    pub fn join(&mut self, other: &VectorClock) {
        if self.ticks.len() < other.ticks.len() {
            self.ticks.resize(other.ticks.len(), 0);
        }
        for (mine, theirs) in self.ticks.iter_mut().zip(&other.ticks) {
            *mine = (*mine).max(*theirs);
        }
    }

    /// Entry-wise minimum with `other`: afterwards this clock covers only what both covered
    /// (what is ordered before either of two events, whichever comes first).
    pub fn meet(&mut self, other: &VectorClock) {
        self.ticks.truncate(other.ticks.len());
        for (mine, theirs) in self.ticks.iter_mut().zip(&other.ticks) {
            *mine = (*mine).min(*theirs);
        }
    }

    /// Raise `actor`'s entry to at least `tick`: afterwards the clock covers `actor`'s history
    /// up to `tick`.
    pub fn advance(&mut self, actor: ActorId, tick: u64) {
        let i = actor.index();
        if self.ticks.len() <= i {
            self.ticks.resize(i + 1, 0);
        }
        self.ticks[i] = self.ticks[i].max(tick);
    }

    /// Does the point `epoch` happen before (or at) this clock?
    pub fn covers(&self, epoch: Epoch) -> bool {
        epoch.tick <= self.get(epoch.actor)
    }
}

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// The access reads the slot.
    Read,
    /// The access writes the slot.
    Write,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_orders_one_actor_after_another() {
        let (a, b) = (ActorId(0), ActorId(1));
        let mut ca = VectorClock::new();
        let e = ca.tick(a); // a's first access
        let mut cb = VectorClock::new();
        cb.tick(b);
        assert!(!cb.covers(e)); // b is not ordered after it …
        cb.join(&ca); // … until it joins a's clock (an event wait)
        assert!(cb.covers(e));
    }
}
