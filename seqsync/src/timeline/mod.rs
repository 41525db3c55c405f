//! Timelines: 64-bit values that only grow, which streams and host threads signal and wait on.
//!
//! It may use: `backend`, through the [`Backend`] and [`Semaphore`]
//! traits only (never a concrete backend), and `primitive` / `lock` / `wait_strategy` below it.
//!
//! A [`Timeline`] is the general form of the ring's "batch `s` is done" (a ring is a timeline
//! whose values are `seq + 1`), and what IREE, Vulkan and D3D12 call a timeline semaphore or a
//! fence. Any value may be signalled (jumps are fine), any number of waits may ask for any
//! value, and a wait may be enqueued on a stream **before** the signal it waits for, from any
//! stream, on CUDA too.
//!
//! ```
//! use seqsync::{timeline::Timeline, HostBackend};
//! use std::time::Duration;
//!
//! let host = HostBackend::new();
//! let (a, b) = (host.new_stream("a")?, host.new_stream("b")?);
//! let produced = Timeline::new(&host, "produced", 0)?;
//! let consumed = Timeline::new(&host, "consumed", 0)?;
//! // Stream b waits for a value nobody has signalled yet...
//! produced.wait_on(&b, 1)?;
//! consumed.signal_on(&b, 1)?;
//! assert_eq!(consumed.query()?, 0);
//! // ...and runs once stream a signals it.
//! produced.signal_on(&a, 1)?;
//! consumed.wait(1, Duration::from_secs(5))?;
//! assert_eq!(produced.query()?, 1);
//! # Ok::<(), seqsync::Error>(())
//! ```
//!
//! # The contract
//!
//! Each row is a test in `seqsync/tests/timeline/timeline_contract.rs`, run on both backends.
//!
//! | case | result |
//! |---|---|
//! | `new(initial)` | `query() == initial` |
//! | host `signal(v)`, `v > current` | the value becomes `v`; host waiters and stream waits for any value `≤ v` are released |
//! | host `signal(v)`, `v ≤ current` | [`Error::NonMonotonic`] `{ current, got }`; the value is unchanged; the timeline is not failed |
//! | `signal_on(stream, v)` | the value becomes `v` when the stream reaches that point; `v` must exceed every value signalled or enqueued before (checked when enqueued) |
//! | host `wait(v, timeout)` with `v ≤ current` | `Ok` at once, any number of times |
//! | host `wait(v, timeout)` not reached in time | [`Error::Timeout`]; nothing changes; the call can be repeated |
//! | `wait_on(stream, v)` | work enqueued on the stream afterwards runs only once the value is `≥ v`, even when no signal of `v` has been enqueued yet (wait-before-signal), from any stream |
//! | [`wait_all`] / [`wait_any`] over `(timeline, value)` lists, with a timeout | all / at least one reached; an empty list is `Ok` at once; a signal above the awaited value satisfies it |
//! | `fail(error)` | every host waiter wakes with [`Error::TimelineFailed`] carrying the error; later query / signal / wait return it; a second `fail` is ignored (the first error stays) |
//! | failure propagation | work that waited on a failed timeline fails every timeline it signals afterwards; a timeline that did not depend on the failed one is not affected |
//! | values | `< 2^63` ([`MAX_VALUE`]); larger ones are [`Error::ValueOutOfRange`] (reserved for failure) |
//! | drop of the last handle, signals enqueued | nothing changes for the values whose signal is enqueued: they arrive, and the waits for them are released by them, in order |
//! | drop with stream waits nothing enqueued reaches | once the enqueued signals have landed, the timeline fails ([`Error::TimelineDropped`]), so no stream waits forever |
//!
//! "Current" in [`Error::NonMonotonic`] is the highest value signalled *or enqueued*: a host
//! signal must also exceed the signals still pending on streams.
//!
//! # Failure
//!
//! A failed timeline's word holds `2^63 | last value` (`backend/semaphore.rs`), which
//! releases every stream wait on it. Propagation is eager and happens on the host
//! (`timeline/propagate/`): at the failure, every stream that has a wait on it for a
//! value it never reached is poisoned from that wait on, and every timeline signalled on such a
//! stream after the wait (already enqueued, or enqueued later) fails too, with an
//! [`Error::TimelineFailed`] whose cause is the upstream failure ([`Error::root_cause`] gives
//! the original error). The work after such a wait still runs (the device is not told), but
//! nothing downstream reports success. A host stream whose closure panicked fails the
//! timelines it signals afterwards, with the panic's message, and the failure spreads from
//! there the same way: the stream's signal marks the timeline failed and poisons the streams
//! that wait on it before its failed word releases their waits (`Semaphore::on_stream_failure`).
//! On CUDA a host function that panics (`Backend::launch_host`) is not a stream failure: the
//! device is not told, the stream's later signals land, and the panic is reported by the
//! stream's next synchronize only (a host function may make no CUDA call, so it cannot fail
//! a word there; synchronize the stream before trusting what it signalled after one).
//!
//! The rule of propagation does not depend on bookkeeping: a signal enqueued after a
//! released wait fails its timeline unless that timeline has reached the signal's value
//! already when the failure arrives (by another route, e.g. a host signal: there is nothing
//! left to fail); see `timeline/propagate/`. A stream poisoned so is never handed to unrelated
//! work by the graph layer's [`Queues`](crate::graph::Queues).
//!
//! # Drops
//!
//! A handle is not needed for a signal to land. When the last [`Timeline`] handle goes while
//! signals of it are still in flight, the timeline is kept alive (a thread of the crate looks
//! at such timelines every millisecond, and ends when none is left) until they have landed or
//! it failed; only then do the stream waits for values that no enqueued signal reaches fail it,
//! with [`Error::TimelineDropped`]. A signal enqueued behind a wait of its own timeline on its
//! stream (for a value nothing else brings) is one that never lands: once the others have
//! landed, the waits left fail. A failure upstream of its signals still spreads through it
//! meanwhile. With waits left that nothing enqueued reaches, the signals in flight are given a
//! bound: 5 s of the value standing still where each stands behind an open timeline wait on its
//! stream (a wait that may itself never be reached), 120 s where one is held by its stream's
//! own work only (a slow kernel or host function); past it the timeline fails, as at the drop.
//!
//! # What each mechanism holds
//!
//! Every mechanism orders what it accepts; where one cannot, it refuses before enqueuing
//! anything.
//!
//! | mechanism | a wait before its signal holds | a failure releases |
//! |---|---|---|
//! | `host-word` (host backend) | everything after it | every wait, at once |
//! | `memops` (CUDA default) | everything after it | every wait, at once |
//! | `hybrid` (CUDA, asked for) | everything after it | word waits at once; an event wait (its signal was enqueued first) when the signal's stream gets there |
//! | `events` (CUDA fallback, or asked for) | nothing: a wait before its signal is enqueued is refused with [`Error::WaitBeforeSignalUnsupported`] (as are a command buffer, barrier or pool call that would need one), nothing enqueued; a wait after its signal holds everything after it | event waits as `hybrid` |
//!
//! A wait before its signal that holds everything after it (`memops`, the word waits of
//! `hybrid`) blocks its stream on the GPU until the value comes, maybe from a host
//! signal not made yet. Meanwhile `cuMemFree`, `cuMemFreeHost`, `cuMemHostUnregister`,
//! `cuCtxSynchronize` and a `cuGraphExecDestroy` of a pending launch, on any thread of the
//! process, wait for the GPU to drain, and hold a driver lock that blocks other threads'
//! driver calls too (measured on the H200: BENCHMARKS.md §5, "Driver calls that wait for the
//! device"). seqsync makes none of them then: a `DeviceBuffer`, `PinnedBuffer` or CUDA graph
//! dropped while such a wait is open is freed once none is (past 1 GiB held, allocations are
//! refused with a named error rather than grow). `cuStreamCreate` returns for a few dozen more
//! streams, then waits too (measured on the H100): `CudaBackend::new_stream` makes streams
//! only while no such wait is open, and keeps a reserve made then (256, shared by the
//! backends of a device) for the streams asked for while one is; with none left it waits up
//! to a second for the waits to close, then returns [`Error::NoStreamWhileWaitsOpen`]
//! (`with_streams_made_ahead` gives a backend a reserve of its own, of any size). Waits on a
//! timeline shared with other processes are not counted (see `ipc::SharedTimeline`). Code of
//! your own that makes those calls must not do so while a thread it waits for has a signal
//! to make, or the process hangs; the `events` mechanism, which refuses such waits, never
//! blocks the GPU.
//!
//! How soon a word wait sees its value (`memops`, `hybrid`): the GPU's front end reads the
//! word, which lives in pinned host memory. While kernels read pinned host memory in place
//! (zero-copy) with many reads in flight, the front end's work (a wait, a write, a copy)
//! waits behind those reads, far longer than a kernel's own read of a host word does
//! (measured on the H100: BENCHMARKS.md §13, runs AB and AC).
//!
//! # Host waits
//!
//! [`Timeline::wait`], [`wait_all`] and [`wait_any`] follow the crate's
//! wait strategy (`wait_strategy.rs`), as the ring's host `synchronize` does: they spin for
//! `SPIN` (100 µs), then park; on the host backend a signal wakes them, so
//! a long wait costs no CPU. On CUDA nothing wakes them: they poll the word, and spin around
//! the end they learnt from earlier waits, so a periodic wait (a 100 ms frame) wakes with a
//! spinning wait's latency for a few percent of a core at most.

