//! [`Hazard`]: one unordered pair of conflicting accesses to a buffer slot, named in full.

use std::fmt;

use super::checker::AccessKind;

/// What kind of actor made an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActorKind {
    /// A stream: the access is work enqueued on it.
    Stream,
    /// A host thread: the access is the thread's own (e.g. `process_data` reading a host
    /// batch).
    Thread,
}

impl fmt::Display for ActorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ActorKind::Stream => "stream",
            ActorKind::Thread => "thread",
        })
    }
}

/// Which order a [`Hazard`] is missing, named after the later access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HazardKind {
    /// A read not ordered after the write before it (it may see old data).
    ReadAfterWrite,
    /// A write not ordered after a read before it (it may clobber data still being read).
    WriteAfterRead,
    /// A write not ordered after the write before it (the slot may end up with either).
    WriteAfterWrite,
}

impl fmt::Display for HazardKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HazardKind::ReadAfterWrite => "read after write",
            HazardKind::WriteAfterRead => "write after read",
            HazardKind::WriteAfterWrite => "write after write",
        })
    }
}

/// One side of a [`Hazard`]: who accessed the slot, how, for which seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessSite {
    /// The stage that made the access (`"f"`, `"process_data"`).
    pub stage: String,
    /// The stream or host thread that made it.
    pub actor: String,
    /// Whether `actor` is a stream or a host thread.
    pub actor_kind: ActorKind,
    /// The batch the access was for.
    pub seq: i64,
    /// Read or write.
    pub kind: AccessKind,
}

impl AccessSite {
    /// "stage f (stream s_f)".
    fn who(&self) -> String {
        format!("stage {} ({} {})", self.stage, self.actor_kind, self.actor)
    }
}

/// An access to a buffer slot that is not ordered after an earlier conflicting access to the
/// same slot (at least one of the two writes).
///
/// Its [`Display`](fmt::Display) is one sentence naming both accesses:
/// `stage f (stream s_f) writes x[1] for seq 3, not ordered after stage h (stream s_h)
/// reading x[1] for seq 1`, followed by `(N times)` when the same pair of stages raced on the
/// slot more than once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hazard {
    /// Which order is missing.
    pub kind: HazardKind,
    /// The buffer (`"x"`).
    pub buffer: String,
    /// The slot of the buffer (`seq % slots` in a ring buffer).
    pub slot: usize,
    /// The access that came first in the checker's view.
    pub earlier: AccessSite,
    /// The access that is not ordered after `earlier` (the first such one seen).
    pub later: AccessSite,
    /// How many unordered pairs of these two stages on this slot, of this kind, were seen.
    pub count: usize,
}

impl Hazard {
    /// Does this hazard involve `stage` (on either side)?
    pub fn involves(&self, stage: &str) -> bool {
        self.earlier.stage == stage || self.later.stage == stage
    }
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (verb, earlier_verb) = match self.kind {
            HazardKind::ReadAfterWrite => ("reads", "writing"),
            HazardKind::WriteAfterRead => ("writes", "reading"),
            HazardKind::WriteAfterWrite => ("writes", "writing"),
        };
        write!(
            f,
            "{} {verb} {}[{}] for seq {}, not ordered after {} {earlier_verb} {}[{}] for seq {}",
            self.later.who(),
            self.buffer,
            self.slot,
            self.later.seq,
            self.earlier.who(),
            self.buffer,
            self.slot,
            self.earlier.seq,
        )?;
        if self.count > 1 {
            write!(f, " ({} times)", self.count)?;
        }
        Ok(())
    }
}
