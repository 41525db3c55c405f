//! The library's errors as Python exceptions: `seqsync.Error` is the base, one subclass per
//! kind, named as the Rust variant, with the numbers as attributes (`e.ring`, `e.seq`, …).

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use seqsync::Error as E;

create_exception!(
    seqsync,
    Error,
    PyException,
    "Base class of every seqsync error."
);
create_exception!(
    seqsync,
    InvalidArgument,
    Error,
    "A call's argument is out of its range."
);
create_exception!(
    seqsync,
    OutOfOrder,
    Error,
    "A record out of sequence order."
);
create_exception!(
    seqsync,
    Overflow,
    Error,
    "A record on a full ring (non-blocking)."
);
create_exception!(
    seqsync,
    NotYetProduced,
    Error,
    "A wait for a seq not yet recorded (non-blocking)."
);
create_exception!(
    seqsync,
    Stale,
    Error,
    "A wait for a seq whose slot was recycled."
);
create_exception!(
    seqsync,
    OverConsumed,
    Error,
    "More consumers than the ring's nconsumers."
);
create_exception!(
    seqsync,
    Stopped,
    Error,
    "The ring was stopped; `reason` says why."
);
create_exception!(
    seqsync,
    StageError,
    Error,
    "A pipeline stage failed (`stage`, `seq`)."
);
create_exception!(
    seqsync,
    Exhausted,
    Error,
    "A pool could not serve an allocation."
);
create_exception!(seqsync, DoubleFree, Error, "A block freed twice.");
create_exception!(
    seqsync,
    ForeignMemory,
    Error,
    "A free of memory the pool never handed out."
);
create_exception!(
    seqsync,
    AllocSize,
    Error,
    "An allocation of 0 bytes or above the pool's maximum."
);
create_exception!(
    seqsync,
    NonMonotonic,
    Error,
    "A timeline signal not above its current value."
);
create_exception!(
    seqsync,
    ValueOutOfRange,
    Error,
    "A timeline value above the maximum."
);
create_exception!(seqsync, Timeout, Error, "A host wait ran out of time.");
create_exception!(
    seqsync,
    TimelineFailed,
    Error,
    "The timeline waited on failed (`cause`)."
);
create_exception!(
    seqsync,
    Cancelled,
    Error,
    "Work cancelled by the application."
);
create_exception!(
    seqsync,
    TimelineDropped,
    Error,
    "A timeline dropped with stream waits pending."
);
create_exception!(
    seqsync,
    WaitBeforeSignalUnsupported,
    Error,
    "A wait before its signal on a mechanism that cannot hold it."
);
create_exception!(
    seqsync,
    NoStreamWhileWaitsOpen,
    Error,
    "A CUDA stream asked for while a wait before its signal is open and stayed open for a second, with no stream made ahead for that left; `open` (waits open) and `made_ahead` (the reserve's size) say how many."
);
create_exception!(
    seqsync,
    Stalled,
    Error,
    "A pipeline run made no progress for its timeout."
);
create_exception!(seqsync, NoDevice, Error, "No CUDA driver or device.");
create_exception!(
    seqsync,
    PeerLost,
    Error,
    "A process that shared a ring or timeline died with it open; `pid` and `role` name it."
);
create_exception!(
    seqsync,
    FailedElsewhere,
    Error,
    "Another process failed a shared timeline; `pid` and `message` say which and why."
);
create_exception!(
    seqsync,
    BadSegment,
    Error,
    "A shared segment that cannot be trusted (malformed, truncated, another user's)."
);
create_exception!(
    seqsync,
    BackendError,
    Error,
    "A backend (driver) call failed."
);
create_exception!(
    seqsync,
    PlanError,
    Error,
    "A pipeline spec is malformed or cannot be derived."
);

/// Registers every exception class on the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    macro_rules! add {
        ($($t:ident),*) => {$( m.add(stringify!($t), py.get_type::<$t>())?; )*};
    }
    add!(
        Error,
        InvalidArgument,
        OutOfOrder,
        Overflow,
        NotYetProduced,
        Stale,
        OverConsumed,
        Stopped,
        StageError,
        Exhausted,
        DoubleFree,
        ForeignMemory,
        AllocSize,
        NonMonotonic,
        ValueOutOfRange,
        Timeout,
        TimelineFailed,
        Cancelled,
        TimelineDropped,
        WaitBeforeSignalUnsupported,
        NoStreamWhileWaitsOpen,
        Stalled,
        NoDevice,
        PeerLost,
        FailedElsewhere,
        BadSegment,
        BackendError,
        PlanError
    );
    Ok(())
}

/// Sets each `name => value` on the exception `err` (values of any type PyO3 converts).
macro_rules! with_attrs {
    ($py:expr, $err:expr; $($name:literal => $value:expr),* $(,)?) => {{
        let err: PyErr = $err;
        let value = err.value($py);
        $( let _ = value.setattr($name, $value); )*
        err
    }};
}

