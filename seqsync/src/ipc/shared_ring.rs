//! [`SharedRing`]: the [`EventRingbuf`](crate::EventRingbuf) contract across processes.
//!
//! Each slot's `word` packs the lap of the seq it holds (`seq / max_size + 1`, 0: never
//! used) with how many consumers took and released it; its `done` is the latest seq of the
//! slot whose work completed. The producer claims a slot with one compare-and-swap once every
//! consumer released the seq before it; a consumer takes its share with a compare-and-swap and
//! releases it with an add, after enqueueing its stream wait or finishing its host wait. A
//! record's completion (host work at the record's place in the producer's stream) first waits
//! until the slot's previous seq completed, so `done >= seq` always means seq itself
//! completed. Blocked calls sleep on the segment's `changes` futex and check the peers'
//! liveness every 100 ms.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::peers::{self, Role, CHECK_EVERY};
use super::rendezvous::{self, Server};
use super::ring_events::{Events, Watch};
use super::segment::{Kind, Segment, Sizes, MAX_SLOTS, NAME_MAX, RELEASED};
use super::wake::{self, Channel};
use crate::backend::{synchronize_by_polling, Backend, MappedHost, SyncOutcome};
use crate::error::{Error, Result};
use crate::ring::Blocking;

/// The most consumers a shared ring takes (each slot counts them in 10 bits).
pub(crate) const MAX_CONSUMERS: u32 = (1 << CNT_BITS) - 1;
const CNT_BITS: u32 = 10;
const CNT_MASK: u64 = (1 << CNT_BITS) - 1;
const TAG_SHIFT: u32 = 2 * CNT_BITS;
/// The largest lap a slot's word holds: seqs up to about 1.7e13 × max_size.
const MAX_TAG: u64 = (1 << (64 - TAG_SHIFT)) - 1;
const TAKEN_ONE: u64 = 1 << CNT_BITS;
const RELEASED_ONE: u64 = 1;

fn tag(w: u64) -> u64 {
    w >> TAG_SHIFT
}
fn taken(w: u64) -> u64 {
    (w >> CNT_BITS) & CNT_MASK
}
fn released(w: u64) -> u64 {
    w & CNT_MASK
}

/// How a shared ring orders streams across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mechanism {
    /// Each slot's completion is a word in the shared segment: the producer's stream writes
    /// it (host work at the record's place), a consumer's stream or thread sleeps on the
    /// segment's futex until it is reached. The host backend's mechanism.
    HostWord,
    /// An event per slot made with `CU_EVENT_INTERPROCESS`, its handle in the segment: the
    /// producer's stream records it, a consumer's stream waits on it
    /// (`cuStreamWaitEvent`), a consumer's host polls it.
    IpcEvent,
    /// A 64-bit word per slot in the shared segment, which every process maps for its
    /// device (`cuMemHostRegister`): the producer's stream writes it
    /// (`cuStreamWriteValue64`), a consumer's stream waits on it (`cuStreamWaitValue64`), a
    /// consumer's host reads it. A stop, or a dead peer, lets every such wait go by a store
    /// from the host. The CUDA default.
    MemOps,
}

impl Mechanism {
    /// Its name on command lines and in Python: `host-word`, `memops`, `ipc-event`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::HostWord => "host-word",
            Mechanism::MemOps => "memops",
            Mechanism::IpcEvent => "ipc-event",
        }
    }
}

impl std::str::FromStr for Mechanism {
    type Err = Error;

    /// ```
    /// use seqsync::ipc::Mechanism;
    /// assert_eq!("memops".parse::<Mechanism>()?, Mechanism::MemOps);
    /// assert!(matches!("gpu".parse::<Mechanism>(), Err(seqsync::Error::InvalidArgument { .. })));
    /// # Ok::<(), seqsync::Error>(())
    /// ```
    fn from_str(s: &str) -> Result<Self> {
        [Mechanism::HostWord, Mechanism::MemOps, Mechanism::IpcEvent]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "mechanism",
                    format!("{s:?}: expected host-word, memops or ipc-event"),
                )
            })
    }
}

/// The part every stream job of the ring holds: the segment and this process's entry in it.
struct Shared {
    name: String,
    /// With memops: the segment mapped for the backend's streams (dropped before `seg`).
    memops: Option<MemOpsState>,
    seg: Segment,
    /// This process's entry in the peer table (`usize::MAX` once it left).
    peer: AtomicUsize,
}

