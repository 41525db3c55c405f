//! The words the resident engine's host threads and its kernel share
//! ([`Engine::Resident`](super::Engine::Resident)): on CUDA pinned host memory that the kernel
//! reads and writes at its host address (unified addressing), on the host backend a boxed slice.
//!
//! | word | written by | read by | says |
//! |---|---|---|---|
//! | `arrived` | get_data, after filling a batch in | the kernel (one block polls it, the others a copy in device memory) | batches `0..arrived` are in their host input slots |
//! | `stop` | the run's stop, and the engine once its threads ended | the kernel, while it waits for a batch that has not arrived | end now: nothing more will arrive |
//! | `done[slot]` | the kernel, once every tile of a batch in that slot was written | the process_data thread that took the batch (copies in place), or the copy-out stream's wait (copies by the copy engines) | `1 +` the newest batch complete in `slot` |
//! | `copied[slot]` | the copy-out stream, after copying a batch's output to its host slot (copies by the copy engines) | the process_data thread that took the batch | `1 +` the newest batch in host output `slot` |
//!
//! With copies by the copy engines ([`CopyBy::Memcpy`](super::CopyBy::Memcpy)) `arrived` is
//! written by the copy-in stream after each copy, not by the host.
//!
//! One set per kernel launch: a `done` or `copied` word only grows, from zero. Each word has a
//! 64-byte line of its own ([`LINE`]), and each of the kernel's own words in device memory a
//! 128-byte line ([`DEVICE_LINE`]): a thread polling one word shares its line with no
//! word another thread or the device writes (BENCHMARKS.md §13, run P).

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// u64s a word takes: one a 64-byte line (the kernel's `CTL_LINE`), so that a host thread
/// polling one word shares its line with no word another thread or the device writes.
pub(crate) const LINE: usize = 8;

/// u64s each of the kernel's own words in device memory takes: one a 128-byte line (its
/// `DEV_LINE`).
const DEVICE_LINE: usize = 16;

/// The kernel's own words in device memory besides one a slot: the ticket, `arrived` and
/// `stop` as seen.
const KERNEL_WORDS: usize = 3;

/// u64s of the kernel's own words in device memory, one a line ([`DEVICE_LINE`]): its
/// [`KERNEL_WORDS`], the tiles done of each slot, and the tiles finished (the cap on tiles
/// reading at once).
pub(crate) fn device_word_count(slots: usize) -> usize {
    (KERNEL_WORDS + slots + 1) * DEVICE_LINE
}

const ARRIVED: usize = 0;
const STOP: usize = 1;
const DONE: usize = 2;
/// `copied[slot]` is word `DONE + slots + slot`.
const COPIED_AFTER_DONE: usize = 1;

/// Where the words live.
enum Storage {
    /// The host backend's: a boxed slice.
    Host(Box<[AtomicU64]>),
    /// Memory the device reaches too (pinned, on CUDA) at `ptr`, which `memory` owns.
    Raw {
        ptr: NonNull<AtomicU64>,
        _memory: Box<dyn Any + Send + Sync>,
    },
}

/// The shared words of one resident kernel over `slots` slots.
pub(crate) struct ResidentWords {
    /// While the kernel may wait for the host: what says so to the backend (on CUDA an
    /// `OpenWait`, which holds frees back), dropped once every batch arrived or on `stop`
    /// (with copies out on streams: by `release_done`).
    /// Dropped before the memory (fields drop in order).
    hold: Mutex<Option<Box<dyn Any + Send + Sync>>>,
    /// The kernel's batches: once `arrived` reaches them it no longer waits for the host.
    release_at: AtomicU64,
    /// Copies out on streams wait on `done` words, and after a stop only
    /// [`release_done`](Self::release_done) ends those waits: the hold goes with it, not before.
    copies_out_wait: AtomicBool,
    storage: Storage,
    slots: usize,
    /// The kernel's own words in device memory (its ticket, what it saw of `arrived` and
    /// `stop`, tiles done per slot): their device address, 0 on the host backend.
    device_words: u64,
}

