//! Declared pipelines: `Pipeline.from_toml(text)`, `check()` (the derived rings and the
//! verdict), and `run(backend, stages={name: fn(seq, stream)}, batches=N)`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use seqsync::backend::AnyStream;
use seqsync::pipeline::{self, PipelineSpec, Plan, StageCtx, Stages};
use seqsync::{AnyBackend, Error};

use crate::block::interruptible;
use crate::borrowed::borrow;
use crate::errors::{to_py, IntoPyResult, StageError};
use crate::stream::Backend;
use crate::thread_state;

/// A pipeline declared in TOML (the `seqsync check` format): threads, streams, buffers and
/// stages. seqsync derives every ring, proves the schedule deadlock-free, and runs it with one
/// Python function per stage.
///
/// ```python
/// p = seqsync.Pipeline.from_toml('''
/// [buffers]
/// x = 2
/// [[thread]]
/// name = "main"
/// [[thread.stage]]
/// name = "fill"
/// stream = "a"
/// writes = ["x"]
/// [[thread.stage]]
/// name = "read"
/// stream = "b"
/// reads = ["x"]
/// ''')
/// assert p.check().deadlock_free
/// b = seqsync.Backend("host")
/// seen = []
/// p.run(b, stages={"fill": lambda seq, s: s.launch(lambda: seen.append(seq)),
///                  "read": lambda seq, s: None}, batches=4)
/// assert seen == [0, 1, 2, 3]
/// ```
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct Pipeline {
    spec: PipelineSpec,
    plan: Plan,
}

/// What `Pipeline.check()` found: the derived rings, the verdict, the plan as JSON text.
#[pyclass(module = "seqsync", frozen, get_all)]
pub(crate) struct Check {
    /// True when no interleaving of the threads can get stuck.
    deadlock_free: bool,
    /// The verdict in words (with the interleaving that deadlocks, if one does).
    verdict: String,
    /// The plan (rings, streams, each thread's ops) as JSON text.
    plan_json: String,
}

#[pymethods]
impl Check {
    fn __repr__(&self) -> String {
        format!(
            "Check(deadlock_free={})",
            if self.deadlock_free { "True" } else { "False" }
        )
    }
}

/// The stream a stage function is given: valid during that call (a later use raises).
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct StageStream {
    name: String,
    stream: Mutex<Option<StreamPtr>>,
    /// The stage call's stage and seq, and where the run keeps the first exception: one
    /// that work launched on this stream raises is the run's `StageError` cause too.
    stage: String,
    seq: i64,
    raised: Raised,
}

/// The first exception of a run, with its stage and seq.
type Raised = Arc<Mutex<Option<(PyErr, String, i64)>>>;

/// A stream of the running pipeline's stream map, borrowed for one stage call.
struct StreamPtr(*const AnyStream);

// SAFETY: `AnyStream` is `Send + Sync`; the pointer is dereferenced only under the
// `StageStream`'s lock while it is `Some`, and it is set to `None` (under that lock) before the
// stage call returns, so before the run's stream map can be dropped.
unsafe impl Send for StreamPtr {}
// SAFETY: as for `Send`.
unsafe impl Sync for StreamPtr {}

impl StageStream {
    /// `f` on the stream, if its stage call has not returned yet. The lock is waited for
    /// without the GIL: its holder may be another Python thread in a call that released the
    /// GIL and waits for work that needs it.
    pub(crate) fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&AnyStream) -> PyResult<T>,
    ) -> PyResult<T> {
        let guard = loop {
            match self.stream.try_lock() {
                Ok(g) => break g,
                Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    py.detach(|| std::thread::sleep(std::time::Duration::from_micros(50)))
                }
            }
        };
        match guard.as_ref() {
            // SAFETY: `Some` only during the stage call, while the stream map lives (see
            // `StreamPtr`).
            Some(p) => f(unsafe { &*p.0 }),
            None => Err(PyTypeError::new_err(format!(
                "stream '{}' was given to a stage call that has returned: keep work on it inside \
                 the stage function",
                self.name
            ))),
        }
    }
}

#[pymethods]
impl StageStream {
    /// The stream's name in the spec.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The raw `CUstream` handle (CUDA), `None` on the host backend.
    #[getter]
    fn handle(&self, py: Python<'_>) -> PyResult<Option<usize>> {
        self.with(py, |s| Ok(crate::stream::handle_of_stream(s)))
    }

    /// Host backend: run `fn()` on the stream, in order. `TypeError` if `fn` is not callable.
    fn launch(&self, py: Python<'_>, f: Py<PyAny>) -> PyResult<()> {
        let (raised, stage, seq) = (self.raised.clone(), self.stage.clone(), self.seq);
        self.with(py, |s| {
            crate::stream::launch_on(py, s, f, move |e| {
                let mut r = raised.lock().unwrap_or_else(|e| e.into_inner());
                if r.is_none() {
                    *r = Some((e, stage, seq));
                }
            })
        })
    }

