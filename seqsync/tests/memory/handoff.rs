//! Buffer handoff by epochs (seed 003): every case of the seed's test paragraph, on the host
//! backend, on CUDA, and on the host under the hazard checker (`mod hazard`: the same bodies on
//! `ValidatingBackend<HostBackend>`, which must report no hazard).
//!
//! Each case counts the stream waits the tracker inserts, checks the buffer's value (the
//! orders are chosen so that a missing wait gives a wrong value), and times the work on the
//! new stream against work queued on the old one, with times taken on the streams themselves
//! (host functions enqueued there): a case that needs no wait finishes its work before the old
//! stream finishes that work (an order, no bound in ms; a miss is retried, see
//! `with_retries`), a case that waits finishes at least that work's length after it started.
#![allow(clippy::type_complexity)]

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::Harness;
use seqsync::backend::Backend;
use seqsync::hazard::ValidatingBackend;
use seqsync::internal::hazard::{Access, ActorId};
use seqsync::internal::memory::HandoffStats;
use seqsync::memory::handoff::{Tracked, TrackedStream, TrackingBackend};
use seqsync::HostBackend;

/// Work queued on the old stream that a move must not wait for (or must, when it waits): long
/// enough that a loaded 2-core machine still runs a move's small work well within it.
const BUSY: Duration = Duration::from_millis(200);

/// What the handoff tests need of a backend beyond [`Harness`]: memory and three kernels.
trait Mem: Harness + Backend {
    /// Device memory of `u32`s (or its host stand-in).
    type Buf: Send + Sync + 'static;
    /// The seed's `more_work` for the motivating example.
    const MORE_WORK: Duration;
    /// Zeroed memory of `n` elements named `name` (for hazard reports).
    fn alloc(&self, name: &'static str, n: usize) -> Self::Buf;
    /// Enqueue: after `delay`, set every element to `value`.
    fn fill(&self, s: &Self::Stream, b: &Self::Buf, value: u32, delay: Duration);
    /// Enqueue: after `delay`, add `x` to every element.
    fn add(&self, s: &Self::Stream, b: &Self::Buf, x: u32, delay: Duration);
    /// Enqueue: after `delay`, copy `src` into `dst`.
    fn copy(&self, s: &Self::Stream, src: &Self::Buf, dst: &Self::Buf, delay: Duration);
    /// Every element (all work on it must be synchronized).
    fn read_all(&self, b: &Self::Buf) -> Vec<u32>;
    /// The calling thread, for [`joined`](Self::joined) (the hazard checker's actor).
    fn task_token(&self) -> Option<ActorId> {
        None
    }
    /// The calling thread joined the thread `token` came from (tell the hazard checker).
    fn joined(&self, _token: Option<ActorId>) {}
}

// ---- host memory --------------------------------------------------------------------------

#[derive(Debug)]
struct HostBuf {
    name: &'static str,
    data: Arc<Vec<AtomicU32>>,
}

fn host_alloc(name: &'static str, n: usize) -> HostBuf {
    HostBuf {
        name,
        data: Arc::new((0..n).map(|_| AtomicU32::new(0)).collect()),
    }
}

fn host_op(
    s: &seqsync::backend::host::HostStream,
    delay: Duration,
    f: impl FnOnce() + Send + 'static,
) {
    s.launch(move || {
        std::thread::sleep(delay);
        f()
    });
}

fn host_fill(s: &seqsync::backend::host::HostStream, b: &HostBuf, v: u32, delay: Duration) {
    let d = b.data.clone();
    host_op(s, delay, move || {
        d.iter().for_each(|x| x.store(v, Ordering::Relaxed))
    });
}

fn host_add(s: &seqsync::backend::host::HostStream, b: &HostBuf, v: u32, delay: Duration) {
    let d = b.data.clone();
    // load + store, not fetch_add: an unordered add loses updates like device memory does.
    host_op(s, delay, move || {
        d.iter()
            .for_each(|x| x.store(x.load(Ordering::Relaxed) + v, Ordering::Relaxed))
    });
}

fn host_copy(
    s: &seqsync::backend::host::HostStream,
    src: &HostBuf,
    dst: &HostBuf,
    delay: Duration,
) {
    let (a, b) = (src.data.clone(), dst.data.clone());
    host_op(s, delay, move || {
        a.iter()
            .zip(b.iter())
            .for_each(|(x, y)| y.store(x.load(Ordering::Relaxed), Ordering::Relaxed))
    });
}

fn host_read(b: &HostBuf) -> Vec<u32> {
    b.data.iter().map(|x| x.load(Ordering::Relaxed)).collect()
}

impl Mem for HostBackend {
    type Buf = HostBuf;
    const MORE_WORK: Duration = BUSY;
    fn alloc(&self, name: &'static str, n: usize) -> HostBuf {
        host_alloc(name, n)
    }
    fn fill(&self, s: &Self::Stream, b: &HostBuf, v: u32, delay: Duration) {
        host_fill(s, b, v, delay)
    }
    fn add(&self, s: &Self::Stream, b: &HostBuf, x: u32, delay: Duration) {
        host_add(s, b, x, delay)
    }
    fn copy(&self, s: &Self::Stream, src: &HostBuf, dst: &HostBuf, delay: Duration) {
        host_copy(s, src, dst, delay)
    }
    fn read_all(&self, b: &HostBuf) -> Vec<u32> {
        host_read(b)
    }
}

// ---- the host backend under the hazard checker ----------------------------------------------

type Vb = ValidatingBackend<HostBackend>;

impl Harness for Vb {
    fn stream(&self) -> Self::Stream {
        Backend::new_stream(self, "test").unwrap()
    }
    fn busy(&self, stream: &Self::Stream, d: Duration) {
        stream.inner().launch(move || std::thread::sleep(d));
    }
    fn sync_stream(&self, stream: &Self::Stream) {
        stream.inner().synchronize().unwrap();
    }
    fn holds_waits_before_signals(&self) -> bool {
        true
    }
}

/// Every kernel declares its accesses to the checker (one slot per buffer).
impl Mem for Vb {
    type Buf = HostBuf;
    const MORE_WORK: Duration = BUSY;
    fn alloc(&self, name: &'static str, n: usize) -> HostBuf {
        host_alloc(name, n)
    }
    fn fill(&self, s: &Self::Stream, b: &HostBuf, v: u32, delay: Duration) {
        host_fill(s.inner(), b, v, delay);
        self.access(s, Access::write("fill", b.name, 0, 0));
    }
    fn add(&self, s: &Self::Stream, b: &HostBuf, x: u32, delay: Duration) {
        host_add(s.inner(), b, x, delay);
        self.access(s, Access::read("add", b.name, 0, 0));
        self.access(s, Access::write("add", b.name, 0, 0));
    }
    fn copy(&self, s: &Self::Stream, src: &HostBuf, dst: &HostBuf, delay: Duration) {
        host_copy(s.inner(), src, dst, delay);
        self.access(s, Access::read("copy", src.name, 0, 0));
        self.access(s, Access::write("copy", dst.name, 0, 0));
    }
    fn read_all(&self, b: &HostBuf) -> Vec<u32> {
        host_read(b)
    }
    fn task_token(&self) -> Option<ActorId> {
        Some(self.checker().current_thread())
    }
    fn joined(&self, token: Option<ActorId>) {
        let me = self.checker().current_thread();
        self.checker()
            .join_actor(me, token.expect("a token of this backend"));
    }
}

// ---- CUDA memory ----------------------------------------------------------------------------

#[cfg(feature = "cuda")]
mod gpu_mem {
    use super::*;
    use seqsync::backend::cuda::{CudaBackend, DeviceBuffer};
    use seqsync::cudarc::driver::{LaunchConfig, PushKernelArg};
    use seqsync::internal::backend::cuda::{CudaFunction, CudaStream};
    use std::sync::OnceLock;

