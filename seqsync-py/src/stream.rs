//! Backends and their streams: `Backend("host" | "cuda" | "auto")`, streams it makes, and
//! framework streams it borrows (`Backend.stream`; the borrowing itself is `borrowed.rs`).

use std::sync::Arc;
use std::time::Instant;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use seqsync::backend::{AnyStream, Backend as _, EventOptions};
use seqsync::internal::backend::{Deadline, SyncOutcome};
use seqsync::{AnyBackend, BackendKind};

use crate::block::POLL;
use crate::borrowed::{borrow, Borrowing};
use crate::errors::{to_py, IntoPyResult};

/// A backend: `"host"` (streams are worker threads that run Python callables in order),
/// `"cuda"` (device 0's primary context, the one PyTorch and CuPy use) or `"auto"` (CUDA when
/// a GPU is there, else host).
///
/// ```python
/// b = seqsync.Backend("host")
/// s = b.new_stream("copy")
/// s.launch(lambda: print("runs on the stream's thread"))
/// s.synchronize()
/// ```
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct Backend {
    /// The backend, with the framework streams it borrowed last (shared with its rings and
    /// timelines).
    pub(crate) shared: Arc<Borrowing>,
}

impl Backend {
    pub(crate) fn inner(&self) -> &AnyBackend {
        &self.shared.backend
    }
}

#[pymethods]
impl Backend {
    /// `chaos=SEED` (host backend): every stream operation first sleeps a random time, so a
    /// missing wait shows up as wrong data instead of hiding behind lucky timing.
    #[new]
    #[pyo3(signature = (kind = "auto", *, chaos = None))]
    fn new(kind: &str, chaos: Option<u64>) -> PyResult<Self> {
        let inner = match (kind, chaos) {
            ("host", Some(seed)) => AnyBackend::Host(seqsync::HostBackend::with_chaos(
                seqsync::backend::host::Chaos::new(seed),
            )),
            ("host", None) => AnyBackend::new(BackendKind::Host).py_err()?,
            ("auto" | "cuda", Some(_)) => {
                return Err(to_py(&seqsync::Error::InvalidArgument {
                    ring: "backend".into(),
                    message: format!("chaos is a host-backend mode; backend '{kind}' has none"),
                }))
            }
            ("auto", None) => AnyBackend::auto().py_err()?,
            ("cuda", None) => AnyBackend::new(BackendKind::Cuda).py_err()?,
            (other, _) => {
                return Err(to_py(&seqsync::Error::InvalidArgument {
                    ring: "backend".into(),
                    message: format!("unknown backend '{other}': expected host, cuda or auto"),
                }))
            }
        };
        Ok(Backend {
            shared: Borrowing::new(inner),
        })
    }

    /// `"host"` or `"cuda"`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner().name()
    }

    /// A new stream (on the host backend a worker thread named `name`). Made without the GIL:
    /// on CUDA, while a wait before its signal is open, it may wait (a second at most) for
    /// another thread to signal.
    #[pyo3(signature = (name = "stream"))]
    fn new_stream(&self, py: Python<'_>, name: &str) -> PyResult<Stream> {
        let backend = self.inner().clone();
        let made = py.detach(move || backend.new_stream(name)).py_err()?;
        Ok(Stream {
            backend: self.inner().clone(),
            inner: Some(made),
            name: name.to_string(),
            borrowed: None,
            raised: Arc::default(),
        })
    }

    /// A CUDA stream made elsewhere, borrowed (never destroyed): an object with
    /// `__cuda_stream__`, a `torch.cuda.Stream`, a CuPy stream or an int handle. `None`: the
    /// current stream of PyTorch if it is imported, else of CuPy. A stream of another device
    /// raises `InvalidArgument`; on the host backend, `TypeError`.
    ///
    /// Rings and timelines also take framework streams directly; a backend keeps the last 16
    /// it was given (alive, so their handles stay theirs) and borrows each once.
    #[pyo3(signature = (obj = None))]
    fn stream(&self, py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Stream> {
        let (inner, owner) = borrow(py, self.inner(), obj)?;
        let name = match crate::stream::handle_of_stream(&inner) {
            Some(h) => format!("borrowed {h:#x}"),
            None => "borrowed".into(),
        };
        Ok(Stream {
            backend: self.inner().clone(),
            inner: Some(inner),
            name,
            borrowed: Some(owner),
            raised: Arc::default(),
        })
    }

    fn __repr__(&self) -> String {
        format!("Backend('{}')", self.inner().name())
    }
}

