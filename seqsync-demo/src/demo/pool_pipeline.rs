//! [`Variant::Pool`](super::Variant::Pool): the seed's pipeline with per-batch device buffers
//! from a stream-ordered [`Pool`] instead of fixed ring buffers.
//!
//! Each batch's `in`, `x`, `y` and `out` are allocated on the copy-in stream (`out` just before
//! h, as late as the ring version's wait for the copy out) and freed after their last reader,
//! on the reader's stream: `in` on s_g after g (waiting for f), `x` and `y`
//! on s_h after h, `out` on s_g2h after the copy out. The data flow is ordered by the pool's
//! points (copy → f, g → h → copy out). An allocation for batch `s` waits on the free of the
//! same buffer of batch `s - N` (N: the ring's slot count), exactly the dependency the ring
//! version has; the pool then reuses that block with zero synchronization (no inserted wait,
//! no host synchronize), which the run's statistics show.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::device::Device;
use super::pipeline::{first_error, marked, Checker, InputPool, RunOptions, Streams, Verification};
use seqsync::backend::Backend;
use seqsync::memory::{AllocFlags, Block, Point, Pool, PoolConfig, PoolStats, Wait};
use seqsync::Result;

/// The pool for a device's layout: room for every slot of every buffer, no more.
pub(crate) fn pool_for<D: Device>(dev: &D) -> Result<Pool<D::B>> {
    let l = dev.layout();
    let bytes = l.n * 4;
    Pool::new(
        dev.backend(),
        "batches",
        PoolConfig {
            slab_bytes: bytes,
            max_bytes: bytes * (l.nin + l.nx + l.ny + l.nout),
            max_alloc: bytes,
            ..PoolConfig::default()
        },
    )
}

/// What h2g hands to g2h for each batch.
struct ToCopyOut<B: seqsync::backend::MemoryBackend> {
    seq: i64,
    out: Block,
    h_done: Point<B>,
}

/// Run the pipeline for `opt.batches` batches with buffers from `pool`; returns the wall time,
/// what process_data saw, and what the pool did during the run.
///
/// The streams stay the same from run to run: at the end of a run the copy-in stream waits on
/// the last frees (a stream wait, no host synchronize), so the next run's allocations reuse
/// every block with zero synchronization.
pub(crate) fn run<D: Device>(
    dev: &D,
    pool: &Pool<D::B>,
    streams: &Streams<D>,
    opt: &RunOptions<'_>,
) -> Result<(Duration, Verification, PoolStats)> {
    let checker = Checker::paced(opt.batches, opt.rate);
    let before = pool.stats();
    let start = Instant::now();
    let (to_g2h, from_h2g) = mpsc::channel::<ToCopyOut<D::B>>();
    let (to_h2g, from_g2h) = mpsc::channel::<Point<D::B>>();
    let results = std::thread::scope(|scope| {
        let (st, checker) = (streams, &checker);
        // A failed thread stops the checker too: the other may be waiting for an arrival.
        let stopping = move |r: Result<()>| {
            if r.is_err() {
                checker.stop();
            }
            r
        };
        let h2g = scope.spawn(move || {
            let r = h2g_thread(dev, pool, st, checker, opt, to_g2h, from_g2h);
            ("h2g", stopping(r))
        });
        let g2h = scope.spawn(move || {
            let r = g2h_thread(dev, pool, st, checker, opt, from_h2g, to_h2g);
            ("g2h", stopping(r))
        });
        // A thread that fails drops its channel ends, which ends the other one's loop.
        vec![
            h2g.join().expect("h2g thread panicked"),
            g2h.join().expect("g2h thread panicked"),
        ]
    });
    let synced = streams.sync_all(dev);
    let wall = start.elapsed();
    first_error(results)?;
    synced?;
    let after = pool.stats();
    let delta = PoolStats {
        allocs: after.allocs - before.allocs,
        frees: after.frees - before.frees,
        reuse: after.reuse - before.reuse,
        reuse_miss: after.reuse_miss - before.reuse_miss,
        fresh: after.fresh - before.fresh,
        waits: after.waits - before.waits,
        exhausted: after.exhausted - before.exhausted,
        slab_allocs: after.slab_allocs - before.slab_allocs,
        slab_releases: after.slab_releases - before.slab_releases,
        host_syncs: after.host_syncs - before.host_syncs,
        leaked: after.leaked - before.leaked,
        ..after
    };
    Ok((wall, checker.finish(), delta))
}

/// The other thread stopped (its own error is the one reported).
fn disconnected() -> seqsync::Error {
    seqsync::Error::Stopped {
        ring: "demo".into(),
        reason: "the other pipeline thread stopped".into(),
        cause: None,
    }
}

