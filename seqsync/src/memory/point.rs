//! Points (events a pool recorded, with what they are ordered after), wait lists, and the
//! per-stream clocks that let a pool prove a requester is already ordered after a free.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::backend::{Backend, EventOptions};
use crate::error::{Error, Result};
use crate::timeline::{MarkState, Observer, StreamMark, Timeline};

/// What a free stands on that the host has not seen settled when the free was called: the
/// timeline values its wait list names, not reached yet, and, for each point its wait list
/// names, the timeline waits enqueued on that point's stream before it ([`StreamMark`]: the
/// last reader waited for its writer's timeline, say). A failure releases a stream wait
/// whatever the value, so such a wait proves nothing about the work it stands for until the
/// host sees it reached: until then the freed block is held back; if one of them fails first,
/// the block is never handed out again.
pub(crate) struct Until<B: Backend>(Vec<Hold<B>>);

/// One thing an [`Until`] waits for.
enum Hold<B: Backend> {
    /// A value of a timeline.
    Value(Observer<B>, u64),
    /// The timeline waits before a place on a stream.
    Waits(StreamMark),
}

/// What an [`Until`] says now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Every value reached: the free's point means what it says.
    Reached,
    /// Some value not reached yet.
    Pending,
    /// A timeline failed before reaching its value.
    Failed,
}

impl<B: Backend> Until<B> {
    /// The values of `waits` not reached yet, and the marks of its points whose waits are not
    /// all reached; `None` if there is none (the free is plain).
    pub(crate) fn of(waits: &[Wait<'_, B>]) -> Option<Self> {
        let mut v: Vec<_> = waits
            .iter()
            .filter_map(Wait::unreached)
            .map(|(t, v)| Hold::Value(t, v))
            .collect();
        v.extend(
            waits
                .iter()
                .filter_map(|w| match w {
                    Wait::Point(p) => p.mark(),
                    _ => None,
                })
                .filter(|m| m.state() != MarkState::Reached)
                .map(|m| Hold::Waits(m.clone())),
        );
        (!v.is_empty()).then_some(Until(v))
    }

    /// `until`, and also the timeline waits enqueued on the freeing stream before the free
    /// (`mark`, at the free), unless all are reached: a failure could release one early (or
    /// did), with the block's last user still at work.
    pub(crate) fn with_stream_waits(until: Option<Self>, mark: Option<StreamMark>) -> Option<Self> {
        match mark.filter(|m| m.state() != MarkState::Reached) {
            None => until,
            Some(m) => {
                let mut u = until.unwrap_or(Until(Vec::new()));
                u.0.push(Hold::Waits(m));
                Some(u)
            }
        }
    }

    /// Look at the timelines again (a load of each word, a lock of each mark's ledger; never
    /// blocks).
    pub(crate) fn settle(&mut self) -> Settled {
        let mut failed = false;
        self.0.retain(|h| match h {
            Hold::Value(t, v) => match t.query() {
                Ok(c) => c < *v,
                // Failed after reaching the value: the wait was released by its signal, so
                // the free's point means what it says.
                Err(Error::TimelineFailed { value, .. }) if value >= *v => false,
                Err(_) => {
                    failed = true;
                    true
                }
            },
            Hold::Waits(m) => match m.state() {
                MarkState::Reached => false,
                MarkState::Pending => true,
                MarkState::Failed => {
                    failed = true;
                    true
                }
            },
        });
        if failed {
            Settled::Failed
        } else if self.0.is_empty() {
            Settled::Reached
        } else {
            Settled::Pending
        }
    }
}

/// What a stream (or a point) is ordered after: for each stream id, the highest point seq of
/// that stream it follows. A vector clock over the streams a pool has seen, sorted by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Frontier(Vec<(u64, u64)>);

impl Frontier {
    /// The highest seq of `stream` this frontier follows (0: none).
    pub(crate) fn get(&self, stream: u64) -> u64 {
        match self.0.binary_search_by_key(&stream, |&(s, _)| s) {
            Ok(i) => self.0[i].1,
            Err(_) => 0,
        }
    }

    /// Follow `stream` up to `seq` as well.
    pub(crate) fn advance(&mut self, stream: u64, seq: u64) {
        match self.0.binary_search_by_key(&stream, |&(s, _)| s) {
            Ok(i) => self.0[i].1 = self.0[i].1.max(seq),
            Err(i) => self.0.insert(i, (stream, seq)),
        }
    }

    /// Forget the streams in `gone` (sorted): nothing is known to follow them any more.
    fn forget(&mut self, gone: &[u64]) {
        self.0.retain(|(s, _)| gone.binary_search(s).is_err());
    }

