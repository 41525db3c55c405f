//! A [`ValidatingBackend`] runs command graphs too: every command goes to the inner backend;
//! a kernel carries the buffer accesses it makes, declared to the checker on its stream when it
//! is enqueued.

use super::backend::{ValidatingBackend, ValidatingStream};
use super::checker::Access;
use crate::backend::command::{CommandBackend, CopyOp, FillOp};
use crate::error::Result;

/// A kernel of a [`ValidatingBackend`]: the inner kernel plus the accesses it makes.
#[derive(Debug, Clone)]
pub struct ValidatingKernel<K> {
    /// The inner backend's kernel.
    pub inner: K,
    /// What it reads and writes, declared each time it is launched.
    pub accesses: Vec<Access>,
}

impl<B: CommandBackend> CommandBackend for ValidatingBackend<B> {
    type Kernel = ValidatingKernel<B::Kernel>;
    type Memory = B::Memory;

    fn launch_kernel(&self, stream: &Self::Stream, kernel: &Self::Kernel) -> Result<()> {
        self.inner().launch_kernel(stream.inner(), &kernel.inner)?;
        for a in &kernel.accesses {
            self.access(stream, a.clone());
        }
        Ok(())
    }

    fn copy(&self, stream: &ValidatingStream<B::Stream>, op: &CopyOp<B::Memory>) -> Result<()> {
        self.inner().copy(stream.inner(), op)
    }

    fn fill(&self, stream: &ValidatingStream<B::Stream>, op: &FillOp<B::Memory>) -> Result<()> {
        self.inner().fill(stream.inner(), op)
    }

    fn check_copy(&self, op: &CopyOp<B::Memory>) -> Result<()> {
        self.inner().check_copy(op)
    }

    fn check_fill(&self, op: &FillOp<B::Memory>) -> Result<()> {
        self.inner().check_fill(op)
    }

    fn alloc_words(&self, words: usize) -> Result<B::Memory> {
        self.inner().alloc_words(words)
    }

    fn read_words(&self, memory: &B::Memory) -> Result<Vec<u32>> {
        self.inner().read_words(memory)
    }

    fn write_words(&self, memory: &B::Memory, data: &[u32]) -> Result<()> {
        self.inner().write_words(memory, data)
    }

    fn spin_kernel(&self, us: u64) -> Result<Self::Kernel> {
        Ok(ValidatingKernel {
            inner: self.inner().spin_kernel(us)?,
            accesses: Vec::new(),
        })
    }
}