mod drain;
pub(crate) mod propagate;
mod shared;
mod wait;

use std::sync::Arc;
use std::time::Duration;

pub use crate::backend::semaphore::{Mechanism, MAX_VALUE};
use crate::backend::{Backend, Semaphore};
use crate::error::{Error, Result};
use propagate::{Refused, Retired};
use shared::{out_of_range, Shared};
use wait::{block_until, WaitOn};

/// A 64-bit timeline (see the [module docs](self)). Cheap to clone: clones are the same
/// timeline. When the last clone is dropped while streams still wait on it for values it has
/// not reached, it fails first, so those streams go on.
pub struct Timeline<B: Backend> {
    shared: Arc<Shared<B>>,
}

impl<B: Backend> Clone for Timeline<B> {
    fn clone(&self) -> Self {
        self.shared
            .handles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Timeline {
            shared: self.shared.clone(),
        }
    }
}

impl<B: Backend> Drop for Timeline<B> {
    fn drop(&mut self) {
        if self
            .shared
            .handles
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel)
            == 1
        {
            let _looked = self.shared.last_handle_dropped();
        }
    }
}

impl<B: Backend> std::fmt::Debug for Timeline<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeline")
            .field("name", &self.shared.name)
            .field("value", &self.query())
            .finish()
    }
}