/// A stream of a [`Backend`]: made by it, or borrowed from a framework (whose stream object
/// this keeps alive). Dropping a host stream with work still queued returns at once: the
/// stream goes once that work has run (a wait nothing ever releases keeps its thread).
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct Stream {
    backend: AnyBackend,
    /// Always `Some` but in `drop`.
    inner: Option<AnyStream>,
    name: String,
    /// The framework's stream object a borrowed stream came from.
    borrowed: Option<Py<PyAny>>,
    /// The first exception launched work raised (the cause of `synchronize`'s error).
    raised: Raised,
}

/// Where launched work leaves the first exception it raised.
pub(crate) type Raised = Arc<std::sync::Mutex<Option<PyErr>>>;

impl Stream {
    pub(crate) fn get(&self) -> &AnyStream {
        self.inner.as_ref().expect("taken only in drop")
    }

    /// Wait for the stream's end in slices between which Ctrl-C is checked (then the stream's
    /// own synchronize, in [`synchronize`](Self::synchronize), returns at once and reports its
    /// failure).
    fn wait_for_end(&self, py: Python<'_>) -> PyResult<()> {
        let (b, s) = (&self.backend, self.get());
        let event = b.create_event(EventOptions::default()).py_err()?;
        b.record(&event, s).py_err()?;
        loop {
            let slice = Deadline(Instant::now() + POLL);
            match py.detach(|| b.synchronize_interruptible(&event, &slice)) {
                Ok(SyncOutcome::Complete) => return Ok(()),
                // The stream failed before the event: its own synchronize says how.
                Err(_) => return Ok(()),
                Ok(_) => py.check_signals()?,
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        // A host stream's drop joins its worker. With work still queued (a wait nothing has
        // released yet, or the very callable this drop runs in, on the worker itself), that
        // could block forever or join the thread from itself: the stream goes on a thread of
        // its own once its work has run, and `del` returns at once (as `cuStreamDestroy`
        // does). Idle, it goes now, with the GIL released (the worker may be waiting for it).
        if matches!(inner, AnyStream::Host(_)) && !idle(&self.backend, &inner) {
            // Handed over through a channel, so that a thread that cannot be started leaves
            // the stream here, to be leaked rather than joined (which could hang, or join the
            // worker from itself).
            let (tx, rx) = std::sync::mpsc::channel::<AnyStream>();
            let started = std::thread::Builder::new()
                .name("seqsync-stream-drop".into())
                .spawn(move || drop(rx.recv()));
            match started {
                Ok(_) => {
                    let _ = tx.send(inner);
                }
                Err(_) => std::mem::forget(inner),
            }
            return;
        }
        Python::attach(|py| py.detach(move || drop(inner)));
    }
}

/// Has everything enqueued on `s` run (asked without waiting)?
fn idle(b: &AnyBackend, s: &AnyStream) -> bool {
    let Ok(event) = b.create_event(EventOptions::default()) else {
        return false;
    };
    b.record(&event, s).is_ok() && b.query(&event).unwrap_or(false)
}

#[pymethods]
impl Stream {
    /// The stream's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The raw `CUstream` handle as an int (CUDA), `None` on the host backend.
    #[getter]
    fn handle(&self) -> Option<usize> {
        handle_of_stream(self.get())
    }

    /// Host backend: run `fn()` on the stream, after everything enqueued before it. An
    /// exception in it fails the stream: the next `synchronize` raises, with its message.
    /// `TypeError` if `fn` is not callable.
    fn launch(&self, py: Python<'_>, f: Py<PyAny>) -> PyResult<()> {
        let raised = self.raised.clone();
        launch_on(py, self.get(), f, move |e| {
            let mut r = raised.lock().unwrap_or_else(|e| e.into_inner());
            r.get_or_insert(e);
        })
    }

    /// Block until everything enqueued on the stream ran, then raise its failure if it has
    /// one (with the exception launched work raised as `__cause__`). Waits without the GIL;
    /// Ctrl-C raises `KeyboardInterrupt` within 20 ms and leaves the work running.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        self.wait_for_end(py)?;
        let r = py
            .detach(|| self.backend.synchronize_stream(self.get()))
            .py_err();
        if let Err(e) = &r {
            // The stream's failure: the exception launched work raised is its cause, with its
            // type and traceback.
            let raised = self.raised.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(cause) = raised.as_ref() {
                e.set_cause(py, Some(cause.clone_ref(py)));
            }
        }
        r
    }

    /// The CUDA-Python stream protocol: `(0, handle)`.
    fn __cuda_stream__(&self) -> PyResult<(i32, usize)> {
        match self.handle() {
            Some(h) => Ok((0, h)),
            None => Err(PyTypeError::new_err(
                "a host-backend stream is not a CUDA stream",
            )),
        }
    }

    fn __repr__(&self) -> String {
        let kind = match self.get() {
            AnyStream::Host(_) => "host",
            _ if self.borrowed.is_some() => "cuda, borrowed",
            _ => "cuda",
        };
        format!("Stream('{}', {kind})", self.name)
    }
}

/// A stream's raw `CUstream` handle, `None` for a host stream.
pub(crate) fn handle_of_stream(s: &AnyStream) -> Option<usize> {
    match s {
        AnyStream::Cuda(s) => Some(s.cu_stream() as usize),
        _ => None,
    }
}

/// Runs Python `f()` on host stream `s`, in order; an exception fails the stream, and is
/// handed to `raised`.
pub(crate) fn launch_on(
    py: Python<'_>,
    s: &AnyStream,
    f: Py<PyAny>,
    raised: impl FnOnce(PyErr) + Send + 'static,
) -> PyResult<()> {
    if !f.bind(py).is_callable() {
        return Err(PyTypeError::new_err(format!(
            "launch takes a callable, not {}",
            f.bind(py).get_type().name()?
        )));
    }
    match s {
        AnyStream::Host(s) => {
            s.launch(move || {
                let failed = Python::attach(move |py| {
                    let failed = f.call0(py).err().map(|e| {
                        let message = e.to_string();
                        // Kept with its traceback but not its frames' locals: the stream keeps
                        // the exception, and the frames may hold the stream (a cycle the
                        // collector cannot see through a Rust object) or large data.
                        if let Some(tb) = e.traceback(py) {
                            let _ = py
                                .import("traceback")
                                .and_then(|m| m.call_method1("clear_frames", (tb,)));
                        }
                        raised(e);
                        message
                    });
                    // Released here, with the GIL: what it holds goes now, on this thread,
                    // not whenever some thread next takes the GIL.
                    drop(f);
                    failed
                });
                if let Some(message) = failed {
                    // A host stream records a panic of its work as the stream's failure:
                    // unwound without the panic hook (no "thread panicked" on stderr for an
                    // exception the next `synchronize` raises).
                    std::panic::resume_unwind(Box::new(message));
                }
            });
            Ok(())
        }
        _ => Err(PyTypeError::new_err(
            "launch runs Python callables on host-backend streams; on CUDA, launch PyTorch or \
             CuPy work on the stream (its handle is .handle)",
        )),
    }
}