    const KERNELS: &str = r#"
__device__ void wait_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
extern "C" __global__ void fill_u32(unsigned int *out, int n, unsigned int v, unsigned long long ns) {
    wait_ns(ns);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = v;
}
extern "C" __global__ void add_u32(unsigned int *out, int n, unsigned int x, unsigned long long ns) {
    wait_ns(ns);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] += x;
}
extern "C" __global__ void copy_u32(unsigned int *dst, const unsigned int *src, int n, unsigned long long ns) {
    wait_ns(ns);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"#;

    fn kernels(b: &CudaBackend) -> &'static [CudaFunction] {
        static K: OnceLock<Vec<CudaFunction>> = OnceLock::new();
        K.get_or_init(|| {
            b.load_kernels(KERNELS, &["fill_u32", "add_u32", "copy_u32"])
                .expect("compile the handoff kernels")
        })
    }

    const CFG: LaunchConfig = LaunchConfig {
        grid_dim: (256, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };

    fn launch(
        b: &CudaBackend,
        s: &Arc<CudaStream>,
        k: usize,
        ptrs: &[u64],
        n: usize,
        scalar: Option<u32>,
        delay: Duration,
    ) {
        let f = &kernels(b)[k];
        let (n, ns) = (n as i32, delay.as_nanos() as u64);
        let mut l = s.launch_builder(f);
        for p in ptrs {
            l.arg(p);
        }
        l.arg(&n);
        if let Some(v) = scalar.as_ref() {
            l.arg(v);
        }
        l.arg(&ns);
        // SAFETY: the kernels take (u32* ..., int n, [u32], u64 ns) exactly as pushed; every
        // pointer is a live DeviceBuffer of at least n u32s, kept alive by the test until its
        // streams are synchronized.
        unsafe { l.launch(CFG) }.expect("launch a handoff kernel");
    }

    impl Mem for CudaBackend {
        type Buf = DeviceBuffer;
        const MORE_WORK: Duration = Duration::from_millis(20);
        fn alloc(&self, _name: &'static str, n: usize) -> DeviceBuffer {
            let b = self.alloc_device(n).unwrap();
            let s = self.new_stream("s").unwrap();
            self.fill(&s, &b, 0, Duration::ZERO);
            self.stream_synchronize(&s).unwrap();
            b
        }
        fn fill(&self, s: &Arc<CudaStream>, b: &DeviceBuffer, v: u32, delay: Duration) {
            launch(self, s, 0, &[b.device_ptr()], b.len(), Some(v), delay);
        }
        fn add(&self, s: &Arc<CudaStream>, b: &DeviceBuffer, x: u32, delay: Duration) {
            launch(self, s, 1, &[b.device_ptr()], b.len(), Some(x), delay);
        }
        fn copy(&self, s: &Arc<CudaStream>, src: &DeviceBuffer, dst: &DeviceBuffer, d: Duration) {
            let ptrs = [dst.device_ptr(), src.device_ptr()];
            launch(self, s, 2, &ptrs, dst.len(), None, d);
        }
        fn read_all(&self, b: &DeviceBuffer) -> Vec<u32> {
            let host = self.alloc_pinned(b.len()).unwrap();
            let s = self.new_stream("s").unwrap();
            // SAFETY: both buffers live until the synchronize below; the caller synchronized
            // every stream that wrote `b`, and nothing else touches `host`.
            unsafe { b.copy_to_pinned_async(&host, &s) }.unwrap();
            self.stream_synchronize(&s).unwrap();
            // SAFETY: the copy into `host` has completed (synchronized above).
            unsafe { host.as_slice() }.to_vec()
        }
    }
}

// ---- helpers --------------------------------------------------------------------------------

const N_HOST: usize = 1024;
const N_GPU: usize = 1 << 20;

fn n_of<G: Mem>(g: &G) -> usize {
    if g.name() == "cuda" {
        N_GPU
    } else {
        N_HOST
    }
}

struct Setup<G: Mem> {
    g: G,
    tb: TrackingBackend<G>,
}

impl<G: Mem> Setup<G> {
    fn new(g: &G) -> Self {
        Setup {
            g: g.clone(),
            tb: TrackingBackend::new(g.clone()),
        }
    }
    fn stream(&self, name: &str) -> TrackedStream<G> {
        self.tb.wrap_stream(self.g.stream(), name)
    }
    fn buf(&self, name: &'static str) -> Tracked<G::Buf> {
        self.tb.track(self.g.alloc(name, n_of(&self.g)))
    }
    /// `fill` through the tracker; the waits it inserted.
    fn fill(&self, s: &TrackedStream<G>, a: &Tracked<G::Buf>, v: u32, delay: Duration) -> usize {
        let g = &self.g;
        self.tb
            .submit(s, &[a.write()], |s, cx| g.fill(s, a.get(cx), v, delay))
            .unwrap()
            .waits
    }
    fn add(&self, s: &TrackedStream<G>, a: &Tracked<G::Buf>, x: u32, delay: Duration) -> usize {
        let g = &self.g;
        self.tb
            .submit(s, &[a.write()], |s, cx| g.add(s, a.get(cx), x, delay))
            .unwrap()
            .waits
    }
    fn copy(
        &self,
        s: &TrackedStream<G>,
        src: &Tracked<G::Buf>,
        dst: &Tracked<G::Buf>,
        delay: Duration,
    ) -> usize {
        let g = &self.g;
        self.tb
            .submit(s, &[src.read(), dst.write()], |s, cx| {
                g.copy(s, src.get(cx), dst.get(cx), delay)
            })
            .unwrap()
            .waits
    }
    fn event(&self) -> <TrackingBackend<G> as Backend>::Event {
        self.tb.create_event(Default::default()).unwrap()
    }
    fn sync(&self, s: &TrackedStream<G>) {
        self.tb.synchronize_stream(s).unwrap();
    }
    /// The value of every element, read on the host the seed's way: a raw reference for a
    /// scratch stream (which waits for whatever the buffer's uses need), then a synchronize.
    fn value(&self, a: &Tracked<G::Buf>) -> u32 {
        let scratch = self.stream("read-back");
        let p = self.tb.raw(a, &scratch).unwrap();
        self.sync(&scratch);
        let v = self.g.read_all(p);
        let first = v[0];
        let differ = v.iter().filter(|&&x| x != first).count();
        assert_eq!(
            differ, 0,
            "{differ} elements differ from the first ({first})"
        );
        first
    }
    fn stats(&self) -> HandoffStats {
        self.tb.stats()
    }
}

/// The moment a stream got to a point: a host function enqueued there with
/// [`Backend::launch_host`] on the backend's own stream (outside the tracker, which never sees
/// it) sends the time it ran. Both sides of every timing check are such stream-side times, so
/// a loaded machine that is slow to wake the test thread does not move them.
struct Stamp(mpsc::Receiver<Instant>);

impl Stamp {
    fn on<G: Mem>(g: &G, s: &G::Stream) -> Stamp {
        let (tx, rx) = mpsc::channel();
        g.launch_host(
            s,
            Box::new(move || {
                let _ = tx.send(Instant::now());
            }),
        )
        .expect("enqueue a stamp");
        Stamp(rx)
    }
    /// When the stream got there (blocks until it has).
    fn at(&self) -> Instant {
        self.0
            .recv_timeout(Duration::from_secs(60))
            .expect("the stream never got to its stamp")
    }
}

/// Slow work queued on the old stream, `len` of it, between two stamps.
struct Busy {
    start: Stamp,
    end: Stamp,
    len: Duration,
}

impl Busy {
    /// `enqueue` (which queues `len` of work on `s`) between two stamps on `s`.
    fn around<G: Mem>(g: &G, s: &G::Stream, len: Duration, enqueue: impl FnOnce()) -> Busy {
        let start = Stamp::on(g, s);
        enqueue();
        let end = Stamp::on(g, s);
        Busy { start, end, len }
    }
    /// `len` of the harness's busy work on `s`.
    fn queue<G: Mem>(g: &G, s: &G::Stream, len: Duration) -> Busy {
        Busy::around(g, s, len, || g.busy(s, len))
    }
}

/// `f` (which submits the move on `s`), a stamp after it on `s`, and a synchronize of `s`:
/// the waits `f` inserted and when `s` finished the move's work.
fn moved<G: Mem>(st: &Setup<G>, s: &TrackedStream<G>, f: impl FnOnce() -> usize) -> (usize, Stamp) {
    let waits = f();
    let done = Stamp::on(&st.g, s.inner());
    st.sync(s);
    (waits, done)
}

/// Milliseconds from `from` to `to`, negative when `to` is earlier.
fn ms(from: Instant, to: Instant) -> f64 {
    match to.checked_duration_since(from) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -from.duration_since(to).as_secs_f64() * 1e3,
    }
}

