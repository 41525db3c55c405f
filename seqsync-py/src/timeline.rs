//! `Timeline`: a 64-bit value that only grows, signalled and waited on by streams and the host.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use seqsync::AnyBackend;

use crate::block::POLL;
use crate::borrowed::{with_stream, Borrowing};
use crate::errors::{to_py, IntoPyResult};
use crate::stream::Backend;

/// A timeline: `signal(v)` / `signal_on(v, stream)` raise it, `wait(v, timeout)` /
/// `wait_on(v, stream)` wait for it; a stream may wait for a value nobody signalled yet
/// (but with the CUDA `events` mechanism, which refuses that: `WaitBeforeSignalUnsupported`).
///
/// ```python
/// b = seqsync.Backend("host")
/// t = seqsync.Timeline(b, "frames")
/// s = b.new_stream("compute")
/// t.wait_on(1, s)        # enqueued before anyone signals 1
/// t.signal(1)
/// s.synchronize()
/// assert t.query() == 1
/// ```
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct Timeline {
    /// The backend and its cache of borrowed framework streams.
    backend: Arc<Borrowing>,
    pub(crate) inner: seqsync::Timeline<AnyBackend>,
}

/// A timeout in seconds (`None`: wait as long as it takes).
fn deadline(timeout: Option<f64>) -> PyResult<Option<Instant>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_finite() && t >= 0.0 => {
            Ok(Some(Instant::now() + Duration::from_secs_f64(t.min(1e9))))
        }
        Some(t) => Err(to_py(&seqsync::Error::InvalidArgument {
            ring: "timeout".into(),
            message: format!("timeout {t} s: expected a finite number of seconds >= 0, or None"),
        })),
    }
}

/// Calls `wait(slice)` in slices of [`POLL`] without the GIL until it is not a `Timeout` or the
/// deadline passed, checking for Ctrl-C between slices.
pub(crate) fn wait_sliced<T: Send>(
    py: Python<'_>,
    timeout: Option<f64>,
    what: impl Fn() -> String,
    wait: impl Fn(Duration) -> seqsync::Result<T> + Sync,
) -> PyResult<T> {
    let end = deadline(timeout)?;
    loop {
        let slice = match end {
            None => POLL,
            Some(e) => POLL.min(e.saturating_duration_since(Instant::now())),
        };
        match py.detach(|| wait(slice)) {
            Err(seqsync::Error::Timeout { .. }) if end.is_none_or(|e| Instant::now() < e) => {}
            Err(seqsync::Error::Timeout { .. }) => {
                return Err(to_py(&seqsync::Error::Timeout {
                    waited_for: what(),
                    timeout: Duration::from_secs_f64(timeout.unwrap_or(0.0)),
                }))
            }
            r => return r.py_err(),
        }
        py.check_signals()?;
    }
}

#[pymethods]
impl Timeline {
    #[new]
    #[pyo3(signature = (backend, name, initial = 0))]
    fn new(py: Python<'_>, backend: &Backend, name: &str, initial: u64) -> PyResult<Self> {
        // Without the GIL: on CUDA the first timeline probes on a new stream, which may wait
        // (a second at most) for another thread to signal an open wait.
        let inner = backend.inner().clone();
        let made = py
            .detach(move || seqsync::Timeline::new(&inner, name, initial))
            .py_err()?;
        Ok(Timeline {
            backend: Arc::clone(&backend.shared),
            inner: made,
        })
    }

    /// The timeline's name.
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// The mechanism in use, in words (`host word`, `memops`, `hybrid`, `events (...)`).
    #[getter]
    fn mechanism(&self) -> String {
        format!("{:?}", self.inner.mechanism())
    }

