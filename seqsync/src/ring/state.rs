//! The packed state word of one ring slot.
//!
//! Each slot is one `AtomicU64`, so that a consumer's acquire, a consumer's release and the
//! producer's publish are each a single atomic operation and no lock is taken on the fast path:
//!
//! | bits | field | meaning |
//! |---|---|---|
//! | 0..10 | `acquired` | consumers that took this seq (0..=nconsumers) |
//! | 10..20 | `released` | consumers that finished with it (0..=acquired) |
//! | 20 | `CONSUMER_WAITING` | some thread sleeps until this slot holds a later seq |
//! | 21 | `PRODUCER_WAITING` | the producer sleeps until `released == nconsumers` |
//! | 22..64 | `tag` | `seq + max_size` of the seq the slot holds (initially the slot index, i.e. seq `index - max_size`, fully released) |
//!
//! Invariants: `released <= acquired <= nconsumers`; a slot's tag only grows, by `max_size` at
//! a time, and only when `released == nconsumers` (every consumer has enqueued its wait or
//! finished its synchronize); only the producer changes the tag.

/// Most consumers a ring can have (10 bits).
pub(crate) const MAX_CONSUMERS: u32 = (1 << 10) - 1;
/// Largest `seq + max_size` a tag can hold (42 bits).
pub(crate) const MAX_TAG: u64 = (1 << 42) - 1;

const COUNT_MASK: u64 = (1 << 10) - 1;
const RELEASED_SHIFT: u32 = 10;
pub(crate) const ONE_RELEASE: u64 = 1 << RELEASED_SHIFT;
pub(crate) const ONE_ACQUIRE: u64 = 1;
pub(crate) const CONSUMER_WAITING: u64 = 1 << 20;
pub(crate) const PRODUCER_WAITING: u64 = 1 << 21;
const TAG_SHIFT: u32 = 22;

/// A decoded view of a slot word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word(pub(crate) u64);

impl Word {
    /// A slot holding the seq whose tag is `tag`, taken and released `count` times each.
    pub(crate) fn new(tag: u64, count: u32) -> Word {
        debug_assert!(tag <= MAX_TAG && count <= MAX_CONSUMERS);
        let c = count as u64;
        Word((tag << TAG_SHIFT) | (c << RELEASED_SHIFT) | c)
    }

    pub(crate) fn tag(self) -> u64 {
        self.0 >> TAG_SHIFT
    }

    pub(crate) fn acquired(self) -> u32 {
        (self.0 & COUNT_MASK) as u32
    }

    pub(crate) fn released(self) -> u32 {
        ((self.0 >> RELEASED_SHIFT) & COUNT_MASK) as u32
    }

    pub(crate) fn has(self, flag: u64) -> bool {
        self.0 & flag != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let w = Word::new(MAX_TAG, MAX_CONSUMERS);
        assert_eq!(w.tag(), MAX_TAG);
        assert_eq!(w.acquired(), MAX_CONSUMERS);
        assert_eq!(w.released(), MAX_CONSUMERS);
        assert!(!w.has(CONSUMER_WAITING) && !w.has(PRODUCER_WAITING));
    }

    #[test]
    fn increments_touch_one_field() {
        let w = Word(Word::new(5, 0).0 + ONE_ACQUIRE + ONE_ACQUIRE + ONE_RELEASE);
        assert_eq!((w.tag(), w.acquired(), w.released()), (5, 2, 1));
        let w = Word(w.0 | CONSUMER_WAITING | PRODUCER_WAITING);
        assert_eq!((w.tag(), w.acquired(), w.released()), (5, 2, 1));
        assert!(w.has(CONSUMER_WAITING) && w.has(PRODUCER_WAITING));
    }
}