    /// Forget every stream.
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Events kept for reuse once no point holds them (creating an event costs more than
/// re-recording one; a re-record never changes a wait enqueued before it).
pub(crate) struct EventCache<B: Backend> {
    events: Mutex<Vec<B::Event>>,
}

/// At most this many idle events are kept.
const EVENT_CACHE_MAX: usize = 1024;

impl<B: Backend> EventCache<B> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(EventCache {
            events: Mutex::new(Vec::new()),
        })
    }

    fn take(&self, backend: &B) -> Result<B::Event> {
        let cached = self.events.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match cached {
            Some(e) => Ok(e),
            None => backend.create_event(EventOptions::default()),
        }
    }

    fn put(&self, event: B::Event) {
        let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if events.len() < EVENT_CACHE_MAX {
            events.push(event);
        }
    }
}

/// A point in a stream, recorded by a pool: the end of an allocation's waits, or the point
/// after which a freed block is free. Cheap to clone.
///
/// Pass it in a later call's wait list ([`Wait::Point`]), or to
/// [`Pool::wait`](super::Pool::wait): the pool then knows the waiting stream is ordered after
/// it, and can hand that stream blocks freed before it with no synchronization at all. Its
/// [`event`](Self::event) is a plain backend event, for calls of your own.
pub struct Point<B: Backend> {
    inner: Arc<PointInner<B>>,
}

struct PointInner<B: Backend> {
    /// The clock domain (the pool) whose seqs `stream`, `seq` and `clock` are.
    domain: u64,
    stream: u64,
    seq: u64,
    /// Everything the point is ordered after, itself included.
    clock: Frontier,
    /// The timeline waits enqueued on its stream before it, if some may still be released by
    /// a failure (see [`Until`]).
    mark: Option<StreamMark>,
    /// Always `Some` until drop, which hands it back to the cache.
    event: Option<B::Event>,
    cache: Weak<EventCache<B>>,
}

impl<B: Backend> Clone for Point<B> {
    fn clone(&self) -> Self {
        Point {
            inner: self.inner.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Point<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Point")
            .field("stream", &self.inner.stream)
            .field("seq", &self.inner.seq)
            .finish()
    }
}

impl<B: Backend> Point<B> {
    /// The event recorded at this point.
    pub fn event(&self) -> &B::Event {
        self.inner
            .event
            .as_ref()
            .expect("a point holds its event until dropped")
    }

    /// The id of the stream it was recorded on ([`crate::backend::Backend::stream_id`]).
    pub fn stream_id(&self) -> u64 {
        self.inner.stream
    }

    /// Its place among the points its pool recorded on that stream (1, 2, …).
    pub fn seq(&self) -> u64 {
        self.inner.seq
    }

    pub(crate) fn domain(&self) -> u64 {
        self.inner.domain
    }

    pub(crate) fn clock(&self) -> &Frontier {
        &self.inner.clock
    }