/// The outcome of a case's timing checks: `Err` says which check missed. The counts of inserted
/// waits and the values are asserted on every attempt; only a timing miss is retried
/// ([`with_retries`]).
type Timing = Result<(), String>;

/// A move that needs no wait overlaps the old stream's slow work: the new stream finished the
/// move's work before the old stream finished its `busy.len` of work (an order of two
/// stream-side times, no bound in ms). A tracker that inserts the wait fails this on every
/// attempt: the wait covers the end stamp, so the move's work finishes after it.
fn overlaps(what: &str, done: Stamp, busy: Busy) -> Timing {
    let (start, end, done) = (busy.start.at(), busy.end.at(), done.at());
    eprintln!(
        "{what}: the new stream's work finished at {:.3} ms, the {:?} queued on the old one at {:.3} ms",
        ms(start, done),
        busy.len,
        ms(start, end)
    );
    if done < end {
        Ok(())
    } else {
        Err(format!(
            "{what}: the new stream's work finished at {:.3} ms, after the {:?} queued on the old \
             stream (done at {:.3} ms): it waited for it",
            ms(start, done),
            busy.len,
            ms(start, end)
        ))
    }
}

/// A move that waits finishes at least `busy.len` after the old stream started its slow work
/// (a load only makes it later, so this is asserted, never retried).
fn assert_waited(what: &str, done: Stamp, busy: Busy) {
    let (start, done) = (busy.start.at(), done.at());
    let took = ms(start, done);
    eprintln!(
        "{what}: the new stream's work finished at {took:.3} ms, after the {:?} on the old one",
        busy.len
    );
    assert!(
        took >= busy.len.as_secs_f64() * 1e3 * 0.9,
        "{what}: finished at {took:.3} ms: it did not wait for the {:?} on the old stream",
        busy.len
    );
}