/// A memops ring's state in this process.
struct MemOpsState {
    map: MappedHost,
    /// Whether this process enqueued a stream operation on the segment: then a stream may
    /// wait on it at any later time (behind other work), and the watchdog keeps letting waits
    /// go while the ring is stopped until the process ends.
    used: AtomicBool,
}

/// Whether a `gpu` word at `word` satisfies a wait for `value` (`CU_STREAM_WAIT_VALUE_GEQ`).
fn reached(word: u64, value: u64) -> bool {
    word.wrapping_sub(value) as i64 >= 0
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

    fn stop(&self, reason: &str) {
        let h = self.seg.header();
        if h.begin_stop() {
            h.finish_stop(reason, peers::me());
        }
        self.release_words();
        wake::wake_all(self.seg.header());
    }

    /// With memops, once stopped: every slot's `gpu` word to [`RELEASED`], which lets every
    /// stream wait on the ring go, in every process (the work after them runs unordered, and
    /// every call on the ring says it stopped).
    fn release_words(&self) {
        if self.seg.sizes.mechanism != Mechanism::MemOps {
            return;
        }
        for i in 0..self.seg.sizes.max_size {
            self.seg.slot(i).gpu.store(RELEASED, Ordering::Release);
        }
    }

    /// With memops: whether this process may still have stream operations on the segment.
    fn used(&self) -> bool {
        self.memops
            .as_ref()
            .is_some_and(|m| m.used.load(Ordering::Acquire))
    }

    /// Stop the ring for a dead peer: every process then reports [`Error::PeerLost`].
    fn lose(&self, e: &Error) {
        let h = self.seg.header();
        if let Error::PeerLost { pid, role, .. } = e {
            if h.begin_stop() {
                h.set_lost_peer(*pid, Role::code_of(role));
                h.finish_stop(&e.to_string(), peers::me());
            }
        }
        self.stop(&e.to_string());
    }

    fn stopped(&self) -> Option<Error> {
        let h = self.seg.header();
        if h.stop_state() == 2 {
            if let Some((pid, role)) = h.lost_peer() {
                return Some(Error::PeerLost {
                    ring: self.name.clone(),
                    pid,
                    role: Role::name(role),
                });
            }
        }
        let reason: String = match self.seg.header().stop_state() {
            0 => return None,
            2 => self.seg.header().reason(),
            _ => "stopped by a process that died before writing why".into(),
        };
        Some(Error::Stopped {
            ring: self.name.clone(),
            reason: reason.into(),
            cause: None,
        })
    }

    fn check_stopped(&self) -> Result<()> {
        self.stopped().map_or(Ok(()), Err)
    }

    /// A misuse error: it stops the ring (in every process) and is returned.
    fn fail<T>(&self, e: Error) -> Result<T> {
        self.stop(&e.to_string());
        Err(e)
    }

    /// Sleep until `ready` has an answer, the ring stops, or a peer dies.
    fn block_until<T>(
        &self,
        c: Channel,
        mut ready: impl FnMut() -> Option<Result<T>>,
    ) -> Result<T> {
        let h = self.seg.header();
        wake::sleep_until(
            h,
            c,
            None,
            || ready().or_else(|| self.stopped().map(Err)),
            || {
                peers::check(h, &self.name).err().map(|e| {
                    self.lose(&e);
                    Err(e)
                })
            },
        )
        .expect("no deadline")
    }

    fn max(&self) -> i64 {
        self.seg.sizes.max_size as i64
    }

    /// Wait until the slot's previous seq completed, then publish `seq`'s completion.
    fn complete(&self, idx: usize, seq: i64, failure: Option<Arc<str>>) -> Result<()> {
        if let Some(m) = failure {
            let e = Error::invalid(
                &self.name,
                format!("the producer's stream failed before recording seq {seq}: {m}"),
            );
            return self.fail(e);
        }
        let slot = self.seg.slot(idx);
        let prev = seq - self.max();
        self.block_until(Channel::Done, || {
            (slot.done.load(Ordering::Acquire) >= prev).then_some(Ok(()))
        })?;
        slot.done.fetch_max(seq, Ordering::AcqRel);
        wake::wake(self.seg.header(), Channel::Done, false);
        Ok(())
    }

    /// Sleep until `seq` (taken from slot `idx`) completed.
    fn await_done(&self, idx: usize, seq: i64) -> Result<()> {
        let slot = self.seg.slot(idx);
        self.block_until(Channel::Done, || {
            (slot.done.load(Ordering::Acquire) >= seq).then_some(Ok(()))
        })
    }

    fn release(&self, idx: usize) {
        self.seg
            .slot(idx)
            .word
            .fetch_add(RELEASED_ONE, Ordering::AcqRel);
        self.wake(false);
    }
}

