//! Shared test harness: the same test bodies run on the host backend and on the CUDA backend.
//!
//! GPU tests are `#[ignore]`d unless the crate is built with the `gpu-tests` feature, so a plain
//! `cargo test` lists them as `ignored, needs a GPU` instead of reporting them as passed. Run
//! them with `cargo test --features gpu-tests` (the GPU bundle builds with `--all-features`).
//! A GPU test that runs and finds no usable GPU fails, unless `SEQSYNC_REQUIRE_GPU=0`. Every
//! suite with GPU tests also has a `gpu_required` test (never ignored) that fails when
//! `SEQSYNC_REQUIRE_GPU=1` and no GPU is usable.
#![allow(dead_code)]

use std::time::Duration;

use seqsync::backend::Backend;
use seqsync::HostBackend;

/// A backend plus the two things tests need of it beyond the trait.
pub trait Harness: Backend {
    fn stream(&self) -> Self::Stream;
    /// Enqueue work that keeps `stream` busy for about `d`.
    fn busy(&self, stream: &Self::Stream, d: Duration);
    fn sync_stream(&self, stream: &Self::Stream);
    /// Does a stream wait enqueued before its signal hold the stream (everything after it)?
    /// False for the CUDA `events` mechanism, which refuses such a wait
    /// (`Error::WaitBeforeSignalUnsupported`, nothing enqueued).
    fn holds_waits_before_signals(&self) -> bool;
}

impl Harness for HostBackend {
    fn stream(&self) -> Self::Stream {
        self.new_stream("test").unwrap()
    }
    fn busy(&self, stream: &Self::Stream, d: Duration) {
        stream.launch(move || std::thread::sleep(d));
    }
    fn sync_stream(&self, stream: &Self::Stream) {
        stream.synchronize().unwrap();
    }
    fn holds_waits_before_signals(&self) -> bool {
        true
    }
}

/// A stream wait enqueued before its signal, under a mechanism that cannot hold one (CUDA
/// `events`): refused with `Error::WaitBeforeSignalUnsupported`, nothing enqueued.
#[track_caller]
pub fn assert_wait_refused(r: seqsync::Result<()>) {
    match r {
        Err(seqsync::Error::WaitBeforeSignalUnsupported { .. }) => {}
        Err(e) => panic!("expected WaitBeforeSignalUnsupported, got: {e}"),
        Ok(()) => panic!("expected WaitBeforeSignalUnsupported, the wait was enqueued"),
    }
}