/// Attempts of a case whose timing missed before it fails.
const ATTEMPTS: usize = 3;

/// Run `attempt` (a whole case, on fresh objects) until its timing checks pass, at most
/// [`ATTEMPTS`] times: one clean pass is enough, a timing miss on every attempt fails.
fn with_retries(mut attempt: impl FnMut() -> Timing) {
    let mut misses = Vec::new();
    for _ in 0..ATTEMPTS {
        match attempt() {
            Ok(()) => return,
            Err(miss) => {
                eprintln!("timing missed (retrying): {miss}");
                misses.push(miss);
            }
        }
    }
    panic!("the timing missed on all {ATTEMPTS} attempts: {misses:#?}");
}

// ---- the seed's cases -----------------------------------------------------------------------

/// Events synchronized on the host avoid waiting: `a` was written before `e`, the host
/// synchronized `e`, so `a` moves to `t` with no wait although `s` is busy.
fn host_synchronized_event_avoids_the_wait<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (st.stream("s"), st.stream("t"));
    let a = st.buf("a");
    st.fill(&s, &a, 1, Duration::ZERO);
    let e = st.event();
    st.tb.record(&e, &s).unwrap();
    st.tb.synchronize(&e).unwrap();
    let busy = Busy::queue(g, s.inner(), BUSY);
    let (waits, done) = moved(&st, &t, || st.add(&t, &a, 1, Duration::ZERO));
    assert_eq!(waits, 0);
    assert_eq!(st.stats().completed, 1, "{:?}", st.stats());
    let timing = overlaps("after an event synchronize", done, busy);
    st.sync(&s);
    assert_eq!(st.value(&a), 2);
    timing
}

/// A query that returned `true` counts as the host seeing the event complete.
fn queried_event_avoids_the_wait<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (st.stream("s"), st.stream("t"));
    let a = st.buf("a");
    st.fill(&s, &a, 1, Duration::ZERO);
    let e = st.event();
    st.tb.record(&e, &s).unwrap();
    while !st.tb.query(&e).unwrap() {
        std::thread::sleep(Duration::from_micros(100));
    }
    let busy = Busy::queue(g, s.inner(), BUSY);
    let (waits, done) = moved(&st, &t, || st.add(&t, &a, 1, Duration::ZERO));
    assert_eq!(waits, 0);
    assert_eq!(st.stats().completed, 1, "{:?}", st.stats());
    let timing = overlaps("after a query that returned true", done, busy);
    st.sync(&s);
    assert_eq!(st.value(&a), 2);
    timing
}

/// A stream synchronize through the tracker is the completed fact too.
fn synchronized_stream_avoids_the_wait<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (st.stream("s"), st.stream("t"));
    let a = st.buf("a");
    st.fill(&s, &a, 1, Duration::ZERO);
    st.sync(&s);
    let busy = Busy::queue(g, s.inner(), BUSY);
    let (waits, done) = moved(&st, &t, || st.add(&t, &a, 1, Duration::ZERO));
    assert_eq!(waits, 0);
    assert_eq!(st.stats().completed, 1, "{:?}", st.stats());
    let timing = overlaps("after a stream synchronize", done, busy);
    st.sync(&s);
    assert_eq!(st.value(&a), 2);
    timing
}

