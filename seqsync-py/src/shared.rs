//! Across processes (Linux): `SharedRing` and `SharedTimeline`, the library's `ipc` layer. One
//! process creates a ring or timeline by name, any other process of the same user opens it;
//! a process that dies with it open is reported as `PeerLost` to every blocked call.

use std::sync::Arc;

use pyo3::prelude::*;
use seqsync::ipc::Mechanism;
use seqsync::AnyBackend;

use crate::block::ring_call;
use crate::borrowed::{with_stream, Borrowing};
use crate::errors::IntoPyResult;
use crate::ring::blocking;
use crate::stream::Backend;
use crate::timeline::wait_sliced;

fn mechanism(name: &str) -> PyResult<Mechanism> {
    name.parse().map_err(|_| {
        crate::errors::to_py(&seqsync::Error::InvalidArgument {
            ring: "SharedRing".into(),
            message: format!("mechanism {name:?}: expected 'host-word', 'memops' or 'ipc-event'"),
        })
    })
}

/// A ring shared by processes: the contract of `EventRingbuf`, one producer process
/// (`SharedRing.create`) and consumers in any process of the user (`SharedRing.open`).
///
/// ```python
/// b = seqsync.Backend("host")
/// producer = seqsync.SharedRing.create(b, "doc-frames", nconsumers=1, max_size=4)
/// consumer = seqsync.SharedRing.open(b, "doc-frames")   # in another process, usually
/// copy = b.new_stream("copy")
/// copy.launch(lambda: None)                              # fill batch 0
/// producer.record(0, copy)
/// consumer.synchronize(0)                                # batch 0's work is done
/// assert consumer.mechanism == "host-word"
/// ```
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct SharedRing {
    backend: Arc<Borrowing>,
    inner: seqsync::ipc::SharedRing<AnyBackend>,
}

#[pymethods]
impl SharedRing {
    /// Make ring `name` in this process, its producer. `mechanism` (`None`: the backend's
    /// best) is `'host-word'` (host backend), `'memops'` or `'ipc-event'` (CUDA).
    #[staticmethod]
    #[pyo3(signature = (backend, name, nconsumers, max_size, mechanism = None))]
    fn create(
        py: Python<'_>,
        backend: &Backend,
        name: &str,
        nconsumers: u32,
        max_size: usize,
        mechanism: Option<&str>,
    ) -> PyResult<Self> {
        let b = backend.inner();
        let m = mechanism.map(self::mechanism).transpose()?;
        let inner = py
            .detach(|| match m {
                None => seqsync::ipc::SharedRing::create(b, name, nconsumers, max_size),
                Some(m) => seqsync::ipc::SharedRing::create_with(b, name, nconsumers, max_size, m),
            })
            .py_err()?;
        Ok(SharedRing {
            backend: Arc::clone(&backend.shared),
            inner,
        })
    }

