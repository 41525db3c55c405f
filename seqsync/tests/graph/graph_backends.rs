//! Command graphs on both backends: the same command buffer gives the same results through the
//! streams + events lowering, the levels lowering and the graph lowering (a CUDA graph on
//! CUDA), and an instantiated graph replays with kernel parameters changed between replays.

use crate::common;
use crate::graph_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use graph_support::families;
use seqsync::backend::{CopyOp, FillOp};
use seqsync::graph::{Affinity, CommandBuffer, Graph, Lowering, Queues};
use seqsync::internal::backend::GraphBackend;
use seqsync::internal::graph::{Command, Dag};

/// The kernels these tests need, on each backend.
trait Kernels: GraphBackend {
    /// `values[me] = me + 1 + Σ values[p]` over `preds` (u32, wrapping), after a short spin
    /// (so a missing dependency shows).
    fn observe(&self, values: &Self::Memory, me: usize, preds: &[usize]) -> Self::Kernel;
    /// `m[i] += v` for every word of `m` (`words` of them).
    fn add(&self, m: &Self::Memory, words: usize, v: u32) -> Self::Kernel;
}

impl Kernels for seqsync::HostBackend {
    fn observe(&self, values: &Self::Memory, me: usize, preds: &[usize]) -> Self::Kernel {
        let (values, preds) = (values.clone(), preds.to_vec());
        seqsync::internal::backend::host::HostKernel::new(move || {
            std::thread::sleep(std::time::Duration::from_micros((me as u64 * 7919) % 50));
            let mut v = values.lock();
            let s = preds
                .iter()
                .fold(me as u32 + 1, |a, &p| a.wrapping_add(v[p]));
            v[me] = s;
        })
    }
    fn add(&self, m: &Self::Memory, words: usize, v: u32) -> Self::Kernel {
        let m = m.clone();
        seqsync::internal::backend::host::HostKernel::new(move || {
            m.lock()[..words]
                .iter_mut()
                .for_each(|x| *x = x.wrapping_add(v))
        })
    }
}

#[cfg(feature = "cuda")]
mod cuda_kernels {
    use super::*;
    use seqsync::backend::cuda::{CudaBackend, CudaKernel, KernelParam};
    use seqsync::backend::CommandBackend;
    use seqsync::internal::backend::cuda::CudaFunction;
    use std::sync::OnceLock;

    const SOURCE: &str = r#"
extern "C" __global__ void observe(unsigned *v, const unsigned *preds, int n, unsigned me,
                                   unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
    unsigned s = me + 1;
    for (int i = 0; i < n; i++) s += v[preds[i]];
    v[me] = s;
}
extern "C" __global__ void add(unsigned *m, int n, unsigned v) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        m[i] += v;
}
"#;

    fn functions(b: &CudaBackend) -> (CudaFunction, CudaFunction) {
        static F: OnceLock<(CudaFunction, CudaFunction)> = OnceLock::new();
        F.get_or_init(|| {
            let f = b
                .load_kernels(SOURCE, &["observe", "add"])
                .expect("compile");
            (f[0].clone(), f[1].clone())
        })
        .clone()
    }

    impl Kernels for CudaBackend {
        fn observe(&self, values: &Self::Memory, me: usize, preds: &[usize]) -> Self::Kernel {
            let list = self.alloc_words(preds.len().max(1)).unwrap();
            let p: Vec<u32> = preds.iter().map(|&p| p as u32).collect();
            self.write_words(&list, &p).unwrap();
            let k = CudaKernel::single(
                functions(self).0,
                vec![
                    KernelParam::Ptr(values.device_ptr()),
                    KernelParam::Ptr(list.device_ptr()),
                    KernelParam::I32(preds.len() as i32),
                    KernelParam::U32(me as u32),
                    KernelParam::U64((me as u64 * 7919) % 50 * 1000),
                ],
            );
            // The kernel reads `list` at every launch: keep it alive as long as the process.
            std::mem::forget(list);
            k
        }
        fn add(&self, m: &Self::Memory, words: usize, v: u32) -> Self::Kernel {
            CudaKernel {
                function: functions(self).1,
                grid: (4, 1, 1),
                block: (128, 1, 1),
                shared_mem_bytes: 0,
                params: vec![
                    KernelParam::Ptr(m.device_ptr()),
                    KernelParam::I32(words as i32),
                    KernelParam::U32(v),
                ],
            }
        }
    }
}

fn expected(dag: &Dag) -> Vec<u32> {
    let mut v = vec![0u32; dag.len()];
    for &c in dag.topo() {
        v[c] = dag
            .preds(c)
            .iter()
            .fold(c as u32 + 1, |a, &p| a.wrapping_add(v[p]));
    }
    v
}

