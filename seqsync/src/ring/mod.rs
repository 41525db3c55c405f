//! [`EventRingbuf`]: one producer records an event per consecutive seq_id; `nconsumers`
//! consumers each make a stream wait on it, or block a host thread on it.
//!
//! It may use: `backend`, through the [`Backend`] trait only, and the host
//! wait strategy (`wait_strategy.rs`) below it.
//!
//! # The contract
//!
//! | case | result |
//! |---|---|
//! | `new` with `max_size == 0` | [`Error::InvalidArgument`] |
//! | `nconsumers == 0` | a pure producer counter: no events, `record` never overflows, `wait`/`synchronize` of seq ≥ 0 is [`Error::OverConsumed`] |
//! | `record(seq)` with seq ≠ next (0, 1, 2, …) | [`Error::OutOfOrder`] |
//! | `record` with `max_size` entries not yet released by every consumer | `Blocking::No`: [`Error::Overflow`]; `Blocking::Yes`: blocks until the oldest is released, or the ring stops |
//! | `wait`/`synchronize(seq)` with seq < 0 | no-op (`Ok`), unless the ring is stopped |
//! | seq not yet recorded | `Blocking::No`: [`Error::NotYetProduced`]; `Blocking::Yes`: blocks until recorded, or stopped |
//! | seq released by every consumer, slot recycled | [`Error::Stale`] |
//! | seq consumed `nconsumers` times (slot not yet recycled) | [`Error::OverConsumed`] |
//! | `synchronize_with_producer(seq)` | blocks until seq is recorded; consumes nothing |
//! | `stop(reason)` | every blocked call wakes; every later call returns [`Error::Stopped`] with the reason, including a thread blocked in `synchronize` on a pending device event |
//! | any misuse error above | also stops the ring, the first error being the reason |
//!
//! # How it works
//!
//! Each slot is one atomic word (see `state.rs`): the seq it holds and how many consumers took
//! and released it. The producer's publish is one `swap`; a stream wait takes and releases its
//! share with one `fetch_add` after enqueueing the wait (its unreleased share keeps the slot
//! from being recycled meanwhile); a host synchronize takes its share with a compare-and-swap
//! and releases it with a `fetch_add` once the wait is over. A lock is taken only by a thread
//! that must sleep, and by whoever wakes it (the word's waiting bits say whether anyone
//! sleeps).
//!
//! Misuse that races (two threads recording the same seq at once, more consumers than
//! declared consuming one seq at once) is detected after the fact, when the second one finds
//! the slot changed under it: it gets the error and the ring stops, so every later call fails;
//! the slot's counts may be off by then, which no longer matters. Backend calls (event
//! record, stream wait, host synchronize) run outside any lock. A slot is re-recorded only when
//! every consumer has released it, i.e. has *enqueued* its stream wait or finished its host
//! synchronize: a later record never changes a wait enqueued earlier.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Backend, EventOptions, Interrupt, SyncOutcome};
use crate::error::{Error, Result};
use crate::primitive::{
    AtomicBool, AtomicI64, Condvar, Mutex, MutexGuard, Ordering, UnmodeledAtomicBool,
};
use crate::wait_strategy::Expectation;

mod state;

use state::{slot_seq, tag_of, Slot, Word, CONSUMER_WAITING, PRODUCER_WAITING};

/// The largest `max_size` a ring accepts (2^20 entries). A ring creates its `max_size` events
/// and slots up front, so this bounds what one ring can take: at 2^20 about 100 MB and a
/// quarter of a second on the host backend (BENCHMARKS.md §8); at the former 2^30 a ring of
/// the documented limit took 8–16 GiB and aborted. The pipeline layer enforces the same limit
/// when it derives or is asked for a ring's size, so `seqsync check` accepts exactly the sizes
/// a ring can be built with.
pub const MAX_SIZE: usize = 1 << 20;

/// The most consumers a ring may have (`nconsumers`): 1023.
pub const MAX_CONSUMERS: u32 = state::MAX_CONSUMERS;

/// From this seq on, slot tags (42 bits) may wrap relative to the seqs callers pass: consumers
/// then read a slot's full seq back against `next` (see `state::slot_seq`). Below it every tag
/// is `seq + max_size < 2^40 + 2^20 < 2^42`, and a tag is the seq itself.
const TAGS_WRAP_FROM: i64 = 1 << 40;

/// Where slot `index` stands for a consumer asking for `seq`.
enum Found {
    /// The slot holds `seq`.
    Here,
    /// `seq` is not recorded yet.
    NotYet,
    /// The slot was recycled for a later seq (the one given).
    Recycled(i64),
}

/// Whether a call may block the calling thread.
///
/// `Blocking::No` turns "would block" into an error ([`Error::Overflow`],
/// [`Error::NotYetProduced`]): use it where the schedule guarantees the call never needs to
/// wait (producer and consumer on the same thread), so a broken guarantee fails loudly.
/// Converts from `bool` (`true` is `Yes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Blocking {
    /// Block until the call can proceed, or the ring is stopped.
    Yes,
    /// Fail instead of blocking.
    No,
}