/// Events waited for by a stream avoid waiting: `t` waited for `e`, which covers the write,
/// so the move inserts nothing and does not wait for the work queued after `e`.
fn stream_waited_event_avoids_the_wait<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (st.stream("s"), st.stream("t"));
    let a = st.buf("a");
    st.fill(&s, &a, 1, Duration::from_millis(10));
    let e = st.event();
    st.tb.record(&e, &s).unwrap();
    let busy = Busy::queue(g, s.inner(), BUSY);
    let (waits, done) = moved(&st, &t, || {
        st.tb.wait(&t, &e).unwrap();
        st.add(&t, &a, 1, Duration::ZERO)
    });
    assert_eq!(waits, 0);
    assert_eq!(st.stats().ordered, 1, "{:?}", st.stats());
    let timing = overlaps("after a stream wait", done, busy);
    st.sync(&s);
    assert_eq!(
        st.value(&a),
        2,
        "the add ran before the fill it was ordered after"
    );
    timing
}

/// The ordered fact is transitive: `u` waited for `t`, which had waited for `s`.
fn ordered_fact_is_transitive<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t, u) = (st.stream("s"), st.stream("t"), st.stream("u"));
    let a = st.buf("a");
    st.fill(&s, &a, 1, Duration::from_millis(10));
    let (e1, e2) = (st.event(), st.event());
    st.tb.record(&e1, &s).unwrap();
    let busy = Busy::queue(g, s.inner(), BUSY);
    st.tb.wait(&t, &e1).unwrap();
    st.tb.record(&e2, &t).unwrap();
    st.tb.wait(&u, &e2).unwrap();
    let (waits, done) = moved(&st, &u, || st.add(&u, &a, 1, Duration::ZERO));
    assert_eq!(waits, 0);
    let timing = overlaps("ordered through a second stream", done, busy);
    st.sync(&s);
    assert_eq!(st.value(&a), 2);
    timing
}

/// A re-recorded event carries its stream's ordered fact as it is at the new record: `e2` was
/// recorded on `t` before `t` waited for `e1`, then again after; the second recording covers
/// `s`'s write through `e1` (a snapshot kept from the first record would not).
fn ordered_fact_is_transitive_after_a_rerecord<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t, u) = (st.stream("s"), st.stream("t"), st.stream("u"));
    let a = st.buf("a");
    st.fill(&s, &a, 1, Duration::from_millis(10));
    let (e1, e2) = (st.event(), st.event());
    st.tb.record(&e2, &t).unwrap(); // t is ordered after nothing yet
    st.tb.record(&e1, &s).unwrap();
    let busy = Busy::queue(g, s.inner(), BUSY);
    st.tb.wait(&t, &e1).unwrap();
    st.tb.record(&e2, &t).unwrap(); // now t is ordered after the fill
    st.tb.wait(&u, &e2).unwrap();
    let (waits, done) = moved(&st, &u, || st.add(&u, &a, 1, Duration::ZERO));
    assert_eq!(waits, 0, "{:?}", st.stats());
    assert_eq!(st.stats().ordered, 1, "{:?}", st.stats());
    let timing = overlaps("ordered through a re-recorded event", done, busy);
    st.sync(&s);
    assert_eq!(st.value(&a), 2);
    timing
}

/// Streams taken over from finished owners avoid waiting: a thread wrote `a` on `s` and
/// exited; this thread takes `s` over, so its event on `s` covers the write.
fn taken_over_stream_avoids_the_wait<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (Arc::new(st.stream("s")), st.stream("t"));
    let a = Arc::new(st.buf("a"));
    let (g2, tb2, s2, a2) = (g.clone(), st.tb.clone(), s.clone(), a.clone());
    std::thread::spawn(move || {
        tb2.submit(&s2, &[a2.write()], |s, cx| {
            g2.fill(s, a2.get(cx), 1, Duration::from_millis(10))
        })
        .unwrap();
    })
    .join()
    .unwrap();
    let e = st.event();
    st.tb.record(&e, &s).unwrap(); // the owner finished: this thread took `s` over
    let busy = Busy::queue(g, s.inner(), BUSY);
    let (waits, done) = moved(&st, &t, || {
        st.tb.wait(&t, &e).unwrap();
        st.add(&t, &a, 1, Duration::ZERO)
    });
    assert_eq!(waits, 0);
    let timing = overlaps("on a taken-over stream", done, busy);
    st.sync(&s);
    assert_eq!(st.value(&a), 2);
    timing
}

/// Memory used after the event still waits: `e` was recorded before the write, so it does
/// not cover it; the move waits for `s` (including the write, which is slow).
fn memory_used_after_the_event_still_waits<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (st.stream("s"), st.stream("t"));
    let a = st.buf("a");
    let e = st.event();
    st.tb.record(&e, &s).unwrap();
    let busy = Busy::around(g, s.inner(), BUSY, || {
        st.fill(&s, &a, 1, BUSY);
    });
    let (waits, done) = moved(&st, &t, || {
        st.tb.wait(&t, &e).unwrap();
        st.add(&t, &a, 1, Duration::ZERO)
    });
    assert_eq!(waits, 1);
    assert_waited("memory used after the event", done, busy);
    st.sync(&s);
    assert_eq!(st.value(&a), 2, "the add ran before the fill");
    Ok(())
}

