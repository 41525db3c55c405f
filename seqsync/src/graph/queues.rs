//! Running a lowered graph: an [`Executable`] (a graph plus its
//! [`Schedule`](super::Schedule), see `executable.rs`) is submitted to a [`Queues`], whose
//! streams span submissions.
//!
//! The schedule's streams are virtual. At each submission every virtual stream is mapped onto a
//! pool stream that is free for it: one never used, one whose last work belongs to an earlier
//! submission on the same logical queue (so it is ordered before this one anyway), or one whose
//! last work has completed — never one that a failure poisoned (it would fail the timelines of
//! work that did not depend on the failure), and never another queue's *anchor* (below).
//! Otherwise a poisoned stream with nothing left to run is replaced by a fresh one in place, or
//! the pool grows: a run of failures does not grow it. A submission thus adds no ordering
//! between submissions beyond the one its queue affinity asks for.
//!
//! Timelines ([`Submit`]): a submission's first commands wait for its `(timeline, value)`
//! list; once all its commands have run it signals its signal list (wait-before-signal works:
//! a submission may be enqueued before the values it waits for are signalled).
//!
//! # Queue order
//!
//! Queue affinity (the seed's `hal.device.queue` mask): a single bit `q` orders the submission
//! after everything earlier submissions with the single bit `q` enqueued (each of its first
//! commands waits for the end of the previous one on every stream that one used); several bits
//! order it with nothing. Whatever a submission's shape:
//!
//! | submission on queue `q` | what it does to the queue |
//! |---|---|
//! | commands | later submissions run after its commands (and after its waits) |
//! | no commands, no waits, no signals | nothing: the next one is still behind the one before |
//! | no commands, waits (a **queue barrier**) | later submissions run after the waits are reached (and after everything before); its signals, if any, come after the waits too |
//! | no commands, signals only | its signals come after everything before on the queue |
//!
//! On no queue (several bits), a submission without commands only orders its signals after
//! its waits.
//!
//! A queue keeps its order on a pool stream of its own, its anchor: each submission on it ends
//! there (the anchor waits for the submission's other streams, then for its timeline waits
//! again) and makes its signals there, and the next submission starts after that end. So a
//! queue behaves as one stream would under a failure: once a timeline wait of a submission on
//! queue `q` is released by a failure, the signals of that submission and of every later one
//! on `q` fail (`Error::TimelineFailed`), whether they were submitted before or after the
//! failure and whatever streams they ran on; other queues, and submissions on no queue that do
//! not wait on the failure, are not affected.
//!
//! # Refusals
//!
//! A submission is refused whole, before anything is enqueued, where part of it would be:
//! a signal its timeline would refuse (out of range, not above every value signalled or
//! enqueued, the list's own earlier signals of it included, or of a failed timeline), a wait
//! value out of range, a copy or fill out of bounds, or an affinity that names no queue
//! (`Affinity(0)`, what `Affinity::queue(64)` and above give). A backend call that fails
//! part-way still ends the queue: its next submission runs after what was enqueued.
//!
//! Where the timeline mechanism holds only timeline operations behind a wait whose signal is
//! not on the device yet (CUDA `events`: see [`Mechanism`](crate::timeline::Mechanism)), a
//! submission that would need its commands held — one with commands, a graph replay, or a
//! barrier (on a queue its end events are commands; on none it would leave its pool stream
//! holding timeline operations on the host) — is refused with
//! [`Error::WaitBeforeSignalUnsupported`](crate::Error::WaitBeforeSignalUnsupported) before
//! anything is enqueued.

use std::collections::HashMap;

use super::executable::Executable;
use super::lower_cuda_graph::GraphExecutable;
use crate::backend::command::CommandBackend;
use crate::backend::replay::GraphBackend;
use crate::backend::{Backend, EventOptions};
use crate::error::Result;
use crate::timeline::Timeline;

/// A bit set of logical queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Affinity(pub u64);

impl Affinity {
    /// Queue `q` alone: in order with that queue's other submissions. There are
    /// [`QUEUES`](Self::QUEUES) queues: a larger `q` names none (`Affinity(0)`), which a
    /// submission refuses with [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub fn queue(q: u32) -> Self {
        Affinity(1u64.checked_shl(q).unwrap_or(0))
    }

    /// How many logical queues there are (one bit each).
    pub const QUEUES: u32 = u64::BITS;

    /// Any queue: in order with nothing.
    pub const ANY: Affinity = Affinity(u64::MAX);

    /// The queue, when exactly one bit is set.
    pub fn single(self) -> Option<u32> {
        (self.0.count_ones() == 1).then(|| self.0.trailing_zeros())
    }
}