    /// The CUDA-Python stream protocol: `(0, handle)`, so PyTorch and CuPy take it.
    fn __cuda_stream__(&self, py: Python<'_>) -> PyResult<(i32, usize)> {
        match self.handle(py)? {
            Some(h) => Ok((0, h)),
            None => Err(PyTypeError::new_err(
                "a host-backend stream is not a CUDA stream",
            )),
        }
    }
}

#[pymethods]
impl Pipeline {
    /// A builder, for a pipeline declared in Python instead of TOML.
    #[staticmethod]
    fn builder() -> PipelineBuilder {
        PipelineBuilder {
            inner: Mutex::new(Some(PipelineSpec::builder())),
        }
    }

    /// Parse, validate and derive a spec written in TOML. Raises `PlanError` (with `.line`).
    #[staticmethod]
    fn from_toml(text: &str) -> PyResult<Self> {
        Self::derived(PipelineSpec::from_toml(text).py_err()?)
    }

    /// `from_toml` of a file.
    #[staticmethod]
    fn from_path(path: std::path::PathBuf) -> PyResult<Self> {
        Self::derived(PipelineSpec::from_path(path).py_err()?)
    }

    /// The same pipeline with `NAME=VALUE` applied (a parameter or `RING.max_size`).
    fn set(&self, assignment: &str) -> PyResult<Self> {
        let mut spec = self.spec.clone();
        spec.apply_assignment(assignment).py_err()?;
        Self::derived(spec)
    }

    /// The plan's rings, as dicts (name, producer, nconsumers, max_size, reason, consumers…).
    #[getter]
    fn rings(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let plan = json(py, &self.plan.to_json())?;
        Ok(plan.get_item("rings")?.unbind())
    }

    /// Prove the schedule deadlock-free, or find the interleaving that gets stuck.
    fn check(&self, py: Python<'_>) -> Check {
        let verdict = py.detach(|| pipeline::check_deadlock(&self.plan));
        Check {
            deadlock_free: verdict.is_deadlock_free(),
            verdict: verdict.to_string(),
            plan_json: self.plan.to_json(),
        }
    }

    /// Run seqs `0..batches` on `backend`: `stages[name](seq, stream)` launches stage
    /// `name`'s work for `seq` on `stream` (a host stage gets `None` and does its work right
    /// there); `after_sync[name](seq)` runs after a `sync = true` stage's synchronize.
    /// `streams` maps spec stream names to framework streams to use (CUDA; the others are
    /// made); a stage on one of them is given that object itself. A Python exception in a stage stops every ring and is raised as `StageError`
    /// (`.stage`, `.seq`, the exception as `__cause__`); Ctrl-C stops the run. Returns the
    /// wall time and per-thread counts. Each spec thread is a host thread taking turns at the
    /// GIL; a stage with heavy PyTorch CPU work wants `torch.set_num_threads` to leave the
    /// spec's threads their cores (README, "Python").
    #[pyo3(signature = (backend, stages, *, batches, after_sync = None, streams = None, stall_timeout = 10.0))]
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        py: Python<'_>,
        backend: &Backend,
        stages: &Bound<'_, PyDict>,
        batches: i64,
        after_sync: Option<&Bound<'_, PyDict>>,
        streams: Option<&Bound<'_, PyDict>>,
        stall_timeout: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let b = backend.inner();
        let launch = callables(stages)?;
        let after = after_sync.map(callables).transpose()?.unwrap_or_default();
        let mut given: HashMap<String, AnyStream> = HashMap::new();
        let mut owners: HashMap<String, Py<PyAny>> = HashMap::new();
        if let Some(map) = streams {
            for (k, v) in map.iter() {
                let name: String = k.extract()?;
                let (stream, owner) = borrow(py, b, Some(&v))?;
                given.insert(name.clone(), stream);
                owners.insert(name, owner);
            }
        }
        let stall = match stall_timeout {
            None => None,
            Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t.min(1e9))),
            Some(t) => {
                return Err(to_py(&Error::InvalidArgument {
                    ring: "stall_timeout".into(),
                    message: format!("{t} s: expected a positive number of seconds, or None"),
                }))
            }
        };
        let cancelled = AtomicBool::new(false);
        let raised: Raised = Arc::default();
        let plan = &self.plan;
        let result = interruptible(
            py,
            || {
                let run = Run {
                    backend: b,
                    plan,
                    launch: &launch,
                    after: &after,
                    owners: &owners,
                };
                run.go(given, batches, stall, &cancelled, &raised)
            },
            || cancelled.store(true, Ordering::SeqCst),
        )?;
        drop(owners);
        let first = raised.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((err, stage, seq)) = first {
            let e = StageError::new_err(format!("stage '{stage}' raised at seq {seq}: {err}"));
            let v = e.value(py);
            v.setattr("stage", stage)?;
            v.setattr("seq", seq)?;
            e.set_cause(py, Some(err));
            return Err(e);
        }
        let stats = result.py_err()?;
        let out = PyDict::new(py);
        out.set_item("wall", stats.wall.as_secs_f64())?;
        let threads = PyDict::new(py);
        for t in &stats.threads {
            let d = PyDict::new(py);
            d.set_item("iterations", t.iterations)?;
            d.set_item("launches", t.launches)?;
            d.set_item("waits", t.waits)?;
            d.set_item("synchronizes", t.synchronizes)?;
            d.set_item("records", t.records)?;
            threads.set_item(&t.name, d)?;
        }
        out.set_item("threads", threads)?;
        Ok(out.into_any().unbind())
    }

    fn __str__(&self) -> String {
        self.plan.to_string()
    }
}