/// Events recorded by another owner still wait: a live thread owns `s`; an event this
/// thread records on `s` covers nothing, so the move waits for all of `s`.
fn event_recorded_by_another_owner_still_waits<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (Arc::new(st.stream("s")), st.stream("t"));
    let a = Arc::new(st.buf("a"));
    let (g2, tb2, s2, a2) = (g.clone(), st.tb.clone(), s.clone(), a.clone());
    let (filled, filled_rx) = mpsc::channel();
    let (done, done_rx) = mpsc::channel::<()>();
    let owner = std::thread::spawn(move || {
        tb2.submit(&s2, &[a2.write()], |s, cx| {
            g2.fill(s, a2.get(cx), 1, Duration::ZERO)
        })
        .unwrap();
        filled.send(()).unwrap();
        done_rx.recv().unwrap(); // stay alive: `s` keeps a live owner
    });
    filled_rx.recv().unwrap();
    let e = st.event();
    st.tb.record(&e, &s).unwrap();
    let busy = Busy::queue(g, s.inner(), BUSY);
    let (waits, moved_done) = moved(&st, &t, || {
        st.tb.wait(&t, &e).unwrap();
        st.add(&t, &a, 1, Duration::ZERO)
    });
    done.send(()).unwrap();
    owner.join().unwrap();
    assert_eq!(waits, 1);
    assert_eq!(st.stats().ordered, 0, "{:?}", st.stats());
    assert_waited("event recorded by another owner", moved_done, busy);
    st.sync(&s);
    assert_eq!(st.value(&a), 2);
    Ok(())
}

/// Events re-recorded elsewhere still wait: `e` covered the write on `s`, then was recorded
/// again on `u`; waiting for it now orders nothing of `s`.
fn event_rerecorded_elsewhere_still_waits<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t, u) = (st.stream("s"), st.stream("t"), st.stream("u"));
    let a = st.buf("a");
    st.fill(&s, &a, 1, Duration::ZERO);
    let e = st.event();
    st.tb.record(&e, &s).unwrap();
    let busy = Busy::queue(g, s.inner(), BUSY);
    st.tb.record(&e, &u).unwrap();
    let (waits, done) = moved(&st, &t, || {
        st.tb.wait(&t, &e).unwrap();
        st.add(&t, &a, 1, Duration::ZERO)
    });
    assert_eq!(waits, 1);
    assert_waited("event re-recorded elsewhere", done, busy);
    st.sync(&s);
    assert_eq!(st.value(&a), 2);
    Ok(())
}

/// An event re-recorded on a stream that another live thread owns covers nothing, not even
/// what its earlier recording covered.
fn event_rerecorded_on_another_owners_stream_still_waits<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t, u) = (st.stream("s"), st.stream("t"), Arc::new(st.stream("u")));
    let a = st.buf("a");
    let other = Arc::new(st.buf("other"));
    st.fill(&s, &a, 1, Duration::ZERO);
    let e = st.event();
    st.tb.record(&e, &s).unwrap(); // covers the fill
    let busy = Busy::queue(g, s.inner(), BUSY);
    let (g2, tb2, u2, o2) = (g.clone(), st.tb.clone(), u.clone(), other.clone());
    let (used, used_rx) = mpsc::channel();
    let (done, done_rx) = mpsc::channel::<()>();
    let owner = std::thread::spawn(move || {
        tb2.submit(&u2, &[o2.write()], |s, cx| {
            g2.fill(s, o2.get(cx), 3, Duration::ZERO)
        })
        .unwrap();
        used.send(()).unwrap();
        done_rx.recv().unwrap(); // stay alive: `u` keeps a live owner
    });
    used_rx.recv().unwrap();
    st.tb.record(&e, &u).unwrap(); // on another live owner's stream: covers nothing
    let (waits, moved_done) = moved(&st, &t, || {
        st.tb.wait(&t, &e).unwrap();
        st.add(&t, &a, 1, Duration::ZERO)
    });
    done.send(()).unwrap();
    owner.join().unwrap();
    assert_eq!(waits, 1, "{:?}", st.stats());
    assert_waited(
        "event re-recorded on another owner's stream",
        moved_done,
        busy,
    );
    st.sync(&s);
    assert_eq!(st.value(&a), 2);
    Ok(())
}

/// Events re-recorded while another thread waits for them still wait: a thread blocks in a
/// host synchronize of `e` (covering the write on `s`, behind `BUSY` of work); meanwhile `e`
/// is recorded again on `u`. The synchronize returns, but counts for nothing. Without the
/// re-record (first half) the same synchronize makes the move free.
fn event_rerecorded_while_another_task_waits_still_waits<G: Mem>(g: &G) -> Timing {
    let mut timing = Ok(());
    for rerecord in [false, true] {
        let st = Setup::new(g);
        let (s, t, u) = (st.stream("s"), st.stream("t"), st.stream("u"));
        let a = Arc::new(st.buf("a"));
        st.fill(&s, &a, 1, BUSY / 2);
        let e = Arc::new(st.event());
        st.tb.record(&e, &s).unwrap();
        let (g2, tb2, e2) = (g.clone(), st.tb.clone(), e.clone());
        let (started, started_rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            started.send(()).unwrap();
            tb2.synchronize(&e2).unwrap();
            g2.task_token()
        });
        started_rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(10)); // the waiter is in its synchronize
        if rerecord {
            st.tb.record(&e, &u).unwrap();
        }
        g.joined(waiter.join().unwrap());
        let busy = Busy::queue(g, s.inner(), BUSY);
        let (waits, done) = moved(&st, &t, || st.add(&t, &a, 1, Duration::ZERO));
        if rerecord {
            assert_eq!(
                waits,
                1,
                "re-recorded during the synchronize: {:?}",
                st.stats()
            );
            assert_waited("re-recorded while another thread waited", done, busy);
        } else {
            assert_eq!(waits, 0, "{:?}", st.stats());
            timing = overlaps("synchronized by another thread", done, busy);
        }
        st.sync(&s);
        assert_eq!(st.value(&a), 2);
    }
    timing
}

