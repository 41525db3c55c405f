//! The host backend's commands: kernels are closures, memory is words behind a lock, and
//! copies, fills and host functions run on the stream's worker thread.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::stream::{Job, StreamShared};
use super::{HostBackend, HostStream};
use crate::backend::command::{
    check_disjoint, check_range, Command, CommandBackend, CopyOp, FillOp,
};
use crate::backend::replay::GraphBackend;
use crate::error::Result;

/// A host "kernel": a closure run on the stream's worker, once per launch.
#[derive(Clone)]
pub struct HostKernel(pub Arc<dyn Fn() + Send + Sync + 'static>);

impl HostKernel {
    /// A kernel running `f`.
    pub fn new(f: impl Fn() + Send + Sync + 'static) -> Self {
        HostKernel(Arc::new(f))
    }
}

impl std::fmt::Debug for HostKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HostKernel")
    }
}

/// Host memory of 32-bit words (shared: clones are the same memory).
#[derive(Clone, Debug, Default)]
pub struct HostMemory(Arc<Mutex<Vec<u32>>>);

impl HostMemory {
    /// `words` zeroed words.
    pub fn zeroed(words: usize) -> Self {
        HostMemory(Arc::new(Mutex::new(vec![0; words])))
    }

    /// Lock the words (a closure of a host kernel may read and write them). Their number is
    /// fixed at creation, as a device allocation's size is: commands checked against it once
    /// stay in bounds.
    pub fn lock(&self) -> HostWords<'_> {
        HostWords(self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The words of a [`HostMemory`], locked: a slice (read and written in place, never resized).
///
/// ```
/// use seqsync::internal::backend::host::HostMemory;
/// let m = HostMemory::zeroed(4);
/// m.lock()[3] = 7;
/// assert_eq!(&m.lock()[..], &[0, 0, 0, 7]);
/// ```
///
/// Its size cannot change under commands checked against it:
///
/// ```compile_fail
/// use seqsync::internal::backend::host::HostMemory;
/// let m = HostMemory::zeroed(4);
/// m.lock().truncate(2);
/// ```
pub struct HostWords<'a>(MutexGuard<'a, Vec<u32>>);

impl std::ops::Deref for HostWords<'_> {
    type Target = [u32];
    fn deref(&self) -> &[u32] {
        &self.0
    }
}

impl std::ops::DerefMut for HostWords<'_> {
    fn deref_mut(&mut self) -> &mut [u32] {
        &mut self.0
    }
}

fn check_copy(op: &CopyOp<HostMemory>) -> Result<()> {
    check_range("copy source", op.src_offset, op.words, op.src.len())?;
    check_range("copy destination", op.dst_offset, op.words, op.dst.len())?;
    if Arc::ptr_eq(&op.src.0, &op.dst.0) {
        check_disjoint(op.src_offset as u64, op.dst_offset as u64, op.words, 1)?;
    }
    Ok(())
}

fn check_fill(op: &FillOp<HostMemory>) -> Result<()> {
    check_range("fill", op.offset, op.words, op.dst.len())
}

fn run_copy(op: &CopyOp<HostMemory>) {
    if Arc::ptr_eq(&op.src.0, &op.dst.0) {
        // Disjoint ranges of one memory (`check_copy`).
        let mut m = op.src.lock();
        m.copy_within(op.src_offset..op.src_offset + op.words, op.dst_offset);
    } else {
        let src = op.src.lock()[op.src_offset..op.src_offset + op.words].to_vec();
        op.dst.lock()[op.dst_offset..op.dst_offset + op.words].copy_from_slice(&src);
    }
}

fn run_fill(op: &FillOp<HostMemory>) {
    op.dst.lock()[op.offset..op.offset + op.words].fill(op.value);
}

/// A host "graph": the nodes' ops in a topological order, run one after another by a single
/// closure on the launching stream. As on CUDA (`cuGraphLaunch`), a launch runs after every
/// earlier launch of the same graph, on whichever stream: one instance runs at a time.
pub struct HostGraphExec {
    ops: Arc<Vec<Command<HostBackend>>>,
    /// Where each node's op is in `ops`.
    position: Vec<usize>,
    /// The last launch: its stream and its place in that stream's order.
    last: Mutex<Option<(Arc<StreamShared>, u64)>>,
}