fn h2g_thread<D: Device>(
    dev: &D,
    pool: &Pool<D::B>,
    st: &Streams<D>,
    checker: &Checker,
    opt: &RunOptions<'_>,
    to_g2h: mpsc::Sender<ToCopyOut<D::B>>,
    from_g2h: mpsc::Receiver<Point<D::B>>,
) -> Result<()> {
    let l = *dev.layout();
    let size = l.n * 4;
    let tracing = opt.spans.is_some();
    let inputs = InputPool::new(dev)?;
    // The free points of earlier batches' buffers, oldest first.
    let (mut freed_in, mut freed_x, mut freed_y) =
        (VecDeque::new(), VecDeque::new(), VecDeque::new());
    // The free of batch `s - slots`, once there are that many batches behind.
    let due = |q: &mut VecDeque<Point<D::B>>, slots: usize| {
        if q.len() >= slots {
            q.pop_front()
        } else {
            None
        }
    };
    for s in 0..opt.batches {
        dev.chaos_pause();
        inputs.wait_free(dev, s)?;
        dev.fill_input(s);
        let alloc = |waited: Option<Point<D::B>>| -> Result<Block> {
            let waits: Vec<_> = waited.iter().map(Wait::Point).collect();
            Ok(pool.alloc(&st.h2g, size, &waits)?.block)
        };
        let d_in = alloc(due(&mut freed_in, l.nin))?;
        let x = alloc(due(&mut freed_x, l.nx))?;
        let y = alloc(due(&mut freed_y, l.ny))?;

        checker.issued(s);
        marked(dev, tracing, &st.h2g, "s_h2g", "copy in", s, || {
            dev.copy_in_to(&st.h2g, (s % l.npatterns as i64) as usize, d_in.addr())
        })?;
        inputs.copy_enqueued(dev, &st.h2g, s)?;
        let copied = pool.record(&st.h2g)?;
        dev.chaos_pause();

        pool.wait(&st.f, &copied)?;
        marked(dev, tracing, &st.f, "s_f", "f", s, || {
            dev.launch_f_at(&st.f, d_in.addr(), x.addr())
        })?;
        let f_done = pool.record(&st.f)?;
        pool.wait(&st.g, &copied)?;
        marked(dev, tracing, &st.g, "s_g", "g", s, || {
            dev.launch_g_at(&st.g, d_in.addr(), y.addr())
        })?;
        // `in`'s last readers are f and g: free it on s_g, after f.
        freed_in.push_back(pool.free(&st.g, d_in, &[Wait::Point(&f_done)])?);
        let g_done = pool.record(&st.g)?;
        dev.chaos_pause();

        // out: allocated (on the copy-in stream too, so that one stream's knowledge serves
        // every allocation) once the g2h copy of batch s - nout has been enqueued and freed
        // (the other thread's free point, in batch order): as late as the ring version's
        // blocking wait, so copy-in, f and g run ahead; h waits for the allocation's point.
        let freed_out = if s >= l.nout as i64 {
            Some(from_g2h.recv().map_err(|_| disconnected())?)
        } else {
            None
        };
        let waits: Vec<_> = freed_out.iter().map(Wait::Point).collect();
        let out = pool.alloc_with(&st.h2g, size, &waits, AllocFlags::default().signal())?;
        pool.wait(&st.h, out.ready.as_ref().expect("signal asked for a point"))?;
        let out = out.block;
        pool.wait(&st.h, &f_done)?;
        pool.wait(&st.h, &g_done)?;
        marked(dev, tracing, &st.h, "s_h", "h", s, || {
            dev.launch_h_at(&st.h, x.addr(), y.addr(), out.addr())
        })?;
        let h_done = pool.record(&st.h)?;
        // h is the last reader of x and y: free them on s_h, in stream order.
        freed_x.push_back(pool.free(&st.h, x, &[])?);
        freed_y.push_back(pool.free(&st.h, y, &[])?);
        to_g2h
            .send(ToCopyOut {
                seq: s,
                out,
                h_done,
            })
            .map_err(|_| disconnected())?;
    }
    // Close the run: the copy-in stream is ordered after every free still outstanding.
    let last_outs = opt.batches.min(l.nout as i64);
    for _ in 0..last_outs {
        let freed = from_g2h.recv().map_err(|_| disconnected())?;
        pool.wait(&st.h2g, &freed)?;
    }
    for p in freed_in.iter().chain(&freed_x).chain(&freed_y) {
        pool.wait(&st.h2g, p)?;
    }
    Ok(())
}

fn g2h_thread<D: Device>(
    dev: &D,
    pool: &Pool<D::B>,
    st: &Streams<D>,
    checker: &Checker,
    opt: &RunOptions<'_>,
    from_h2g: mpsc::Receiver<ToCopyOut<D::B>>,
    to_h2g: mpsc::Sender<Point<D::B>>,
) -> Result<()> {
    let tracing = opt.spans.is_some();
    for _ in 0..opt.batches {
        let ToCopyOut { seq, out, h_done } = from_h2g.recv().map_err(|_| disconnected())?;
        dev.chaos_pause();
        pool.wait(&st.g2h, &h_done)?;
        marked(dev, tracing, &st.g2h, "s_g2h", "copy out", seq, || {
            dev.copy_out_from(&st.g2h, out.addr(), 0)
        })?;
        // The copy out is `out`'s last reader: free it in stream order after it, and hand the
        // free point to h2g at once (its allocation of batch seq + nout waits on it).
        let freed = pool.free(&st.g2h, out, &[])?;
        to_h2g.send(freed.clone()).map_err(|_| disconnected())?;
        // process_data needs the batch on the host: the demo (not the pool) waits here.
        dev.backend().synchronize(freed.event())?;
        checker.process(dev, 0, seq);
        if let Some(p) = opt.progress {
            p(seq + 1);
        }
    }
    Ok(())
}