/// `e` as the Python exception of its kind, its fields set as attributes.
pub(crate) fn to_py(e: &E) -> PyErr {
    Python::attach(|py| {
        let m = e.to_string();
        match e {
            E::InvalidArgument { ring, .. } => {
                with_attrs!(py, InvalidArgument::new_err(m); "ring" => ring)
            }
            E::OutOfOrder {
                ring,
                expected,
                got,
            } => {
                with_attrs!(py, OutOfOrder::new_err(m); "ring" => ring, "expected" => expected, "got" => got)
            }
            E::Overflow {
                ring,
                seq,
                oldest,
                max_size,
                nconsumers,
            } => with_attrs!(py, Overflow::new_err(m);
                "ring" => ring, "seq" => seq, "oldest" => oldest, "max_size" => max_size,
                "nconsumers" => nconsumers),
            E::NotYetProduced { ring, seq, next } => {
                with_attrs!(py, NotYetProduced::new_err(m); "ring" => ring, "seq" => seq, "next" => next)
            }
            E::Stale {
                ring,
                seq,
                current,
                max_size,
                nconsumers,
            } => with_attrs!(py, Stale::new_err(m);
                "ring" => ring, "seq" => seq, "current" => current, "max_size" => max_size,
                "nconsumers" => nconsumers),
            E::OverConsumed {
                ring,
                seq,
                nconsumers,
            } => with_attrs!(py, OverConsumed::new_err(m);
                "ring" => ring, "seq" => seq, "nconsumers" => nconsumers),
            E::Stopped {
                ring,
                reason,
                cause,
            } => {
                let err = with_attrs!(py, Stopped::new_err(m);
                    "ring" => ring, "reason" => reason.as_ref());
                // The error that stopped the ring, when one did.
                if let Some(cause) = cause {
                    err.set_cause(py, Some(to_py(cause)));
                }
                err
            }
            // The seq of the call that raised, where one did (`Pipeline.run` sets it); `None`
            // for what the runtime found itself (no function for a stage, a missing stream).
            E::Stage { stage, .. } => {
                with_attrs!(py, StageError::new_err(m); "stage" => stage, "seq" => None::<i64>)
            }
            E::Exhausted {
                pool,
                requested,
                reserved,
                max,
                ..
            } => with_attrs!(py, Exhausted::new_err(m);
                "pool" => pool, "requested" => requested, "reserved" => reserved, "max" => max),
            E::DoubleFree { pool, addr } => {
                with_attrs!(py, DoubleFree::new_err(m); "pool" => pool, "addr" => addr)
            }
            E::ForeignMemory { pool, addr } => {
                with_attrs!(py, ForeignMemory::new_err(m); "pool" => pool, "addr" => addr)
            }
            E::AllocSize { pool, size, max } => {
                with_attrs!(py, AllocSize::new_err(m); "pool" => pool, "size" => size, "max" => max)
            }
            E::NonMonotonic {
                timeline,
                current,
                got,
            } => with_attrs!(py, NonMonotonic::new_err(m);
                "timeline" => timeline, "current" => current, "got" => got),
            E::ValueOutOfRange { timeline, got, max } => {
                with_attrs!(py, ValueOutOfRange::new_err(m);
                "timeline" => timeline, "got" => got, "max" => max)
            }
            E::Timeout {
                waited_for,
                timeout,
            } => with_attrs!(py, Timeout::new_err(m);
                "waited_for" => waited_for, "timeout" => timeout.as_secs_f64()),
            E::TimelineFailed {
                timeline,
                value,
                cause,
            } => {
                let err = with_attrs!(py, TimelineFailed::new_err(m); "timeline" => timeline, "value" => value);
                err.set_cause(py, Some(to_py(cause)));
                err
            }
            E::Cancelled(why) => with_attrs!(py, Cancelled::new_err(m); "reason" => why),
            E::TimelineDropped {
                timeline,
                value,
                pending,
            } => with_attrs!(py, TimelineDropped::new_err(m);
                "timeline" => timeline, "value" => value, "pending" => pending),
            E::WaitBeforeSignalUnsupported {
                timeline,
                value,
                enqueued,
                mechanism,
            } => {
                with_attrs!(py, WaitBeforeSignalUnsupported::new_err(m);
                    "timeline" => timeline, "value" => value, "enqueued" => enqueued,
                    "mechanism" => mechanism)
            }
            E::NoStreamWhileWaitsOpen { open, made_ahead } => {
                with_attrs!(py, NoStreamWhileWaitsOpen::new_err(m);
                    "open" => open, "made_ahead" => made_ahead)
            }
            E::Stalled {
                timeout_ms,
                threads,
            } => {
                with_attrs!(py, Stalled::new_err(m); "timeout_ms" => timeout_ms, "threads" => threads.clone())
            }
            E::NoDevice(_) => NoDevice::new_err(m),
            E::PeerLost { ring, pid, role } => {
                with_attrs!(py, PeerLost::new_err(m); "ring" => ring, "pid" => pid, "role" => *role)
            }
            E::FailedElsewhere { pid, message } => {
                with_attrs!(py, FailedElsewhere::new_err(m); "pid" => pid, "message" => message)
            }
            E::BadSegment { ring, message } => {
                with_attrs!(py, BadSegment::new_err(m); "ring" => ring, "message" => message)
            }
            E::Backend(b) => with_attrs!(py, BackendError::new_err(m);
                "backend" => b.backend, "op" => b.op, "code" => b.code),
            E::Plan(p) => with_attrs!(py, PlanError::new_err(m); "line" => p.line()),
            _ => Error::new_err(m),
        }
    })
}

/// A library result as a Python one.
pub(crate) trait IntoPyResult<T> {
    /// The error as the Python exception of its kind.
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for seqsync::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(|e| to_py(&e))
    }
}

impl<T> IntoPyResult<T> for Result<T, seqsync::pipeline::PlanError> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(|e| to_py(&E::Plan(e)))
    }
}