impl From<bool> for Blocking {
    fn from(b: bool) -> Self {
        if b {
            Blocking::Yes
        } else {
            Blocking::No
        }
    }
}

struct StopInfo {
    reason: Arc<str>,
    cause: Option<Arc<Error>>,
}

/// A ring of events: one producer records seq_id 0, 1, 2, … on a stream; `nconsumers`
/// consumers each make a stream [`wait`](Self::wait) on every seq, or block a host thread on
/// it with [`synchronize`](Self::synchronize). At most `max_size` seqs are recorded and not yet
/// released by every consumer. Thread-safe: share it with `Arc` or scoped threads.
///
/// See the [module docs](crate::ring) for the whole contract.
///
/// ```
/// use seqsync::{Blocking, EventRingbuf, HostBackend};
/// use std::sync::{Arc, Mutex};
///
/// let host = HostBackend::new();
/// let (producer, consumer) = (host.new_stream("producer")?, host.new_stream("consumer")?);
/// // One consumer (the consumer stream); room for 2 seqs in flight.
/// let ring = EventRingbuf::new(&host, "produce", 1, 2)?;
/// let data = Arc::new(Mutex::new(Vec::new()));
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// for seq in 0..10 {
///     let d = data.clone();
///     producer.launch(move || d.lock().unwrap().push(seq));
///     ring.record(&producer, seq, Blocking::No)?;
///     ring.wait(&consumer, seq, Blocking::No)?; // the consumer stream waits for the producer
///     let (d, s) = (data.clone(), seen.clone());
///     // Runs after the producer's closure for `seq` (it may run ahead, never behind).
///     consumer.launch(move || s.lock().unwrap().push(d.lock().unwrap()[seq as usize]));
/// }
/// consumer.synchronize()?;
/// assert_eq!(*seen.lock().unwrap(), (0..10).collect::<Vec<i64>>());
/// # Ok::<(), seqsync::Error>(())
/// ```
pub struct EventRingbuf<B: Backend> {
    backend: B,
    name: String,
    nconsumers: u32,
    max_size: usize,
    /// `max_size - 1` when max_size is a power of two (0 for max_size 1 too), else 0.
    index_mask: u64,
    events: Box<[B::Event]>,
    slots: Box<[Slot]>,
    /// The next seq to record, written by the one producer. Two threads recording the same seq
    /// at once is caught when the second publishes (see the module docs on misuse).
    next: AtomicI64,
    /// Set (by the producer, before it publishes seq `TAGS_WRAP_FROM`) once tags may wrap.
    tags_wrap: UnmodeledAtomicBool,
    stopped: AtomicBool,
    /// `nconsumers == 0` only: a thread in `synchronize_with_producer` sleeps until `next`
    /// moves.
    next_watched: AtomicBool,
    stop_info: Mutex<Option<StopInfo>>,
    /// How long host synchronizes waited lately (a hint for polling backends, which learn it:
    /// see [`Interrupt::expectation`]).
    sync_expectation: Expectation,
    /// Sleeping threads (producer waiting for space, consumers waiting for a seq, host
    /// synchronizes between polls) wait on `wakeup` with this lock. Whoever makes progress
    /// that a sleeper flagged takes it before notifying, so no wake-up is lost.
    sleepers: Mutex<()>,
    wakeup: Condvar,
}

impl<B: Backend> std::fmt::Debug for EventRingbuf<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRingbuf")
            .field("name", &self.name)
            .field("backend", &self.backend.name())
            .field("nconsumers", &self.nconsumers)
            .field("max_size", &self.max_size)
            .field("next", &self.next.load(Ordering::Relaxed))
            .field("stopped", &self.stopped.load(Ordering::Relaxed))
            .finish()
    }
}

impl<B: Backend> EventRingbuf<B> {
    /// A ring named `name` (the name appears in every error) with `nconsumers` consumers per
    /// seq and room for `max_size` unreleased seqs. Creates `max_size` events up front (none
    /// when `nconsumers == 0`).
    ///
    /// Seqs run from 0 to `i64::MAX - 1`: the slot tags wrap safely, so a ring never runs
    /// into a limit of its own (at one seq per nanosecond, `i64::MAX` is 292 000 years away).
    ///
    /// # Examples
    ///
    /// ```
    /// use seqsync::{Error, EventRingbuf, HostBackend};
    ///
    /// let host = HostBackend::new();
    /// let ring = EventRingbuf::new(&host, "copy", 2, 4)?;
    /// assert_eq!((ring.nconsumers(), ring.max_size(), ring.next_seq()), (2, 4, 0));
    /// // A ring needs room for at least one seq.
    /// let err = EventRingbuf::new(&host, "copy", 1, 0).unwrap_err();
    /// assert!(matches!(err, Error::InvalidArgument { ref ring, .. } if ring == "copy"));
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `max_size == 0`, `max_size > `[`MAX_SIZE`] (2^20), or
    /// `nconsumers > 1023`; [`Error::Backend`] when an event cannot be created.
    pub fn new(
        backend: &B,
        name: impl Into<String>,
        nconsumers: u32,
        max_size: usize,
    ) -> Result<Self> {
        Self::with_event_options(backend, name, nconsumers, max_size, EventOptions::default())
    }

