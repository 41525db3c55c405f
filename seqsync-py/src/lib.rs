//! Python bindings of seqsync (`import seqsync`): backends and streams (`stream.rs`), streams
//! borrowed from frameworks (`borrowed.rs`), rings
//! (`ring.rs`), timelines (`timeline.rs`), declared pipelines (`pipeline.rs`), the exception
//! classes (`errors.rs`), blocking without the GIL, interruptible (`block.rs`), and the Python
//! thread state a run's thread keeps between stage calls (`thread_state.rs`); across processes
//! (Linux), shared rings and timelines (`shared.rs`).
//!
//! Every call that can block releases the GIL; a host wait checks for Ctrl-C every 20 ms.

mod block;
mod borrowed;
mod errors;
mod pipeline;
mod ring;
#[cfg(target_os = "linux")]
mod shared;
mod stream;
mod thread_state;
mod timeline;

use pyo3::prelude::*;

#[pymodule]
fn _seqsync(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<stream::Backend>()?;
    m.add_class::<stream::Stream>()?;
    m.add_class::<ring::EventRingbuf>()?;
    m.add_class::<ring::Recording>()?;
    m.add_class::<timeline::Timeline>()?;
    m.add_function(wrap_pyfunction!(timeline::wait_all, m)?)?;
    m.add_function(wrap_pyfunction!(timeline::wait_any, m)?)?;
    m.add_class::<pipeline::Pipeline>()?;
    m.add_class::<pipeline::PipelineBuilder>()?;
    m.add_class::<pipeline::Check>()?;
    m.add_class::<pipeline::StageStream>()?;
    #[cfg(target_os = "linux")]
    {
        m.add_class::<shared::SharedRing>()?;
        m.add_class::<shared::SharedTimeline>()?;
    }
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