    /// The value reached now.
    fn query(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.inner.query()).py_err()
    }

    /// Raise the value to `v` from the host.
    fn signal(&self, py: Python<'_>, v: u64) -> PyResult<()> {
        py.detach(|| self.inner.signal(v)).py_err()
    }

    /// Raise the value to `v` once `stream` gets here.
    #[pyo3(signature = (v, stream = None))]
    fn signal_on(&self, py: Python<'_>, v: u64, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        with_stream(py, &self.backend, stream, |s| {
            py.detach(|| self.inner.signal_on(s, v)).py_err()
        })
    }

    /// Make `stream` wait until the value reaches `v` (signalled already or not; with the CUDA
    /// `events` mechanism, only once a signal of `v` or more is enqueued).
    #[pyo3(signature = (v, stream = None))]
    fn wait_on(&self, py: Python<'_>, v: u64, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        with_stream(py, &self.backend, stream, |s| {
            py.detach(|| self.inner.wait_on(s, v)).py_err()
        })
    }

    /// Block the host until the value reaches `v`, at most `timeout` seconds (`None`: no
    /// limit); without the GIL, and Ctrl-C raises `KeyboardInterrupt` within 20 ms.
    #[pyo3(signature = (v, timeout = None))]
    fn wait(&self, py: Python<'_>, v: u64, timeout: Option<f64>) -> PyResult<()> {
        let what = || format!("timeline '{}' to reach {v}", self.inner.name());
        wait_sliced(py, timeout, what, |d| self.inner.wait(v, d))
    }

    /// Fail the timeline: every wait on it is released with `TimelineFailed`, and the failure
    /// spreads to what streams that waited on it signal.
    #[pyo3(signature = (reason = "failed from Python"))]
    fn fail(&self, reason: &str) {
        self.inner
            .fail(seqsync::Error::Cancelled(reason.to_string()));
    }

    /// Whether the timeline failed.
    #[getter]
    fn failed(&self) -> bool {
        self.inner.is_failed()
    }

    /// `with timeline:` fails the timeline when an exception leaves the block (naming it), so
    /// waiters in other threads and on streams are released instead of waiting for a value
    /// that will never come; a block that ends well changes nothing.
    ///
    /// ```python
    /// b = seqsync.Backend("host")
    /// t = seqsync.Timeline(b, "frames")
    /// try:
    ///     with t:
    ///         t.signal(1)
    ///         raise ValueError("camera gone")
    /// except ValueError:
    ///     pass
    /// assert t.failed
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
        if exc_type.is_some() {
            let reason = crate::ring::ended("the timeline's `with` block", exc_type, exc);
            self.inner.fail(seqsync::Error::Cancelled(reason));
        }
        false
    }

    fn __repr__(&self) -> String {
        format!("Timeline('{}')", self.inner.name())
    }
}

/// Block until every `(timeline, value)` of `list` is reached, at most `timeout` seconds.
#[pyfunction]
#[pyo3(signature = (list, timeout = None))]
pub(crate) fn wait_all(
    py: Python<'_>,
    list: Vec<(Bound<'_, Timeline>, u64)>,
    timeout: Option<f64>,
) -> PyResult<()> {
    let pairs: Vec<(&seqsync::Timeline<AnyBackend>, u64)> =
        list.iter().map(|(t, v)| (&t.get().inner, *v)).collect();
    wait_sliced(
        py,
        timeout,
        || "every timeline of wait_all".into(),
        |d| seqsync::timeline::wait_all(&pairs, d),
    )
}

/// Block until one `(timeline, value)` of `list` is reached, at most `timeout` seconds: its
/// index (`None` for an empty list). Raises `Timeout` when the time passes first.
#[pyfunction]
#[pyo3(signature = (list, timeout = None))]
pub(crate) fn wait_any(
    py: Python<'_>,
    list: Vec<(Bound<'_, Timeline>, u64)>,
    timeout: Option<f64>,
) -> PyResult<Option<usize>> {
    let pairs: Vec<(&seqsync::Timeline<AnyBackend>, u64)> =
        list.iter().map(|(t, v)| (&t.get().inner, *v)).collect();
    wait_sliced(
        py,
        timeout,
        || "any timeline of wait_any".into(),
        |d| seqsync::timeline::wait_any(&pairs, d),
    )
}
