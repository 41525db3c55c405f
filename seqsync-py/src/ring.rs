//! `EventRingbuf`: one producer records per seq, consumers wait on a stream or synchronize the
//! host. Blocking flags are keyword arguments (`blocking=False` by default, as in Rust).

use pyo3::prelude::*;
use seqsync::{AnyBackend, Blocking};
use std::sync::Arc;

use crate::block::ring_call;
use crate::borrowed::{with_stream, Borrowing};
use crate::errors::IntoPyResult;
use crate::stream::Backend;

/// A ring of `max_size` events: `record(seq, stream)` by the producer, `wait(seq, stream)`
/// (a stream waits) or `synchronize(seq)` (the host waits) by each of `nconsumers` consumers.
///
/// ```python
/// b = seqsync.Backend("host")
/// copy, kernel = b.new_stream("copy"), b.new_stream("kernel")
/// ring = seqsync.EventRingbuf(b, "copy", nconsumers=1, max_size=4)
/// for seq in range(8):
///     copy.launch(lambda: None)          # copy batch seq in
///     ring.record(seq, copy)
///     ring.wait(seq, kernel)             # the kernel of batch seq waits for its copy
/// kernel.synchronize()
/// ```
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct EventRingbuf {
    /// The backend and its cache of borrowed framework streams.
    backend: Arc<Borrowing>,
    inner: seqsync::EventRingbuf<AnyBackend>,
}

pub(crate) fn blocking(b: bool) -> Blocking {
    if b {
        Blocking::Yes
    } else {
        Blocking::No
    }
}

#[pymethods]
impl EventRingbuf {
    #[new]
    #[pyo3(signature = (backend, name, nconsumers, max_size))]
    fn new(backend: &Backend, name: &str, nconsumers: u32, max_size: usize) -> PyResult<Self> {
        Ok(EventRingbuf {
            backend: Arc::clone(&backend.shared),
            inner: seqsync::EventRingbuf::new(backend.inner(), name, nconsumers, max_size)
                .py_err()?,
        })
    }

    /// The ring's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// Consumers per seq.
    #[getter]
    fn nconsumers(&self) -> u32 {
        self.inner.nconsumers()
    }

    /// Seqs in flight at most.
    #[getter]
    fn max_size(&self) -> usize {
        self.inner.max_size()
    }

    /// The next seq to record.
    #[getter]
    fn next_seq(&self) -> i64 {
        self.inner.next_seq()
    }

    /// Whether the ring was stopped.
    #[getter]
    fn stopped(&self) -> bool {
        self.inner.is_stopped()
    }

    /// Record `seq` (the next one) at the current end of `stream` (`None`: the framework's
    /// current stream). With `blocking=True` a full ring waits for room (without the GIL;
    /// Ctrl-C stops the ring); else it raises `Overflow`.
    #[pyo3(signature = (seq, stream = None, *, blocking = false))]
    fn record(
        &self,
        py: Python<'_>,
        seq: i64,
        stream: Option<&Bound<'_, PyAny>>,
        blocking: bool,
    ) -> PyResult<()> {
        with_stream(py, &self.backend, stream, |s| {
            self.call(py, blocking, || {
                self.inner.record(s, seq, self::blocking(blocking))
            })
        })
    }

    /// Record `seq` from the host: the work it stands for is done now.
    #[pyo3(signature = (seq, *, blocking = false))]
    fn record_host(&self, py: Python<'_>, seq: i64, blocking: bool) -> PyResult<()> {
        self.call(py, blocking, || {
            self.inner.record_host(seq, self::blocking(blocking))
        })
    }

    /// Make `stream` wait for `seq`. With `blocking=True`, a seq not recorded yet is waited
    /// for on the host first (without the GIL); else it raises `NotYetProduced`.
    #[pyo3(signature = (seq, stream = None, *, blocking = false))]
    fn wait(
        &self,
        py: Python<'_>,
        seq: i64,
        stream: Option<&Bound<'_, PyAny>>,
        blocking: bool,
    ) -> PyResult<()> {
        with_stream(py, &self.backend, stream, |s| {
            self.call(py, blocking, || {
                self.inner.wait(s, seq, self::blocking(blocking))
            })
        })
    }

