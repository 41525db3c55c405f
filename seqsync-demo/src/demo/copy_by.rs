//! How the graph engines and the device bound copy a batch between host and device memory.

use serde::Serialize;

use super::names::parse_name;
use super::Engine;
use seqsync::{Error, Result};

/// How a graph node copies batches between pinned host memory and the device (the engines
/// that enqueue copies on streams themselves, and the baselines, always use the copy engines;
/// the device bound and the isolated latency take the faster of both).
///
/// On CUDA a copy node costs more to launch than a kernel node and stands longer between the
/// nodes around it (BENCHMARKS.md §13, run I): with [`CopyBy::Kernel`] a batch's graph is five
/// kernel nodes, its copies kernels that read or write the pinned host buffers in place
/// (unified addressing). On the host backend both are the same copy.
///
/// ```
/// use seqsync_demo::demo::CopyBy;
/// assert_eq!("kernel".parse::<CopyBy>().unwrap(), CopyBy::Kernel);
/// let e = "dma".parse::<CopyBy>().unwrap_err().to_string();
/// assert!(e.contains("unknown copy 'dma'"), "{e}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyBy {
    /// Copy nodes (`cuMemcpyAsync` in a graph): the copy engines.
    #[default]
    Memcpy,
    /// Kernel nodes that copy over the host buffers' device addresses (zero-copy).
    Kernel,
}

/// Batch bytes below which the graph engines copy by kernels unless told: on the H100 at
/// 64 KiB they doubled the adaptive engine's throughput and cut its p99 to a third, at
/// 256 KiB gained a fifth, and at 1 MiB lost to the copy engines (BENCHMARKS.md §13, run I).
pub const KERNEL_COPY_BELOW: usize = 1 << 20;

/// Batch bytes from which [`Engine::Resident`](super::Engine::Resident) copies by the copy
/// engines unless told: on the H100 its copies on streams lost to its zero-copy reads and
/// writes at 1 MiB (28–32 against 36 GB/s) and won from 4 MiB (42 against 38 GB/s at 4 and
/// 16 MiB), BENCHMARKS.md §13, run K.
pub const RESIDENT_COPY_ENGINES_FROM: usize = 4 << 20;

impl CopyBy {
    /// Both, memcpy first.
    pub const ALL: [CopyBy; 2] = [CopyBy::Memcpy, CopyBy::Kernel];

    /// The copies of a graph engine's nodes for batches of `batch_bytes` when not told:
    /// kernels below [`KERNEL_COPY_BELOW`], memcpy from it.
    ///
    /// ```
    /// use seqsync_demo::demo::{CopyBy, KERNEL_COPY_BELOW};
    /// assert_eq!(CopyBy::auto(64 << 10), CopyBy::Kernel);
    /// assert_eq!(CopyBy::auto(KERNEL_COPY_BELOW), CopyBy::Memcpy);
    /// ```
    pub fn auto(batch_bytes: usize) -> CopyBy {
        if batch_bytes < KERNEL_COPY_BELOW {
            CopyBy::Kernel
        } else {
            CopyBy::Memcpy
        }
    }

    /// The copies of `engine` for batches of `batch_bytes` when not told: [`auto`](Self::auto)
    /// for the graph engines, kernels below [`RESIDENT_COPY_ENGINES_FROM`] for
    /// [`Engine::Resident`](super::Engine::Resident); `None` for an engine that does not choose
    /// (its copies are on streams, by the copy engines).
    ///
    /// ```
    /// use seqsync_demo::demo::{CopyBy, Engine};
    /// assert_eq!(CopyBy::auto_for(Engine::Adaptive, 1 << 20), Some(CopyBy::Memcpy));
    /// assert_eq!(CopyBy::auto_for(Engine::Resident, 1 << 20), Some(CopyBy::Kernel));
    /// assert_eq!(CopyBy::auto_for(Engine::Resident, 4 << 20), Some(CopyBy::Memcpy));
    /// assert_eq!(CopyBy::auto_for(Engine::HandWritten, 1 << 20), None);
    /// ```
    pub fn auto_for(engine: Engine, batch_bytes: usize) -> Option<CopyBy> {
        match engine {
            Engine::Resident if batch_bytes < RESIDENT_COPY_ENGINES_FROM => Some(CopyBy::Kernel),
            Engine::Resident => Some(CopyBy::Memcpy),
            e if e.chooses_copies() => Some(CopyBy::auto(batch_bytes)),
            _ => None,
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CopyBy::Memcpy => "memcpy",
            CopyBy::Kernel => "kernel",
        }
    }
}

impl std::str::FromStr for CopyBy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        parse_name(s, "copy", &CopyBy::ALL, CopyBy::name)
    }
}