/// A ring of one producer process and consumers in any processes of the same user, with the
/// contract of [`EventRingbuf`](crate::EventRingbuf): every row and every named error, across
/// processes. `stop` (or a misuse error) in any process stops it in all of them.
///
/// `create` makes it (the producer process); `open` finds it by name from any other process
/// of the same user. Its state is a sealed memory file of mode 0600 handed over a Unix socket,
/// so nothing outlives the processes that use it. A process that dies with the ring open
/// (killed, say) is noticed within a second by every call blocked on the ring: they return
/// [`Error::PeerLost`] naming it, and the ring stops; once its creator is gone, the name can
/// be created again.
///
/// The host backend orders by words in the segment ([`Mechanism::HostWord`]). CUDA orders by
/// stream memory operations on words in the segment, which every process maps for its device
/// ([`Mechanism::MemOps`], the default), or by an IPC event per slot
/// ([`Mechanism::IpcEvent`], where the segment cannot be mapped, or asked for with
/// [`create_with`](Self::create_with); `create` makes the events up front). A consumer opens
/// with the mechanism's backend (a host-backend ring on CUDA, or the reverse, is refused by
/// name). With memops, a stop or a dead peer lets every stream wait on the ring go, in every
/// process (the work after them then runs unordered, and every call on the ring returns the
/// error): nothing waits forever. With IPC events a stop or a dead peer cuts host waits short,
/// but a stream already waiting on a dead producer's event waits for good (the driver never
/// completes it; seen on the H200), and from then on every call that waits for the device to
/// drain (`cuMemFree`, `cuCtxSynchronize`, …) hangs in that process: use memops where a peer
/// may die. A memops ring's segment stays mapped in every process that created or opened it
/// until the process ends (unmapping waits for the device to drain, which a stuck stream
/// would make a hang), and a process whose streams used it keeps its watchdog thread too.
///
/// ```
/// use seqsync::ipc::SharedRing;
/// use seqsync::{Blocking, HostBackend};
///
/// let host = HostBackend::new();
/// let copy = host.new_stream("copy")?;
/// // The producer process creates the ring...
/// let producer = SharedRing::create(&host, "doc-frames", 1, 4)?;
/// // ...and a consumer, in this or any other process of the user, opens it by name.
/// let consumer = SharedRing::open(&host, "doc-frames")?;
/// producer.record(&copy, 0, Blocking::No)?;
/// consumer.synchronize(0, Blocking::Yes)?;
/// let err = consumer.synchronize(0, Blocking::No).unwrap_err(); // one consumer per seq
/// assert!(matches!(err, seqsync::Error::OverConsumed { seq: 0, .. }));
/// # Ok::<(), seqsync::Error>(())
/// ```
pub struct SharedRing<B: Backend> {
    shared: Arc<Shared>,
    backend: B,
    role: Role,
    /// The slots' events, where the ring orders by IPC events.
    events: Option<Events<B::Event>>,
    /// An idle stream of the producer's, for `record_host` with a device mechanism (made at
    /// first use).
    idle: Mutex<Option<B::Stream>>,
    /// Set on drop: the memops watchdog ends then, unless this process used the segment.
    closed: Arc<AtomicBool>,
    _server: Option<Server>,
}

impl<B: Backend> std::fmt::Debug for SharedRing<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRing")
            .field("name", &self.shared.name)
            .field("role", &self.role)
            .finish()
    }
}

pub(crate) fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            name,
            format!("a shared ring's or timeline's name is 1 to {NAME_MAX} of A-Z a-z 0-9 . _ -"),
        ))
    }
}

/// Host words need stream work that may block (the host backend); the device mechanisms need
/// a backend whose streams do not run them as host work (CUDA).
fn check_backend<B: Backend>(backend: &B, name: &str, mechanism: Mechanism) -> Result<()> {
    let host = backend.host_work_may_block();
    if host == (mechanism == Mechanism::HostWord) {
        return Ok(());
    }
    Err(Error::invalid(
        name,
        format!(
            "backend '{}' cannot order a shared ring by {mechanism:?} (host words need the host \
             backend, IPC events and memops a device backend)",
            backend.name()
        ),
    ))
}