    /// Block the host until `seq`'s work is done (without the GIL; Ctrl-C stops the ring).
    #[pyo3(signature = (seq, *, blocking = false))]
    fn synchronize(&self, py: Python<'_>, seq: i64, blocking: bool) -> PyResult<()> {
        self.call(py, true, || {
            self.inner.synchronize(seq, self::blocking(blocking))
        })
    }

    /// Stop the ring: every call blocked on it, and every later call, raises `Stopped`.
    #[pyo3(signature = (reason = "stopped from Python"))]
    fn stop(&self, reason: &str) {
        self.inner.stop(reason);
    }

    /// `with ring:` stops the ring when the block ends, so no call blocked on it in another
    /// thread outlives the block; an exception leaving the block is named in the reason.
    ///
    /// ```python
    /// b = seqsync.Backend("host")
    /// with seqsync.EventRingbuf(b, "frames", nconsumers=1, max_size=2) as ring:
    ///     ring.record_host(0)
    /// assert ring.stopped
    /// ```
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> bool {
        self.inner
            .stop(ended("the ring's `with` block", exc_type, exc));
        false
    }

    /// `with ring.recording(seq, stream):` records `seq` on `stream` when the block ends, after
    /// the work the block enqueued there. An exception in the block records nothing and stops
    /// the ring (naming the exception), so no consumer waits for a seq that will never come.
    ///
    /// ```python
    /// b = seqsync.Backend("host")
    /// copy = b.new_stream("copy")
    /// ring = seqsync.EventRingbuf(b, "copy", nconsumers=1, max_size=2)
    /// with ring.recording(0, copy):
    ///     copy.launch(lambda: None)      # batch 0's copy
    /// assert ring.next_seq == 1
    /// try:
    ///     with ring.recording(1, copy):
    ///         raise ValueError("no data")
    /// except ValueError:
    ///     pass
    /// assert ring.stopped
    /// ```
    #[pyo3(signature = (seq, stream = None, *, blocking = false))]
    fn recording(slf: Py<Self>, seq: i64, stream: Option<Py<PyAny>>, blocking: bool) -> Recording {
        Recording {
            ring: slf,
            seq,
            stream,
            blocking,
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "EventRingbuf('{}', nconsumers={}, max_size={}, next_seq={})",
            self.inner.name(),
            self.inner.nconsumers(),
            self.inner.max_size(),
            self.inner.next_seq()
        )
    }
}

/// The context `EventRingbuf.recording` returns: records its seq when the block ends well,
/// stops the ring when it raises.
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct Recording {
    ring: Py<EventRingbuf>,
    seq: i64,
    stream: Option<Py<PyAny>>,
    blocking: bool,
}

#[pymethods]
impl Recording {
    /// The seq the block's work is for.
    fn __enter__(&self) -> i64 {
        self.seq
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let ring = self.ring.get();
        if exc_type.is_some() {
            let what = format!("the `with` block recording seq {}", self.seq);
            ring.inner.stop(ended(&what, exc_type, exc));
            return Ok(false);
        }
        let stream = self.stream.as_ref().map(|s| s.bind(py));
        ring.record(py, self.seq, stream, self.blocking)?;
        Ok(false)
    }
}

/// A stop reason: how a `with` block ended (`what` ended, or raised the exception).
pub(crate) fn ended(
    what: &str,
    exc_type: Option<&Bound<'_, PyAny>>,
    exc: Option<&Bound<'_, PyAny>>,
) -> String {
    match (exc_type, exc) {
        (Some(t), Some(e)) => {
            let name = t
                .getattr("__name__")
                .map_or_else(|_| "exception".into(), |n| n.to_string());
            format!("{what} raised {name}: {e}")
        }
        (Some(t), None) => format!("{what} raised {t}"),
        _ => format!("{what} ended"),
    }
}

impl EventRingbuf {
    /// `f` without the GIL: on this thread when it cannot block, else interruptibly.
    fn call(
        &self,
        py: Python<'_>,
        may_block: bool,
        f: impl FnOnce() -> seqsync::Result<()> + Send,
    ) -> PyResult<()> {
        ring_call(py, may_block, f, || {
            self.inner.stop("interrupted (KeyboardInterrupt)")
        })
    }
}