    /// The timeline waits enqueued on its stream before it (see [`Until`]).
    pub(crate) fn mark(&self) -> Option<&StreamMark> {
        self.inner.mark.as_ref()
    }
}

impl<B: Backend> Drop for PointInner<B> {
    fn drop(&mut self) {
        if let (Some(event), Some(cache)) = (self.event.take(), self.cache.upgrade()) {
            cache.put(event);
        }
    }
}

/// One entry of a wait list: what an allocation or free must wait for.
pub enum Wait<'a, B: Backend> {
    /// A point of a pool. The pool that recorded it also learns that the waiting stream is now
    /// ordered after it.
    Point(&'a Point<B>),
    /// A plain event of the backend: enqueued, but a pool learns nothing from it.
    Event(&'a B::Event),
    /// A timeline value: enqueued with [`Timeline::wait_on`] (wait-before-signal allowed,
    /// except on a mechanism whose waits before their signal hold only timeline operations:
    /// [`Error::WaitBeforeSignalUnsupported`](crate::Error::WaitBeforeSignalUnsupported),
    /// nothing enqueued); a pool learns nothing from it, and a timeline that has failed
    /// already fails the call. In a free, a value not reached yet when the free is called
    /// holds the block back until the host sees it reached; if the timeline fails first, the
    /// block is never handed out again ([`PoolStats::quarantined`](super::PoolStats),
    /// `leaked`).
    Timeline(&'a Timeline<B>, u64),
}

impl<B: Backend> Clone for Wait<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Wait<'_, B> {}

impl<B: Backend> Wait<'_, B> {
    /// Fail if the producer has failed already (without blocking), or if the wait would not
    /// hold what follows it on `stream`.
    fn check(&self, backend: &B, stream: &B::Stream) -> Result<()> {
        match self {
            Wait::Point(p) => backend.query(p.event()).map(drop),
            Wait::Event(e) => backend.query(e).map(drop),
            // A wait before its signal must hold the memory operation behind it: a mechanism
            // that cannot wait before the signal (CUDA `events`) refuses the call before
            // anything is enqueued.
            Wait::Timeline(t, v) => {
                t.check_wait_on(stream, *v)?;
                t.query()?;
                t.check_holds_commands(*v)
            }
        }
    }

    /// The timeline value this entry waits for, if it is one the host has not seen reached
    /// (a timeline that failed counts: see [`Until`]).
    pub(crate) fn unreached(&self) -> Option<(Observer<B>, u64)> {
        match self {
            Wait::Timeline(t, v) if !matches!(t.query(), Ok(c) if c >= *v) => {
                Some((t.observer(), *v))
            }
            _ => None,
        }
    }

    /// Enqueue the wait on `stream`.
    fn enqueue(&self, backend: &B, stream: &B::Stream) -> Result<()> {
        match self {
            Wait::Point(p) => backend.wait(stream, p.event()),
            Wait::Event(e) => backend.wait(stream, e),
            Wait::Timeline(t, v) => t.wait_on(stream, *v),
        }
    }
}

/// What a pool knows of one stream: the seq of its last point, and what it is ordered after.
#[derive(Debug, Default)]
struct StreamClock {
    seq: u64,
    frontier: Frontier,
}

/// One pool's clock domain: the streams it has seen, and its idle events. Every method is
/// called under the pool's lock, so the points of a stream get their seqs in the order they
/// are recorded on it.
///
/// Streams that go are forgotten at the pool's next call ([`Clocks::forget_gone`]) once no
/// free block stands on them (a point on a forgotten stream is then simply not known to be
/// followed, the cautious answer), so the clocks hold the live streams and those of the free
/// blocks, however many streams come and go: but for streams whose going the backend tells
/// late (CUDA notes streams gone as new ones register) and, where more than the backend's
/// journal keeps (4096) went between two calls of a pool, the entries of those it lost.
pub(crate) struct Clocks<B: Backend> {
    domain: u64,
    streams: HashMap<u64, StreamClock>,
    events: Arc<EventCache<B>>,
    /// The backend's journal of streams gone, as far as read.
    gone_seen: u64,
    /// Streams gone that a free block's point stands on: still known (see
    /// [`Clocks::forget_gone`]).
    gone_kept: HashSet<u64>,
    /// Calls of [`Clocks::forget_gone`] (to look at `gone_kept` now and then).
    calls: u64,
}

impl<B: Backend> Clocks<B> {
    pub(crate) fn new() -> Self {
        static NEXT_DOMAIN: AtomicU64 = AtomicU64::new(1);
        Clocks {
            domain: NEXT_DOMAIN.fetch_add(1, Ordering::Relaxed),
            streams: HashMap::new(),
            events: EventCache::new(),
            gone_seen: crate::backend::streams_gone_now(),
            gone_kept: HashSet::new(),
            calls: 0,
        }
    }

    /// Forget the streams gone since the last look that this pool has an entry for (their
    /// own entries at once), and what other streams follow of them, except for the streams
    /// in `deaths()` (those a free block's point stands on, asked for only when something is
    /// to be forgotten): those stay known until no block stands there any more. Where more
    /// streams went than the backend's journal keeps, every frontier is also emptied (nothing
    /// is then known to be ordered after anything: cautious, and correct), and the entries of
    /// the ids lost stay (a live stream's seq must never go back). Looks again at the streams
    /// kept for their blocks whenever the journal moves, and every 64 calls while some are
    /// kept.
    pub(crate) fn forget_gone(&mut self, deaths: impl FnOnce() -> HashSet<u64>) {
        use crate::backend::GoneSince;
        self.calls = self.calls.wrapping_add(1);
        let ids = match crate::backend::streams_gone_since(self.gone_seen) {
            GoneSince::Nothing if self.gone_kept.is_empty() || !self.calls.is_multiple_of(64) => {
                return
            }
            GoneSince::Nothing => Vec::new(),
            GoneSince::Ids(ids, now) => {
                self.gone_seen = now;
                ids
            }
            GoneSince::Missed(ids, now) => {
                self.gone_seen = now;
                for c in self.streams.values_mut() {
                    c.frontier.clear();
                }
                ids
            }
        };
        // Only a stream with an entry (it recorded a point here) can stand in a frontier.
        let mut candidates: Vec<u64> = ids
            .into_iter()
            .filter(|id| self.streams.remove(id).is_some())
            .collect();
        if candidates.is_empty() && self.gone_kept.is_empty() {
            return;
        }
        let deaths = deaths();
        candidates.extend(self.gone_kept.drain());
        let mut forgotten = Vec::new();
        for id in candidates {
            if deaths.contains(&id) {
                self.gone_kept.insert(id);
            } else {
                forgotten.push(id);
            }
        }
        if forgotten.is_empty() {
            return;
        }
        forgotten.sort_unstable();
        for c in self.streams.values_mut() {
            c.frontier.forget(&forgotten);
        }
    }

    /// Streams with an entry, and the longest frontier (what the clocks hold).
    #[cfg(test)]
    pub(crate) fn size(&self) -> (usize, usize) {
        let longest = self.streams.values().map(|c| c.frontier.0.len()).max();
        (self.streams.len(), longest.unwrap_or(0))
    }

    /// May a frontier hold `stream`? A stream the pool knows (live), or one gone whose
    /// blocks still stand on it.
    fn known(&self, stream: u64) -> bool {
        self.streams.contains_key(&stream) || self.gone_kept.contains(&stream)
    }

    /// Fail if a wait's producer has already failed (a non-blocking query of each event), so
    /// that a call with a failing wait list changes nothing.
    pub(crate) fn check_waits(
        backend: &B,
        stream: &B::Stream,
        waits: &[Wait<'_, B>],
    ) -> Result<()> {
        for w in waits {
            w.check(backend, stream)?;
        }
        Ok(())
    }

    /// Enqueue `waits` on `stream` (id `sid`), learning from this domain's points.
    pub(crate) fn enqueue_waits(
        &mut self,
        backend: &B,
        stream: &B::Stream,
        sid: u64,
        waits: &[Wait<'_, B>],
    ) -> Result<()> {
        for w in waits {
            w.enqueue(backend, stream)?;
            if let Wait::Point(p) = w {
                self.learn(sid, p);
            }
        }
        Ok(())
    }

    /// What `sid` would be ordered after once `waits` were enqueued on it, without enqueuing
    /// them: a caller decides with it first and enqueues only once the call cannot be refused.
    pub(crate) fn frontier_with(&self, sid: u64, waits: &[Wait<'_, B>]) -> Frontier {
        let mut f = self
            .streams
            .get(&sid)
            .map(|c| c.frontier.clone())
            .unwrap_or_default();
        for w in waits {
            if let Wait::Point(p) = w {
                if p.domain() == self.domain && p.stream_id() != sid {
                    for &(s, q) in &p.clock().0 {
                        if self.known(s) {
                            f.advance(s, q);
                        }
                    }
                }
            }
        }
        f
    }

    /// `sid`'s later work is ordered after `point` (a wait on it was just enqueued).
    pub(crate) fn learn(&mut self, sid: u64, point: &Point<B>) {
        if point.domain() == self.domain && point.stream_id() != sid {
            // Only streams still known: a point's clock may name streams forgotten since.
            let known: Vec<(u64, u64)> = point
                .clock()
                .0
                .iter()
                .copied()
                .filter(|&(s, _)| self.known(s))
                .collect();
            let frontier = &mut self.streams.entry(sid).or_default().frontier;
            for (s, q) in known {
                frontier.advance(s, q);
            }
        }
    }

    /// Record a new point at the current end of `stream`.
    pub(crate) fn record(&mut self, backend: &B, stream: &B::Stream, sid: u64) -> Result<Point<B>> {
        let event = self.events.take(backend)?;
        let mark = crate::timeline::stream_mark(backend, stream);
        backend.record(&event, stream)?;
        let clock = self.streams.entry(sid).or_default();
        clock.seq += 1;
        let mut snapshot = clock.frontier.clone();
        snapshot.advance(sid, clock.seq);
        Ok(Point {
            inner: Arc::new(PointInner {
                domain: self.domain,
                stream: sid,
                seq: clock.seq,
                clock: snapshot,
                mark,
                event: Some(event),
                cache: Arc::downgrade(&self.events),
            }),
        })
    }

    /// Would work enqueued on stream `sid` be ordered after `point`, where `frontier` is what
    /// the stream would be ordered after ([`frontier_with`](Self::frontier_with))? True on the
    /// point's own stream (stream order), or when the stream waited, directly or through other
    /// points, on a later point of the same stream.
    pub(crate) fn ordered_after_in(&self, frontier: &Frontier, sid: u64, point: &Point<B>) -> bool {
        point.stream_id() == sid
            || (point.domain() == self.domain && frontier.get(point.stream_id()) >= point.seq())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frontier_keeps_the_max_per_stream_and_forgets_streams_gone() {
        let mut a = Frontier::default();
        a.advance(3, 5);
        a.advance(1, 2);
        a.advance(3, 4);
        a.advance(2, 7);
        assert_eq!((a.get(1), a.get(2), a.get(3), a.get(9)), (2, 7, 5, 0));
        a.forget(&[1, 3]);
        assert_eq!((a.get(1), a.get(2), a.get(3)), (0, 7, 0));
        a.clear();
        assert_eq!(a, Frontier::default());
    }
}
