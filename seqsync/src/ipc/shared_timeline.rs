//! [`SharedTimeline`]: a [`Timeline`](crate::timeline::Timeline) that processes of one user
//! signal and wait on.
//!
//! The value and the highest value signalled or enqueued live in the segment's header; a
//! signal raises `enqueued` with a compare-and-swap (so two processes never enqueue the same
//! value), and raises `value` with a `fetch_max` when it lands (so signals that land out of
//! order never lower it). A failure is the segment's stop state: its message, the process that
//! failed it, and, for a dead peer, which one (`lost_peer`), so that every process rebuilds the
//! same cause. Blocked calls sleep on the segment's `changes` futex and check the peers every
//! 100 ms.
//!
//! Streams whose host work may block (the host backend) signal and wait with host jobs. Device
//! streams (CUDA) use stream memory operations on the segment, mapped for the device:
//!
//! - every process has its own word, in its peer entry (`Peer::gpu`), which its streams wait
//!   on with `GEQ` (`wait_mapped_on`);
//! - a signal is a host function on the stream (`launch_host_always`) that lands the value as
//!   a host signal does and raises every process's word with a `fetch_max`: a plain device
//!   store could lower a word that another process's signal raised;
//! - a failure is spread by each process to its own streams before it releases its own word
//!   (`2^63`, which the cyclic `GEQ` reads as reached): the in-process failure rule
//!   ([`propagate`](crate::timeline)) first poisons every stream of the process whose wait the
//!   failure releases, so a timeline those streams signal afterwards fails before the device
//!   lets them go. A process learns of a failure in another process from its watchdog (every
//!   100 ms), which also notices dead peers and waits nobody can release any more.
//!
//! A process whose streams used the segment keeps it mapped until it ends
//! (`cuMemHostUnregister` waits for the whole device, and a stream may wait for good), and
//! keeps its peer entry until its handles are gone and no device wait of it can be pending.
//!
//! Its device waits are not among the waits that hold back this process's frees and stream
//! creations (the timeline docs, "# Mechanisms"): while a stream waits for another process's
//! signal, a `cuMemFree` or a `cuStreamCreate` past the few dozen the driver makes at once may
//! wait for that signal. They wait, not hang, unless that process waits for this one first.
//!
//! It may use: `backend` (host work, mapped host words) and `timeline` (the failure rule).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use super::peers::{self, Role, CHECK_EVERY};
use super::rendezvous::{self, Server};
use super::segment::{Kind, Segment, Sizes};
use super::shared_ring::check_name;
use super::wake::{self, Channel};
use crate::backend::semaphore::FAILED_BIT;
use crate::backend::{Backend, MappedHost};
use crate::error::{BackendError, Error, Result};
use crate::timeline::propagate::{self, FailTarget, Propagation, Refused, Retired};
use crate::timeline::MAX_VALUE;

/// The part every handle and stream job holds: the segment and this process's entry in it.
struct Shared {
    name: String,
    seg: Segment,
    /// This process's entry in the peer table (`usize::MAX` once it left).
    peer: AtomicUsize,
    /// The error this process failed the timeline with (kept whole, for `root_cause`).
    local_failure: OnceLock<Arc<Error>>,
    /// The user's handles in this process (clones count).
    handles: AtomicUsize,
    /// Signals this process enqueued on streams that have not landed.
    pending: AtomicUsize,
    /// Device streams: the segment mapped for them (made once, never dropped).
    device: OnceLock<MappedHost>,
    device_init: Mutex<()>,
    /// The highest value a device wait of this process was enqueued for.
    max_waited: AtomicU64,
    /// This process has spread the timeline's failure to its streams (and released its word).
    marked: AtomicBool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.leave();
    }
}

impl Shared {
    /// Give this process's peer entry back (once).
    fn leave(&self) {
        peers::leave(self.seg.header(), &self.peer);
    }

    fn wake(&self, always: bool) {
        wake::wake(self.seg.header(), Channel::State, always);
    }

    /// The value (frozen at a failure: the word then carries [`FAILED_BIT`] too).
    fn value(&self) -> u64 {
        self.seg.header().value.load(Ordering::SeqCst) & !FAILED_BIT
    }