/// A pipeline built in Python instead of TOML: `Pipeline.builder()`, then `param`, `buffer`,
/// `thread` and `stage` calls (each returns the builder), then `build()`.
///
/// ```python
/// p = (seqsync.Pipeline.builder()
///      .buffer("x", 2)
///      .thread("main")
///      .stage("fill", stream="a", writes=["x"])
///      .stage("read", stream="b", reads=["x"], sync=True)
///      .build())
/// assert p.check().deadlock_free
/// ```
#[pyclass(module = "seqsync", frozen)]
pub(crate) struct PipelineBuilder {
    /// `None` once built.
    inner: Mutex<Option<pipeline::PipelineBuilder>>,
}

impl PipelineBuilder {
    fn update(
        slf: &Bound<'_, Self>,
        f: impl FnOnce(pipeline::PipelineBuilder) -> pipeline::PipelineBuilder,
    ) -> PyResult<Py<Self>> {
        let mut guard = slf.get().inner.lock().unwrap_or_else(|e| e.into_inner());
        let b = guard
            .take()
            .ok_or_else(|| PyTypeError::new_err("this builder was built already"))?;
        *guard = Some(f(b));
        Ok(slf.clone().unbind())
    }
}

#[pymethods]
impl PipelineBuilder {
    /// A parameter that buffer sizes may name.
    fn param(slf: &Bound<'_, Self>, name: &str, value: u64) -> PyResult<Py<Self>> {
        Self::update(slf, |b| b.param(name, value))
    }

    /// A buffer of `slots` slots: a number, or the name of a parameter.
    fn buffer(slf: &Bound<'_, Self>, name: &str, slots: &Bound<'_, PyAny>) -> PyResult<Py<Self>> {
        let slots = match slots.extract::<u64>() {
            Ok(n) => seqsync::internal::pipeline::Slots::count(n),
            Err(_) => seqsync::internal::pipeline::Slots::param(slots.extract::<String>()?),
        };
        Self::update(slf, |b| b.buffer(name, slots))
    }

    /// A host thread; the stages after it are its loop body, in order.
    fn thread(slf: &Bound<'_, Self>, name: &str) -> PyResult<Py<Self>> {
        Self::update(slf, |b| b.thread(name))
    }

    /// A stage of the last thread: on `stream`, or on the host thread itself (`stream=None`),
    /// reading and writing the named buffers; `sync=True` synchronizes the thread on it.
    #[pyo3(signature = (name, *, stream = None, reads = vec![], writes = vec![], sync = false))]
    fn stage(
        slf: &Bound<'_, Self>,
        name: &str,
        stream: Option<String>,
        reads: Vec<String>,
        writes: Vec<String>,
        sync: bool,
    ) -> PyResult<Py<Self>> {
        let mut st = match stream {
            Some(s) => pipeline::StageSpec::on_stream(s),
            None => pipeline::StageSpec::on_host(),
        };
        for r in reads {
            st = st.reads(r);
        }
        for w in writes {
            st = st.writes(w);
        }
        if sync {
            st = st.sync();
        }
        Self::update(slf, |b| b.stage(name, st))
    }

    /// Validate and derive: the pipeline, or `PlanError`.
    fn build(&self) -> PyResult<Pipeline> {
        let b = self
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| PyTypeError::new_err("this builder was built already"))?;
        Pipeline::derived(b.build().py_err()?)
    }
}

impl Pipeline {
    fn derived(spec: PipelineSpec) -> PyResult<Self> {
        let plan = pipeline::derive(&spec).py_err()?;
        Ok(Pipeline { spec, plan })
    }
}

fn json<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (text,))
}

