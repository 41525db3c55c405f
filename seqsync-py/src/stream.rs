//! Backends and streams: `Backend("host" | "cuda" | "auto")`, streams made by a backend, and
//! streams borrowed from PyTorch, CuPy, `cuda.core` or a raw handle.

use std::time::{Duration, Instant};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use seqsync::backend::{AnyStream, Backend as _, EventOptions};
use seqsync::internal::backend::{Interrupt, SyncOutcome};
use seqsync::{AnyBackend, BackendKind};

use crate::block::POLL;
use crate::errors::{to_py, IntoPyResult};
use crate::pipeline::StageStream;

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
    pub(crate) inner: AnyBackend,
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
        Ok(Backend { inner })
    }

    /// `"host"` or `"cuda"`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.name()
    }

    /// A new stream (on the host backend a worker thread named `name`).
    #[pyo3(signature = (name = "stream"))]
    fn new_stream(&self, name: &str) -> PyResult<Stream> {
        Ok(Stream {
            backend: self.inner.clone(),
            inner: Some(self.inner.new_stream(name).py_err()?),
            name: name.to_string(),
            borrowed: None,
        })
    }

    /// A CUDA stream made elsewhere, borrowed (never destroyed): an object with
    /// `__cuda_stream__`, a `torch.cuda.Stream`, a CuPy stream or an int handle. `None`: the
    /// current stream of PyTorch if it is imported, else of CuPy. A stream of another device
    /// raises `InvalidArgument`; on the host backend, `TypeError`.
    #[pyo3(signature = (obj = None))]
    fn stream(&self, py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Stream> {
        borrow(py, &self.inner, obj)
    }

    fn __repr__(&self) -> String {
        format!("Backend('{}')", self.inner.name())
    }
}

/// A stream of a [`Backend`]: made by it, or borrowed from a framework (whose stream object
/// this keeps alive).
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct Stream {
    backend: AnyBackend,
    /// Always `Some` but in `drop`.
    inner: Option<AnyStream>,
    name: String,
    /// The framework's stream object a borrowed stream came from.
    borrowed: Option<Py<PyAny>>,
}

impl Stream {
    pub(crate) fn get(&self) -> &AnyStream {
        self.inner.as_ref().expect("taken only in drop")
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // A host stream's drop joins its worker, which may be waiting for the GIL to run a
        // callable: drop it with the GIL released.
        if let Some(inner) = self.inner.take() {
            Python::attach(|py| py.detach(move || drop(inner)));
        }
    }
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
    fn launch(&self, f: Py<PyAny>) -> PyResult<()> {
        launch_on(self.get(), f)
    }