    /// This timeline's identity in the ledgers (the address their `Weak`s point to).
    fn id(&self) -> *const () {
        self as *const Self as *const ()
    }

    /// Fail the timeline (the first failure wins, in every process), then spread it to this
    /// process's streams.
    fn fail(&self, error: Error) {
        self.fail_segment(error);
        self.notice_failure();
    }

    /// Write the failure into the segment (if it is the first) and wake every blocked call.
    fn fail_segment(&self, error: Error) {
        let h = self.seg.header();
        if h.begin_stop() {
            // The value is frozen: a signal landing later raises nothing (`land`).
            h.value.fetch_or(FAILED_BIT, Ordering::SeqCst);
            if let Error::PeerLost { pid, role, .. } = &error {
                h.set_lost_peer(*pid, Role::code_of(role));
            }
            let _ = self.local_failure.set(Arc::new(error.clone()));
            h.finish_stop(&error.to_string(), peers::me());
        }
        self.wake(true);
    }

    /// Once the timeline has failed (in any process, its reason written): spread the failure
    /// to the streams of this process whose waits it releases, then release this process's
    /// word. Once per process.
    fn notice_failure(&self) {
        if let Some(more) = self.mark() {
            propagate::apply(more);
            self.release_word();
        }
    }

    /// The first time this process sees the failure: the failures it causes downstream.
    fn mark(&self) -> Option<Vec<Propagation>> {
        if self.seg.header().stop_state() != 2 {
            return None;
        }
        // Marked before the ledgers are searched: a device `wait_on` adds its entry, then
        // looks at this flag, so either the search finds the entry or the wait sees the flag.
        if self.marked.swap(true, Ordering::SeqCst) {
            return None;
        }
        let err = Arc::new(self.failed()?);
        let value = self.value();
        Some(
            propagate::waits_on(self.id(), value)
                .into_iter()
                .flat_map(|(ledger, seq)| ledger.poison_from(seq, err.clone()))
                .collect(),
        )
    }

    /// Let this process's device waits go (the failed word) and wake its host waiters.
    fn release_word(&self) {
        if let Some(p) = self.my_entry() {
            p.gpu.store(FAILED_BIT, Ordering::SeqCst);
        }
        self.wake(true);
    }

    fn my_entry(&self) -> Option<&super::segment::Peer> {
        self.seg
            .header()
            .peers
            .get(self.peer.load(Ordering::Acquire))
    }

    /// The failure, as [`Error::TimelineFailed`], if the timeline failed.
    fn failed(&self) -> Option<Error> {
        let h = self.seg.header();
        let by = || h.stopped_by.load(Ordering::Relaxed);
        let cause = match (h.stop_state(), self.local_failure.get()) {
            (0, _) => return None,
            (2, Some(mine)) => mine.clone(),
            (2, None) => Arc::new(if let Some((pid, role)) = h.lost_peer() {
                Error::PeerLost {
                    ring: self.name.clone(),
                    pid,
                    role: Role::name(role),
                }
            } else {
                Error::FailedElsewhere {
                    pid: by(),
                    message: h.reason(),
                }
            }),
            _ => Arc::new(Error::FailedElsewhere {
                pid: by(),
                message: "failed by a process that died before writing why".into(),
            }),
        };
        Some(Error::TimelineFailed {
            timeline: self.name.clone(),
            value: self.value(),
            cause,
        })
    }

    fn check_failed(&self) -> Result<()> {
        self.failed().map_or(Ok(()), Err)
    }

    fn check_value(&self, v: u64) -> Result<()> {
        if v > MAX_VALUE {
            return Err(Error::ValueOutOfRange {
                timeline: self.name.clone(),
                got: v,
                max: MAX_VALUE,
            });
        }
        Ok(())
    }

    /// Claim `v` as the next value signalled or enqueued.
    fn claim(&self, v: u64) -> Result<()> {
        self.check_value(v)?;
        self.check_failed()?;
        let h = self.seg.header();
        let mut current = h.enqueued.load(Ordering::Acquire);
        loop {
            if v <= current {
                return Err(Error::NonMonotonic {
                    timeline: self.name.clone(),
                    current,
                    got: v,
                });
            }
            match h
                .enqueued
                .compare_exchange(current, v, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(()),
                Err(now) => current = now,
            }
        }
    }