impl Default for Affinity {
    /// Queue 0.
    fn default() -> Self {
        Affinity::queue(0)
    }
}

/// How a submission is ordered with other work: its queue affinity, the timeline values its
/// commands wait for, and the values it signals once all of them have run.
///
/// ```
/// use seqsync::graph::{Affinity, CommandBuffer, Lowering, Queues, Submit};
/// use seqsync::timeline::Timeline;
/// use seqsync::HostBackend;
/// use std::time::Duration;
///
/// let host = HostBackend::new();
/// let (ready, done) = (Timeline::new(&host, "ready", 0)?, Timeline::new(&host, "done", 0)?);
/// let mut cb = CommandBuffer::<HostBackend>::new();
/// cb.host("a", || {}, &[]);
/// cb.host("b", || {}, &[]);
/// let mut exe = cb.finish().unwrap().lower(Lowering::Streams);
/// let mut pool = Queues::new(host.clone());
/// let how = Submit { affinity: Affinity::ANY, waits: &[(&ready, 1)], signals: &[(&done, 1)] };
/// pool.submit_with(&mut exe, &how)?; // enqueued before `ready` reaches 1
/// assert!(done.wait(1, Duration::from_millis(20)).is_err());
/// ready.signal(1)?;
/// done.wait(1, Duration::from_secs(5))?;
/// # Ok::<(), seqsync::Error>(())
/// ```
pub struct Submit<'a, B: Backend> {
    /// The logical queues.
    pub affinity: Affinity,
    /// `(timeline, value)`: every command runs once each timeline has reached its value.
    pub waits: &'a [(&'a Timeline<B>, u64)],
    /// `(timeline, value)`: signalled once every command has run.
    pub signals: &'a [(&'a Timeline<B>, u64)],
}

impl<B: Backend> Submit<'_, B> {
    /// No waits and no signals, on `affinity`.
    pub fn on(affinity: Affinity) -> Self {
        Submit {
            affinity,
            waits: &[],
            signals: &[],
        }
    }

    /// Every wait must hold the commands behind it: with a timeline mechanism that holds only
    /// later timeline operations (CUDA `events`), a wait whose signal is not enqueued yet
    /// would let the commands run early, so the submission is refused before anything is
    /// enqueued.
    fn check_waits_hold_commands(&self) -> Result<()> {
        self.waits
            .iter()
            .try_for_each(|(t, v)| t.check_holds_commands(*v))
    }

    /// Everything the timelines would refuse part-way through the submission, refused before
    /// anything is enqueued: a wait that cannot hold the commands behind it (above), a value
    /// out of range, and a signal that is not above every value signalled or enqueued on its
    /// timeline (the list's earlier signals of the same timeline included), or of a failed
    /// timeline. Otherwise the commands before the refusal would run outside the queue's
    /// order.
    fn check_admission(&self) -> Result<()> {
        if self.affinity.0 == 0 {
            return Err(crate::Error::invalid(
                "queues",
                format!(
                    "the affinity names no queue (queues are 0..{})",
                    Affinity::QUEUES
                ),
            ));
        }
        self.check_waits_hold_commands()?;
        for (t, v) in self.waits {
            t.check_wait(*v)?;
        }
        for (i, (t, v)) in self.signals.iter().enumerate() {
            t.check_signal(*v)?;
            let earlier = self.signals[..i]
                .iter()
                .filter(|(u, _)| u.same(t))
                .map(|(_, w)| *w)
                .max();
            if let Some(current) = earlier.filter(|&w| w >= *v) {
                return Err(crate::Error::NonMonotonic {
                    timeline: t.name().to_owned(),
                    current,
                    got: *v,
                });
            }
        }
        Ok(())
    }
}

/// Which submission last used a pool stream, and on which queue.
#[derive(Debug, Clone, Copy)]
struct Stamp {
    queue: Option<u32>,
}

