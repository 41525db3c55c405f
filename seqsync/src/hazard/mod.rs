//! Hazard checking for hand-written pipelines: a validation mode that reports every access to
//! a buffer slot not ordered after the previous conflicting access.
//!
//! It may use: `backend`, through the [`Backend`](crate::backend::Backend) trait only (it wraps
//! any backend), and `happens_before` (actors, vector clocks).
//!
//! A hand-written pipeline (the seed's `CudaEventRingbuf` code) is correct only if every
//! kernel's reads come after the writes they read, and its writes after the reads (and writes)
//! of the batch that used the slot before. A missing wait rarely shows up as a wrong result in
//! testing; this module finds it on every run, whatever the timing: it tracks the
//! happens-before order made by stream order, event records, stream waits and host
//! synchronizes with vector clocks, and checks each declared access against the slot's history
//! (write after read, read after write, write after write).
//!
//! | module | concept |
//! |---|---|
//! | `checker` | [`HazardChecker`], the tracker; [`Access`] |
//! | `backend` | [`ValidatingBackend`], a [`Backend`](crate::backend::Backend) wrapper feeding the checker |
//! | `command` | [`ValidatingKernel`]: command graphs on a validating backend, kernels declaring their accesses |
//! | `report` | [`Hazard`], naming both accesses |
//!
//! The model is CUDA's ordering (the host backend follows it too): every stream and host thread
//! is an actor with a clock; a host thread's call that enqueues on a stream orders that stream
//! after what the thread did before; a record snapshots the stream's clock into the event (a
//! re-record replaces it, earlier waits keep what they joined); a stream wait joins the
//! snapshot into the stream, a host synchronize into the thread; a host thread's
//! [`record_host`](crate::EventRingbuf::record_host) (work it did itself, as a pipeline's host
//! stage does) joins the thread's clock into the slot's event. An access ticks its actor and
//! is ordered after an earlier one iff the earlier one's epoch is covered by its clock. Each
//! unordered pair is reported once per slot, pair of stages and kind, with a count.
//!
//! # Example
//!
//! A copy stream fills `in[s % 2]`, a kernel stream reads it. Forgetting that the copy of batch
//! `s` must wait for the kernel of batch `s - 2` is reported, naming both accesses:
//!
//! ```
//! use seqsync::backend::Backend;
//! use seqsync::hazard::{Access, ValidatingBackend};
//! use seqsync::{Blocking, EventRingbuf, HostBackend};
//!
//! fn run(wait_for_slot: bool) -> seqsync::Result<Vec<String>> {
//!     let vb = ValidatingBackend::new(HostBackend::new());
//!     let (copy, kernel) = (vb.new_stream("s_copy")?, vb.new_stream("s_kernel")?);
//!     let copied = EventRingbuf::new(&vb, "copy", 1, 1)?;
//!     let computed = EventRingbuf::new(&vb, "kernel", u32::from(wait_for_slot), 2)?;
//!     for s in 0..6 {
//!         if wait_for_slot {
//!             computed.wait(&copy, s - 2, Blocking::No)?; // in[s % 2] is free again
//!         }
//!         vb.launch_host(&copy, Box::new(|| { /* copy batch s into in[s % 2] */ }))?;
//!         vb.access(&copy, Access::write("copy", "in", (s % 2) as usize, s));
//!         copied.record(&copy, s, Blocking::No)?;
//!
//!         copied.wait(&kernel, s, Blocking::No)?;
//!         vb.launch_host(&kernel, Box::new(|| { /* read in[s % 2] */ }))?;
//!         vb.access(&kernel, Access::read("kernel", "in", (s % 2) as usize, s));
//!         computed.record(&kernel, s, Blocking::No)?;
//!     }
//!     vb.synchronize_stream(&kernel)?;
//!     Ok(vb.checker().hazards().iter().map(|h| h.to_string()).collect())
//! }
//!
//! assert!(run(true)?.is_empty());
//! assert_eq!(
//!     run(false)?,
//!     ["stage copy (stream s_copy) writes in[0] for seq 2, not ordered after \
//!       stage kernel (stream s_kernel) reading in[0] for seq 0 (2 times)",
//!      "stage copy (stream s_copy) writes in[1] for seq 3, not ordered after \
//!       stage kernel (stream s_kernel) reading in[1] for seq 1 (2 times)"]
//! );
//! # Ok::<(), seqsync::Error>(())
//! ```

#![forbid(unsafe_code)]

pub(crate) mod backend;
pub(crate) mod checker;
pub(crate) mod command;
pub(crate) mod report;

pub use backend::{ValidatingBackend, ValidatingStream};
pub use checker::{Access, HazardChecker};
pub use command::ValidatingKernel;
pub use report::{Hazard, HazardKind};