impl<B: Backend + Clone> SharedRing<B> {
    /// Make ring `name` in this process, its producer: `nconsumers` consumers release each
    /// seq (up to 1023), `max_size` seqs in flight at most (1 to 65 536), ordered by the
    /// backend's best mechanism: host words on the host backend; on CUDA stream memory
    /// operations on the segment ([`Mechanism::MemOps`]), else IPC events.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name or size, a backend without a cross-process
    /// mechanism, or a name a living process has created already.
    pub fn create(backend: &B, name: &str, nconsumers: u32, max_size: usize) -> Result<Self> {
        if backend.host_work_may_block() {
            return Self::create_with(backend, name, nconsumers, max_size, Mechanism::HostWord);
        }
        // Memops where the device maps the segment; IPC events where it cannot.
        let why = match Self::create_with(backend, name, nconsumers, max_size, Mechanism::MemOps) {
            Err(e @ Error::Backend(_)) => e.to_string(),
            Err(Error::InvalidArgument { message, .. }) if message.contains("mapped") => message,
            r => return r,
        };
        Self::create_with(backend, name, nconsumers, max_size, Mechanism::IpcEvent).map_err(|e| {
            Error::invalid(
                name,
                format!("no cross-process mechanism: memops: {why}; IPC events: {e}"),
            )
        })
    }

    /// As [`create`](Self::create), ordered by `mechanism`.
    ///
    /// # Errors
    /// As `create`; [`Error::InvalidArgument`] for a mechanism the backend cannot run (host
    /// words on CUDA, a device mechanism on the host backend).
    pub fn create_with(
        backend: &B,
        name: &str,
        nconsumers: u32,
        max_size: usize,
        mechanism: Mechanism,
    ) -> Result<Self> {
        check_name(name)?;
        if max_size == 0 || max_size > MAX_SLOTS {
            return Err(Error::invalid(
                name,
                format!("max_size {max_size}: a shared ring takes 1 to {MAX_SLOTS}"),
            ));
        }
        if nconsumers > MAX_CONSUMERS {
            return Err(Error::invalid(
                name,
                format!("nconsumers {nconsumers}: a shared ring takes at most {MAX_CONSUMERS}"),
            ));
        }
        check_backend(backend, name, mechanism)?;
        let (events, handles) = if mechanism == Mechanism::IpcEvent {
            let (e, h) = Events::create(backend, name, max_size)?;
            (Some(e), h)
        } else {
            (None, Vec::new())
        };
        let seg = Segment::create(
            name,
            Kind::Ring,
            Sizes {
                nconsumers,
                max_size,
                mechanism,
                data: 0,
                buffer_len: 0,
            },
        )?;
        for (i, h) in handles.iter().enumerate() {
            seg.set_event_handle(i, h);
        }
        let fd = seg
            .fd()
            .try_clone_to_owned()
            .map_err(|e| Error::invalid(name, format!("dup its segment: {e}")))?;
        let mut ring = Self::joined(backend, name, seg, Role::Producer, events)?;
        ring._server = Some(Server::start(Kind::Ring, name, fd)?);
        Ok(ring)
    }

    /// Open ring `name`, made by another process (or this one) of the same user, as a
    /// consumer, by its creator's mechanism.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when no living process has created it, or for a backend
    /// that cannot run its mechanism; [`Error::BadSegment`] when what its creator handed
    /// over is not a ring segment this build can trust (checked before use).
    pub fn open(backend: &B, name: &str) -> Result<Self> {
        check_name(name)?;
        let seg = Segment::open(name, Kind::Ring, rendezvous::fetch(Kind::Ring, name)?)?;
        let mechanism = seg.sizes.mechanism;
        check_backend(backend, name, mechanism)?;
        let events = (mechanism == Mechanism::IpcEvent)
            .then(|| Events::open(name, &seg, seg.created_here()));
        Self::joined(backend, name, seg, Role::Consumer, events)
    }