    /// Open ring `name`, made by a process of this user, as a consumer.
    #[staticmethod]
    fn open(py: Python<'_>, backend: &Backend, name: &str) -> PyResult<Self> {
        let b = backend.inner();
        let inner = py
            .detach(|| seqsync::ipc::SharedRing::open(b, name))
            .py_err()?;
        Ok(SharedRing {
            backend: Arc::clone(&backend.shared),
            inner,
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

    /// The next seq the producer records, as every process sees it.
    #[getter]
    fn next_seq(&self) -> i64 {
        self.inner.next_seq()
    }

    /// Whether the ring was stopped, in any process.
    #[getter]
    fn stopped(&self) -> bool {
        self.inner.is_stopped()
    }

    /// How it orders across processes: `'host-word'`, `'memops'` or `'ipc-event'`.
    #[getter]
    fn mechanism(&self) -> &'static str {
        self.inner.mechanism().name()
    }

    /// Record `seq` at the current end of `stream` (the producer's process only).
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

    /// Make `stream` (of this process) wait for `seq`'s work in the producer's process.
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

    /// Block until `seq`'s work in the producer's process is done (without the GIL; Ctrl-C
    /// stops the ring).
    #[pyo3(signature = (seq, *, blocking = false))]
    fn synchronize(&self, py: Python<'_>, seq: i64, blocking: bool) -> PyResult<()> {
        self.call(py, true, || {
            self.inner.synchronize(seq, self::blocking(blocking))
        })
    }

    /// Block until `seq` is recorded (not necessarily done); consumes nothing.
    fn synchronize_with_producer(&self, py: Python<'_>, seq: i64) -> PyResult<()> {
        self.call(py, true, || self.inner.synchronize_with_producer(seq))
    }

    /// Stop the ring in every process: blocked calls wake, later calls raise `Stopped`.
    #[pyo3(signature = (reason = "stopped from Python"))]
    fn stop(&self, reason: &str) {
        self.inner.stop(reason);
    }

    fn __repr__(&self) -> String {
        format!(
            "SharedRing('{}', nconsumers={}, max_size={}, mechanism='{}')",
            self.inner.name(),
            self.inner.nconsumers(),
            self.inner.max_size(),
            self.mechanism()
        )
    }
}

impl SharedRing {
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

/// A timeline every process of the user can signal and wait on: `SharedTimeline.create` in
/// one, `SharedTimeline.open` in the others. Host signals and waits work with every backend;
/// stream signals and waits on the host backend.
///
/// ```python
/// b = seqsync.Backend("host")
/// ready = seqsync.SharedTimeline.create(b, "doc-ready")
/// seen = seqsync.SharedTimeline.open(b, "doc-ready")     # in another process, usually
/// ready.signal(1)
/// seen.wait(1, timeout=5)
/// assert seen.query() == 1
/// ```
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct SharedTimeline {
    backend: Arc<Borrowing>,
    inner: seqsync::ipc::SharedTimeline<AnyBackend>,
}

#[pymethods]
impl SharedTimeline {
    /// Make timeline `name` at `initial`, in this process.
    #[staticmethod]
    #[pyo3(signature = (backend, name, initial = 0))]
    fn create(py: Python<'_>, backend: &Backend, name: &str, initial: u64) -> PyResult<Self> {
        let b = backend.inner();
        let inner = py
            .detach(|| seqsync::ipc::SharedTimeline::create(b, name, initial))
            .py_err()?;
        Ok(SharedTimeline {
            backend: Arc::clone(&backend.shared),
            inner,
        })
    }

    /// Open timeline `name`, made by a process of this user.
    #[staticmethod]
    fn open(py: Python<'_>, backend: &Backend, name: &str) -> PyResult<Self> {
        let b = backend.inner();
        let inner = py
            .detach(|| seqsync::ipc::SharedTimeline::open(b, name))
            .py_err()?;
        Ok(SharedTimeline {
            backend: Arc::clone(&backend.shared),
            inner,
        })
    }

    /// The timeline's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// The value now, as every process sees it.
    fn query(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.inner.query()).py_err()
    }

    /// Raise the value to `v` now.
    fn signal(&self, py: Python<'_>, v: u64) -> PyResult<()> {
        py.detach(|| self.inner.signal(v)).py_err()
    }

    /// Raise the value to `v` once `stream` gets here (host backend streams).
    #[pyo3(signature = (v, stream = None))]
    fn signal_on(&self, py: Python<'_>, v: u64, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        with_stream(py, &self.backend, stream, |s| {
            py.detach(|| self.inner.signal_on(s, v)).py_err()
        })
    }

    /// Make `stream` wait until the value reaches `v` (host backend streams).
    #[pyo3(signature = (v, stream = None))]
    fn wait_on(&self, py: Python<'_>, v: u64, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        with_stream(py, &self.backend, stream, |s| {
            py.detach(|| self.inner.wait_on(s, v)).py_err()
        })
    }

    /// Block until the value reaches `v`, at most `timeout` seconds (`None`: no limit);
    /// without the GIL, and Ctrl-C raises `KeyboardInterrupt` within 20 ms.
    #[pyo3(signature = (v, timeout = None))]
    fn wait(&self, py: Python<'_>, v: u64, timeout: Option<f64>) -> PyResult<()> {
        let what = || format!("shared timeline '{}' to reach {v}", self.inner.name());
        wait_sliced(py, timeout, what, |d| self.inner.wait(v, d))
    }

    /// Fail it in every process: every wait raises `TimelineFailed`.
    #[pyo3(signature = (reason = "failed from Python"))]
    fn fail(&self, reason: &str) {
        self.inner
            .fail(seqsync::Error::Cancelled(reason.to_string()));
    }

    /// Whether it failed, in any process.
    #[getter]
    fn failed(&self) -> bool {
        self.inner.is_failed()
    }

    fn __repr__(&self) -> String {
        format!("SharedTimeline('{}')", self.inner.name())
    }
}
