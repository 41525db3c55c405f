//! `EventRingbuf`: one producer records per seq, consumers wait on a stream or synchronize the
//! host. Blocking flags are keyword arguments (`blocking=False` by default, as in Rust).

use pyo3::prelude::*;
use seqsync::{AnyBackend, Blocking};

use crate::block::interruptible;
use crate::errors::IntoPyResult;
use crate::stream::{with_stream, Backend};

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
    backend: AnyBackend,
    inner: seqsync::EventRingbuf<AnyBackend>,
}

fn blocking(b: bool) -> Blocking {
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
            backend: backend.inner.clone(),
            inner: seqsync::EventRingbuf::new(&backend.inner, name, nconsumers, max_size)
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

impl EventRingbuf {
    /// `f` without the GIL: on this thread when it cannot block, else interruptibly.
    fn call(
        &self,
        py: Python<'_>,
        may_block: bool,
        f: impl FnOnce() -> seqsync::Result<()> + Send,
    ) -> PyResult<()> {
        if may_block {
            interruptible(py, f, || self.inner.stop("interrupted (KeyboardInterrupt)"))?.py_err()
        } else {
            py.detach(f).py_err()
        }
    }
}