    /// This process registered in the segment's peer table as `role`; with memops, the
    /// segment mapped for the backend's streams and its watchdog started.
    fn joined(
        backend: &B,
        name: &str,
        seg: Segment,
        role: Role,
        events: Option<Events<B::Event>>,
    ) -> Result<Self> {
        let mapped = if seg.sizes.mechanism == Mechanism::MemOps {
            let (ptr, len) = seg.mapping();
            // SAFETY: the segment's mapping is page-aligned (mmap) and stays mapped while the
            // `Shared` that owns both lives, and a memops `Shared` is never dropped (below):
            // the mapping outlives every stream operation enqueued through it.
            Some(unsafe { backend.map_host(ptr, len) }?)
        } else {
            None
        };
        let peer = peers::register(seg.header(), name, role)?;
        let memops = mapped.map(|m| MemOpsState {
            map: m,
            used: AtomicBool::new(false),
        });
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            memops,
            seg,
            peer: AtomicUsize::new(peer),
        });
        if shared.memops.is_some() {
            // Never unmapped while the process lives: `cuMemHostUnregister` waits for the
            // whole device to drain, holding a driver lock, and a stream of the process may
            // wait for good (on a dead process's IPC event, say): unmapping could hang the
            // process. A segment per memops ring created or opened stays.
            std::mem::forget(shared.clone());
        }
        let closed = Arc::new(AtomicBool::new(false));
        if shared.memops.is_some() {
            let (s, c) = (shared.clone(), closed.clone());
            std::thread::Builder::new()
                .name("seqsync-ring-watch".into())
                .spawn(move || watch(&s, &c))
                .map_err(|e| Error::invalid(name, format!("cannot spawn its watchdog: {e}")))?;
        }
        Ok(SharedRing {
            shared,
            backend: backend.clone(),
            role,
            events,
            idle: Mutex::new(None),
            closed,
            _server: None,
        })
    }
}

/// The watchdog of a memops ring in this process: it notices a dead peer even when no call is
/// blocked (and stops the ring), and lets every stream wait go while the ring is stopped
/// (again and again: a producer's write landing late could take a word back below a wait).
/// Once the ring is dropped here it ends, unless this process's streams used the segment:
/// then it keeps the segment (and itself, one sleeping thread) until the process ends, since a
/// queued stream operation may still touch it.
fn watch(shared: &Shared, closed: &AtomicBool) {
    let h = shared.seg.header();
    loop {
        // A plain sleep, not the segment's futex: a sleeper there would make every change of
        // the ring a wake-up syscall. The stopping process releases the words itself.
        std::thread::sleep(CHECK_EVERY);
        if shared.stopped().is_none() {
            if let Err(e) = peers::check(h, &shared.name) {
                shared.lose(&e);
            }
        }
        if shared.stopped().is_some() {
            shared.release_words();
        }
        if closed.load(Ordering::Acquire) && !shared.used() {
            return;
        }
    }
}

impl<B: Backend> SharedRing<B> {
    /// The ring's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Consumers per seq.
    pub fn nconsumers(&self) -> u32 {
        self.shared.seg.sizes.nconsumers
    }

    /// Seqs in flight at most.
    pub fn max_size(&self) -> usize {
        self.shared.seg.sizes.max_size
    }

    /// The next seq the producer records (as every process sees it).
    pub fn next_seq(&self) -> i64 {
        self.shared.seg.header().next_seq.load(Ordering::Acquire)
    }

    /// Whether the ring was stopped, in any process.
    pub fn is_stopped(&self) -> bool {
        self.shared.stopped().is_some()
    }

    /// How this ring orders work across processes.
    pub fn mechanism(&self) -> Mechanism {
        self.shared.seg.sizes.mechanism
    }

    /// Stop the ring in every process: every blocked call wakes, every later call returns
    /// [`Error::Stopped`] with `reason` (its first 256 bytes).
    pub fn stop(&self, reason: &str) {
        self.shared.stop(reason);
    }