impl std::fmt::Debug for HostGraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostGraphExec")
            .field("nodes", &self.ops.len())
            .finish()
    }
}

impl GraphBackend for HostBackend {
    type GraphExec = HostGraphExec;

    fn instantiate_graph(
        &self,
        ops: &[Command<HostBackend>],
        _deps: &[Vec<usize>],
        _joins: &[Vec<usize>],
        order: &[usize],
    ) -> Result<HostGraphExec> {
        for op in ops {
            match op {
                Command::Copy(c) => check_copy(c)?,
                Command::Fill(f) => check_fill(f)?,
                _ => {}
            }
        }
        // One topological order honours every dependency.
        let mut position = vec![0; ops.len()];
        for (k, &i) in order.iter().enumerate() {
            position[i] = k;
        }
        Ok(HostGraphExec {
            ops: Arc::new(order.iter().map(|&i| ops[i].clone()).collect()),
            position,
            last: Mutex::new(None),
        })
    }

    fn launch_graph(&self, exec: &HostGraphExec, stream: &HostStream) -> Result<()> {
        let ops = exec.ops.clone();
        let mut last = exec.last.lock().unwrap_or_else(|e| e.into_inner());
        // After the previous launch, when it went to another stream (on this one, the stream's
        // own order holds it); a failure of that stream stays its own.
        if let Some((on, pos)) = last.take() {
            if !Arc::ptr_eq(&on, &stream.shared) {
                stream.shared.enqueue(Job::Follow { on, pos });
            }
        }
        let pos = stream.shared.enqueue_at(Job::Run(Box::new(move || {
            for op in ops.iter() {
                match op {
                    Command::Kernel(k) => (k.0)(),
                    Command::Copy(c) => run_copy(c),
                    Command::Fill(f) => run_fill(f),
                    Command::Host(h) => h(),
                }
            }
        })));
        *last = Some((stream.shared.clone(), pos));
        Ok(())
    }

    fn update_graph_kernel(
        &self,
        exec: &mut HostGraphExec,
        node: usize,
        kernel: &HostKernel,
    ) -> Result<()> {
        let pos = exec.position[node];
        match Arc::make_mut(&mut exec.ops).get_mut(pos) {
            Some(Command::Kernel(k)) => {
                *k = kernel.clone();
                Ok(())
            }
            _ => Err(crate::Error::invalid(
                "graph",
                format!("node {node} is not a kernel node"),
            )),
        }
    }
}

impl CommandBackend for HostBackend {
    type Kernel = HostKernel;
    type Memory = HostMemory;

    fn launch_kernel(&self, stream: &HostStream, kernel: &HostKernel) -> Result<()> {
        let k = kernel.0.clone();
        stream.launch(move || k());
        Ok(())
    }

    fn copy(&self, stream: &HostStream, op: &CopyOp<HostMemory>) -> Result<()> {
        check_copy(op)?;
        let op = op.clone();
        stream.launch(move || run_copy(&op));
        Ok(())
    }

    fn fill(&self, stream: &HostStream, op: &FillOp<HostMemory>) -> Result<()> {
        check_fill(op)?;
        let op = op.clone();
        stream.launch(move || run_fill(&op));
        Ok(())
    }

    fn check_copy(&self, op: &CopyOp<HostMemory>) -> Result<()> {
        check_copy(op)
    }

    fn check_fill(&self, op: &FillOp<HostMemory>) -> Result<()> {
        check_fill(op)
    }

    fn alloc_words(&self, words: usize) -> Result<HostMemory> {
        Ok(HostMemory::zeroed(words))
    }

    fn read_words(&self, memory: &HostMemory) -> Result<Vec<u32>> {
        Ok(memory.lock().to_vec())
    }

    fn write_words(&self, memory: &HostMemory, data: &[u32]) -> Result<()> {
        let mut m = memory.lock();
        check_range("write", 0, data.len(), m.len())?;
        m[..data.len()].copy_from_slice(data);
        Ok(())
    }

    fn spin_kernel(&self, us: u64) -> Result<HostKernel> {
        Ok(HostKernel::new(move || {
            std::thread::sleep(Duration::from_micros(us))
        }))
    }
}