// SAFETY: `Storage::Raw`'s pointer is to atomics in memory its `_memory` owns (moving with the
// struct, freed with it); every access through `&self` is atomic.
unsafe impl Send for ResidentWords {}
// SAFETY: as above: shared access is only ever atomic.
unsafe impl Sync for ResidentWords {}

impl ResidentWords {
    /// u64 words for `slots` slots.
    pub(crate) fn len_for(slots: usize) -> usize {
        (DONE + (1 + COPIED_AFTER_DONE) * slots) * LINE
    }

    /// Words in host memory (the host backend's kernel is a host thread).
    pub(crate) fn on_host(slots: usize) -> Self {
        let words = (0..Self::len_for(slots))
            .map(|_| AtomicU64::new(0))
            .collect();
        Self::with(Storage::Host(words), slots, 0)
    }

    fn with(storage: Storage, slots: usize, device_words: u64) -> Self {
        ResidentWords {
            hold: Mutex::new(None),
            release_at: AtomicU64::new(u64::MAX),
            copies_out_wait: AtomicBool::new(false),
            storage,
            slots,
            device_words,
        }
    }

    /// Words at `ptr`, which `memory` owns.
    ///
    /// # Safety
    /// `ptr` points to [`len_for`](Self::len_for)`(slots)` zeroed, 8-byte aligned u64s that
    /// live as long as `memory` does, which the host accesses only through this struct (the
    /// device may read and write them meanwhile).
    pub(crate) unsafe fn from_raw(
        ptr: *mut u64,
        slots: usize,
        device_words: u64,
        memory: Box<dyn Any + Send + Sync>,
    ) -> Self {
        // SAFETY: the caller's guarantee (not null: it points to live memory); AtomicU64 has
        // u64's size and, at 8-byte alignment, its layout.
        let ptr = unsafe { NonNull::new_unchecked(ptr.cast::<AtomicU64>()) };
        let storage = Storage::Raw {
            ptr,
            _memory: memory,
        };
        Self::with(storage, slots, device_words)
    }