    /// Claim `seq`'s slot for the producer; `None` for a ring without consumers. `publish`
    /// runs once the slot is free (every consumer of its previous seq released it) and before
    /// consumers can take `seq` (an IPC event's record: a consumer must never wait on the
    /// slot's event before it stands for `seq`); its error stops the ring.
    fn claim(
        &self,
        seq: i64,
        blocking: Blocking,
        publish: impl FnOnce(usize) -> Result<()>,
    ) -> Result<Option<usize>> {
        let s = &*self.shared;
        s.check_stopped()?;
        if self.role != Role::Producer {
            return s.fail(Error::invalid(
                &s.name,
                "record from a process that opened the ring: only its creator records",
            ));
        }
        let h = s.seg.header();
        let next = h.next_seq.load(Ordering::Acquire);
        if seq != next {
            return s.fail(Error::OutOfOrder {
                ring: s.name.clone(),
                expected: next,
                got: seq,
            });
        }
        let n = u64::from(s.seg.sizes.nconsumers);
        if n == 0 {
            h.next_seq.store(seq + 1, Ordering::Release);
            s.wake(false);
            return Ok(None);
        }
        let max = s.max();
        let idx = (seq % max) as usize;
        let want = (seq / max) as u64 + 1;
        if want > MAX_TAG {
            return s.fail(Error::invalid(
                &s.name,
                format!("seq {seq} beyond a shared ring's limit"),
            ));
        }
        let slot = s.seg.slot(idx);
        let room = |w: u64| tag(w) + 1 == want && (tag(w) == 0 || released(w) == n);
        let mut w = slot.word.load(Ordering::Acquire);
        if !room(w) {
            if tag(w) + 1 != want {
                return s.fail(Error::invalid(
                    &s.name,
                    format!(
                        "slot of seq {seq} holds lap {}: the segment was changed",
                        tag(w)
                    ),
                ));
            }
            if blocking == Blocking::No {
                return s.fail(Error::Overflow {
                    ring: s.name.clone(),
                    seq,
                    oldest: seq - max,
                    max_size: s.seg.sizes.max_size,
                    nconsumers: s.seg.sizes.nconsumers,
                });
            }
            w = s.block_until(Channel::State, || {
                let w = slot.word.load(Ordering::Acquire);
                room(w).then_some(Ok(w))
            })?;
        }
        if let Err(e) = publish(idx) {
            return s.fail(e);
        }
        if slot
            .word
            .compare_exchange(w, want << TAG_SHIFT, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return s.fail(Error::invalid(
                &s.name,
                format!("slot of seq {seq} changed under its producer"),
            ));
        }
        h.next_seq.store(seq + 1, Ordering::Release);
        s.wake(false);
        Ok(Some(idx))
    }

    /// Record `seq` (the next one) at the current end of `stream`: consumers in every process
    /// are ordered after the work enqueued on `stream` before this call. A stream that failed
    /// before the record stops the ring (its consumers would wait forever otherwise).
    ///
    /// # Errors
    /// As [`EventRingbuf::record`](crate::EventRingbuf::record); [`Error::InvalidArgument`]
    /// from a process that opened the ring (only its creator records).
    pub fn record(
        &self,
        stream: &B::Stream,
        seq: i64,
        blocking: impl Into<Blocking>,
    ) -> Result<()> {
        if let Some(events) = &self.events {
            let record = |idx| {
                let e = events.get(&self.backend, &self.shared.seg, idx)?;
                self.backend.record(e, stream)
            };
            return self.claim(seq, blocking.into(), record).map(drop);
        }
        if let Some(m) = &self.shared.memops {
            let seg = &self.shared.seg;
            let write = |idx: usize| {
                m.used.store(true, Ordering::Release);
                let at = seg.gpu_offset(idx);
                let prev = seq - self.max_size() as i64;
                if prev >= 0 {
                    // The slot's words land in seq order, whatever stream wrote the last one.
                    self.backend
                        .wait_mapped_on(stream, &m.map, at, prev as u64 + 1)?;
                }
                self.backend
                    .write_mapped_on(stream, &m.map, at, seq as u64 + 1)?;
                Ok(())
            };
            return self.claim(seq, blocking.into(), write).map(drop);
        }
        let Some(idx) = self.claim(seq, blocking.into(), |_| Ok(()))? else {
            return Ok(());
        };
        let shared = self.shared.clone();
        let r = self.backend.launch_host_always(
            stream,
            Box::new(move |failure| {
                // An error here stopped the ring already, which is how consumers learn of it.
                let _ = shared.complete(idx, seq, failure);
            }),
        );
        r.or_else(|e| self.shared.fail(e))
    }

    /// Record `seq` from the host: the work it stands for is done now.
    ///
    /// # Errors
    /// As [`record`](Self::record).
    pub fn record_host(&self, seq: i64, blocking: impl Into<Blocking>) -> Result<()> {
        if self.shared.seg.sizes.mechanism != Mechanism::HostWord {
            // A record on an idle stream completes at once.
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.is_none() {
                *idle = Some(self.backend.new_stream("seqsync-shared-ring-host")?);
            }
            let stream = idle.as_ref().expect("made above");
            return self.record(stream, seq, blocking);
        }
        match self.claim(seq, blocking.into(), |_| Ok(()))? {
            Some(idx) => self.shared.complete(idx, seq, None),
            None => Ok(()),
        }
    }