    /// `v` landed: the value, and then every process's device word. Once the timeline has
    /// failed nothing is raised (the value is frozen there, so that a process that has not
    /// seen the failure yet does not let a wait above it go unpoisoned).
    fn land(&self, v: u64) {
        let h = self.seg.header();
        let mut current = h.value.load(Ordering::SeqCst);
        loop {
            if current & FAILED_BIT != 0 || current >= v {
                self.wake(false);
                return;
            }
            match h
                .value
                .compare_exchange(current, v, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        // SeqCst with `joined`'s: an entry claimed meanwhile either gets this raise or reads
        // the value after it. (A word raised here after a failure froze the value holds a
        // value reached before it: waits up to it were satisfied.)
        // Entries in use only: one being claimed now is raised by its own `joined`, which
        // reads the value after it is in use (SeqCst), so after this CAS.
        for p in h
            .peers
            .iter()
            .filter(|p| p.state.load(Ordering::SeqCst) == 2)
        {
            p.gpu.fetch_max(v, Ordering::SeqCst);
        }
        self.wake(false);
    }

    /// This process can no longer signal it once it has no handle and no pending signal:
    /// say so in its entry (for the other processes' check of waits nobody can release).
    fn maybe_done_signalling(&self) {
        if self.handles.load(Ordering::SeqCst) == 0 && self.pending.load(Ordering::SeqCst) == 0 {
            if let Some(p) = self.my_entry() {
                p.may_signal.store(0, Ordering::SeqCst);
            }
        }
    }

    /// Whether no device wait of this process can be pending any more (each is at or below
    /// the value, or released by a failure this process has spread).
    fn settled(&self) -> bool {
        self.marked.load(Ordering::Acquire)
            || self.value() >= self.max_waited.load(Ordering::Acquire)
    }

    /// The liveness check of a blocked call: a dead peer fails the timeline. For a stream
    /// wait (`stream_wait`), also a timeline nobody can signal any more: no handle and no
    /// pending signal in this process, no other process registered.
    fn check_peers(&self, stream_wait: Option<u64>) -> Option<Error> {
        let h = self.seg.header();
        if let Err(e) = peers::check(h, &self.name) {
            self.fail(e);
        } else if let Some(v) = stream_wait.filter(|_| {
            self.handles.load(Ordering::SeqCst) == 0
                && self.pending.load(Ordering::SeqCst) == 0
                && peers::signallers_elsewhere(h, self.peer.load(Ordering::Acquire)) == 0
        }) {
            // Read after `pending`: a signal that landed just before its count went is seen.
            if self.value() >= v {
                return self.failed();
            }
            self.fail(Error::TimelineDropped {
                timeline: self.name.clone(),
                value: self.value(),
                pending: 1,
            });
        }
        self.failed()
    }

    /// Sleep until the value reaches `v`, the timeline fails, or `timeout` passes.
    fn wait(&self, v: u64, timeout: Option<Duration>, stream_wait: bool) -> Result<()> {
        let deadline = timeout.and_then(wake::deadline);
        let r = wake::sleep_until(
            self.seg.header(),
            Channel::State,
            deadline,
            || {
                if self.value() >= v {
                    Some(Ok(()))
                } else {
                    self.failed().map(Err)
                }
            },
            || {
                self.repair_frozen();
                self.check_peers(stream_wait.then_some(v)).map(Err)
            },
        );
        r.unwrap_or_else(|| {
            Err(Error::Timeout {
                waited_for: format!(
                    "timeline '{}' to reach {v} (at {})",
                    self.name,
                    self.value()
                ),
                timeout: timeout.unwrap_or(Duration::MAX),
            })
        })
    }
}

impl Shared {
    /// The segment is every process's to write: a value frozen with no failure begun would
    /// hold every wait above it for good. The timeline is failed instead, saying why.
    fn repair_frozen(&self) {
        if frozen_without_failure(self.seg.header()) {
            self.fail(Error::FailedElsewhere {
                pid: 0,
                message: "the segment's value was frozen by a failure never begun".into(),
            });
        }
    }
}

impl FailTarget for Shared {
    fn reached_value(&self) -> u64 {
        self.value()
    }

    /// A stream of this process that signals it waited on a timeline that failed first.
    fn mark_failed(&self, cause: Arc<Error>) -> Option<Vec<Propagation>> {
        self.fail_segment(Error::clone(&cause));
        self.mark()
    }

    fn release(&self) {
        self.release_word();
    }
}

/// Does the segment say the value is frozen (a failure's mark) while no failure was begun?
/// A failure begins the stop before it freezes the value, so only a corrupt segment does.
fn frozen_without_failure(h: &super::segment::Header) -> bool {
    // The value first: a failure under way that froze it had begun its stop before.
    h.value.load(Ordering::SeqCst) & FAILED_BIT != 0 && h.stop_state() == 0
}

/// The watchdog of a timeline whose segment this process's device streams use: it spreads a
/// failure made in another process to this process's streams, fails the timeline for a dead
/// peer or a device wait nobody can release any more, and ends (giving the peer entry back)
/// once no handle is left here and no device wait of this process can be pending.
fn watch(shared: &Shared) {
    let h = shared.seg.header();
    let mut writing_seen = false;
    loop {
        std::thread::sleep(CHECK_EVERY);
        match h.stop_state() {
            0 if frozen_without_failure(h) => shared.repair_frozen(),
            0 => {
                let top = shared.max_waited.load(Ordering::Acquire);
                shared.check_peers((shared.value() < top).then_some(top));
            }
            1 if writing_seen => {
                // Its failing process died between claiming the failure and writing why.
                h.value.fetch_or(FAILED_BIT, Ordering::SeqCst);
                h.finish_stop("failed by a process that died before writing why", 0);
                shared.notice_failure();
            }
            _ => shared.notice_failure(),
        }
        writing_seen = h.stop_state() == 1;
        let idle = shared.handles.load(Ordering::Acquire) == 0
            && shared.pending.load(Ordering::Acquire) == 0;
        if idle && shared.settled() {
            shared.leave();
            return;
        }
    }
}

/// A timeline that every process of the user on this host can signal and wait on, with the
/// contract of [`Timeline`](crate::timeline::Timeline): values only grow, a value no larger
/// than the highest one signalled or enqueued (in any process) is [`Error::NonMonotonic`], a
/// wait may come before its signal, a failure in any process reaches every process, and a
/// stream that waited on a timeline which then failed fails the timelines it signals
/// afterwards.
///
/// `create` makes it (it lives while its creator does); `open` finds it by name. A process
/// that dies with it open fails it, within a second, with [`Error::PeerLost`] as the cause
/// (every blocked call in every process returns the [`Error::TimelineFailed`], and every
/// stream wait on it goes on, poisoning its stream); once the creator is gone the name can be
/// created again. A stream wait that nobody can release any more (no handle or pending signal
/// left in its process, no other process) fails it with [`Error::TimelineDropped`].
///
/// Streams: on the host backend a signal or wait is a host job; on CUDA a wait is
/// `cuStreamWaitValue64` on a word of the segment and a signal a host function
/// ([`mechanism`](Self::mechanism) says which). A stream whose timeline operations are held on
/// the host (the in-process `events` mechanism, behind a wait whose signal is not enqueued) is
/// refused, before anything is enqueued.
///
/// ```
/// use seqsync::ipc::SharedTimeline;
/// use seqsync::HostBackend;
/// use std::time::Duration;
///
/// let host = HostBackend::new();
/// let stream = host.new_stream("decode")?;
/// // One process creates it...
/// let decoded = SharedTimeline::create(&host, "doc-decoded", 0)?;
/// // ...any other of the same user opens it by name, and waits for a value not signalled yet.
/// let seen = SharedTimeline::open(&host, "doc-decoded")?;
/// decoded.signal_on(&stream, 1)?;
/// seen.wait(1, Duration::from_secs(5))?;
/// let err = seen.signal(1).unwrap_err(); // 1 was signalled already, in either process
/// assert!(matches!(err, seqsync::Error::NonMonotonic { current: 1, got: 1, .. }));
/// # Ok::<(), seqsync::Error>(())
/// ```
pub struct SharedTimeline<B: Backend> {
    shared: Arc<Shared>,
    /// `shared` as the ledgers name it.
    target: Weak<dyn FailTarget>,
    backend: B,
    /// The creator's listener: it serves the segment while any clone lives.
    _server: Option<Arc<Server>>,
}

impl<B: Backend> std::fmt::Debug for SharedTimeline<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTimeline")
            .field("name", &self.shared.name)
            .field("value", &self.shared.value())
            .finish()
    }
}

