//! Buffer handoff and command graphs (issue 12, item 4): recording and instantiating a graph
//! produces neither fact and stamps nothing; launching it through
//! [`TrackingBackend::submit`] is a use of its buffers, stamped at every replay.
//!
//! Each graph spins for [`SPIN_US`] and then fills the buffer, so a use on another stream that
//! the tracker forgot to order after the replay reads the old value.

use crate::common;

use seqsync::backend::{Backend, CopyOp, FillOp};
use seqsync::graph::{CommandBuffer, GraphExecutable};
use seqsync::internal::backend::GraphBackend;
use seqsync::internal::memory::HandoffStats;
use seqsync::memory::handoff::{Tracked, TrackedStream, TrackingBackend};

/// How long each replay runs before it writes the buffer.
const SPIN_US: u64 = 50_000;
const WORDS: usize = 4;

/// A graph that spins, then fills `dst` with `value`, instantiated on the *inner* backend.
fn writer<B: GraphBackend>(b: &B, dst: &B::Memory, value: u32) -> GraphExecutable<B> {
    let mut cb = CommandBuffer::<B>::new();
    cb.kernel("spin", b.spin_kernel(SPIN_US).unwrap(), &[]);
    cb.fill(
        "fill",
        FillOp {
            dst: dst.clone(),
            offset: 0,
            words: WORDS,
            value,
        },
        &["spin"],
    );
    cb.finish().unwrap().instantiate(b).unwrap()
}

/// A tracked replay of `exe` on `s`: a write of `buf`. Returns the waits it needed.
fn replay<B: GraphBackend>(
    tb: &TrackingBackend<B>,
    s: &TrackedStream<B>,
    buf: &Tracked<B::Memory>,
    exe: &GraphExecutable<B>,
) -> usize {
    let r = tb.submit(s, &[buf.write()], |s, _| exe.launch(s)).unwrap();
    r.value.unwrap();
    r.waits
}

/// A tracked read of `buf` on `s` (copied into `out`). Returns the waits it needed.
fn read_into<B: GraphBackend>(
    tb: &TrackingBackend<B>,
    s: &TrackedStream<B>,
    buf: &Tracked<B::Memory>,
    out: &B::Memory,
) -> usize {
    let r = tb
        .submit(s, &[buf.read()], |s, cx| {
            tb.inner().copy(
                s,
                &CopyOp {
                    src: buf.get(cx).clone(),
                    src_offset: 0,
                    dst: out.clone(),
                    dst_offset: 0,
                    words: WORDS,
                },
            )
        })
        .unwrap();
    r.value.unwrap();
    r.waits
}

struct Setup<B: GraphBackend> {
    tb: TrackingBackend<B>,
    a: TrackedStream<B>,
    b: TrackedStream<B>,
    mem: B::Memory,
    buf: Tracked<B::Memory>,
    out: B::Memory,
}

fn setup<B: GraphBackend>(b: &B) -> Setup<B> {
    let tb = TrackingBackend::new(b.clone());
    let (sa, sb) = (tb.new_stream("a").unwrap(), tb.new_stream("b").unwrap());
    let mem = b.alloc_words(WORDS).unwrap();
    let out = b.alloc_words(WORDS).unwrap();
    Setup {
        buf: tb.track(mem.clone()),
        tb,
        a: sa,
        b: sb,
        mem,
        out,
    }
}

/// A buffer written by a replayed graph on A, then read on B: one wait, and B sees the value.
fn graph_replay_then_use_elsewhere_waits<B: GraphBackend>(b: &B) {
    let s = setup(b);
    let exe = writer(b, &s.mem, 7);
    assert_eq!(replay(&s.tb, &s.a, &s.buf, &exe), 0);
    assert_eq!(read_into(&s.tb, &s.b, &s.buf, &s.out), 1);
    b.synchronize_stream(s.b.inner()).unwrap();
    assert_eq!(b.read_words(&s.out).unwrap(), [7; WORDS]);
    assert_eq!(s.tb.stats().waits, 1);
    s.tb.synchronize_stream(&s.a).unwrap();
}

/// Each replay stamps again: a host synchronize of A makes the next use on B wait-free, a
/// further replay on A makes it wait again (and that replay, a write after B's read, waits
/// for B).
fn graph_each_replay_stamps_again<B: GraphBackend>(b: &B) {
    let s = setup(b);
    let exe = writer(b, &s.mem, 3);
    assert_eq!(replay(&s.tb, &s.a, &s.buf, &exe), 0);
    s.tb.synchronize_stream(&s.a).unwrap();
    assert_eq!(read_into(&s.tb, &s.b, &s.buf, &s.out), 0, "completed");
    assert_eq!(s.tb.stats().completed, 1);
    // Behind the tracker's back (both streams idle): B read 3; clear the buffer, so that a
    // read not ordered after the next replay sees 0.
    b.synchronize_stream(s.b.inner()).unwrap();
    assert_eq!(b.read_words(&s.out).unwrap(), [3; WORDS]);
    b.write_words(&s.mem, &[0; WORDS]).unwrap();

    // The replay is a write after B's read (the tracker saw no synchronize of B): it waits.
    assert_eq!(replay(&s.tb, &s.a, &s.buf, &exe), 1);
    assert_eq!(read_into(&s.tb, &s.b, &s.buf, &s.out), 1, "replayed again");
    b.synchronize_stream(s.b.inner()).unwrap();
    assert_eq!(b.read_words(&s.out).unwrap(), [3; WORDS]);
    s.tb.synchronize_stream(&s.a).unwrap();
}

/// Recording and instantiating a graph that writes the buffer produces no fact and no stamp:
/// a use on B before any launch inserts no wait; an event recorded on A (and waited for by B)
/// before the launch does not cover the launch.
fn graph_recording_produces_no_fact<B: GraphBackend>(b: &B) {
    let s = setup(b);
    let exe = writer(b, &s.mem, 5);
    assert_eq!(s.tb.stats(), HandoffStats::default());
    assert_eq!(
        read_into(&s.tb, &s.b, &s.buf, &s.out),
        0,
        "nothing launched"
    );

    // An event recorded on A before the launch, and B ordered after it.
    let e = s.tb.create_event(Default::default()).unwrap();
    s.tb.record(&e, &s.a).unwrap();
    s.tb.wait(&s.b, &e).unwrap();
    // The launch writes after B's read: one wait for B.
    assert_eq!(replay(&s.tb, &s.a, &s.buf, &exe), 1);
    // `e` was recorded before the launch: it does not cover it, B waits.
    assert_eq!(read_into(&s.tb, &s.b, &s.buf, &s.out), 1);
    assert_eq!(s.tb.stats().ordered, 0);
    b.synchronize_stream(s.b.inner()).unwrap();
    assert_eq!(b.read_words(&s.out).unwrap(), [5; WORDS]);
    s.tb.synchronize_stream(&s.a).unwrap();
}

on_both_backends!(
    graph_replay_then_use_elsewhere_waits,
    graph_each_replay_stamps_again,
    graph_recording_produces_no_fact,
);