impl<B: Backend> Timeline<B> {
    /// A timeline named `name` (errors name it) at value `initial`.
    ///
    /// # Errors
    /// [`Error::ValueOutOfRange`] for `initial > MAX_VALUE`; a backend error if the word cannot
    /// be made (CUDA: pinned memory); on CUDA, [`Error::NoStreamWhileWaitsOpen`] for the first
    /// timeline of a backend whose stream memory operations are not probed yet, made while a
    /// wait before its signal is open and no stream made ahead is left for the probe.
    pub fn new(backend: &B, name: &str, initial: u64) -> Result<Self> {
        Ok(Timeline {
            shared: Shared::new(backend, name, initial)?,
        })
    }

    /// The timeline's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How the backend implements this timeline. On CUDA: stream memory operations by default
    /// (`memops`: every wait on the device, every one released by a failure),
    /// `hybrid` or events when asked for (the CUDA backend's `TimelineMechanism`,
    /// `SEQSYNC_TIMELINE_MECHANISM`), or events with the reason memory operations are not
    /// usable. [`Mechanism::holds_commands`] and
    /// [`Mechanism::releases_every_wait_on_failure`] say where a mechanism falls short of the
    /// contract.
    pub fn mechanism(&self) -> Mechanism {
        self.shared.sem.mechanism()
    }