fn callables(d: &Bound<'_, PyDict>) -> PyResult<HashMap<String, Py<PyAny>>> {
    d.iter()
        .map(|(k, v)| {
            let name: String = k
                .extract()
                .map_err(|_| PyKeyError::new_err("stage names are strings"))?;
            if !v.is_callable() {
                return Err(PyTypeError::new_err(format!(
                    "stage '{name}': not callable"
                )));
            }
            Ok((name, v.unbind()))
        })
        .collect()
}

/// What a run needs on its helper thread.
struct Run<'a> {
    backend: &'a AnyBackend,
    plan: &'a Plan,
    launch: &'a HashMap<String, Py<PyAny>>,
    after: &'a HashMap<String, Py<PyAny>>,
    /// The framework stream objects given for spec streams: a stage on one of them is given
    /// that object (so `torch.cuda.stream(s)` takes it as it is).
    owners: &'a HashMap<String, Py<PyAny>>,
}

impl Run<'_> {
    /// The run itself: the missing streams made, the stages wrapped, `pipeline::run`.
    fn go(
        &self,
        mut streams: HashMap<String, AnyStream>,
        batches: i64,
        stall_timeout: Option<Duration>,
        cancelled: &AtomicBool,
        raised: &Raised,
    ) -> seqsync::Result<pipeline::RunStats> {
        let Run {
            backend,
            plan,
            launch,
            after,
            owners,
        } = *self;
        for name in plan.streams() {
            if !streams.contains_key(name) {
                streams.insert(
                    name.clone(),
                    seqsync::backend::Backend::new_stream(backend, name)?,
                );
            }
        }
        let keep = |stage: &str, seq: i64, err: PyErr| -> Error {
            let message = err.to_string();
            let mut r = raised.lock().unwrap_or_else(|e| e.into_inner());
            if r.is_none() {
                *r = Some((err, stage.to_string(), seq));
            }
            Error::Stage {
                stage: stage.to_string(),
                message,
            }
        };
        let check = || {
            if cancelled.load(Ordering::SeqCst) {
                Err(Error::Cancelled("KeyboardInterrupt".into()))
            } else {
                Ok(())
            }
        };
        // Each stage's stream name, looked up once (a stage call reads it every batch).
        let stream_of: HashMap<&str, &str> = plan
            .stages()
            .iter()
            .filter_map(|s| Some((s.name.as_str(), plan.streams()[s.stream?].as_str())))
            .collect();
        let stream_name = |cx: &StageCtx<'_, AnyBackend>| stream_of.get(cx.stage).copied();
        let mut stages = Stages::<AnyBackend>::new();
        for (name, f) in launch {
            stages = stages.stage(name.clone(), move |cx: &StageCtx<'_, AnyBackend>| {
                check()?;
                thread_state::keep();
                Python::attach(|py| {
                    let name = stream_name(cx).unwrap_or_default();
                    if let Some(owner) = owners.get(name) {
                        let r = f.call1(py, (cx.seq, owner.clone_ref(py)));
                        return r.map(drop).map_err(|e| keep(cx.stage, cx.seq, e));
                    }
                    let arg: Option<Py<StageStream>> = match cx.stream {
                        None => None,
                        Some(s) => Some(
                            Py::new(
                                py,
                                StageStream {
                                    name: name.to_string(),
                                    stream: Mutex::new(Some(StreamPtr(s as *const AnyStream))),
                                    stage: cx.stage.to_string(),
                                    seq: cx.seq,
                                    raised: raised.clone(),
                                },
                            )
                            .map_err(|e| keep(cx.stage, cx.seq, e))?,
                        ),
                    };
                    let r = f.call1(py, (cx.seq, arg.as_ref().map(|a| a.clone_ref(py))));
                    if let Some(a) = &arg {
                        // Without the GIL: another Python thread may hold the lock in a call
                        // that waits for work needing the GIL.
                        let stage_stream = a.get();
                        py.detach(|| {
                            *stage_stream
                                .stream
                                .lock()
                                .unwrap_or_else(|e| e.into_inner()) = None;
                        });
                    }
                    r.map(drop).map_err(|e| keep(cx.stage, cx.seq, e))
                })
            });
        }
        for (name, f) in after {
            let stage = name.clone();
            stages = stages.after_sync(name.clone(), move |seq| {
                check()?;
                thread_state::keep();
                Python::attach(|py| {
                    f.call1(py, (seq,))
                        .map(drop)
                        .map_err(|e| keep(&stage, seq, e))
                })
            });
        }
        let r = pipeline::run(pipeline::RunConfig {
            plan,
            backend,
            streams: &streams,
            stages: &stages,
            batches,
            stall_timeout,
        });
        drop(stages);
        drop(streams);
        r
    }
}