    /// Take a consumer's share of `seq`; `None` for `seq < 0`.
    fn take(&self, seq: i64, blocking: Blocking) -> Result<Option<usize>> {
        let s = &*self.shared;
        s.check_stopped()?;
        if seq < 0 {
            return Ok(None);
        }
        let n = u64::from(s.seg.sizes.nconsumers);
        if n == 0 {
            return s.fail(Error::OverConsumed {
                ring: s.name.clone(),
                seq,
                nconsumers: 0,
            });
        }
        let h = s.seg.header();
        let max = s.max();
        let idx = (seq % max) as usize;
        let want = (seq / max) as u64 + 1;
        let slot = s.seg.slot(idx);
        loop {
            let w = slot.word.load(Ordering::Acquire);
            let t = tag(w);
            if t < want {
                if blocking == Blocking::No {
                    return s.fail(Error::NotYetProduced {
                        ring: s.name.clone(),
                        seq,
                        next: h.next_seq.load(Ordering::Acquire),
                    });
                }
                s.block_until(Channel::State, || {
                    let published = tag(slot.word.load(Ordering::Acquire)) >= want;
                    if published {
                        Some(Ok(()))
                    } else if h.producer_closed.load(Ordering::Acquire) != 0 {
                        Some(self.producer_gone(seq))
                    } else {
                        None
                    }
                })?;
                continue;
            }
            if t > want {
                return s.fail(Error::Stale {
                    ring: s.name.clone(),
                    seq,
                    current: (t as i64 - 1) * max + idx as i64,
                    max_size: s.seg.sizes.max_size,
                    nconsumers: s.seg.sizes.nconsumers,
                });
            }
            if taken(w) >= n {
                return s.fail(Error::OverConsumed {
                    ring: s.name.clone(),
                    seq,
                    nconsumers: s.seg.sizes.nconsumers,
                });
            }
            if slot
                .word
                .compare_exchange(w, w + TAKEN_ONE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(Some(idx));
            }
        }
    }

    fn producer_gone<T>(&self, seq: i64) -> Result<T> {
        let reason = format!("the producer closed the ring before recording seq {seq}");
        self.shared.stop(&reason);
        Err(Error::Stopped {
            ring: self.shared.name.clone(),
            reason: reason.into(),
            cause: None,
        })
    }

    /// Make `stream` (of this process) wait for `seq`'s work in the producer process.
    ///
    /// # Errors
    /// As [`EventRingbuf::wait`](crate::EventRingbuf::wait). If the ring stops or a peer
    /// dies while the stream waits, the stream fails with that error.
    pub fn wait(&self, stream: &B::Stream, seq: i64, blocking: impl Into<Blocking>) -> Result<()> {
        let Some(idx) = self.take(seq, blocking.into())? else {
            return Ok(());
        };
        if let Some(events) = &self.events {
            let r = events
                .get(&self.backend, &self.shared.seg, idx)
                .and_then(|e| self.backend.wait(stream, e));
            self.shared.release(idx);
            return r.or_else(|e| self.shared.fail(e));
        }
        if let Some(m) = &self.shared.memops {
            m.used.store(true, Ordering::Release);
            let value = seq as u64 + 1;
            let r =
                self.backend
                    .wait_mapped_on(stream, &m.map, self.shared.seg.gpu_offset(idx), value);
            self.shared.release(idx);
            return r.or_else(|e| self.shared.fail(e));
        }
        let shared = self.shared.clone();
        // Blocks until another process is done: a stream dropped meanwhile does not wait.
        let r = self.backend.launch_host_wait(
            stream,
            Box::new(move || {
                if let Err(e) = shared.await_done(idx, seq) {
                    // Fails the stream: what it runs next must not run unordered.
                    panic!("{e}");
                }
            }),
        );
        self.shared.release(idx);
        r.or_else(|e| self.shared.fail(e))
    }

    /// Block this thread until `seq`'s work in the producer process is done.
    ///
    /// # Errors
    /// As [`EventRingbuf::synchronize`](crate::EventRingbuf::synchronize), and
    /// [`Error::PeerLost`] when a process of the ring dies meanwhile.
    pub fn synchronize(&self, seq: i64, blocking: impl Into<Blocking>) -> Result<()> {
        let Some(idx) = self.take(seq, blocking.into())? else {
            return Ok(());
        };
        if let Some(events) = &self.events {
            return self.synchronize_event(events, idx);
        }
        if self.shared.memops.is_some() {
            return self.synchronize_word(idx, seq);
        }
        self.shared.await_done(idx, seq)?;
        self.shared.release(idx);
        Ok(())
    }

