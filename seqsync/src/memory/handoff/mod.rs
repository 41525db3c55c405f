//! Buffer handoff by epochs (seed 003): moving a buffer between streams — and between the host
//! threads that own them — waits only for what no event or synchronize already ordered.
//!
//! It may use: `backend`, through the [`Backend`](crate::backend::Backend) trait only, the
//! vector clocks of `happens_before` (the hazard checker's too), and the crate's short-section
//! `lock`.
//!
//! A library that tracks buffers (CUDA.jl, cudarc's per-slice events) makes a buffer's new
//! stream wait for everything its old stream queued. That is more than needed when the
//! program already ordered the work with an event: a parent thread writes `a`, records `e`,
//! and goes on queueing more work; a child thread makes its own stream wait for `e` and
//! updates `a`. The child's update should not wait for the parent's later work, and here it
//! does not.
//!
//! # The model
//!
//! - Each tracked stream's work is cut into **epochs**. A [`Tracked`] buffer remembers, per
//!   stream, the epoch of its last read and of its last write. Recording an event on a stream
//!   or synchronizing it closes the stream's open epoch.
//! - **Completed**: the host saw a point finish — an event synchronize, a stream synchronize,
//!   or a query that returned `true`. Uses in the epochs it covers are over.
//! - **Ordered**: a stream waited for an event; its later work runs after everything the event
//!   covers (and, transitively, everything the event's stream was ordered after: the facts are
//!   vector clocks, the hazard checker's `VectorClock`).
//! - Using a buffer on a stream ([`TrackingBackend::submit`]) waits for each earlier use on
//!   another stream that neither fact covers — one stream wait per such stream, none for a
//!   read after reads — and stamps the use.
//! - **Tasks**: a stream is used by host threads ("tasks"). An epoch counts only if the task
//!   that closed it is the only live task submitting to the stream: events recorded on
//!   another task's stream, or on a stream several live tasks use, cover nothing (between
//!   another task's stamp and its submission the close would seem to cover work not yet
//!   submitted). A task ends when its thread exits or calls [`end_task`]; a stream whose
//!   tasks have ended is **taken over** by the next task that submits to it.
//! - A **re-recorded** event covers only its latest recording; a host wait counts only if
//!   the event was not recorded again meanwhile (host waits do not hold the tracker's lock;
//!   stream waits and records do, so they see a consistent recording).
//! - A **raw** reference taken out with [`TrackingBackend::raw`] is stamped once and gets no
//!   shortcut: until the buffer moves to another stream, its next use elsewhere waits for
//!   everything submitted to the old stream. Work submitted through the old reference after
//!   that move is not ordered with the new stream's work (it never was).
//!
//! Dropping a [`TrackedStream`] synchronizes it. Anything can be tracked: device memory
//! (`Tracked<DeviceBuffer>`), host memory that host streams use, a library handle.
//!
//! # Command graphs
//!
//! Recording a graph produces neither fact; launching it stamps its buffers (seed 003).
//!
//! - **Recording and instantiating** ([`CommandBuffer`](crate::graph::CommandBuffer),
//!   [`Graph::instantiate`](crate::graph::Graph::instantiate)) happen on the *inner*
//!   backend: the graph layer needs a `GraphBackend`, and
//!   `TrackingBackend` is not one. They enqueue nothing on a stream, so no epoch closes, no
//!   fact is made, no buffer is stamped. Ordering *inside* a graph (its edges; on CUDA an
//!   event record or wait made while a stream is captured, which only adds a node or an edge)
//!   is not seen by the tracker, and must not be: a node runs only when the graph is
//!   launched, once per launch, so at recording time there is no queued work it could cover
//!   or be ordered after.
//! - **Launching** is a use, at every replay: enqueue it with
//!   `tb.submit(&stream, &[buf.write(), ...], |s, _| exe.launch(s))`, declaring every tracked
//!   buffer the graph reads or writes (the tracker cannot look into the graph). That inserts
//!   the waits the buffers' earlier uses need and stamps them with `stream`'s epoch, like any
//!   other work. A launch not made through [`submit`](TrackingBackend::submit) (on
//!   [`TrackedStream::inner`], or by a [`Queues`](crate::graph::Queues) over the
//!   inner backend) is not seen: it stamps nothing.
//! - **What counts**: records, stream waits and synchronizes made through the
//!   `TrackingBackend` on its tracked streams, before or after a launch, are ordinary calls
//!   and do make facts: an event recorded after a tracked launch covers it, one recorded
//!   before does not. Records and waits made on the inner backend — by a graph's
//!   streams lowering run by a `Queues` over the inner backend, the only way the graph
//!   layer can run today — are not seen and make no fact (and since that pool's work is
//!   unseen too, order it with the tracked streams yourself). Were `TrackingBackend` to
//!   implement `CommandBackend`, a pool over it would make its records and waits through the
//!   tracker, and they would count like any others; its kernels, copies and fills would still
//!   be uses the tracker does not see.
//!
//! # Example
//!
//! A buffer moves from the parent's stream to a child thread's stream; the event the child
//! waits for already orders it, so the tracker inserts no wait and the child's work does not
//! wait for the parent's later work:
//!
//! ```
//! use seqsync::backend::Backend;
//! use seqsync::memory::handoff::TrackingBackend;
//! use seqsync::HostBackend;
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let host = HostBackend::new();
//! let tb = TrackingBackend::new(host.clone());
//! let parent = tb.wrap_stream(host.new_stream("parent")?, "parent");
//! let child = tb.wrap_stream(host.new_stream("child")?, "child");
//! let a = Arc::new(tb.track(Arc::new(AtomicU32::new(0))));
//!
//! tb.submit(&parent, &[a.write()], |s, cx| {
//!     let a = a.get(cx).clone();
//!     s.launch(move || a.store(1, Ordering::Relaxed)); // a .= 1
//! })?;
//! let e = tb.create_event(Default::default())?;
//! tb.record(&e, &parent)?;
//! parent.inner().launch(|| std::thread::sleep(Duration::from_millis(50))); // more work
//!
//! let (tb2, a2) = (tb.clone(), a.clone());
//! let waits = std::thread::spawn(move || -> seqsync::Result<usize> {
//!     tb2.wait(&child, &e)?; // the child's stream waits for `e`
//!     let r = tb2.submit(&child, &[a2.write()], |s, cx| {
//!         let a = a2.get(cx).clone();
//!         s.launch(move || { a.fetch_add(1, Ordering::Relaxed); }); // a .+= 1
//!     })?;
//!     tb2.synchronize_stream(&child)?;
//!     Ok(r.waits)
//! })
//! .join()
//! .unwrap()?;
//! assert_eq!(waits, 0); // ordered by `e`: no wait for the parent's later work
//! assert_eq!(tb.stats().ordered, 1);
//! tb.synchronize_stream(&parent)?;
//! # let cx_check = tb.submit(&parent, &[a.read()], |_, cx| a.get(cx).load(Ordering::Relaxed))?;
//! # assert_eq!(cx_check.value, 2);
//! # Ok::<(), seqsync::Error>(())
//! ```

pub(crate) mod backend;
mod buffer;
pub(crate) mod state;
mod task;

pub use backend::{TrackedStream, TrackingBackend};
pub use buffer::{Ctx, Submitted, Tracked, Use};
pub use task::end_task;