    /// Block until everything enqueued on the stream ran, then raise its failure if it has
    /// one. Waits without the GIL; Ctrl-C raises `KeyboardInterrupt` within 20 ms and
    /// leaves the work running.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let (b, s) = (&self.backend, self.get());
        // An event at the stream's end, waited on in slices between which Ctrl-C is checked;
        // then the stream's own synchronize, which returns at once and reports its failure.
        let event = b.create_event(EventOptions::default()).py_err()?;
        b.record(&event, s).py_err()?;
        loop {
            let slice = Slice(Instant::now() + POLL);
            match py
                .detach(|| b.synchronize_interruptible(&event, &slice))
                .py_err()?
            {
                SyncOutcome::Complete => break,
                _ => py.check_signals()?,
            }
        }
        py.detach(|| b.synchronize_stream(s)).py_err()
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

/// Runs Python `f()` on host stream `s`, in order; an exception fails the stream.
pub(crate) fn launch_on(s: &AnyStream, f: Py<PyAny>) -> PyResult<()> {
    match s {
        AnyStream::Host(s) => {
            s.launch(move || {
                let failed = Python::attach(|py| f.call0(py).err().map(|e| e.to_string()));
                if let Some(message) = failed {
                    // A host stream records a panic of its work as the stream's failure.
                    panic!("{message}");
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

/// An interrupt that fires at its deadline: one slice of a host wait.
struct Slice(Instant);

impl Interrupt for Slice {
    fn interrupted(&self) -> bool {
        Instant::now() >= self.0
    }

    fn sleep(&self, timeout: Duration) -> bool {
        std::thread::sleep(timeout.min(self.0.saturating_duration_since(Instant::now())));
        self.interrupted()
    }
}

/// The raw handle `obj` names: `__cuda_stream__()` (the CUDA-Python protocol), a
/// `torch.cuda.Stream`'s `.cuda_stream`, a CuPy stream's `.ptr`, or an int.
fn handle_of(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(proto) = obj.getattr("__cuda_stream__") {
        let (version, handle): (i64, usize) = proto.call0()?.extract()?;
        if version != 0 {
            return Err(PyTypeError::new_err(format!(
                "__cuda_stream__ protocol version {version}: only version 0 is known"
            )));
        }
        return Ok(handle);
    }
    for attr in ["cuda_stream", "ptr"] {
        if let Ok(h) = obj.getattr(attr).and_then(|v| v.extract::<usize>()) {
            return Ok(h);
        }
    }
    obj.extract::<usize>().map_err(|_| {
        PyTypeError::new_err(format!(
            "not a stream: {} (expected a seqsync.Stream, an object with __cuda_stream__, a \
             torch.cuda.Stream, a CuPy stream or an int handle)",
            obj.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))
    })
}

/// The current stream of PyTorch (if imported), else of CuPy (if imported).
fn current_stream(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    let modules = py.import("sys")?.getattr("modules")?;
    if modules.contains("torch")? {
        return py
            .import("torch")?
            .getattr("cuda")?
            .call_method0("current_stream");
    }
    if modules.contains("cupy")? {
        return py
            .import("cupy")?
            .getattr("cuda")?
            .call_method0("get_current_stream");
    }
    Err(PyTypeError::new_err(
        "stream=None means the current stream of PyTorch (if imported), else of CuPy (if \
         imported); neither is imported: pass a stream",
    ))
}

fn borrow(
    py: Python<'_>,
    backend: &AnyBackend,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<Stream> {
    let AnyBackend::Cuda(cuda) = backend else {
        return Err(PyTypeError::new_err(
            "the host backend takes only its own streams (Backend.new_stream)",
        ));
    };
    let obj = match obj {
        Some(o) => o.clone(),
        None => current_stream(py)?,
    };
    let handle = handle_of(&obj)?;
    // SAFETY: the handle comes from a live framework stream object, which the returned
    // `Stream` keeps alive (`borrowed`) for as long as it is used.
    let inner = unsafe { cuda.borrow_stream(handle) }.py_err()?;
    Ok(Stream {
        backend: backend.clone(),
        inner: Some(AnyStream::Cuda(inner)),
        name: format!("borrowed {handle:#x}"),
        borrowed: Some(obj.unbind()),
    })
}

/// A framework stream for a pipeline run's stream map: the borrowed stream and its owner.
pub(crate) fn borrow_for_run(
    py: Python<'_>,
    backend: &AnyBackend,
    obj: &Bound<'_, PyAny>,
) -> PyResult<(AnyStream, Py<PyAny>)> {
    let mut s = borrow(py, backend, Some(obj))?;
    let inner = s.inner.take().expect("just made");
    Ok((inner, s.borrowed.take().expect("borrowed")))
}

/// Runs `f` on the stream `obj` is for `backend`: a [`Stream`] as is, anything else borrowed
/// for the call.
pub(crate) fn with_stream<T>(
    py: Python<'_>,
    backend: &AnyBackend,
    obj: Option<&Bound<'_, PyAny>>,
    f: impl FnOnce(&AnyStream) -> PyResult<T>,
) -> PyResult<T> {
    if let Some(o) = obj {
        if let Ok(s) = o.cast::<Stream>() {
            return f(s.get().get());
        }
        if let Ok(s) = o.cast::<StageStream>() {
            return s.get().with(f);
        }
    }
    let s = borrow(py, backend, obj)?;
    f(s.get())
}