    fn words(&self) -> &[AtomicU64] {
        match &self.storage {
            Storage::Host(words) => words,
            // SAFETY: `len_for(slots)` live atomics (`from_raw`'s contract).
            Storage::Raw { ptr, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), Self::len_for(self.slots))
            },
        }
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        &self.words()[i * LINE]
    }

    /// Keep `hold` (what tells the backend that the kernel may wait for the host) until the
    /// kernel of `batches` batches no longer may: every batch arrived, or `stop`.
    pub(crate) fn hold_until_released(&self, hold: Box<dyn Any + Send + Sync>, batches: u64) {
        *self.hold.lock().unwrap_or_else(|e| e.into_inner()) = Some(hold);
        self.release_at.store(batches, Ordering::SeqCst);
        if self.arrived() >= batches || self.stopped() {
            self.release_unless_copies_out_wait();
        }
    }

    /// Copies out on streams will wait on the `done` words (before
    /// [`hold_until_released`](Self::hold_until_released)): keep the hold until
    /// [`release_done`](Self::release_done).
    pub(crate) fn hold_through_copies_out(&self) {
        self.copies_out_wait.store(true, Ordering::SeqCst);
    }

    /// The kernel no longer waits for the host: drop the hold, unless copies out may still wait
    /// on words only the host will write.
    fn release_unless_copies_out_wait(&self) {
        if !self.copies_out_wait.load(Ordering::SeqCst) {
            self.release();
        }
    }

    /// Drop the hold.
    fn release(&self) {
        let hold = self.hold.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(hold);
    }

    /// Slots the words cover.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// The address of the first word (the kernel's `ctl` parameter).
    pub(crate) fn address(&self) -> u64 {
        self.words().as_ptr() as u64
    }

    /// The kernel's device words (0 on the host backend).
    pub(crate) fn device_words(&self) -> u64 {
        self.device_words
    }

    /// Batches `0..arrived` are in their host input slots.
    pub(crate) fn arrived(&self) -> u64 {
        self.word(ARRIVED).load(Ordering::Acquire)
    }

    /// get_data: batches `0..n` are in place (after their inputs were written).
    pub(crate) fn arrive(&self, n: u64) {
        self.word(ARRIVED).store(n, Ordering::Release);
        self.arrivals_enqueued(n);
    }

    /// get_data, with copies by the copy engines: the arrivals of batches `0..n` are enqueued
    /// (a stream writes them after their copies, with no wait for the host before): once they
    /// cover every batch the kernel no longer waits for the host.
    pub(crate) fn arrivals_enqueued(&self, n: u64) {
        if n >= self.release_at.load(Ordering::Relaxed) {
            self.release_unless_copies_out_wait();
        }
    }

    /// End the kernel's waits: nothing more arrives.
    pub(crate) fn stop(&self) {
        self.word(STOP).store(1, Ordering::Release);
        self.release_unless_copies_out_wait();
    }

    pub(crate) fn stopped(&self) -> bool {
        self.word(STOP).load(Ordering::Acquire) != 0
    }

    /// `1 +` the newest batch complete in `slot` (0: none yet).
    pub(crate) fn done(&self, slot: usize) -> u64 {
        self.word(self.done_index(slot)).load(Ordering::Acquire)
    }

    /// The host backend's kernel: batch `n - 1` in `slot` is complete.
    pub(crate) fn set_done(&self, slot: usize, n: u64) {
        self.word(self.done_index(slot)).store(n, Ordering::Release);
    }

    /// `1 +` the newest batch copied to host output `slot` (0: none yet); copies by the copy
    /// engines only.
    pub(crate) fn copied(&self, slot: usize) -> u64 {
        self.word(self.copied_index(slot)).load(Ordering::Acquire)
    }

    /// The host backend's copy-out stream: batch `n - 1` is in host output `slot`.
    pub(crate) fn set_copied(&self, slot: usize, n: u64) {
        // Never lowered (a copy out of an earlier batch landing late: only with a test switch
        // dropping the waits before slot reuse).
        self.word(self.copied_index(slot))
            .fetch_max(n, Ordering::AcqRel);
    }

    fn done_index(&self, slot: usize) -> usize {
        assert!(
            slot < self.slots,
            "slot {slot} out of bounds: {} slots",
            self.slots
        );
        DONE + slot
    }

    fn copied_index(&self, slot: usize) -> usize {
        self.done_index(slot) + self.slots
    }

    /// The byte offsets from [`address`](Self::address) of `arrived`, `done[slot]` and
    /// `copied[slot]`: where streams write and wait.
    pub(crate) fn offsets(&self, slot: usize) -> (usize, usize, usize) {
        assert!(
            slot < self.slots,
            "slot {slot} out of bounds: {} slots",
            self.slots
        );
        let bytes = |i: usize| 8 * LINE * i;
        (
            bytes(ARRIVED),
            bytes(self.done_index(slot)),
            bytes(self.copied_index(slot)),
        )
    }

    /// Once the kernel ended (its stream synchronized): raise every `done` word to what the
    /// batches `0..batches` would have left, so that no copy-out still waiting for a batch
    /// the kernel never finished (it stopped first) waits for ever, and drop the hold. What
    /// such a copy then copies is not a result: the run stopped.
    pub(crate) fn release_done(&self, batches: u64) {
        let slots = self.slots as u64;
        for slot in 0..slots.min(batches) {
            // The newest batch of this slot below `batches`, plus one.
            let last = batches - 1 - (batches - 1 - slot) % slots;
            self.word(self.done_index(slot as usize))
                .fetch_max(last + 1, Ordering::AcqRel);
        }
        // Nothing waits on the host any more.
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_start_at_zero_and_keep_what_was_stored() {
        let w = ResidentWords::on_host(3);
        assert_eq!((w.arrived(), w.stopped(), w.slots()), (0, false, 3));
        assert!((0..3).all(|s| w.done(s) == 0));
        w.arrive(5);
        w.set_done(2, 3);
        w.set_copied(1, 2);
        w.stop();
        assert_eq!((w.arrived(), w.done(2), w.done(1)), (5, 3, 0));
        assert_eq!(
            (w.copied(1), w.copied(2), w.done(1)),
            (2, 0, 0),
            "copied apart from done"
        );
        assert_eq!(w.offsets(1), (0, 64 * 3, 64 * 6), "a word a 64-byte line");
        assert!(w.stopped());
        assert_eq!(w.device_words(), 0);
        // The address is the first word's: the kernel's ctl[0].
        assert_eq!(w.address(), w.word(0) as *const AtomicU64 as u64);
    }

    #[test]
    fn the_kernel_spaces_the_words_as_the_host_does() {
        use crate::demo::workload::CUDA_SOURCE;
        assert!(CUDA_SOURCE.contains(&format!("#define CTL_LINE {LINE}ull")));
        assert!(CUDA_SOURCE.contains(&format!("#define DEV_LINE {DEVICE_LINE}ull")));
        // Three words of the kernel's own, one a slot and the tiles finished, 16 u64s (128
        // bytes) each.
        assert_eq!(device_word_count(2), 6 * 16);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn a_slot_past_the_words_panics_rather_than_reading_past_them() {
        ResidentWords::on_host(2).done(2);
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn a_copied_slot_past_the_words_panics_rather_than_reading_another_word() {
        // Word DONE + 2 + 2 exists (the words end at DONE + 4): the check is on the slot.
        ResidentWords::on_host(3).copied(3);
    }

    #[test]
    fn releasing_done_raises_each_slot_to_its_last_batch_and_lowers_none() {
        let w = ResidentWords::on_host(3);
        w.set_done(0, 7);
        w.release_done(6);
        // Batches 0..6: slot 0 ends with 3 (already past it: 7 stays), slot 1 with 4, slot 2
        // with 5.
        assert_eq!((w.done(0), w.done(1), w.done(2)), (7, 5, 6));
        let w = ResidentWords::on_host(4);
        w.release_done(2);
        assert_eq!((w.done(0), w.done(1), w.done(2), w.done(3)), (1, 2, 0, 0));
        w.release_done(0);
        assert_eq!(w.done(2), 0);
    }

    #[test]
    fn the_hold_goes_once_every_batch_arrived_or_on_stop() {
        let held = |w: &ResidentWords| w.hold.lock().unwrap().is_some();
        let w = ResidentWords::on_host(2);
        w.hold_until_released(Box::new(()), 3);
        assert!(held(&w));
        w.arrive(2);
        assert!(held(&w), "batch 2 has not arrived");
        w.arrive(3);
        assert!(!held(&w), "every batch arrived");
        let w = ResidentWords::on_host(2);
        w.hold_until_released(Box::new(()), 3);
        w.stop();
        assert!(!held(&w), "stopped");
        // Copies out on streams: the hold stays past the arrivals and the stop, until the done
        // words are released.
        let w = ResidentWords::on_host(2);
        w.hold_through_copies_out();
        w.hold_until_released(Box::new(()), 3);
        w.arrivals_enqueued(3);
        w.stop();
        assert!(held(&w), "copies out may still wait");
        w.release_done(3);
        assert!(!held(&w), "the done words released");
        // Taken after every batch arrived (the device bound's kernel): released at once.
        let w = ResidentWords::on_host(2);
        w.arrive(4);
        w.hold_until_released(Box::new(()), 4);
        assert!(!held(&w));
    }
}