pub fn require_gpu() -> bool {
    std::env::var("SEQSYNC_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// `SEQSYNC_REQUIRE_GPU=0`: a GPU test that runs without a GPU returns early instead of failing.
pub fn allow_missing_gpu() -> bool {
    std::env::var("SEQSYNC_REQUIRE_GPU").is_ok_and(|v| v == "0")
}

#[cfg(feature = "cuda")]
pub mod gpu {
    use super::*;
    use seqsync::backend::cuda::CudaBackend;
    use seqsync::cudarc::driver::{LaunchConfig, PushKernelArg};
    use seqsync::internal::backend::cuda::{CudaFunction, CudaStream};
    use std::sync::{Arc, OnceLock};

    pub const KERNELS: &str = r#"
extern "C" __global__ void spin_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
extern "C" __global__ void slow_fill(float *out, int n, float value, unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = value;
}
"#;

    #[derive(Clone, Debug)]
    pub struct Gpu {
        pub backend: CudaBackend,
        pub spin: CudaFunction,
        pub slow_fill: CudaFunction,
    }

    /// The GPU. Without one: panics (a GPU test that runs must not pass without a GPU), or,
    /// under `SEQSYNC_REQUIRE_GPU=0`, prints why and returns `None`.
    pub fn gpu() -> Option<Gpu> {
        static GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();
        let r = GPU.get_or_init(|| {
            let backend = CudaBackend::new(0).map_err(|e| e.to_string())?;
            // Before any test has a wait open: the stream memory operations are probed (the
            // answer is shared by the backend's clones and rebuilds) and the streams made
            // ahead are made (the probe takes a stream).
            let _ = backend.stream_memory_ops();
            let _ = backend.new_stream("made ahead");
            let k = backend
                .load_kernels(KERNELS, &["spin_ns", "slow_fill"])
                .map_err(|e| e.to_string())?;
            Ok(Gpu {
                backend,
                spin: k[0].clone(),
                slow_fill: k[1].clone(),
            })
        });
        match r {
            Ok(g) => Some(g.clone()),
            Err(e) if allow_missing_gpu() => {
                eprintln!("skipping GPU test (SEQSYNC_REQUIRE_GPU=0): {e}");
                None
            }
            Err(e) => panic!("GPU test without a usable GPU: {e}"),
        }
    }

    impl Gpu {
        pub fn spin(&self, stream: &Arc<CudaStream>, d: Duration) {
            let ns = d.as_nanos() as u64;
            let cfg = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(&self.spin);
            b.arg(&ns);
            // SAFETY: spin_ns takes one u64 and touches no memory.
            unsafe { b.launch(cfg) }.expect("launch spin_ns");
        }
    }

    /// A stream of `b`. While a test running beside this one has a wait before its signal
    /// open, streams come from those made ahead; should none be left and the waits stay open
    /// past the second `new_stream` waits for them, this asks again (for 10 s at most).
    pub fn new_stream(b: &CudaBackend) -> std::sync::Arc<seqsync::cudarc::driver::CudaStream> {
        let start = std::time::Instant::now();
        loop {
            match b.new_stream("s") {
                Err(seqsync::Error::NoStreamWhileWaitsOpen { .. })
                    if start.elapsed() < Duration::from_secs(10) =>
                {
                    std::thread::sleep(Duration::from_millis(1))
                }
                r => return r.unwrap(),
            }
        }
    }

    /// The CUDA backend with the harness's kernels; `Harness` is implemented on it through
    /// a thread-local handle to the kernels.
    impl Harness for CudaBackend {
        fn stream(&self) -> Self::Stream {
            new_stream(self)
        }
        fn busy(&self, stream: &Self::Stream, d: Duration) {
            gpu().expect("gpu").spin(stream, d);
        }
        fn sync_stream(&self, stream: &Self::Stream) {
            self.stream_synchronize(stream).unwrap();
        }
        fn holds_waits_before_signals(&self) -> bool {
            seqsync::Timeline::new(self, "probe", 0)
                .unwrap()
                .mechanism()
                .holds_commands()
        }
    }
}

/// Generate `mod host` and `mod cuda` test modules calling the generic bodies named.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod host {
            $( #[test] fn $name() { super::$name(&seqsync::HostBackend::new()) } )*
        }
        #[cfg(feature = "cuda")]
        mod cuda {
            $( #[test]
            #[cfg_attr(not(feature = "gpu-tests"), ignore = "needs a GPU: cargo test --features gpu-tests")]
            fn $name() {
                if let Some(g) = super::common::gpu::gpu() { super::$name(&g.backend) }
            } )*
        }
        $crate::gpu_required!();
    };
}

/// The same cases on a host backend whose host waits are never woken
/// (`HostBackend::polling()`: they poll, as on CUDA), in a module `host_polling`.
#[macro_export]
macro_rules! on_polling_host {
    ($($name:ident),* $(,)?) => {
        mod host_polling {
            $( #[test] fn $name() { super::$name(&seqsync::HostBackend::polling()) } )*
        }
    };
}

/// The suite's `gpu_required` test: fails when `SEQSYNC_REQUIRE_GPU=1` and no GPU is usable.
/// Every test file with GPU tests calls it once (`on_both_backends!` does).
#[macro_export]
macro_rules! gpu_required {
    () => {
        #[test]
        fn gpu_required() {
            if !common::require_gpu() {
                return;
            }
            #[cfg(feature = "cuda")]
            if let Err(e) = seqsync::backend::cuda::CudaBackend::new(0) {
                panic!("SEQSYNC_REQUIRE_GPU=1 but no usable GPU: {e}");
            }
            #[cfg(not(feature = "cuda"))]
            panic!("SEQSYNC_REQUIRE_GPU=1 but seqsync was built without the cuda feature");
        }
    };
}