struct PoolStream<B: Backend> {
    stream: B::Stream,
    /// Recorded at the end of every submission that uses the stream.
    end: B::Event,
    last: Option<Stamp>,
    /// A submission failed half-way on it: its end event does not cover its work.
    broken: bool,
    /// The queue whose anchor it is (see [`QueueEnd`]): no other submission gets it.
    anchor_of: Option<u32>,
}

/// A queue's order lives on one pool stream of its own, its *anchor*: every submission on the
/// queue ends there (the anchor waits for the submission's other streams, and for its
/// timeline waits again), makes its signals there, and the next submission starts after the
/// anchor's end. A failed timeline wait of any submission on the queue thus poisons the
/// anchor, and every later signal of the queue fails by the timelines' own rule, whichever
/// streams the submissions were mapped to and whenever the failure came.
struct QueueEnd<B: Backend> {
    anchor: usize,
    /// Recorded on the anchor at the end of the queue's last submission.
    end: B::Event,
}

/// What one submission did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    /// The pool stream each virtual stream ran on.
    pub streams: Vec<usize>,
    /// Waits made for the queue's previous submission.
    pub queue_waits: usize,
    /// Pool streams created for this submission.
    pub new_streams: usize,
}

/// Streams shared by every submission made through it (see the module docs).
pub struct Queues<B: CommandBackend> {
    backend: B,
    streams: Vec<PoolStream<B>>,
    queues: HashMap<u32, QueueEnd<B>>,
}

impl<B: CommandBackend> Queues<B> {
    /// The most streams a pool holds: a submission that would need more (every stream busy
    /// with work not done yet) is refused with
    /// [`Error::TooManyStreams`](crate::Error::TooManyStreams), before anything is enqueued.
    pub const MAX_STREAMS: usize = 1024;