impl<B: Backend> Clone for SharedTimeline<B> {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::AcqRel);
        SharedTimeline {
            shared: self.shared.clone(),
            target: self.target.clone(),
            backend: self.backend.clone(),
            _server: self._server.clone(),
        }
    }
}

impl<B: Backend> Drop for SharedTimeline<B> {
    fn drop(&mut self) {
        let s = &self.shared;
        if s.handles.fetch_sub(1, Ordering::SeqCst) == 1 {
            s.maybe_done_signalling();
            // A segment mapped for the device is never dropped: give the entry back now if no
            // device wait can be pending (else the watchdog does, once none can), so that
            // the other processes do not take this one for dead once it exits.
            if s.device.get().is_some() && s.pending.load(Ordering::SeqCst) == 0 && s.settled() {
                s.leave();
            }
        }
        // A stream wait of this process may now be one nobody can release: let it look.
        self.shared.wake(false);
    }
}

impl<B: Backend> SharedTimeline<B> {
    /// Make timeline `name` at value `initial`, in this process.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name or a name a living process has created
    /// already; [`Error::ValueOutOfRange`] for `initial` above [`MAX_VALUE`].
    pub fn create(backend: &B, name: &str, initial: u64) -> Result<Self> {
        check_name(name)?;
        if initial > MAX_VALUE {
            return Err(Error::ValueOutOfRange {
                timeline: name.to_owned(),
                got: initial,
                max: MAX_VALUE,
            });
        }
        let seg = Segment::create(name, Kind::Timeline, Sizes::default())?;
        seg.header().value.store(initial, Ordering::Relaxed);
        seg.header().enqueued.store(initial, Ordering::Release);
        let fd = seg
            .fd()
            .try_clone_to_owned()
            .map_err(|e| Error::invalid(name, format!("dup its segment: {e}")))?;
        let server = Server::start(Kind::Timeline, name, fd)?;
        Self::joined(backend, name, seg, Role::Creator, Some(Arc::new(server)))
    }