    /// [`new`](Self::new), with `first_seq` as the first seq to record (for a service that
    /// resumes its numbering): seqs `first_seq - max_size .. first_seq` count as recorded and
    /// consumed by every consumer (a wait on one of them is [`Error::OverConsumed`], on an
    /// older one [`Error::Stale`]).
    ///
    /// ```
    /// use seqsync::{Blocking, EventRingbuf, HostBackend};
    /// let host = HostBackend::new();
    /// let s = host.new_stream("s")?;
    /// let ring = EventRingbuf::starting_at(&host, "r", 1, 2, 1 << 42)?;
    /// ring.record(&s, 1 << 42, Blocking::No)?;
    /// ring.wait(&s, 1 << 42, Blocking::No)?;
    /// assert_eq!(ring.next_seq(), (1 << 42) + 1);
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`Error::InvalidArgument`] when `first_seq` is negative.
    pub fn starting_at(
        backend: &B,
        name: impl Into<String>,
        nconsumers: u32,
        max_size: usize,
        first_seq: i64,
    ) -> Result<Self> {
        let name = name.into();
        if first_seq < 0 {
            return Err(Error::invalid(
                &name,
                format!("first_seq must be at least 0, got {first_seq}"),
            ));
        }
        let ring =
            Self::with_event_options(backend, name, nconsumers, max_size, EventOptions::default())?;
        ring.next.store(first_seq, Ordering::Relaxed);
        ring.tags_wrap
            .store(first_seq >= TAGS_WRAP_FROM, Ordering::Relaxed);
        for (i, slot) in ring.slots.iter().enumerate() {
            // The seq of slot i just below first_seq, fully consumed.
            let below = first_seq - max_size as i64;
            let s = below + (i as i64 - below).rem_euclid(max_size as i64);
            slot.init(Word::new(tag_of(s, max_size), nconsumers));
        }
        Ok(ring)
    }

    /// [`new`](Self::new), with the ring's events created with `options` (for instance
    /// `blocking_sync`).
    ///
    /// ```
    /// use seqsync::backend::EventOptions;
    /// use seqsync::{Error, EventRingbuf, HostBackend};
    ///
    /// let host = HostBackend::new();
    /// let ring = EventRingbuf::with_event_options(&host, "r", 1, 4, EventOptions::default())?;
    /// assert_eq!(ring.max_size(), 4);
    /// let err = EventRingbuf::with_event_options(&host, "r", 1, 0, EventOptions::default());
    /// assert!(matches!(err, Err(Error::InvalidArgument { .. })));
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_event_options(
        backend: &B,
        name: impl Into<String>,
        nconsumers: u32,
        max_size: usize,
        options: EventOptions,
    ) -> Result<Self> {
        let name = name.into();
        if max_size == 0 {
            return Err(Error::invalid(&name, "max_size must be at least 1, got 0"));
        }
        if max_size > MAX_SIZE {
            return Err(Error::invalid(
                &name,
                format!("max_size={max_size} exceeds 2^20 (MAX_SIZE)"),
            ));
        }
        if nconsumers > MAX_CONSUMERS {
            return Err(Error::invalid(
                &name,
                format!("nconsumers={nconsumers} exceeds the maximum of {MAX_CONSUMERS}"),
            ));
        }
        let nevents = if nconsumers == 0 { 0 } else { max_size };
        let events = (0..nevents)
            .map(|_| backend.create_event(options))
            .collect::<Result<Vec<_>>>()?
            .into_boxed_slice();
        // Slot i starts out holding seq i - max_size, fully released: free for seq i.
        let slots = (0..nevents)
            .map(|i| Slot::new(Word::new(i as u64, nconsumers)))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ok(EventRingbuf {
            backend: backend.clone(),
            name,
            nconsumers,
            max_size,
            index_mask: if max_size.is_power_of_two() {
                max_size as u64 - 1
            } else {
                0
            },
            events,
            slots,
            next: AtomicI64::new(0),
            tags_wrap: UnmodeledAtomicBool::new(false),
            stopped: AtomicBool::new(false),
            next_watched: AtomicBool::new(false),
            stop_info: Mutex::new(None),
            sync_expectation: Expectation::new(),
            sleepers: Mutex::new(()),
            wakeup: Condvar::new(),
        })
    }

    /// The ring's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many consumers release each seq.
    pub fn nconsumers(&self) -> u32 {
        self.nconsumers
    }

    /// How many seqs may be recorded and not yet released by every consumer.
    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// The backend the ring's events belong to.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The next seq the producer will record.
    pub fn next_seq(&self) -> i64 {
        self.next.load(Ordering::Acquire)
    }

    /// Seqs recorded and not yet released by every consumer (a snapshot).
    pub fn unreleased(&self) -> usize {
        let n = self.nconsumers;
        self.slots
            .iter()
            .map(Slot::load)
            .filter(|w| w.released() < n)
            .count()
    }

    /// Has the ring been stopped (by [`stop`](Self::stop) or by an error)?
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Producer: record the ring's event for `seq` at the current end of `stream`.
    ///
    /// `seq` must be the next one: 0, 1, 2, …. When `max_size` seqs are unreleased,
    /// `Blocking::Yes` waits until the oldest is released by every consumer.
    ///
    /// # Examples
    ///
    /// ```
    /// use seqsync::{Blocking, Error, EventRingbuf, HostBackend};
    ///
    /// let host = HostBackend::new();
    /// let s = host.new_stream("s")?;
    /// let ring = EventRingbuf::new(&host, "copy", 1, 2)?;
    /// ring.record(&s, 0, Blocking::No)?;
    /// ring.record(&s, 1, Blocking::No)?;
    /// // Two seqs unreleased and room for two: seq 2 would overwrite seq 0's event.
    /// let err = ring.record(&s, 2, Blocking::No).unwrap_err();
    /// assert!(matches!(err, Error::Overflow { seq: 2, oldest: 0, max_size: 2, .. }));
    /// // The error stopped the ring: every later call says so.
    /// assert!(matches!(ring.wait(&s, 0, Blocking::No), Err(Error::Stopped { .. })));
    ///
    /// // Seqs come in order.
    /// let ring = EventRingbuf::new(&host, "copy", 1, 2)?;
    /// let err = ring.record(&s, 1, Blocking::No).unwrap_err();
    /// assert!(matches!(err, Error::OutOfOrder { expected: 0, got: 1, .. }));
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::OutOfOrder`], [`Error::Overflow`] (with `Blocking::No`), [`Error::Stopped`],
    /// [`Error::Backend`], [`Error::InvalidArgument`] for seq `i64::MAX` (the one seq that
    /// cannot be recorded). Every error but `Stopped` also stops the ring.
    #[inline]
    pub fn record(
        &self,
        stream: &B::Stream,
        seq: i64,
        blocking: impl Into<Blocking>,
    ) -> Result<()> {
        self.publish(seq, blocking.into(), |event| {
            self.backend.record(event, stream)
        })
    }

    /// Producer: publish `seq` as work the calling host thread has already done, with no
    /// stream and no event recorded: a consumer's [`wait`](Self::wait) or
    /// [`synchronize`](Self::synchronize) of `seq` is then ordered after it by the ring alone
    /// (a blocking consumer returns only once this call has been made).
    ///
    /// The slot's event is left as it is. In a ring recorded only this way it is never
    /// recorded, so it counts as complete; where earlier seqs were recorded on a stream it may
    /// still stand for that older work, which consumers then wait for too (more order, never
    /// less). The backend hears of it ([`Backend::record_host`]): the hazard checker's
    /// backend orders later waits on the slot after the calling thread's work.
    ///
    /// ```
    /// use seqsync::{Blocking, Error, EventRingbuf, HostBackend};
    ///
    /// let host = HostBackend::new();
    /// let ring = EventRingbuf::new(&host, "host stage", 1, 2)?;
    /// ring.record_host(0, Blocking::No)?; // batch 0 is done: the host thread did it
    /// ring.synchronize(0, Blocking::No)?;  // returns at once
    /// assert!(matches!(ring.record_host(2, Blocking::No), Err(Error::OutOfOrder { .. })));
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`record`](Self::record), without [`Error::Backend`].
    pub fn record_host(&self, seq: i64, blocking: impl Into<Blocking>) -> Result<()> {
        self.publish(seq, blocking.into(), |event| {
            self.backend.record_host(event);
            Ok(())
        })
    }

    /// The producer's side of [`record`](Self::record): claim `seq`'s slot, let `record_event`
    /// make its event stand for `seq`, publish it.
    #[inline]
    fn publish(
        &self,
        seq: i64,
        blocking: Blocking,
        record_event: impl FnOnce(&B::Event) -> Result<()>,
    ) -> Result<()> {
        self.check_stopped()?;
        let expected = self.next.load(Ordering::Relaxed);
        if seq != expected {
            return Err(self.out_of_order(expected, seq));
        }
        // Before the counter's shortcut too: `next` would pass i64::MAX.
        if seq == i64::MAX {
            return Err(self.fail(Error::invalid(
                &self.name,
                format!("seq {seq} (i64::MAX) cannot be recorded: the last seq is i64::MAX - 1"),
            )));
        }
        if self.nconsumers == 0 {
            return self.advance_counter(seq);
        }
        if seq >= TAGS_WRAP_FROM && !self.tags_wrap.load(Ordering::Relaxed) {
            // Before publishing: a consumer that sees this seq's tag sees the flag too.
            self.tags_wrap.store(true, Ordering::Relaxed);
        }
        let tag = tag_of(seq, self.max_size);
        let index = self.index(seq);
        let slot = &self.slots[index];
        // The slot still holds seq - max_size until its last consumer releases it (the load
        // orders their backend calls on the event before our re-record).
        if slot.load().released() < self.nconsumers {
            self.wait_for_free_slot(seq, index, blocking)?;
        }
        // One producer: a plain store. Two threads recording the same seq at once (misuse) are
        // caught below, when the second finds the slot already published.
        self.next.store(seq + 1, Ordering::Release);
        if let Err(e) = record_event(&self.events[index]) {
            return Err(self.fail(e));
        }
        let old = slot.publish(tag);
        // The slot held seq - max_size, whose tag is seq's own (mod 2^42).
        if old.tag() != tag_of(seq - self.max_size as i64, self.max_size) {
            return Err(self.out_of_order(seq + 1, seq));
        }
        if old.has(CONSUMER_WAITING) {
            self.wake_all();
        }
        Ok(())
    }

    /// The slow path of [`publish`](Self::publish): `seq`'s slot still holds a seq some
    /// consumer has not released. Fails with [`Error::Overflow`], or sleeps until it is free.
    #[cold]
    fn wait_for_free_slot(&self, seq: i64, index: usize, blocking: Blocking) -> Result<()> {
        match blocking {
            Blocking::No => Err(self.fail(Error::Overflow {
                ring: self.name.clone(),
                seq,
                oldest: seq - self.max_size as i64,
                max_size: self.max_size,
                nconsumers: self.nconsumers,
            })),
            Blocking::Yes => self.sleep_until_free(index),
        }
    }

    /// Consumer: make `stream` wait for the event of `seq` (a no-op for seq < 0).
    ///
    /// The seq is released as soon as the wait is enqueued.
    ///
    /// # Examples
    ///
    /// ```
    /// use seqsync::{Blocking, Error, EventRingbuf, HostBackend};
    ///
    /// let host = HostBackend::new();
    /// let (producer, consumer) = (host.new_stream("p")?, host.new_stream("c")?);
    /// let ring = EventRingbuf::new(&host, "copy", 1, 1)?;
    /// ring.wait(&consumer, -1, Blocking::No)?; // before the first batch: nothing to wait for
    /// ring.record(&producer, 0, Blocking::No)?;
    /// ring.wait(&consumer, 0, Blocking::No)?;
    /// // Seq 1 is not recorded yet, and the call may not block.
    /// let err = ring.wait(&consumer, 1, Blocking::No).unwrap_err();
    /// assert!(matches!(err, Error::NotYetProduced { seq: 1, next: 1, .. }));
    ///
    /// // One consumer declared, two waits on seq 0: the second is one too many.
    /// let ring = EventRingbuf::new(&host, "copy", 1, 1)?;
    /// ring.record(&producer, 0, Blocking::No)?;
    /// ring.wait(&consumer, 0, Blocking::No)?;
    /// let err = ring.wait(&consumer, 0, Blocking::No).unwrap_err();
    /// assert!(matches!(err, Error::OverConsumed { seq: 0, nconsumers: 1, .. }));
    ///
    /// // Seq 0's slot was reused for seq 1: too late to wait for seq 0.
    /// let ring = EventRingbuf::new(&host, "copy", 1, 1)?;
    /// ring.record(&producer, 0, Blocking::No)?;
    /// ring.wait(&consumer, 0, Blocking::No)?;
    /// ring.record(&producer, 1, Blocking::No)?;
    /// let err = ring.wait(&consumer, 0, Blocking::No).unwrap_err();
    /// assert!(matches!(err, Error::Stale { seq: 0, current: 1, .. }));
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::NotYetProduced`] (with `Blocking::No`), [`Error::Stale`],
    /// [`Error::OverConsumed`], [`Error::Stopped`], [`Error::Backend`]. Every error but
    /// `Stopped` also stops the ring.
    #[inline]
    pub fn wait(&self, stream: &B::Stream, seq: i64, blocking: impl Into<Blocking>) -> Result<()> {
        self.check_stopped()?;
        if seq < 0 {
            return Ok(());
        }
        let (index, want) = self.find_produced(seq, blocking.into())?;
        // Our share of `seq` is not released yet, so the producer cannot re-record this event
        // while the backend enqueues the wait: it needs all nconsumers releases first.
        if let Err(e) = self.backend.wait(stream, &self.events[index]) {
            return Err(self.fail(e));
        }
        // Take and release our share in one step (the wait is enqueued: nothing holds it).
        let old = self.slots[index].take_and_release();
        if old.tag() != want || old.acquired() >= self.nconsumers {
            // Another thread consumed the last share meanwhile: more consumers than declared.
            return Err(self.fail(Error::OverConsumed {
                ring: self.name.clone(),
                seq,
                nconsumers: self.nconsumers,
            }));
        }
        if old.released() + 1 == self.nconsumers && old.has(PRODUCER_WAITING) {
            self.wake_all();
        }
        Ok(())
    }

    /// Consumer: block the calling thread until the work before `seq`'s record has completed
    /// (a no-op for seq < 0). [`stop`](Self::stop) from another thread wakes it even while the
    /// device event is still pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use seqsync::{Blocking, Error, EventRingbuf, HostBackend};
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    ///
    /// let host = HostBackend::new();
    /// let s = host.new_stream("copy out")?;
    /// let ring = EventRingbuf::new(&host, "copy out", 1, 1)?;
    /// let copied = Arc::new(AtomicBool::new(false));
    /// let c = copied.clone();
    /// s.launch(move || c.store(true, Ordering::SeqCst));
    /// ring.record(&s, 0, Blocking::No)?;
    /// ring.synchronize(0, Blocking::No)?; // returns once the copy has run
    /// assert!(copied.load(Ordering::SeqCst));
    /// let err = ring.synchronize(1, Blocking::No).unwrap_err();
    /// assert!(matches!(err, Error::NotYetProduced { seq: 1, .. }));
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`wait`](Self::wait); [`Error::Stopped`] when stopped while waiting.
    pub fn synchronize(&self, seq: i64, blocking: impl Into<Blocking>) -> Result<()> {
        let Some(index) = self.acquire(seq, blocking.into())? else {
            return Ok(());
        };
        // Already complete (the common case for a lagged consumer): no timing, no polling.
        match self.backend.query(&self.events[index]) {
            Ok(true) => {
                self.release(index);
                return Ok(());
            }
            Ok(false) => {}
            Err(e) => return Err(self.fail(e)),
        }
        match self
            .backend
            .synchronize_interruptible(&self.events[index], &StopInterrupt(self))
        {
            Ok(SyncOutcome::Complete) => {
                self.release(index);
                Ok(())
            }
            Ok(SyncOutcome::Interrupted) => Err(self.stopped_error()),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Block until `seq` has been recorded (or already recycled); consumes nothing. A no-op for
    /// seq < 0.
    ///
    /// ```
    /// use seqsync::{Blocking, Error, EventRingbuf, HostBackend};
    ///
    /// let host = HostBackend::new();
    /// let ring = EventRingbuf::new(&host, "r", 1, 2)?;
    /// ring.synchronize_with_producer(-1)?; // before the first seq: nothing to wait for
    /// ring.record_host(0, Blocking::No)?;
    /// ring.synchronize_with_producer(0)?; // recorded: returns at once, consumes nothing
    /// ring.stop("shutting down");
    /// assert!(matches!(ring.synchronize_with_producer(1), Err(Error::Stopped { .. })));
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Stopped`] only: when the ring is or gets stopped (by [`stop`](Self::stop) or by
    /// another call's error) before `seq` is recorded.
    pub fn synchronize_with_producer(&self, seq: i64) -> Result<()> {
        self.check_stopped()?;
        if seq < 0 {
            return Ok(());
        }
        if self.nconsumers == 0 {
            return self.sleep_until_next_passes(seq);
        }
        self.sleep_until_recorded(self.index(seq), seq).map(|_| ())
    }

    /// Stop the ring: every blocked call wakes, and every later call returns
    /// [`Error::Stopped`] carrying `reason`. Only the first stop (or error) counts.
    ///
    /// # Examples
    ///
    /// ```
    /// use seqsync::{Blocking, Error, EventRingbuf, HostBackend};
    ///
    /// let host = HostBackend::new();
    /// let ring = EventRingbuf::new(&host, "copy", 1, 1)?;
    /// std::thread::scope(|scope| {
    ///     // Blocks: seq 0 is never recorded. The stop wakes it.
    ///     let waiter = scope.spawn(|| ring.synchronize(0, Blocking::Yes));
    ///     std::thread::sleep(std::time::Duration::from_millis(10));
    ///     ring.stop("shutting down");
    ///     let err = waiter.join().unwrap().unwrap_err();
    ///     assert!(matches!(err, Error::Stopped { ref reason, .. } if &**reason == "shutting down"));
    /// });
    /// assert!(ring.is_stopped());
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    pub fn stop(&self, reason: impl Into<String>) {
        let reason: String = reason.into();
        self.stop_with(reason.into(), None);
    }

    // ---- internals -------------------------------------------------------------------------

    #[inline]
    fn index(&self, seq: i64) -> usize {
        // A mask when max_size is a power of two: a division costs as much as the rest of a
        // stream wait's bookkeeping.
        if self.index_mask != 0 || self.max_size == 1 {
            (seq as u64 & self.index_mask) as usize
        } else {
            (seq as u64 % self.max_size as u64) as usize
        }
    }

    /// Where a slot holding `word` stands for a consumer of `seq` (`seq >= 0`). `word` must
    /// have been loaded (Acquire) before this reads `tags_wrap` and `next`: the producer's
    /// stores before it published the word's seq are then visible.
    #[inline]
    fn locate(&self, seq: i64, word: Word) -> Found {
        let held = if self.tags_wrap.load(Ordering::Relaxed) {
            slot_seq(word.tag(), self.max_size, self.next.load(Ordering::Relaxed))
        } else {
            // Every tag so far is below 2^42: no wrap.
            word.tag() as i64 - self.max_size as i64
        };
        match held.cmp(&seq) {
            std::cmp::Ordering::Equal => Found::Here,
            // The slot still holds an older seq: seq is not claimed yet, or its record is in
            // flight.
            std::cmp::Ordering::Less => Found::NotYet,
            std::cmp::Ordering::Greater => Found::Recycled(held),
        }
    }

    #[inline]
    fn check_stopped(&self) -> Result<()> {
        if self.stopped.load(Ordering::Acquire) {
            return Err(self.stopped_error());
        }
        Ok(())
    }

    /// Consumer, `seq >= 0`: the slot index and tag once `seq` is recorded and has a share
    /// left, without taking it.
    #[inline]
    fn find_produced(&self, seq: i64, blocking: Blocking) -> Result<(usize, u64)> {
        let want = tag_of(seq, self.max_size);
        if self.nconsumers == 0 {
            return Err(self.fail(Error::OverConsumed {
                ring: self.name.clone(),
                seq,
                nconsumers: 0,
            }));
        }
        let index = self.index(seq);
        // Acquire: pairs with the producer's publishing swap, so the event record happened
        // before our backend call on it.
        let mut word = self.slots[index].load();
        loop {
            match self.locate(seq, word) {
                Found::Here => {
                    if word.acquired() >= self.nconsumers {
                        return Err(self.fail(Error::OverConsumed {
                            ring: self.name.clone(),
                            seq,
                            nconsumers: self.nconsumers,
                        }));
                    }
                    return Ok((index, want));
                }
                Found::Recycled(current) => return Err(self.stale(seq, current)),
                Found::NotYet if blocking == Blocking::No => return Err(self.not_yet_produced(seq)),
                Found::NotYet => word = self.sleep_until_recorded(index, seq)?,
            }
        }
    }

    #[cold]
    fn stale(&self, seq: i64, current: i64) -> Error {
        self.fail(Error::Stale {
            ring: self.name.clone(),
            seq,
            current,
            max_size: self.max_size,
            nconsumers: self.nconsumers,
        })
    }

    #[cold]
    fn not_yet_produced(&self, seq: i64) -> Error {
        self.fail(Error::NotYetProduced {
            ring: self.name.clone(),
            seq,
            next: self.next_seq(),
        })
    }

    /// Take one consumption of `seq` (to be [`release`](Self::release)d after the backend
    /// call): `Ok(None)` for a negative seq, else the slot index.
    #[inline]
    fn acquire(&self, seq: i64, blocking: Blocking) -> Result<Option<usize>> {
        self.check_stopped()?;
        if seq < 0 {
            return Ok(None);
        }
        loop {
            let (index, want) = self.find_produced(seq, blocking)?;
            let slot = &self.slots[index];
            let word = slot.load();
            // Retry from the top if anything changed since `find_produced` looked.
            if word.tag() == want && word.acquired() < self.nconsumers && slot.try_take(word) {
                return Ok(Some(index));
            }
        }
    }

    #[inline]
    fn release(&self, index: usize) {
        let old = self.slots[index].release();
        if old.released() + 1 == self.nconsumers && old.has(PRODUCER_WAITING) {
            self.wake_all();
        }
    }

    /// `nconsumers == 0`: the ring is only a counter.
    fn advance_counter(&self, seq: i64) -> Result<()> {
        if let Err(actual) =
            self.next
                .compare_exchange(seq, seq + 1, Ordering::SeqCst, Ordering::Relaxed)
        {
            return Err(self.out_of_order(actual, seq));
        }
        // SeqCst with the watcher's store-then-load: either it sees the new `next`, or we see
        // its flag and wake it.
        if self.next_watched.load(Ordering::SeqCst) {
            self.wake_all();
        }
        Ok(())
    }

    fn lock_sleepers(&self) -> MutexGuard<'_, ()> {
        self.sleepers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait_on<'a>(&'a self, guard: MutexGuard<'a, ()>) -> MutexGuard<'a, ()> {
        self.wakeup.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    #[cold]
    fn wake_all(&self) {
        let _guard = self.lock_sleepers();
        self.wakeup.notify_all();
    }

    /// Producer, ring full: sleep until slot `index` is released by every consumer.
    #[cold]
    fn sleep_until_free(&self, index: usize) -> Result<()> {
        let n = self.nconsumers;
        self.sleep_until(index, PRODUCER_WAITING, |w| w.released() >= n)
            .map(|_| ())
    }

    /// Consumer: sleep until slot `index` holds `seq` or a later seq.
    #[cold]
    fn sleep_until_recorded(&self, index: usize, seq: i64) -> Result<Word> {
        self.sleep_until(index, CONSUMER_WAITING, |w| {
            !matches!(self.locate(seq, w), Found::NotYet)
        })
    }

    /// Sleep until slot `index`'s word satisfies `done`, with `flag` set in it meanwhile.
    ///
    /// The flag is set under the sleepers lock, and whoever changes the word so that `done`
    /// may hold (the last releaser, the publishing producer) sees the flag and takes the lock
    /// before notifying, so it cannot notify between our check and our wait.
    fn sleep_until(&self, index: usize, flag: u64, done: impl Fn(Word) -> bool) -> Result<Word> {
        let slot = &self.slots[index];
        let mut guard = self.lock_sleepers();
        loop {
            self.check_stopped()?;
            let word = slot.load();
            if done(word) {
                return Ok(word);
            }
            if !word.has(flag) && !slot.try_set_flag(word, flag) {
                continue;
            }
            guard = self.wait_on(guard);
        }
    }

    #[cold]
    fn sleep_until_next_passes(&self, seq: i64) -> Result<()> {
        let mut guard = self.lock_sleepers();
        loop {
            self.check_stopped()?;
            self.next_watched.store(true, Ordering::SeqCst);
            if self.next.load(Ordering::SeqCst) > seq {
                return Ok(());
            }
            guard = self.wait_on(guard);
        }
    }

    #[cold]
    fn out_of_order(&self, expected: i64, got: i64) -> Error {
        self.fail(Error::OutOfOrder {
            ring: self.name.clone(),
            expected,
            got,
        })
    }

    /// Stop the ring with `err` as the reason (unless it already stopped), and hand `err` back.
    #[cold]
    fn fail(&self, err: Error) -> Error {
        if !err.is_stopped() {
            self.stop_with(err.to_string().into(), Some(Arc::new(err.clone())));
        }
        err
    }

    fn stop_with(&self, reason: Arc<str>, cause: Option<Arc<Error>>) {
        {
            let mut info = self.stop_info.lock().unwrap_or_else(|e| e.into_inner());
            if info.is_none() {
                *info = Some(StopInfo { reason, cause });
            }
        }
        self.stopped.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    #[cold]
    fn stopped_error(&self) -> Error {
        let info = self.stop_info.lock().unwrap_or_else(|e| e.into_inner());
        let (reason, cause) = match info.as_ref() {
            Some(i) => (i.reason.clone(), i.cause.clone()),
            None => ("stopped".into(), None),
        };
        Error::Stopped {
            ring: self.name.clone(),
            reason,
            cause,
        }
    }
}

/// A ring is its own interrupt: a host synchronize on one of its events ends when it stops.
/// What cuts a ring's host synchronize short: the ring being stopped. Private, so that only
/// the ring's own synchronize waits on its condition variable.
struct StopInterrupt<'a, B: Backend>(&'a EventRingbuf<B>);