/// Launches through a pointer taken before the synchronize still wait: `p = raw(a)`,
/// synchronize, then work through `p` that the tracker never saw; the move waits for it.
fn launch_through_pointer_taken_before_the_synchronize_still_waits<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (st.stream("s"), st.stream("t"));
    let a = st.buf("a");
    st.fill(&s, &a, 1, Duration::ZERO);
    let p = st.tb.raw(&a, &s).unwrap();
    st.sync(&s);
    // through the raw pointer: 1 + 1, slowly
    let busy = Busy::around(g, s.inner(), BUSY, || g.add(s.inner(), p, 1, BUSY));
    let (waits, done) = moved(&st, &t, || st.fill(&t, &a, 10, Duration::ZERO));
    assert_eq!(waits, 1);
    assert_eq!(st.stats().raw, 1, "{:?}", st.stats());
    assert_waited("pointer taken before a synchronize", done, busy);
    st.sync(&s);
    assert_eq!(
        st.value(&a),
        10,
        "the fill ran before the add through the raw pointer"
    );
    Ok(())
}

/// Launches through a pointer taken before the event still wait, though the new stream
/// waited for the event.
fn launch_through_pointer_taken_before_the_event_still_waits<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (st.stream("s"), st.stream("t"));
    let a = st.buf("a");
    st.fill(&s, &a, 1, Duration::ZERO);
    let p = st.tb.raw(&a, &s).unwrap();
    let e = st.event();
    st.tb.record(&e, &s).unwrap();
    let busy = Busy::around(g, s.inner(), BUSY, || g.add(s.inner(), p, 1, BUSY));
    let (waits, done) = moved(&st, &t, || {
        st.tb.wait(&t, &e).unwrap();
        st.fill(&t, &a, 10, Duration::ZERO)
    });
    assert_eq!(waits, 1);
    assert_waited("pointer taken before an event", done, busy);
    st.sync(&s);
    // The move ended the raw state: with `t` synchronized, the shortcut applies again.
    st.sync(&t);
    assert_eq!(st.add(&s, &a, 1, Duration::ZERO), 0);
    st.sync(&s);
    assert_eq!(
        st.value(&a),
        11,
        "the fill ran before the add through the raw pointer"
    );
    Ok(())
}

/// Read after read needs no wait; the write after both reads waits for the slow one.
fn read_after_read_needs_no_wait<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t, u) = (st.stream("s"), st.stream("t"), st.stream("u"));
    let (a, b, c) = (st.buf("a"), st.buf("b"), st.buf("c"));
    st.fill(&s, &a, 1, Duration::ZERO);
    st.sync(&s);
    // Two unordered readers of `a`: the second needs nothing of the first.
    let busy = Busy::around(g, u.inner(), BUSY, || {
        assert_eq!(st.copy(&u, &a, &b, BUSY), 0);
    });
    assert_eq!(st.copy(&t, &a, &c, Duration::ZERO), 0);
    assert_eq!(st.stats().waits, 0);
    // A write of `a` on `t` must wait for `u`'s slow read (and only that).
    let (waits, done) = moved(&st, &t, || st.fill(&t, &a, 7, Duration::ZERO));
    assert_eq!(waits, 1);
    assert_waited("write after a slow read elsewhere", done, busy);
    st.sync(&u);
    assert_eq!(st.value(&b), 1, "the write overtook the read");
    assert_eq!(st.value(&c), 1);
    assert_eq!(st.value(&a), 7);
    Ok(())
}

/// Write after write on another stream waits; on the same stream, never.
fn write_after_write_waits_except_on_the_same_stream<G: Mem>(g: &G) -> Timing {
    let st = Setup::new(g);
    let (s, t) = (st.stream("s"), st.stream("t"));
    let a = st.buf("a");
    let busy = Busy::around(g, s.inner(), BUSY, || {
        st.fill(&s, &a, 1, BUSY);
    });
    assert_eq!(st.add(&s, &a, 1, Duration::ZERO), 0);
    let (waits, done) = moved(&st, &t, || st.add(&t, &a, 1, Duration::ZERO));
    assert_eq!(waits, 1);
    assert_waited("write after write elsewhere", done, busy);
    assert_eq!(st.value(&a), 3);
    Ok(())
}