fn same_results_through_every_lowering<B: Kernels>(b: &B) {
    let mut pool = Queues::new(b.clone());
    for (name, preds) in families(21).into_iter().filter(|(_, p)| p.len() <= 120) {
        let dag = Dag::from_preds(&preds).unwrap();
        let values = b.alloc_words(dag.len()).unwrap();
        let ops: Vec<Command<B>> = (0..dag.len())
            .map(|c| Command::Kernel(b.observe(&values, c, dag.preds(c))))
            .collect();
        for lowering in [Lowering::Streams, Lowering::Levels, Lowering::CudaGraph] {
            b.write_words(&values, &vec![0; dag.len()]).unwrap();
            let graph = Graph::new(dag.clone(), ops.clone());
            if lowering == Lowering::CudaGraph {
                let exe = graph.instantiate(b).unwrap();
                assert_eq!(exe.report().false_dependencies, 0);
                pool.submit_graph(&exe, Affinity::queue(0)).unwrap();
                pool.synchronize().unwrap();
            } else {
                let mut exe = graph.lower(lowering);
                pool.submit(&mut exe, Affinity::queue(0)).unwrap();
                pool.synchronize().unwrap();
            }
            assert_eq!(
                b.read_words(&values).unwrap(),
                expected(&dag),
                "{name} through {lowering:?}"
            );
        }
    }
}

/// fill 5 → add k → copy out, instantiated once and replayed with k = 1, 2, 3.
fn graph_replays_with_updated_kernel_parameters<B: Kernels>(b: &B) {
    const WORDS: usize = 1000;
    let (m, out) = (b.alloc_words(WORDS).unwrap(), b.alloc_words(WORDS).unwrap());
    let replays = Arc::new(AtomicUsize::new(0));
    let r = replays.clone();
    let mut cb = CommandBuffer::<B>::new();
    cb.fill(
        "fill",
        FillOp {
            dst: m.clone(),
            offset: 0,
            words: WORDS,
            value: 5,
        },
        &[],
    );
    cb.barrier();
    let add = cb.kernel("add", b.add(&m, WORDS, 0), &[]);
    cb.barrier();
    let copy = CopyOp {
        src: m.clone(),
        src_offset: 0,
        dst: out.clone(),
        dst_offset: 0,
        words: WORDS,
    };
    cb.copy("copy", copy, &[]);
    cb.host(
        "count",
        move || {
            r.fetch_add(1, Ordering::SeqCst);
        },
        &["copy"],
    );
    let mut exe = cb.finish().unwrap().instantiate(b).unwrap();
    let mut pool = Queues::new(b.clone());
    for k in 1..=3u32 {
        exe.set_kernel(add, b.add(&m, WORDS, k)).unwrap();
        pool.submit_graph(&exe, Affinity::queue(0)).unwrap();
        pool.synchronize().unwrap();
        assert_eq!(
            b.read_words(&out).unwrap(),
            vec![5 + k; WORDS],
            "replay with k = {k}"
        );
    }
    assert_eq!(replays.load(Ordering::SeqCst), 3);
    assert!(
        exe.set_kernel(0, b.add(&m, WORDS, 1)).is_err(),
        "command 0 is a fill"
    );
}

/// IREE's ChainedFillThenCopy, through streams and through a graph.
fn cts_chained_fill_then_copy<B: Kernels>(b: &B) {
    for lowering in [Lowering::Streams, Lowering::CudaGraph] {
        let (src, dst) = (b.alloc_words(4096).unwrap(), b.alloc_words(4096).unwrap());
        let mut cb = CommandBuffer::<B>::new();
        cb.fill(
            "fill",
            FillOp {
                dst: src.clone(),
                offset: 0,
                words: 4096,
                value: 0x1122_3344,
            },
            &[],
        );
        let copy = CopyOp {
            src,
            src_offset: 0,
            dst: dst.clone(),
            dst_offset: 0,
            words: 4096,
        };
        cb.copy("copy", copy, &["fill"]);
        let graph = cb.finish().unwrap();
        let mut pool = Queues::new(b.clone());
        if lowering == Lowering::CudaGraph {
            let exe = graph.instantiate(b).unwrap();
            pool.submit_graph(&exe, Affinity::queue(0)).unwrap();
            pool.synchronize().unwrap();
        } else {
            let mut exe = graph.lower(lowering);
            pool.submit(&mut exe, Affinity::queue(0)).unwrap();
            pool.synchronize().unwrap();
        }
        assert!(
            b.read_words(&dst)
                .unwrap()
                .iter()
                .all(|&w| w == 0x1122_3344),
            "{lowering:?}"
        );
    }
}

/// Queue order between graph replays and stream submissions: replay 1 writes, a stream
/// submission on the same queue adds, replay 2 adds again.
fn graph_and_stream_submissions_keep_queue_order<B: Kernels>(b: &B) {
    const WORDS: usize = 256;
    let m = b.alloc_words(WORDS).unwrap();
    let mut g = CommandBuffer::<B>::new();
    g.kernel("add1", b.add(&m, WORDS, 1), &[]);
    let graph = g.finish().unwrap().instantiate(b).unwrap();
    let mut s = CommandBuffer::<B>::new();
    s.kernel("add10", b.add(&m, WORDS, 10), &[]);
    s.kernel("spin", b.spin_kernel(200).unwrap(), &[]);
    let mut streams = s.finish().unwrap().lower(Lowering::Streams);
    let mut pool = Queues::new(b.clone());
    for _ in 0..5 {
        pool.submit_graph(&graph, Affinity::queue(0)).unwrap();
        pool.submit(&mut streams, Affinity::queue(0)).unwrap();
    }
    pool.synchronize().unwrap();
    assert_eq!(b.read_words(&m).unwrap(), vec![55; WORDS]);
}

on_both_backends!(
    same_results_through_every_lowering,
    graph_replays_with_updated_kernel_parameters,
    cts_chained_fill_then_copy,
    graph_and_stream_submissions_keep_queue_order,
);