    /// Open timeline `name`, made by another process (or this one) of the same user.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when no living process has created it;
    /// [`Error::BadSegment`] when what its creator handed over is not a timeline segment this
    /// build can trust (checked before use).
    pub fn open(backend: &B, name: &str) -> Result<Self> {
        check_name(name)?;
        let fd = rendezvous::fetch(Kind::Timeline, name)?;
        let seg = Segment::open(name, Kind::Timeline, fd)?;
        if frozen_without_failure(seg.header()) {
            return Err(Error::BadSegment {
                ring: name.to_owned(),
                message: "its value is frozen by a failure that was never begun".into(),
            });
        }
        Self::joined(backend, name, seg, Role::Opener, None)
    }

    fn joined(
        backend: &B,
        name: &str,
        seg: Segment,
        role: Role,
        server: Option<Arc<Server>>,
    ) -> Result<Self> {
        let peer = peers::register(seg.header(), name, role)?;
        // SeqCst with `land`'s: either its raise of this entry comes after `register`'s reset,
        // or this load sees the value it landed.
        let h = seg.header();
        let value = h.value.load(Ordering::SeqCst);
        if value & FAILED_BIT != 0 {
            // Failed already: released (a wait another process left queued on this entry
            // before giving it back goes on).
            h.peers[peer].gpu.store(FAILED_BIT, Ordering::SeqCst);
        } else {
            h.peers[peer].gpu.fetch_max(value, Ordering::SeqCst);
        }
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            seg,
            peer: AtomicUsize::new(peer),
            local_failure: OnceLock::new(),
            handles: AtomicUsize::new(1),
            pending: AtomicUsize::new(0),
            device: OnceLock::new(),
            device_init: Mutex::new(()),
            max_waited: AtomicU64::new(0),
            marked: AtomicBool::new(false),
        });
        let target: Weak<dyn FailTarget> = Arc::downgrade(&shared) as Weak<dyn FailTarget>;
        Ok(SharedTimeline {
            shared,
            target,
            backend: backend.clone(),
            _server: server,
        })
    }

    /// The timeline's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How it orders streams across processes: [`HostWord`](super::Mechanism::HostWord)
    /// (host jobs on words of the segment) on the host backend,
    /// [`MemOps`](super::Mechanism::MemOps) (stream memory operations on them) on CUDA.
    pub fn mechanism(&self) -> super::Mechanism {
        if self.backend.host_work_may_block() {
            super::Mechanism::HostWord
        } else {
            super::Mechanism::MemOps
        }
    }

    /// The value now, as every process sees it.
    ///
    /// # Errors
    /// [`Error::TimelineFailed`].
    pub fn query(&self) -> Result<u64> {
        self.shared.check_failed()?;
        Ok(self.shared.value())
    }

    /// Has it failed, in any process?
    pub fn is_failed(&self) -> bool {
        self.shared.failed().is_some()
    }

    /// Set the value to `v` now: host waiters and stream waits for values up to `v` go on,
    /// in every process.
    ///
    /// # Errors
    /// [`Error::NonMonotonic`] when `v` does not exceed every value signalled or enqueued
    /// before, in any process (nothing changes); [`Error::ValueOutOfRange`];
    /// [`Error::TimelineFailed`].
    pub fn signal(&self, v: u64) -> Result<()> {
        self.shared.claim(v)?;
        self.shared.land(v);
        Ok(())
    }

    /// Set the value to `v` when `stream` gets to this point. A stream that waited on a
    /// timeline which failed first (or, on the host backend, ran a panicking job) fails this
    /// timeline instead; `Ok` is returned then.
    ///
    /// # Errors
    /// As [`signal`](Self::signal), checked when enqueued.
    pub fn signal_on(&self, stream: &B::Stream, v: u64) -> Result<()> {
        self.shared.claim(v)?;
        if !self.backend.host_work_may_block() {
            // The in-process failure rule: a stream poisoned by a failed wait fails it.
            let id = self.backend.stream_id(stream);
            let poisoned = propagate::with_ledger(id, false, |l| match l {
                None => Ok(None),
                Some(l) => match l.add_signal(&self.target, v) {
                    Ok(_) => Ok(None),
                    Err(Refused::Poisoned(cause)) => Ok(Some(cause)),
                    Err(Refused::Retired) => Err(Retired),
                },
            });
            if let Some(cause) = poisoned {
                self.shared.fail(Error::clone(&cause));
                return Ok(());
            }
        }
        let shared = self.shared.clone();
        let backend = self.backend.name();
        shared.pending.fetch_add(1, Ordering::SeqCst);
        let r = self.backend.launch_host_always(
            stream,
            Box::new(move |failure| {
                match failure {
                    None => shared.land(v),
                    Some(m) => shared.fail(Error::Backend(BackendError::new(
                        backend,
                        "a stream failed before its signal",
                        format!("timeline '{}', value {v}: {m}", shared.name),
                    ))),
                }
                shared.pending.fetch_sub(1, Ordering::SeqCst);
                shared.maybe_done_signalling();
                shared.wake(false);
            }),
        );
        if let Err(e) = &r {
            // Nothing was enqueued, but `v` was claimed: nothing may wait for it in vain.
            self.shared.pending.fetch_sub(1, Ordering::SeqCst);
            self.shared.fail(e.clone());
        }
        r
    }

    /// Work enqueued on `stream` afterwards runs once the value is at least `v`, even when
    /// no process has signalled or enqueued `v` yet. If the timeline fails first, the wait
    /// goes on and the stream is poisoned: what it signals afterwards fails (on the host
    /// backend the stream itself fails). Nothing is enqueued when `v` is reached already.
    ///
    /// # Errors
    /// [`Error::ValueOutOfRange`]; [`Error::TimelineFailed`] when it has failed already;
    /// [`Error::InvalidArgument`] for a backend with no stream mechanism for it, before
    /// anything is enqueued.
    pub fn wait_on(&self, stream: &B::Stream, v: u64) -> Result<()> {
        self.shared.check_value(v)?;
        self.shared.check_failed()?;
        if self.backend.host_work_may_block() {
            let shared = self.shared.clone();
            return self.backend.launch_host_wait(
                stream,
                Box::new(move || {
                    if let Err(e) = shared.wait(v, None, true) {
                        panic!("{e}");
                    }
                }),
            );
        }
        if self.shared.value() >= v {
            return Ok(());
        }
        let map = self.device_map()?;
        let s = &self.shared;
        s.max_waited.fetch_max(v, Ordering::SeqCst);
        let id = self.backend.stream_id(stream);
        let (ledger, seq) = propagate::with_ledger(id, true, |l| {
            let l = l.expect("made when asked");
            Ok((l.clone(), l.add_wait(&self.target, v)?))
        });
        if s.marked.load(Ordering::SeqCst) {
            // It failed meanwhile and this process spread the failure already (its word is
            // released): a wait the failure released poisons the stream from here.
            if s.value() < v {
                if let Some(err) = s.failed() {
                    propagate::apply(ledger.poison_from(seq, Arc::new(err)));
                }
            }
            return Ok(());
        }
        let peer = s.peer.load(Ordering::Acquire);
        let r = self
            .backend
            .wait_mapped_on(stream, map, s.seg.peer_gpu_offset(peer), v);
        if let Err(e) = &r {
            // Its ledger entry and `max_waited` are in: nothing may rely on a wait that is not.
            s.fail(e.clone());
        }
        r
    }

    /// Block this thread until the value is at least `v`, up to `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`] (nothing changes; call again); [`Error::TimelineFailed`] (with
    /// [`Error::PeerLost`] as the cause when a process died with it open);
    /// [`Error::ValueOutOfRange`].
    pub fn wait(&self, v: u64, timeout: Duration) -> Result<()> {
        self.shared.check_value(v)?;
        let r = self.shared.wait(v, Some(timeout), false);
        if r.is_err() {
            self.shared.notice_failure();
        }
        r
    }

    /// Fail it in every process: blocked calls wake with [`Error::TimelineFailed`] carrying
    /// `error` (other processes get its message, as [`Error::FailedElsewhere`]), stream waits
    /// go on and poison their streams, later calls return it. A second failure is ignored.
    pub fn fail(&self, error: Error) {
        self.shared.fail(error);
    }

    /// The segment mapped for device streams (the first time: mapped for good, and the
    /// watchdog started).
    fn device_map(&self) -> Result<&MappedHost> {
        let s = &self.shared;
        if let Some(m) = s.device.get() {
            return Ok(m);
        }
        let _g = s.device_init.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = s.device.get() {
            return Ok(m);
        }
        let (ptr, len) = s.seg.mapping();
        // SAFETY: the segment's mapping is page-aligned (mmap) and stays mapped while `Shared`
        // lives, and a `Shared` mapped here is never dropped (below): the mapping outlives
        // every stream operation enqueued through it.
        let map = unsafe { self.backend.map_host(ptr, len) }?;
        let watched = s.clone();
        std::thread::Builder::new()
            .name("seqsync-timeline-watch".into())
            .spawn(move || watch(&watched))
            .map_err(|e| Error::invalid(&s.name, format!("cannot spawn its watchdog: {e}")))?;
        // Never unmapped while the process lives (see the module's header).
        std::mem::forget(s.clone());
        let _ = s.device.set(map);
        Ok(s.device.get().expect("set above"))
    }
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    use super::*;
    use crate::{AnyBackend, BackendKind};

    /// A segment whose value another process froze (the failure mark) without beginning a
    /// failure: a new opener refuses it, and a wait in a process that has it open fails
    /// instead of waiting for good.
    #[test]
    fn a_value_frozen_without_a_failure_is_refused_at_open_and_fails_waits() {
        // The host backend, through the `Backend` trait (this layer names no concrete one).
        let host = AnyBackend::new(BackendKind::Host).unwrap();
        let name = format!("frozen-{}", std::process::id());
        let t = SharedTimeline::create(&host, &name, 0).unwrap();
        t.shared
            .seg
            .header()
            .value
            .fetch_or(FAILED_BIT, Ordering::SeqCst);
        let Err(e) = SharedTimeline::open(&host, &name) else {
            panic!("a frozen segment was opened");
        };
        assert!(matches!(e, Error::BadSegment { .. }), "{e}");
        let e = t.wait(1, Duration::from_secs(10)).unwrap_err();
        assert!(matches!(e, Error::TimelineFailed { .. }), "{e}");
    }
}