    /// The value now. Never blocks (a load of the word).
    ///
    /// # Errors
    /// [`Error::TimelineFailed`] once the timeline failed.
    ///
    /// ```
    /// # use seqsync::{timeline::Timeline, HostBackend};
    /// let t = Timeline::new(&HostBackend::new(), "t", 123)?;
    /// assert_eq!(t.query()?, 123);
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    pub fn query(&self) -> Result<u64> {
        self.shared.observe()
    }

    fn check_value(&self, v: u64) -> Result<()> {
        if v > MAX_VALUE {
            return Err(out_of_range(&self.shared.name, v));
        }
        Ok(())
    }

    /// `Err` where [`signal`](Self::signal) or [`signal_on`](Self::signal_on) of `v` would be
    /// refused now (out of range, not above every value signalled or enqueued, failed),
    /// without signalling anything: for a caller that enqueues other work before the signal
    /// and must refuse the whole before enqueuing any of it.
    pub(crate) fn check_signal(&self, v: u64) -> Result<()> {
        self.check_value(v)?;
        let st = self.shared.lock();
        self.shared.admit(&st, v)
    }

    /// `Err` where [`wait_on`](Self::wait_on) of `v` would be refused for its value.
    pub(crate) fn check_wait(&self, v: u64) -> Result<()> {
        self.check_value(v)
    }

    /// `Err` where [`wait_on`](Self::wait_on) of `v` on `stream` would be refused for its
    /// value or its stream (one of another backend).
    pub(crate) fn check_wait_on(&self, stream: &B::Stream, v: u64) -> Result<()> {
        self.check_value(v)?;
        self.check_stream(stream)
    }

    /// `Err` where a stream operation of this timeline would refuse `stream` (one of another
    /// backend).
    pub(crate) fn check_stream(&self, stream: &B::Stream) -> Result<()> {
        self.shared.backend.check_stream(stream)
    }