impl<B: Backend> Interrupt for StopInterrupt<'_, B> {
    fn interrupted(&self) -> bool {
        self.0.is_stopped()
    }

    fn expectation(&self) -> Option<&Expectation> {
        Some(&self.0.sync_expectation)
    }

    fn sleep(&self, timeout: Duration) -> bool {
        let ring = self.0;
        let guard = ring.lock_sleepers();
        if !ring.is_stopped() {
            let _ = ring.wakeup.wait_timeout(guard, timeout);
        }
        ring.is_stopped()
    }
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    use super::*;
    use crate::{AnyBackend, BackendKind};

    /// The producer turns on wrap-safe reading before it publishes seq 2^40.
    #[test]
    fn tags_wrap_is_set_when_the_producer_reaches_2_pow_40() {
        // The host backend, through the `Backend` trait (this layer names no concrete one).
        let host = AnyBackend::new(BackendKind::Host).unwrap();
        let s = host.new_stream("s").unwrap();
        let ring = EventRingbuf::starting_at(&host, "w", 1, 2, TAGS_WRAP_FROM - 2).unwrap();
        for seq in TAGS_WRAP_FROM - 2..TAGS_WRAP_FROM {
            ring.record(&s, seq, Blocking::No).unwrap();
            ring.wait(&s, seq, Blocking::No).unwrap();
        }
        assert!(!ring.tags_wrap.load(Ordering::Relaxed));
        ring.record(&s, TAGS_WRAP_FROM, Blocking::No).unwrap();
        assert!(ring.tags_wrap.load(Ordering::Relaxed));
        ring.wait(&s, TAGS_WRAP_FROM, Blocking::No).unwrap();
    }
}
