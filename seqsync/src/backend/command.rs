//! [`CommandBackend`]: what a command graph needs of a backend beyond streams and events —
//! running a kernel, a copy, a fill or a host function in stream order, and memory to copy and
//! fill.
//!
//! | backend | kernel | memory | copy / fill | host function |
//! |---|---|---|---|---|
//! | host | [`HostKernel`](super::host::HostKernel): a closure | [`HostMemory`](super::host::HostMemory): words behind a lock | on the stream's worker | on the stream's worker |
//! | cuda | `CudaKernel`: a function, launch shape, parameters | `DeviceBuffer` | `cuMemcpyDtoDAsync`, `cuMemsetD32Async` | `cuLaunchHostFunc` |
//!
//! Memory is counted in 32-bit words. Streams and host functions are the [`Backend`]'s own
//! (`new_stream`, `launch_host`).

use super::Backend;
use crate::error::Result;

use std::sync::Arc;

/// Copy `words` words from `src[src_offset..]` to `dst[dst_offset..]`.
#[derive(Debug, Clone)]
pub struct CopyOp<M> {
    /// Where from.
    pub src: M,
    /// First word read.
    pub src_offset: usize,
    /// Where to.
    pub dst: M,
    /// First word written.
    pub dst_offset: usize,
    /// How many words.
    pub words: usize,
}

/// Set `words` words of `dst` from `offset` on to `value`.
#[derive(Debug, Clone)]
pub struct FillOp<M> {
    /// The memory.
    pub dst: M,
    /// First word written.
    pub offset: usize,
    /// How many words.
    pub words: usize,
    /// The pattern.
    pub value: u32,
}

/// A host function run in stream order; it may run many times (once per submission).
pub type HostFn = Arc<dyn Fn() + Send + Sync + 'static>;

/// A backend that can run a command graph's commands.
pub trait CommandBackend: Backend {
    /// A kernel launch: the code and its parameters. Cheap to clone.
    type Kernel: Clone + Send + Sync + 'static;
    /// Memory that copies and fills act on. Cheap to clone (shared).
    type Memory: Clone + Send + Sync + 'static;

    /// Enqueue `kernel` on `stream`.
    fn launch_kernel(&self, stream: &Self::Stream, kernel: &Self::Kernel) -> Result<()>;

    /// Enqueue a copy on `stream`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] when a range is out of bounds.
    fn copy(&self, stream: &Self::Stream, op: &CopyOp<Self::Memory>) -> Result<()>;

    /// Enqueue a fill on `stream`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] when the range is out of bounds.
    fn fill(&self, stream: &Self::Stream, op: &FillOp<Self::Memory>) -> Result<()>;

    /// `Err` where [`copy`](Self::copy) would refuse `op` (a range out of bounds), without
    /// enqueuing anything: so that a submission of many commands is refused whole, before
    /// its first command is enqueued.
    fn check_copy(&self, op: &CopyOp<Self::Memory>) -> Result<()>;

    /// `Err` where [`fill`](Self::fill) would refuse `op`, without enqueuing anything.
    fn check_fill(&self, op: &FillOp<Self::Memory>) -> Result<()>;

    /// `words` zeroed words of memory.
    fn alloc_words(&self, words: usize) -> Result<Self::Memory>;

    /// The contents of `memory` (synchronous: order it after the work that writes it).
    fn read_words(&self, memory: &Self::Memory) -> Result<Vec<u32>>;

    /// Overwrite the start of `memory` with `data` (synchronous).
    fn write_words(&self, memory: &Self::Memory, data: &[u32]) -> Result<()>;

    /// A kernel that runs for about `us` microseconds and does nothing else (host: a sleep;
    /// CUDA: one thread spinning on the global timer).
    fn spin_kernel(&self, us: u64) -> Result<Self::Kernel>;
}

/// What a command runs.
pub enum Command<B: CommandBackend> {
    /// A kernel launch.
    Kernel(B::Kernel),
    /// A copy.
    Copy(CopyOp<B::Memory>),
    /// A fill.
    Fill(FillOp<B::Memory>),
    /// A host function.
    Host(HostFn),
}

impl<B: CommandBackend> Clone for Command<B> {
    fn clone(&self) -> Self {
        match self {
            Command::Kernel(k) => Command::Kernel(k.clone()),
            Command::Copy(c) => Command::Copy(c.clone()),
            Command::Fill(f) => Command::Fill(f.clone()),
            Command::Host(h) => Command::Host(h.clone()),
        }
    }
}

impl<B: CommandBackend> Command<B> {
    /// `"kernel"`, `"copy"`, `"fill"` or `"host"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Kernel(_) => "kernel",
            Command::Copy(_) => "copy",
            Command::Fill(_) => "fill",
            Command::Host(_) => "host",
        }
    }

    /// `Err` where [`enqueue`](Self::enqueue) would refuse it for what it is (a copy or fill
    /// out of bounds), without enqueuing anything.
    pub fn check(&self, backend: &B) -> crate::Result<()> {
        match self {
            Command::Copy(c) => backend.check_copy(c),
            Command::Fill(f) => backend.check_fill(f),
            Command::Kernel(_) | Command::Host(_) => Ok(()),
        }
    }

    /// Enqueue it on `stream`.
    pub fn enqueue(&self, backend: &B, stream: &B::Stream) -> crate::Result<()> {
        match self {
            Command::Kernel(k) => backend.launch_kernel(stream, k),
            Command::Copy(c) => backend.copy(stream, c),
            Command::Fill(f) => backend.fill(stream, f),
            Command::Host(h) => {
                let h = h.clone();
                backend.launch_host(stream, Box::new(move || h()))
            }
        }
    }
}

/// `Err` unless `offset + words <= len`.
pub(crate) fn check_range(what: &str, offset: usize, words: usize, len: usize) -> Result<()> {
    match offset.checked_add(words) {
        Some(end) if end <= len => Ok(()),
        _ => Err(crate::Error::invalid(
            "command",
            format!("{what} range {offset}..{offset}+{words} is outside memory of {len} words"),
        )),
    }
}

/// Refuse a copy of `words` words whose source and destination, starting at `src` and `dst`
/// in one address space (words of one memory, or bytes of unified addresses, `unit` apiece),
/// overlap: the copy engines give no defined result there, and both backends refuse it alike.
pub(crate) fn check_disjoint(src: u64, dst: u64, words: usize, unit: u64) -> Result<()> {
    let len = (words as u64).saturating_mul(unit);
    if words > 0 && src < dst.saturating_add(len) && dst < src.saturating_add(len) {
        return Err(crate::Error::invalid(
            "command",
            format!(
                "a copy of {words} words whose source and destination overlap (at {src} and \
                 {dst}): copy through a second buffer"
            ),
        ));
    }
    Ok(())
}
