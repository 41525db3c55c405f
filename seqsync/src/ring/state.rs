//! One ring slot: its packed state word ([`Word`]) and the atomic that owns it ([`Slot`]).
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
//! | 22..64 | `tag` | `seq + max_size` of the seq the slot holds, modulo 2^42 (initially the slot index, i.e. seq `index - max_size`, fully released) |
//!
//! Invariants: `released <= acquired <= nconsumers`; a slot's tag only moves forward, by
//! `max_size` at a time (modulo 2^42), and only when `released == nconsumers` (every consumer
//! has enqueued its wait or finished its synchronize); only the producer changes the tag.
//!
//! Tags wrap: a tag alone names a seq only modulo 2^42. The ring reads the full seq back with
//! [`slot_seq`], relative to the producer's full 64-bit `next` counter: a slot always holds a
//! seq within `2 * max_size` (≤ 2^31) below `next`, far inside the ±2^41 that 42 bits tell
//! apart. So seqs run to `i64::MAX - 1` (292 000 years at one seq per nanosecond).

use crate::primitive::{AtomicU64, Ordering};

/// Most consumers a ring can have (10 bits).
pub(crate) const MAX_CONSUMERS: u32 = (1 << 10) - 1;
/// Tags are `seq + max_size` modulo 2^42.
const TAG_BITS: u32 = 42;
pub(crate) const TAG_MASK: u64 = (1 << TAG_BITS) - 1;

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
    /// `tag` is taken modulo 2^42.
    pub(crate) fn new(tag: u64, count: u32) -> Word {
        debug_assert!(count <= MAX_CONSUMERS);
        let c = count as u64;
        Word(((tag & TAG_MASK) << TAG_SHIFT) | (c << RELEASED_SHIFT) | c)
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

/// One ring slot: the word, on its own cache line (the producer and the consumers of
/// neighbouring seqs touch neighbouring slots). Every atomic operation on a slot is a method
/// here, with its memory ordering and why.
///
/// The orderings pair up like this (tokio's `sync/watch.rs` documents its state the same way):
/// the producer's [`publish`](Slot::publish) (release) is acquired by every consumer's
/// [`load`](Slot::load), so the event record happens before the consumer's backend call on the
/// event; each consumer's [`release`](Slot::release) or
/// [`take_and_release`](Slot::take_and_release) (release) is acquired by the producer's
/// [`load`](Slot::load) before it re-records, so every consumer's backend call on the event
/// happens before the re-record.
#[repr(align(64))]
pub(crate) struct Slot(AtomicU64);

impl Slot {
    /// A slot holding `word`.
    pub(crate) fn new(word: Word) -> Slot {
        Slot(AtomicU64::new(word.0))
    }

    /// Overwrite the word. Relaxed: only while the ring is being built, before any other
    /// thread can see it.
    pub(crate) fn init(&self, word: Word) {
        self.0.store(word.0, Ordering::Relaxed);
    }

    /// The word now. Acquire: pairs with the producer's [`publish`](Self::publish) (the event
    /// was recorded before) and with consumers' releases (their backend calls on the event
    /// were made before).
    #[inline]
    pub(crate) fn load(&self) -> Word {
        Word(self.0.load(Ordering::Acquire))
    }

    /// Producer: make the slot hold the seq whose tag is `tag`, taken and released by nobody
    /// yet; returns the word it replaced. AcqRel: release so that consumers that see the new
    /// tag also see the recorded event; acquire so that the producer sees the flags sleepers
    /// set in the old word.
    #[inline]
    pub(crate) fn publish(&self, tag: u64) -> Word {
        Word(self.0.swap(Word::new(tag, 0).0, Ordering::AcqRel))
    }

    /// Consumer of a stream wait: take and release one share in one step (the wait is already
    /// enqueued, so nothing holds the share); returns the word before. AcqRel: release so that
    /// the backend call happens before the producer's re-record; acquire to read the tag and
    /// counts it checks.
    #[inline]
    pub(crate) fn take_and_release(&self) -> Word {
        Word(
            self.0
                .fetch_add(ONE_ACQUIRE + ONE_RELEASE, Ordering::AcqRel),
        )
    }

    /// Consumer of a host synchronize: take one share if the word is still `seen`. AcqRel on
    /// success (the share is ordered after the publish it saw), Acquire on failure (the caller
    /// reloads). Weak: the caller retries in a loop.
    #[inline]
    pub(crate) fn try_take(&self, seen: Word) -> bool {
        self.0
            .compare_exchange_weak(
                seen.0,
                seen.0 + ONE_ACQUIRE,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    /// Consumer: release a share taken with [`try_take`](Self::try_take); returns the word
    /// before. AcqRel: release so that the backend call on the event (the synchronize) happens
    /// before the producer's re-record.
    #[inline]
    pub(crate) fn release(&self) -> Word {
        Word(self.0.fetch_add(ONE_RELEASE, Ordering::AcqRel))
    }

    /// A sleeper: set `flag` if the word is still `seen` (whoever changes the word next sees
    /// the flag and wakes it). AcqRel/Acquire: the flag is ordered after what the sleeper
    /// checked, and a failure reloads the current word.
    pub(crate) fn try_set_flag(&self, seen: Word, flag: u64) -> bool {
        self.0
            .compare_exchange(seen.0, seen.0 | flag, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// The tag of `seq` in a ring of `max_size`: `seq + max_size` modulo 2^42.
#[inline]
pub(crate) fn tag_of(seq: i64, max_size: usize) -> u64 {
    (seq as u64).wrapping_add(max_size as u64) & TAG_MASK
}

/// The full seq a slot with `tag` holds, given the producer's `next` counter: the seq congruent
/// to `tag - max_size` modulo 2^42 nearest to `next`. Exact while the slot's seq is within
/// ±2^41 of `next` (a slot holds a seq at most `2 * max_size` below it).
#[inline]
pub(crate) fn slot_seq(tag: u64, max_size: usize, next: i64) -> i64 {
    let d = tag.wrapping_sub(max_size as u64).wrapping_sub(next as u64) & TAG_MASK;
    // Sign-extend the 42-bit difference.
    let d = ((d << (64 - TAG_BITS)) as i64) >> (64 - TAG_BITS);
    next.wrapping_add(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let w = Word::new(TAG_MASK, MAX_CONSUMERS);
        assert_eq!(w.tag(), TAG_MASK);
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

    #[test]
    fn slot_seq_reads_tags_back_across_the_wrap() {
        for next in [
            0i64,
            5,
            (1 << 42) - 3,
            1 << 42,
            (1 << 42) + 7,
            1 << 62,
            i64::MAX,
        ] {
            for max_size in [1usize, 3, 4, 1 << 30] {
                for back in 1..=(2 * max_size as i64).min(9) {
                    let seq = next - back;
                    let tag = tag_of(seq, max_size);
                    assert_eq!(
                        slot_seq(tag, max_size, next),
                        seq,
                        "next {next} max {max_size}"
                    );
                }
                let far = (2 * max_size as i64).max(1 << 31);
                assert_eq!(
                    slot_seq(tag_of(next - far, max_size), max_size, next),
                    next - far
                );
            }
        }
    }
}
