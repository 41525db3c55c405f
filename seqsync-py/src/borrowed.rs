//! Streams borrowed from frameworks: an object with `__cuda_stream__` (the CUDA-Python
//! protocol), a `torch.cuda.Stream`'s `.cuda_stream`, a CuPy stream's `.ptr`, or an int; and
//! each backend's cache of the last ones it borrowed, so a framework stream passed on every
//! call is borrowed (its context checked) once, not on every call.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use seqsync::backend::AnyStream;
use seqsync::AnyBackend;

use crate::errors::IntoPyResult;
use crate::pipeline::StageStream;
use crate::stream::Stream;

/// Framework stream objects a cache keeps, at most. Each entry keeps its object alive (so its
/// handle names the same stream for as long as the entry is there); the oldest is dropped
/// first. Sixteen covers a pipeline's streams with room to spare, and bounds what the cache
/// holds however many streams a program passes over its life.
const CACHED: usize = 16;

/// A backend and the framework streams it borrowed last: shared by the backend's Python
/// object and every ring and timeline made on it.
pub(crate) struct Borrowing {
    pub(crate) backend: AnyBackend,
    cache: Mutex<VecDeque<Entry>>,
}

/// A framework stream object, its handle, and the stream borrowed for it.
struct Entry {
    owner: Py<PyAny>,
    handle: usize,
    stream: AnyStream,
}

impl Borrowing {
    pub(crate) fn new(backend: AnyBackend) -> Arc<Self> {
        Arc::new(Borrowing {
            backend,
            cache: Mutex::new(VecDeque::with_capacity(CACHED)),
        })
    }

    /// The cached stream for `obj`: the same object given before, or one whose handle a
    /// cached (hence live) object has. An entry found by handle takes `obj` as its owner, so
    /// the next call with `obj` is found by identity.
    fn cached(&self, obj: &Bound<'_, PyAny>, handle: Option<usize>) -> Option<AnyStream> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let i = cache.iter().position(|e| match handle {
            None => e.owner.is(obj),
            Some(h) => e.handle == h,
        })?;
        let stream = share(&cache[i].stream)?;
        if handle.is_some() {
            let old = std::mem::replace(&mut cache[i].owner, obj.clone().unbind());
            drop(cache);
            // Dropped outside the lock: a `__del__` it runs may pass a stream here again.
            drop(old);
        }
        Some(stream)
    }

    fn insert(&self, owner: Py<PyAny>, handle: usize, stream: &AnyStream) {
        let Some(stream) = share(stream) else { return };
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let evicted = if cache.len() == CACHED {
            cache.pop_back()
        } else {
            None
        };
        cache.push_front(Entry {
            owner,
            handle,
            stream,
        });
        drop(cache);
        drop(evicted);
    }
}

/// Another handle on a CUDA stream (`None` for a host stream, which is never cached).
fn share(s: &AnyStream) -> Option<AnyStream> {
    match s {
        AnyStream::Cuda(s) => Some(AnyStream::Cuda(Arc::clone(s))),
        _ => None,
    }
}

/// The raw handle `obj` names: `__cuda_stream__()` (the CUDA-Python protocol), a
/// `torch.cuda.Stream`'s `.cuda_stream`, a CuPy stream's `.ptr`, or an int. The second value
/// says whether `obj` is a stream object (which may be cached) rather than a bare int.
fn handle_of(obj: &Bound<'_, PyAny>) -> PyResult<(usize, bool)> {
    if let Ok(proto) = obj.getattr("__cuda_stream__") {
        let (version, handle): (i64, usize) = proto.call0()?.extract()?;
        if version != 0 {
            return Err(PyTypeError::new_err(format!(
                "__cuda_stream__ protocol version {version}: only version 0 is known"
            )));
        }
        return Ok((handle, true));
    }
    for attr in ["cuda_stream", "ptr"] {
        if let Ok(h) = obj.getattr(attr).and_then(|v| v.extract::<usize>()) {
            return Ok((h, true));
        }
    }
    match obj.extract::<usize>() {
        Ok(h) => Ok((h, false)),
        Err(_) => Err(PyTypeError::new_err(format!(
            "not a stream: {} (expected a seqsync.Stream, an object with __cuda_stream__, a \
             torch.cuda.Stream, a CuPy stream or an int handle)",
            obj.repr().map_or_else(|_| "?".into(), |r| r.to_string())
        ))),
    }
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

/// The framework stream `obj` (`None`: the current one) borrowed on `backend`, with the object
/// that keeps it alive, checked to be of the backend's context. Not cached.
pub(crate) fn borrow(
    py: Python<'_>,
    backend: &AnyBackend,
    obj: Option<&Bound<'_, PyAny>>,
) -> PyResult<(AnyStream, Py<PyAny>)> {
    let obj = match obj {
        Some(o) => o.clone(),
        None => current_stream(py)?,
    };
    let (handle, _) = handle_of(&obj)?;
    Ok((borrow_handle(backend, handle)?, obj.unbind()))
}

fn borrow_handle(backend: &AnyBackend, handle: usize) -> PyResult<AnyStream> {
    let AnyBackend::Cuda(cuda) = backend else {
        return Err(PyTypeError::new_err(
            "the host backend takes only its own streams (Backend.new_stream)",
        ));
    };
    // SAFETY: the handle comes from a live framework stream object (or an int the caller
    // vouches for, as the docs say), which the caller keeps alive for as long as the stream
    // is used: a `Stream` holds it, a cache entry holds it, a single call borrows it under
    // the caller's reference.
    let inner = unsafe { cuda.borrow_stream(handle) }.py_err()?;
    Ok(AnyStream::Cuda(inner))
}

/// Runs `f` on the stream `obj` is for: a [`Stream`] or a stage's stream as is, a framework
/// stream from the cache (borrowed and cached on a miss), an int handle borrowed for the call.
pub(crate) fn with_stream<T>(
    py: Python<'_>,
    b: &Borrowing,
    obj: Option<&Bound<'_, PyAny>>,
    f: impl FnOnce(&AnyStream) -> PyResult<T>,
) -> PyResult<T> {
    if let Some(o) = obj {
        if let Ok(s) = o.cast::<Stream>() {
            return f(s.get().get());
        }
        if let Ok(s) = o.cast::<StageStream>() {
            return s.get().with(py, f);
        }
    }
    if !matches!(b.backend, AnyBackend::Cuda(_)) {
        return Err(PyTypeError::new_err(
            "the host backend takes only its own streams (Backend.new_stream)",
        ));
    }
    let current;
    let obj = match obj {
        Some(o) => o,
        None => {
            current = current_stream(py)?;
            &current
        }
    };
    if let Some(s) = b.cached(obj, None) {
        return f(&s);
    }
    let (handle, object) = handle_of(obj)?;
    if !object {
        return f(&borrow_handle(&b.backend, handle)?);
    }
    if let Some(s) = b.cached(obj, Some(handle)) {
        return f(&s);
    }
    let s = borrow_handle(&b.backend, handle)?;
    b.insert(obj.clone().unbind(), handle, &s);
    f(&s)
}