    /// A consumer's host wait on slot `idx`'s `gpu` word (nothing wakes the host when the
    /// device writes it: polled), cut short by a stop or a dead peer.
    fn synchronize_word(&self, idx: usize, seq: i64) -> Result<()> {
        let word = &self.shared.seg.slot(idx).gpu;
        let query = || Ok(reached(word.load(Ordering::Acquire), seq as u64 + 1));
        self.host_wait(idx, |watch| synchronize_by_polling(query, watch))
    }

    /// A consumer's host wait on slot `idx`'s event, cut short by a stop or a dead peer.
    fn synchronize_event(&self, events: &Events<B::Event>, idx: usize) -> Result<()> {
        let e = match events.get(&self.backend, &self.shared.seg, idx) {
            Ok(e) => e,
            Err(e) => return self.shared.fail(e),
        };
        self.host_wait(idx, |watch| {
            self.backend.synchronize_interruptible(e, watch)
        })
    }

    /// A host wait on slot `idx` by `wait`, which a [`Watch`] cuts short; the slot released
    /// once it completed.
    fn host_wait(
        &self,
        idx: usize,
        wait: impl FnOnce(&Watch<'_>) -> Result<SyncOutcome>,
    ) -> Result<()> {
        let s = &*self.shared;
        let stopped = || s.stopped().is_some();
        let stop = |e: &Error| s.lose(e);
        let watch = Watch::new(s.seg.header(), &s.name, &stopped, &stop);
        match wait(&watch) {
            Ok(SyncOutcome::Complete) => {
                // With memops a stop's release reaches every word too: not a completion.
                s.check_stopped()?;
                s.release(idx);
                Ok(())
            }
            Ok(SyncOutcome::Interrupted) => match watch.lost.into_inner() {
                Some(lost) => Err(lost),
                None => s
                    .check_stopped()
                    .and(Err(Error::invalid(&s.name, "interrupted"))),
            },
            Err(e) => s.fail(e),
        }
    }

    /// Block until `seq` is recorded (not necessarily done); consumes nothing.
    ///
    /// # Errors
    /// [`Error::Stopped`], [`Error::PeerLost`].
    pub fn synchronize_with_producer(&self, seq: i64) -> Result<()> {
        let s = &*self.shared;
        s.check_stopped()?;
        let h = s.seg.header();
        s.block_until(Channel::State, || {
            if h.next_seq.load(Ordering::Acquire) > seq {
                Some(Ok(()))
            } else if h.producer_closed.load(Ordering::Acquire) != 0 {
                Some(self.producer_gone(seq))
            } else {
                None
            }
        })
    }
}

impl<B: Backend> Drop for SharedRing<B> {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Release);
        if self.shared.memops.is_some() {
            // The segment stays mapped for this process's streams; the process itself leaves
            // the ring now (its entry may serve another).
            self.shared.leave();
        }
        if self.role == Role::Producer {
            let h = self.shared.seg.header();
            h.producer_closed.store(1, Ordering::Release);
            self.shared.wake(true);
        }
    }
}

#[cfg(test)]
mod tests {
    //! What only a changed segment can cause (another process writing what the protocol never
    //! writes): refused with a named error that stops the ring, never a wrong slot.
    use super::*;
    use crate::{AnyBackend, BackendKind};

    fn ring(what: &str) -> SharedRing<AnyBackend> {
        let name = format!("u-{what}-{}", std::process::id());
        let host = AnyBackend::new(BackendKind::Host).unwrap();
        SharedRing::create(&host, &name, 1, 2).unwrap()
    }

    #[test]
    fn a_seq_beyond_the_lap_limit_is_refused() {
        let r = ring("limit");
        let huge = (MAX_TAG as i64) * 2; // lap MAX_TAG + 1 of a ring of 2 slots
        r.shared
            .seg
            .header()
            .next_seq
            .store(huge, Ordering::Release);
        let e = r.record_host(huge, Blocking::No).unwrap_err();
        assert!(
            e.to_string().contains("beyond a shared ring's limit"),
            "{e}"
        );
        assert!(r.is_stopped());
    }

    #[test]
    fn a_slot_of_another_lap_is_refused_as_a_changed_segment() {
        let r = ring("changed");
        r.record_host(0, Blocking::No).unwrap();
        // Slot 1 claims lap 5 although seq 1 (lap 1) is the next to go there.
        r.shared
            .seg
            .slot(1)
            .word
            .store(5 << TAG_SHIFT, Ordering::Release);
        let e = r.record_host(1, Blocking::No).unwrap_err();
        assert!(
            e.to_string()
                .contains("holds lap 5: the segment was changed"),
            "{e}"
        );
        assert!(r.is_stopped());
    }
}