    /// Are both handles of one timeline?
    pub(crate) fn same(&self, other: &Timeline<B>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Host signal: the value becomes `v` now.
    ///
    /// # Errors
    /// [`Error::NonMonotonic`] if `v` does not exceed every value signalled or enqueued so far
    /// (nothing changes); [`Error::ValueOutOfRange`]; [`Error::TimelineFailed`].
    ///
    /// ```
    /// # use seqsync::{timeline::Timeline, Error, HostBackend};
    /// let t = Timeline::new(&HostBackend::new(), "t", 10)?;
    /// t.signal(40)?;
    /// let err = t.signal(40).unwrap_err();
    /// assert!(matches!(err, Error::NonMonotonic { current: 40, got: 40, .. }));
    /// assert_eq!(t.query()?, 40);
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    pub fn signal(&self, v: u64) -> Result<()> {
        self.check_value(v)?;
        let s = &self.shared;
        let mut st = s.lock();
        s.admit(&st, v)?;
        st.last_enqueued = v;
        let r = s.sem.store(v);
        drop(st);
        if let Err(e) = r {
            s.fail(e, None);
            return Err(self.query().expect_err("failed just now"));
        }
        s.floor.fetch_max(v, crate::primitive::Ordering::AcqRel);
        s.waiters.wake_all();
        Ok(())
    }

    /// Enqueue a signal of `v` on `stream`: the value becomes `v` when the stream gets there.
    ///
    /// If the stream waited on a timeline that failed before reaching what it waited for, this
    /// timeline fails instead (see [Failure](self#failure)); `Ok` is returned then.
    ///
    /// # Errors
    /// [`Error::NonMonotonic`] if `v` does not exceed every value signalled or enqueued so far;
    /// [`Error::ValueOutOfRange`]; [`Error::TimelineFailed`]; a backend error.
    pub fn signal_on(&self, stream: &B::Stream, v: u64) -> Result<()> {
        self.check_value(v)?;
        let s = &self.shared;
        s.backend.check_stream(stream)?;
        let id = s.backend.stream_id(stream);
        // Under the timeline's lock from admission to the backend's enqueue: signals reach the
        // backend in value order, and none after a failure is marked. The fast path finds the
        // stream's ledger (or that it has none) in this thread's cache.
        let mut st = s.lock();
        s.admit(&st, v)?;
        let undo = (
            st.last_enqueued,
            s.last_free.load(std::sync::atomic::Ordering::Relaxed),
        );
        if let Some(Ok(())) = propagate::with_cached_ledger(id, |l| add_signal(s, l, v)) {
            st.last_enqueued = v;
            return s.backend.signal_on(stream, &s.sem, v).inspect_err(|_| {
                // Refused: nothing enqueued, so nothing counts as enqueued.
                (st.last_enqueued, _) = undo;
                s.last_free
                    .store(undo.1, std::sync::atomic::Ordering::Relaxed);
            });
        }
        drop(st);
        self.signal_on_slow(stream, id, v)
    }

    /// [`signal_on`](Self::signal_on) when the stream's ledger is not cached (or was retired),
    /// or the stream is poisoned: the whole admission again (the fast path changed nothing).
    /// On a miss the ledger is looked up (the registry's lock) without the timeline's lock,
    /// then the admission starts over.
    #[cold]
    #[inline(never)]
    fn signal_on_slow(&self, stream: &B::Stream, id: u64, v: u64) -> Result<()> {
        let s = &self.shared;
        let add = |l: Option<&Arc<propagate::Ledger>>| add_signal(s, l, v);
        let mut looked_up = false;
        loop {
            let mut st = s.lock();
            s.admit(&st, v)?;
            let undo = (
                st.last_enqueued,
                s.last_free.load(std::sync::atomic::Ordering::Relaxed),
            );
            let added = if looked_up {
                // Still not cached (no thread-local cache here, or it is in use): the
                // registry, under the timeline's lock.
                propagate::with_ledger(id, false, add)
            } else {
                match propagate::with_cached_ledger(id, add) {
                    Some(added) => added,
                    None => {
                        drop(st);
                        propagate::look_up(id);
                        looked_up = true;
                        continue;
                    }
                }
            };
            if let Err(cause) = added {
                drop(st);
                s.fail(Error::clone(&cause), None);
                return Ok(());
            }
            st.last_enqueued = v;
            return s.backend.signal_on(stream, &s.sem, v).inspect_err(|_| {
                (st.last_enqueued, _) = undo;
                s.last_free
                    .store(undo.1, std::sync::atomic::Ordering::Relaxed);
            });
        }
    }

    /// Enqueue a wait on `stream`: work enqueued on it afterwards runs once the value is `≥ v`,
    /// even if no signal of `v` is enqueued yet (but for the CUDA `events` mechanism, which
    /// refuses that). Nothing is enqueued if `v` is reached already.
    ///
    /// If the timeline fails before reaching `v`, the wait is released and the stream is
    /// poisoned: the timelines it signals from then on fail (see [Failure](self#failure)).
    ///
    /// # Errors
    /// [`Error::ValueOutOfRange`]; [`Error::WaitBeforeSignalUnsupported`] where the mechanism
    /// cannot hold a stream's work before the signal is enqueued (CUDA `events`: see
    /// [What each mechanism holds](self#what-each-mechanism-holds)), nothing enqueued; a
    /// backend error. A wait on a timeline that has failed already is not an error: it
    /// poisons the stream.
    pub fn wait_on(&self, stream: &B::Stream, v: u64) -> Result<()> {
        self.check_value(v)?;
        let s = &self.shared;
        s.backend.check_stream(stream)?;
        match s.observe_known() {
            Ok(c) if c >= v => return Ok(()),
            Ok(_) => {}
            // Failed already (an error of the word fails it too): nothing to list or enqueue
            // (a failure racing this call is handled below, where the entry is listed first).
            Err(_) => {
                self.wait_on_failed_now(s.backend.stream_id(stream), v);
                return Ok(());
            }
        }
        if !s.sem.holds_commands_for(v) {
            // CUDA `events`: a stream wait is an event wait on the point of a signal enqueued
            // already; before its signal, nothing on the device could hold the kernels and
            // copies enqueued on the stream after it. Refused, before anything is listed or
            // enqueued (under the timeline's lock: a signal enqueued meanwhile is seen).
            self.check_holds_commands(v)?;
        }
        let id = s.backend.stream_id(stream);
        // Before the entry: a last handle's drop that sees no flag finds no entry either.
        if !s.stream_waited.load(std::sync::atomic::Ordering::Relaxed) {
            s.stream_waited
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        // A failure marks the timeline failed, then looks for waits in the ledgers: either it
        // finds this one (added first), or this sees the mark.
        let failed = propagate::with_ledger(id, true, |ledger| {
            let ledger = ledger.expect("made when asked");
            let seq = ledger.add_wait(&s.target, v)?;
            Ok(s.failed
                .load(crate::primitive::Ordering::Acquire)
                .then(|| (ledger.clone(), seq)))
        });
        if let Some((ledger, seq)) = failed {
            self.wait_on_failed(&ledger, seq, v);
            return Ok(());
        }
        s.backend.wait_on(stream, &s.sem, v)
    }

    /// A wait for `v` on stream `id` of a timeline failed already: poison the stream from now
    /// on if the failure came before `v` (nothing is listed or enqueued).
    #[cold]
    #[inline(never)]
    fn wait_on_failed_now(&self, id: u64, v: u64) {
        let (value, err) = self.failure();
        if v > value {
            propagate::with_ledger(id, true, |ledger| {
                ledger.expect("made when asked").poison_now(err.clone())
            });
        }
    }

    /// A wait for `v`, entered in `ledger` as `seq`, found the timeline failed: poison the
    /// stream from there if the failure came before `v` (nothing is enqueued).
    #[cold]
    #[inline(never)]
    fn wait_on_failed(&self, ledger: &propagate::Ledger, seq: u64, v: u64) {
        let (value, err) = self.failure();
        if v > value {
            propagate::apply(ledger.poison_from(seq, err));
        }
    }

    /// The failure of a timeline whose failed flag is set: the last value it reached, and the
    /// error its waits report.
    fn failure(&self) -> (u64, Arc<Error>) {
        let s = &self.shared;
        let st = s.lock();
        let f = st
            .failure
            .as_ref()
            .expect("failed flag set without a failure");
        (f.value, Arc::new(s.failed_error(f)))
    }

    /// Block the calling thread until the value is `≥ v`, or `timeout` passes
    /// (`Duration::MAX`: no limit).
    ///
    /// # Errors
    /// [`Error::Timeout`] (nothing changes; call again); [`Error::TimelineFailed`];
    /// [`Error::ValueOutOfRange`].
    ///
    /// ```
    /// # use seqsync::{timeline::Timeline, Error, HostBackend};
    /// # use std::time::Duration;
    /// let t = Timeline::new(&HostBackend::new(), "t", 2)?;
    /// t.wait(2, Duration::ZERO)?;
    /// let err = t.wait(3, Duration::from_millis(1)).unwrap_err();
    /// assert!(matches!(err, Error::Timeout { .. }));
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    pub fn wait(&self, v: u64, timeout: Duration) -> Result<()> {
        wait_all(&[(self, v)], timeout)
    }

    /// Fail the timeline with `error`: host waiters wake with [`Error::TimelineFailed`]
    /// carrying it, stream waits are released, the failure spreads to the timelines signalled
    /// after waits on it, and every later call returns it. A second `fail` is ignored.
    ///
    /// ```
    /// # use seqsync::{timeline::Timeline, Error, HostBackend};
    /// # use std::time::Duration;
    /// let t = Timeline::new(&HostBackend::new(), "t", 0)?;
    /// t.fail(Error::Cancelled("shutting down".into()));
    /// let err = t.wait(1, Duration::MAX).unwrap_err();
    /// assert!(matches!(err.root_cause(), Error::Cancelled(why) if why == "shutting down"));
    /// assert!(t.query().is_err() && t.signal(1).is_err());
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    pub fn fail(&self, error: Error) {
        self.shared.fail(error, None);
    }

    /// The backend's word (for the loom models, which play a stream's signal on it).
    #[cfg(all(test, seqsync_loom))]
    pub(crate) fn semaphore(&self) -> &B::Semaphore {
        &self.shared.sem
    }

    /// `Ok` if a stream wait for `v` enqueued now holds the commands enqueued after it until
    /// `v`: always, except with a mechanism that cannot wait before the signal
    /// ([`Mechanism::holds_commands`]) while no point of a signal at or above `v` exists on the
    /// device yet (and `v` is not reached, and the timeline has not failed).
    ///
    /// # Errors
    /// [`Error::WaitBeforeSignalUnsupported`].
    pub(crate) fn check_holds_commands(&self, v: u64) -> Result<()> {
        let mechanism = self.mechanism();
        if mechanism.holds_commands() {
            return Ok(());
        }
        let st = self.shared.lock();
        let on_device = v <= st.last_enqueued && self.shared.sem.holds_commands_for(v);
        if st.failure.is_some() || on_device {
            return Ok(());
        }
        Err(Error::WaitBeforeSignalUnsupported {
            timeline: self.shared.name.clone(),
            value: v,
            enqueued: st.last_enqueued,
            mechanism: mechanism.name().to_owned(),
        })
    }

    /// Has the timeline failed?
    pub fn is_failed(&self) -> bool {
        self.query().is_err()
    }

    /// For host waits: `Some` once reached or failed (a backend that finds the word will never
    /// get there fails the timeline).
    fn poll(&self, v: u64) -> Option<Result<()>> {
        match self.shared.observe() {
            Ok(c) if c >= v => Some(Ok(())),
            Ok(_) => match self.shared.sem.check() {
                Ok(()) => None,
                Err(e) => {
                    self.shared.fail(e, None);
                    Some(self.query().map(drop))
                }
            },
            Err(e) => Some(Err(e)),
        }
    }

    fn describe(&self, v: u64) -> String {
        let now = match self.shared.observe() {
            Ok(c) => c.to_string(),
            Err(_) => "failed".into(),
        };
        format!("timeline '{}' to reach {v} (at {now})", self.shared.name)
    }
}

/// A timeline seen without holding a handle of it: its value can be read, and dropping the last
/// [`Timeline`] handle still does what it does (a pool that holds back a freed block until a
/// value is reached must not keep the timeline from failing when its last handle goes).
pub(crate) struct Observer<B: Backend> {
    shared: Arc<Shared<B>>,
}

impl<B: Backend> Observer<B> {
    /// As [`Timeline::query`].
    pub(crate) fn query(&self) -> Result<u64> {
        self.shared.observe()
    }
}

impl<B: Backend> Timeline<B> {
    /// An observer of this timeline, which is not a handle.
    pub(crate) fn observer(&self) -> Observer<B> {
        Observer {
            shared: self.shared.clone(),
        }
    }
}

pub(crate) use propagate::{MarkState, StreamMark};

/// A mark at `stream`'s current place, if a timeline wait enqueued on it so far may still be
/// released by a failure (see [`StreamMark`]): what a pool needs to know before it trusts a
/// point recorded there.
pub(crate) fn stream_mark<B: Backend>(backend: &B, stream: &B::Stream) -> Option<StreamMark> {
    propagate::stream_mark(backend.stream_id(stream))
}

/// Is `stream` poisoned: did a failure release a timeline wait enqueued on it, so that every
/// timeline it signals from now on fails (see [Failure](self#failure))? A stream shared by
/// unrelated work (a pool of streams) must not be used for new work once it is.
pub(crate) fn is_poisoned<B: Backend>(backend: &B, stream: &B::Stream) -> bool {
    propagate::is_poisoned(backend.stream_id(stream))
}

/// Enter a signal of `v` in the stream's ledger, if it has one: `Ok(Err(cause))` if the stream
/// is poisoned (the timeline must fail instead), `Err(Retired)` if the ledger was retired.
#[inline(always)]
fn add_signal<B: Backend>(
    s: &Shared<B>,
    ledger: Option<&Arc<propagate::Ledger>>,
    v: u64,
) -> std::result::Result<std::result::Result<(), Arc<Error>>, Retired> {
    let kept = match ledger {
        None => false,
        Some(l) => match l.add_signal(&s.target, v) {
            Ok(kept) => kept,
            Err(Refused::Poisoned(cause)) => return Ok(Err(cause)),
            Err(Refused::Retired) => return Err(Retired),
        },
    };
    if !kept {
        // No wait listed ahead of it on its stream: nothing of this timeline holds it (what a
        // dropped timeline counts on, `Shared::reachable`). Under the timeline's lock.
        s.last_free.store(v, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(Ok(()))
}

fn wait_on_of<'a, B: Backend>(list: &'a [(&'a Timeline<B>, u64)]) -> WaitOn<'a> {
    WaitOn {
        waiters: list.iter().map(|(t, _)| &*t.shared.waiters).collect(),
        all_notify: list.iter().all(|(t, _)| t.shared.sem.notifies()),
    }
}

fn timeout_error<B: Backend>(list: &[(&Timeline<B>, u64)], timeout: Duration, all: bool) -> Error {
    let parts: Vec<String> = list.iter().map(|(t, v)| t.describe(*v)).collect();
    let joiner = if all { " and " } else { " or " };
    Error::Timeout {
        waited_for: parts.join(joiner),
        timeout,
    }
}

/// Block until every `(timeline, value)` of `list` is reached, or `timeout` passes. An empty
/// list is `Ok` at once.
///
/// # Errors
/// [`Error::Timeout`]; [`Error::TimelineFailed`] as soon as one of them fails;
/// [`Error::ValueOutOfRange`].
///
/// ```
/// # use seqsync::{timeline::{wait_all, Timeline}, Error, HostBackend};
/// # use std::time::Duration;
/// let host = HostBackend::new();
/// let (a, b) = (Timeline::new(&host, "a", 0)?, Timeline::new(&host, "b", 1)?);
/// let err = wait_all(&[(&a, 1), (&b, 1)], Duration::ZERO).unwrap_err();
/// assert!(matches!(err, Error::Timeout { .. }));
/// a.signal(1)?;
/// wait_all(&[(&a, 1), (&b, 1)], Duration::MAX)?;
/// # Ok::<(), seqsync::Error>(())
/// ```
pub fn wait_all<B: Backend>(list: &[(&Timeline<B>, u64)], timeout: Duration) -> Result<()> {
    for (t, v) in list {
        t.check_value(*v)?;
    }
    let on = wait_on_of(list);
    let r = block_until(&on, timeout, || {
        let mut done = true;
        for (t, v) in list {
            match t.poll(*v) {
                Some(Ok(())) => {}
                Some(Err(e)) => return Some(Err(e)),
                None => done = false,
            }
        }
        done.then_some(Ok(()))
    });
    r.unwrap_or_else(|| Err(timeout_error(list, timeout, true)))
}

/// Block until at least one `(timeline, value)` of `list` is reached, or `timeout` passes;
/// returns the index of one that is. An empty list is `Ok(None)` at once.
///
/// # Errors
/// [`Error::Timeout`]; [`Error::TimelineFailed`] when none is reached and one failed;
/// [`Error::ValueOutOfRange`].
///
/// ```
/// # use seqsync::{timeline::{wait_any, Timeline}, HostBackend};
/// # use std::time::Duration;
/// let host = HostBackend::new();
/// let (a, b) = (Timeline::new(&host, "a", 0)?, Timeline::new(&host, "b", 1)?);
/// assert_eq!(wait_any(&[(&a, 1), (&b, 1)], Duration::MAX)?, Some(1));
/// # Ok::<(), seqsync::Error>(())
/// ```
pub fn wait_any<B: Backend>(
    list: &[(&Timeline<B>, u64)],
    timeout: Duration,
) -> Result<Option<usize>> {
    if list.is_empty() {
        return Ok(None);
    }
    for (t, v) in list {
        t.check_value(*v)?;
    }
    let on = wait_on_of(list);
    let r = block_until(&on, timeout, || {
        let mut failure = None;
        for (i, (t, v)) in list.iter().enumerate() {
            match t.poll(*v) {
                Some(Ok(())) => return Some(Ok(Some(i))),
                Some(Err(e)) => failure = failure.or(Some(e)),
                None => {}
            }
        }
        failure.map(Err)
    });
    r.unwrap_or_else(|| Err(timeout_error(list, timeout, false)))
}