/// The seed's motivating example: the parent writes `a`, records `e`, and queues
/// `MORE_WORK` of `more_work` on `b`; a child thread waits for `e` on its own stream and
/// updates `a`. The child's update finishes long before `more_work`, and `a` is right. The
/// baseline without shortcuts (every move waits for the old stream) finishes after it.
fn motivating_example<G: Mem>(g: &G) -> Timing {
    let more = G::MORE_WORK;
    let mut finished = Vec::new();
    let mut timing = Ok(());
    for shortcuts in [true, false] {
        let tb = if shortcuts {
            TrackingBackend::new(g.clone())
        } else {
            TrackingBackend::without_shortcuts(g.clone())
        };
        let st = Setup { g: g.clone(), tb };
        let parent = st.stream("parent");
        let child = st.stream("child");
        // (names differ per run: the hazard checker keys buffers by name)
        let names = if shortcuts { ("a", "b") } else { ("a0", "b0") };
        let (a, b) = (Arc::new(st.buf(names.0)), st.buf(names.1));
        st.fill(&parent, &a, 1, Duration::ZERO); // a .= 1
        let e = st.event();
        st.tb.record(&e, &parent).unwrap(); // record(e)
        let busy = Busy::around(g, parent.inner(), more, || {
            st.fill(&parent, &b, 5, more); // more_work!(b)
        });
        let (g2, tb2, a2) = (g.clone(), st.tb.clone(), a.clone());
        let (waits, child_done) = std::thread::spawn(move || {
            tb2.wait(&child, &e).unwrap(); // CUDA.wait(e) on the child's stream
            let r = tb2
                .submit(&child, &[a2.write()], |s, cx| {
                    g2.add(s, a2.get(cx), 1, Duration::ZERO)
                })
                .unwrap(); // a .+= 1
            let done = Stamp::on(&g2, child.inner());
            tb2.synchronize_stream(&child).unwrap();
            (r.waits, done)
        })
        .join()
        .unwrap();
        st.sync(&parent);
        let (start, end, child_at) = (busy.start.at(), busy.end.at(), child_done.at());
        eprintln!(
            "motivating example on {} ({}): child finished at {:.3} ms, more_work at {:.3} ms",
            g.name(),
            if shortcuts { "epochs" } else { "no shortcuts" },
            ms(start, child_at),
            ms(start, end)
        );
        assert_eq!(st.value(&a), 2);
        assert_eq!(st.value(&b), 5);
        if shortcuts {
            assert_eq!(waits, 0);
            if child_at >= end {
                timing = Err(format!(
                    "the child's update finished at {:.3} ms, after more_work ({more:?}, done \
                     at {:.3} ms): it waited for it",
                    ms(start, child_at),
                    ms(start, end)
                ));
            }
        } else {
            assert_eq!(waits, 1);
            assert!(
                ms(start, child_at) >= more.as_secs_f64() * 1e3 * 0.9,
                "without shortcuts the child finished at {:.3} ms, before more_work ({:.3} ms)",
                ms(start, child_at),
                ms(start, end)
            );
        }
        finished.push(ms(start, child_at));
    }
    eprintln!(
        "motivating example on {}: child finishes at {:.3} ms with epochs vs {:.3} ms without",
        g.name(),
        finished[0],
        finished[1]
    );
    timing
}

/// A tracked stream of another tracker, or a buffer of another tracker, is an error.
fn other_trackers_objects_are_errors<G: Mem>(g: &G) -> Timing {
    let (one, two) = (Setup::new(g), Setup::new(g));
    let s1 = one.stream("s1");
    let a2 = two.buf("a2");
    let err = one.tb.submit(&s1, &[a2.write()], |_, _| ()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ring 'handoff': invalid argument: use #0 is of a buffer of another tracker"
    );
    let s2 = two.stream("s2");
    let err = one.tb.synchronize_stream(&s2).unwrap_err();
    assert_eq!(
        err.to_string(),
        "ring 'handoff': invalid argument: stream 's2' belongs to another tracker"
    );
    Ok(())
}

macro_rules! handoff_cases {
    ($($name:ident),* $(,)?) => {
        mod host {
            $( #[test] fn $name() {
                super::with_retries(|| super::$name(&seqsync::HostBackend::new()))
            } )*
        }
        #[cfg(feature = "cuda")]
        mod cuda {
            $( #[test]
            #[cfg_attr(not(feature = "gpu-tests"), ignore = "needs a GPU: cargo test --features gpu-tests")]
            fn $name() {
                if let Some(g) = super::common::gpu::gpu() {
                    super::with_retries(|| super::$name(&g.backend))
                }
            } )*
        }
        $crate::gpu_required!();
        /// The same bodies on the host backend under the hazard checker: no hazard allowed
        /// (a fresh checker for each attempt).
        mod hazard {
            $( #[test] fn $name() {
                super::with_retries(|| {
                    let vb = super::Vb::new(seqsync::HostBackend::new());
                    let timing = super::$name(&vb);
                    assert!(vb.checker().is_clean(), "{}", vb.checker().report());
                    timing
                })
            } )*
        }
    };
}

handoff_cases!(
    host_synchronized_event_avoids_the_wait,
    queried_event_avoids_the_wait,
    synchronized_stream_avoids_the_wait,
    stream_waited_event_avoids_the_wait,
    ordered_fact_is_transitive,
    ordered_fact_is_transitive_after_a_rerecord,
    taken_over_stream_avoids_the_wait,
    memory_used_after_the_event_still_waits,
    event_recorded_by_another_owner_still_waits,
    event_rerecorded_elsewhere_still_waits,
    event_rerecorded_on_another_owners_stream_still_waits,
    event_rerecorded_while_another_task_waits_still_waits,
    launch_through_pointer_taken_before_the_synchronize_still_waits,
    launch_through_pointer_taken_before_the_event_still_waits,
    read_after_read_needs_no_wait,
    write_after_write_waits_except_on_the_same_stream,
    motivating_example,
    other_trackers_objects_are_errors,
);

/// The hazard checker does see a missing wait in these bodies: the move of the motivating
/// example with the child's wait left out (and the tracker bypassed) is reported.
#[test]
fn hazard_checker_sees_an_unordered_move() {
    let vb = Vb::new(HostBackend::new());
    let (s, t) = (vb.stream(), vb.stream());
    let a = vb.alloc("a", 4);
    vb.fill(&s, &a, 1, Duration::ZERO);
    vb.add(&t, &a, 1, Duration::ZERO);
    vb.sync_stream(&s);
    vb.sync_stream(&t);
    assert!(!vb.checker().is_clean());
}
