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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::peers::{self, Role};
use super::rendezvous::{self, Server};
use super::segment::{Kind, Segment, Sizes};
use super::shared_ring::check_name;
use super::wake::{self, Channel};
use crate::backend::Backend;
use crate::error::{BackendError, Error, Result};
use crate::timeline::MAX_VALUE;

/// The part every handle and stream job holds: the segment and this process's entry in it.
struct Shared {
    name: String,
    seg: Segment,
    peer: usize,
    /// The error this process failed the timeline with (kept whole, for `root_cause`).
    local_failure: OnceLock<Arc<Error>>,
    /// The user's handles in this process (clones count).
    handles: AtomicUsize,
    /// Signals this process enqueued on streams that have not landed.
    pending: AtomicUsize,
}

impl Drop for Shared {
    fn drop(&mut self) {
        peers::unregister(self.seg.header(), self.peer);
    }
}

impl Shared {
    fn wake(&self, always: bool) {
        wake::wake(self.seg.header(), Channel::State, always);
    }

    fn value(&self) -> u64 {
        self.seg.header().value.load(Ordering::Acquire)
    }

    /// Fail the timeline (the first failure wins, in every process).
    fn fail(&self, error: Error) {
        let h = self.seg.header();
        if h.begin_stop() {
            if let Error::PeerLost { pid, role, .. } = &error {
                h.set_lost_peer(*pid, Role::code_of(role));
            }
            let _ = self.local_failure.set(Arc::new(error.clone()));
            h.finish_stop(&error.to_string(), peers::me());
        }
        self.wake(true);
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

    fn land(&self, v: u64) {
        self.seg.header().value.fetch_max(v, Ordering::AcqRel);
        self.wake(false);
    }

    /// The liveness check of a blocked call: a dead peer fails the timeline. For a stream
    /// wait (`stream_wait`), also a timeline nobody can signal any more: no handle and no
    /// pending signal in this process, no other process registered.
    fn check_peers(&self, stream_wait: bool) -> Option<Error> {
        let h = self.seg.header();
        if let Err(e) = peers::check(h, &self.name) {
            self.fail(e);
        } else if stream_wait
            && self.handles.load(Ordering::Acquire) == 0
            && self.pending.load(Ordering::Acquire) == 0
            && peers::registered(h) <= 1
        {
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
            || self.check_peers(stream_wait).map(Err),
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

/// A timeline that every process of the user on this host can signal and wait on, with the
/// contract of [`Timeline`](crate::timeline::Timeline) for host signals and waits, and for
/// streams of the host backend: values only grow, a value no larger than the highest one
/// signalled or enqueued (in any process) is [`Error::NonMonotonic`], a failure in any
/// process reaches every process, and a stream that waited on a failed timeline fails the
/// timelines it signals afterwards (its work is a panicking host job, as on one process).
///
/// `create` makes it (it lives while its creator does); `open` finds it by name. A process
/// that dies with it open fails it, within a second, with [`Error::PeerLost`] as the cause
/// (every blocked call in every process returns the [`Error::TimelineFailed`]); once the
/// creator is gone the name can be created again. A stream wait that nobody can release any
/// more (no handle or pending signal left in its process, no other process) fails it with
/// [`Error::TimelineDropped`].
///
/// Host `signal`, `wait` and `query` work with every backend; `signal_on` and `wait_on` need
/// streams whose host work may block (the host backend): on CUDA they are refused, before
/// anything is enqueued (the device mechanisms are not built yet).
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
            backend: self.backend.clone(),
            _server: self._server.clone(),
        }
    }
}

impl<B: Backend> Drop for SharedTimeline<B> {
    fn drop(&mut self) {
        self.shared.handles.fetch_sub(1, Ordering::AcqRel);
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
        Ok(SharedTimeline {
            shared: Arc::new(Shared {
                name: name.to_owned(),
                seg,
                peer,
                local_failure: OnceLock::new(),
                handles: AtomicUsize::new(1),
                pending: AtomicUsize::new(0),
            }),
            backend: backend.clone(),
            _server: server,
        })
    }

    /// The timeline's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How it orders work across processes: words in the shared segment.
    pub fn mechanism(&self) -> super::Mechanism {
        super::Mechanism::HostWord
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

    /// Set the value to `v` when `stream` gets to this point. A stream that failed before
    /// (a panicking job, a wait on a failed timeline) fails the timeline instead.
    ///
    /// # Errors
    /// As [`signal`](Self::signal), checked when enqueued; [`Error::InvalidArgument`] on a
    /// backend whose stream work may not block (CUDA), before anything is enqueued.
    pub fn signal_on(&self, stream: &B::Stream, v: u64) -> Result<()> {
        self.check_streams()?;
        self.shared.claim(v)?;
        let shared = self.shared.clone();
        let backend = self.backend.name();
        shared.pending.fetch_add(1, Ordering::AcqRel);
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
                shared.pending.fetch_sub(1, Ordering::AcqRel);
                shared.wake(false);
            }),
        );
        if let Err(e) = &r {
            // Nothing was enqueued, but `v` was claimed: nothing may wait for it in vain.
            self.shared.pending.fetch_sub(1, Ordering::AcqRel);
            self.shared.fail(e.clone());
        }
        r
    }

    /// Work enqueued on `stream` afterwards runs once the value is at least `v`, even when
    /// no process has signalled or enqueued `v` yet. If the timeline fails first, the stream
    /// fails (what it runs next must not run unordered), and so do the timelines it signals
    /// afterwards.
    ///
    /// # Errors
    /// [`Error::ValueOutOfRange`]; [`Error::TimelineFailed`]; [`Error::InvalidArgument`] on
    /// a backend whose stream work may not block (CUDA), before anything is enqueued.
    pub fn wait_on(&self, stream: &B::Stream, v: u64) -> Result<()> {
        self.check_streams()?;
        self.shared.check_value(v)?;
        self.shared.check_failed()?;
        let shared = self.shared.clone();
        self.backend.launch_host(
            stream,
            Box::new(move || {
                if let Err(e) = shared.wait(v, None, true) {
                    panic!("{e}");
                }
            }),
        )
    }

    /// Block this thread until the value is at least `v`, up to `timeout`.
    ///
    /// # Errors
    /// [`Error::Timeout`] (nothing changes; call again); [`Error::TimelineFailed`] (with
    /// [`Error::PeerLost`] as the cause when a process died with it open);
    /// [`Error::ValueOutOfRange`].
    pub fn wait(&self, v: u64, timeout: Duration) -> Result<()> {
        self.shared.check_value(v)?;
        self.shared.wait(v, Some(timeout), false)
    }

    /// Fail it in every process: blocked calls wake with [`Error::TimelineFailed`] carrying
    /// `error` (other processes get its message, as [`Error::FailedElsewhere`]), stream waits
    /// fail their streams, later calls return it. A second failure is ignored.
    pub fn fail(&self, error: Error) {
        self.shared.fail(error);
    }

    fn check_streams(&self) -> Result<()> {
        if self.backend.host_work_may_block() {
            Ok(())
        } else {
            Err(Error::invalid(
                &self.shared.name,
                format!(
                    "backend '{}' has no cross-process stream mechanism yet (stream signals and \
                     waits of a shared timeline run on the host backend; host signals and waits \
                     work everywhere)",
                    self.backend.name()
                ),
            ))
        }
    }
}