    /// An empty pool on `backend`.
    pub fn new(backend: B) -> Self {
        Queues {
            backend,
            streams: Vec::new(),
            queues: HashMap::new(),
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// How many streams the pool holds.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// No streams yet?
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Pool stream `i`.
    pub fn stream(&self, i: usize) -> &B::Stream {
        &self.streams[i].stream
    }

    /// Is pool stream `i` free for a submission on `queue` (see the module docs)?
    fn is_free(&self, i: usize, queue: Option<u32>) -> Result<bool> {
        let s = &self.streams[i];
        // A poisoned stream fails every timeline it signals: work of another submission that
        // did not depend on the failure must not land on it.
        if s.broken {
            return Ok(false);
        }
        // A queue's anchor is its own: poisoned or not, only its queue's work goes there
        // (after a failure of the queue, that work fails its signals anyway).
        if let Some(q) = s.anchor_of {
            return Ok(Some(q) == queue);
        }
        if crate::timeline::is_poisoned(&self.backend, &s.stream) {
            return Ok(false);
        }
        match s.last {
            None => Ok(true),
            Some(st) if st.queue.is_some() && st.queue == queue => Ok(true),
            // A stream whose work failed (a host closure panicked) is not free: its end never
            // completes. Its failure is not this submission's error: it takes another stream.
            Some(_) => Ok(self.backend.query(&s.end).unwrap_or(false)),
        }
    }

    /// Map `n` virtual streams onto free pool streams, growing the pool as needed.
    fn map_streams(&mut self, n: usize, queue: Option<u32>) -> Result<(Vec<usize>, usize)> {
        let mut taken = vec![false; self.streams.len()];
        let mut map = Vec::with_capacity(n);
        // Streams of the queue's previous submission first: their own stream order replaces a
        // wait.
        let mut candidates: Vec<usize> = queue
            .and_then(|q| self.queues.get(&q))
            .map(|e| vec![e.anchor])
            .unwrap_or_default();
        candidates.extend(0..self.streams.len());
        let mut poisoned_idle = Vec::new();
        for i in candidates {
            if map.len() == n {
                break;
            }
            if taken[i] {
                continue;
            }
            if self.is_free(i, queue)? {
                taken[i] = true;
                map.push(i);
            } else if self.is_replaceable(i) {
                taken[i] = true;
                poisoned_idle.push(i);
            }
        }
        // Beyond the limit only where a poisoned idle stream is replaced in place.
        if self.streams.len() + (n - map.len()).saturating_sub(poisoned_idle.len())
            > Self::MAX_STREAMS
        {
            // Every stream was looked at (fewer than `n` were free): the others are busy.
            return Err(crate::Error::TooManyStreams {
                limit: Self::MAX_STREAMS,
                needed: n,
                busy: (self.streams.len() - map.len()).saturating_sub(poisoned_idle.len()),
            });
        }
        let mut created = 0;
        while map.len() < n {
            let stream = self
                .backend
                .new_stream(&format!("graph-{}", self.streams.len()))?;
            let end = self.backend.create_event(EventOptions::default())?;
            let fresh = PoolStream {
                stream,
                end,
                last: None,
                broken: false,
                anchor_of: None,
            };
            // A stream that a failure poisoned, with nothing left to run, is replaced in
            // place: a run of failures does not grow the pool. Its failure bookkeeping goes
            // with it (a stream that goes tells the timelines).
            if let Some(i) = poisoned_idle.pop() {
                self.streams[i] = fresh;
                map.push(i);
            } else {
                self.streams.push(fresh);
                map.push(self.streams.len() - 1);
            }
            created += 1;
        }
        Ok((map, created))
    }

    /// Is pool stream `i` no queue's anchor, done with everything it was given, and either
    /// poisoned or failed (a closure of it panicked: it runs nothing more)? Nothing is lost by
    /// replacing it with a fresh stream then.
    fn is_replaceable(&self, i: usize) -> bool {
        let s = &self.streams[i];
        s.anchor_of.is_none()
            && !s.broken
            && match self.backend.query(&s.end) {
                Ok(done) => done && crate::timeline::is_poisoned(&self.backend, &s.stream),
                // Reached, and failed on the way.
                Err(_) => true,
            }
    }

    /// Enqueue every command of `exe` on the pool's streams, with `affinity`.
    ///
    /// # Errors
    /// A failing backend call, or an out-of-bounds copy or fill. Streams that got part of the
    /// submission are not reused by later ones.
    /// [`Error::TooManyStreams`](crate::Error::TooManyStreams) where the submission would
    /// need a stream beyond [`MAX_STREAMS`](Self::MAX_STREAMS) (nothing is enqueued).
    pub fn submit(&mut self, exe: &mut Executable<B>, affinity: Affinity) -> Result<Submission> {
        self.submit_with(exe, &Submit::on(affinity))
    }

    /// Enqueue every command of `exe` with `how`'s affinity, after its timeline waits (each
    /// first command of the submission waits for them) and before its timeline signals (made
    /// once every command has run).
    ///
    /// # Errors
    /// As [`submit`](Self::submit); a timeline error (a non-monotonic signal, a value out of
    /// range); [`Error::WaitBeforeSignalUnsupported`](crate::Error::WaitBeforeSignalUnsupported)
    /// for a wait whose signal is not enqueued yet on the CUDA `events` mechanism, in a
    /// submission with commands (nothing is enqueued then).
    pub fn submit_with(
        &mut self,
        exe: &mut Executable<B>,
        how: &Submit<'_, B>,
    ) -> Result<Submission> {
        let queue = how.affinity.single();
        let empty = exe.schedule.order.is_empty();
        // Every submission is checked: one with commands holds them behind its waits; a barrier
        // on a queue holds the queue's later work through the end events it records (commands
        // too); and a barrier on no queue holds its signals behind its waits (CUDA `events`
        // cannot wait before a signal is enqueued: refused).
        how.check_admission()?;
        // Memory keeps its size: a graph's copies and fills are checked once, not per
        // submission.
        if !exe.commands_checked {
            for op in &exe.graph.ops {
                op.check(&self.backend)?;
            }
            exe.commands_checked = true;
        }
        if empty && how.signals.is_empty() && (how.waits.is_empty() || queue.is_none()) {
            // Nothing to hold and nothing to signal: the queue's last end stays what it was
            // (a submission after this one is still behind the one before it).
            return Ok(Submission {
                streams: Vec::new(),
                queue_waits: 0,
                new_streams: 0,
            });
        }
        // A barrier orders its signals, and its queue's later work, after its waits and after
        // the queue's previous submission: on one stream.
        let streams = exe.schedule.streams.len().max(usize::from(empty));
        let (map, new_streams) = self.map_streams(streams, queue)?;
        self.check_streams(&map, how)?;
        let result = self.enqueue(exe, &map, how);
        match result {
            Ok(queue_waits) => Ok(Submission {
                streams: map,
                queue_waits,
                new_streams,
            }),
            Err(e) => {
                // A backend call failed part-way (what can be refused was, before anything was
                // enqueued): what was enqueued still ends the queue, so that the queue's next
                // submission runs after it.
                let _ = self.finish_submission(&map, queue, &Submit::on(how.affinity));
                for &p in &map {
                    self.streams[p].broken = true;
                }
                Err(e)
            }
        }
    }

    fn enqueue(
        &mut self,
        exe: &mut Executable<B>,
        map: &[usize],
        how: &Submit<'_, B>,
    ) -> Result<usize> {
        let queue = how.affinity.single();
        let b = &self.backend;
        for (c, r) in exe.recorded.iter().enumerate() {
            if *r && exe.events[c].is_none() {
                exe.events[c] = Some(b.create_event(EventOptions::default())?);
            }
            if exe.joined[c] && exe.join_events[c].is_none() {
                exe.join_events[c] = Some(b.create_event(EventOptions::default())?);
            }
        }
        let mut queue_waits = 0;
        let sched = &exe.schedule;
        for &c in &sched.order {
            let p = map[sched.stream_of[c]];
            let stream = &self.streams[p].stream;
            if exe.graph.dag.preds(c).is_empty() {
                queue_waits += self.queue_waits(p, queue)?;
                for (t, v) in how.waits {
                    t.wait_on(stream, *v)?;
                }
            }
            for &from in &exe.waits_into[c] {
                b.wait(stream, exe.events[from].as_ref().expect("created above"))?;
            }
            for &j in &exe.joins_into[c] {
                b.wait(stream, exe.join_events[j].as_ref().expect("created above"))?;
            }
            // The join: recorded once the stream has waited for everything `c` waits for.
            if exe.joined[c] {
                b.record(exe.join_events[c].as_ref().expect("created above"), stream)?;
            }
            exe.graph.ops[c].enqueue(b, stream)?;
            if exe.recorded[c] {
                b.record(exe.events[c].as_ref().expect("created above"), stream)?;
            }
        }
        let used: Vec<usize> = sched
            .streams
            .iter()
            .enumerate()
            .filter(|(_, cmds)| !cmds.is_empty())
            .map(|(v, _)| map[v])
            .collect();
        let used = match (used.is_empty(), map.first()) {
            (true, Some(&p)) => {
                queue_waits += self.queue_waits(p, queue)?;
                for (t, v) in how.waits {
                    t.wait_on(&self.streams[p].stream, *v)?;
                }
                vec![p]
            }
            _ => used,
        };
        self.signal(&used, how)?;
        self.finish_submission(&used, queue, how)?;
        Ok(queue_waits)
    }

    /// Block until everything submitted so far has run, on every stream (also past one whose
    /// work failed).
    ///
    /// # Errors
    /// A failed backend call, or work that failed (a panicking host closure): the first
    /// stream's in pool order. A failed stream keeps its failure until a later submission
    /// replaces it with a fresh stream, so a synchronize after it reports it again.
    pub fn synchronize(&self) -> Result<()> {
        // Every stream, also past a failed one: the first failure is returned once all of them
        // ran what they were given.
        let mut first = Ok(());
        for s in &self.streams {
            let r = self.backend.synchronize_stream(&s.stream);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    /// Enqueue one replay of an instantiated graph on a pool stream, with `affinity`.
    ///
    /// # Errors
    /// A failing backend call.
    pub fn submit_graph(
        &mut self,
        exe: &GraphExecutable<B>,
        affinity: Affinity,
    ) -> Result<Submission>
    where
        B: GraphBackend,
    {
        self.submit_graph_with(exe, &Submit::on(affinity))
    }

    /// Enqueue one replay of an instantiated graph with `how`'s affinity, timeline waits (made
    /// on the launch stream before the launch) and signals (after it).
    ///
    /// # Errors
    /// As [`submit_graph`](Self::submit_graph); a timeline error;
    /// [`Error::WaitBeforeSignalUnsupported`](crate::Error::WaitBeforeSignalUnsupported) as for
    /// [`submit_with`](Self::submit_with).
    pub fn submit_graph_with(
        &mut self,
        exe: &GraphExecutable<B>,
        how: &Submit<'_, B>,
    ) -> Result<Submission>
    where
        B: GraphBackend,
    {
        how.check_admission()?;
        let queue = how.affinity.single();
        let (map, new_streams) = self.map_streams(1, queue)?;
        self.check_streams(&map, how)?;
        let p = map[0];
        let result = (|| {
            let waits = self.queue_waits(p, queue)?;
            for (t, v) in how.waits {
                t.wait_on(&self.streams[p].stream, *v)?;
            }
            self.backend
                .launch_graph(&exe.exec, &self.streams[p].stream)?;
            self.signal(&map, how)?;
            self.finish_submission(&map, queue, how)?;
            Ok(waits)
        })();
        match result {
            Ok(queue_waits) => Ok(Submission {
                streams: map,
                queue_waits,
                new_streams,
            }),
            Err(e) => {
                // As in `submit_with`: what was enqueued ends the queue.
                let _ = self.finish_submission(&map, queue, &Submit::on(how.affinity));
                self.streams[p].broken = true;
                Err(e)
            }
        }
    }

    /// Refuse, before anything is enqueued, timelines that would refuse the pool's streams
    /// (a timeline of another backend: the pool's streams are all of its own).
    fn check_streams(&self, map: &[usize], how: &Submit<'_, B>) -> Result<()> {
        let Some(&p) = map.first() else {
            return Ok(());
        };
        let stream = &self.streams[p].stream;
        how.waits
            .iter()
            .chain(how.signals)
            .try_for_each(|(t, _)| t.check_stream(stream))
    }

    /// Make pool stream `p` wait for the end of `queue`'s previous submission (on its anchor,
    /// unless `p` is the anchor); returns how many waits.
    fn queue_waits(&self, p: usize, queue: Option<u32>) -> Result<usize> {
        match queue.and_then(|q| self.queues.get(&q)) {
            Some(prev) if prev.anchor != p => {
                self.backend.wait(&self.streams[p].stream, &prev.end)?;
                Ok(1)
            }
            _ => Ok(0),
        }
    }

    /// Make `how`'s timeline signals once all of a submission's work on pool streams `used`
    /// has run: the last stream waits for the others' ends (and for the submission's timeline
    /// waits again, so that a failed wait fails the signals), then signals.
    fn signal(&mut self, used: &[usize], how: &Submit<'_, B>) -> Result<()> {
        let Some(&j) = used.last() else {
            return Ok(());
        };
        // On a queue, the anchor joins and signals (`finish_submission`).
        if how.signals.is_empty() || how.affinity.single().is_some() {
            return Ok(());
        }
        for &u in used {
            if u != j {
                let s = &self.streams[u];
                self.backend.record(&s.end, &s.stream)?;
                self.backend.wait(&self.streams[j].stream, &s.end)?;
            }
        }
        let stream = &self.streams[j].stream;
        for (t, v) in how.waits {
            t.wait_on(stream, *v)?;
        }
        for (t, v) in how.signals {
            t.signal_on(stream, *v)?;
        }
        Ok(())
    }

    /// Record the end of a submission that used pool streams `used`; on a queue, end it on
    /// the queue's anchor (see [`QueueEnd`]): the anchor waits for the other streams and for
    /// the submission's timeline waits, then makes its signals.
    fn finish_submission(
        &mut self,
        used: &[usize],
        queue: Option<u32>,
        how: &Submit<'_, B>,
    ) -> Result<()> {
        for &p in used {
            let s = &mut self.streams[p];
            self.backend.record(&s.end, &s.stream)?;
            s.last = Some(Stamp { queue });
        }
        let Some(q) = queue else {
            return Ok(());
        };
        let anchor = match self.queues.get(&q) {
            Some(e) => e.anchor,
            None => {
                let Some(&a) = used.last() else {
                    return Ok(());
                };
                let end = self.backend.create_event(EventOptions::default())?;
                self.queues.insert(q, QueueEnd { anchor: a, end });
                self.streams[a].anchor_of = Some(q);
                a
            }
        };
        let a = &self.streams[anchor];
        for &u in used {
            if u != anchor {
                self.backend.wait(&a.stream, &self.streams[u].end)?;
            }
        }
        for (t, v) in how.waits {
            t.wait_on(&a.stream, *v)?;
        }
        for (t, v) in how.signals {
            t.signal_on(&a.stream, *v)?;
        }
        let end = &self.queues[&q].end;
        self.backend.record(end, &a.stream)?;
        self.backend.record(&a.end, &a.stream)?;
        self.streams[anchor].last = Some(Stamp { queue });
        Ok(())
    }
}
