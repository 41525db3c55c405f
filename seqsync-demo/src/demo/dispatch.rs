//! [`run`]: resolve a config (a spec's shape, the backend, the batch size, the graph engine's
//! slot counts), check it, and run it on the backend it picks.

use seqsync::backend::host::{Chaos, HostBackend};
use seqsync::backend::BackendKind;
use seqsync::Result;

use super::device::{HostDevice, Layout};
use super::measure::run_on;
use super::validate::invalid;
use super::workload;
use super::{adaptive_engine, auto_graph_batches, graph_engine, resident_engine, seed_shape};
use super::{CopyBy, DemoConfig, DemoReport, Engine, Variant};

/// A config resolved for a run: the slot counts of its spec or engine, the backend kind, the
/// layout of its buffers and the batch size; checked.
pub(crate) fn resolve(config: &DemoConfig) -> Result<(DemoConfig, BackendKind, Layout, usize)> {
    let shaped;
    let config = match (&config.spec, config.engine) {
        (Some(spec), Engine::Pipeline | Engine::Graph | Engine::Adaptive | Engine::Resident) => {
            let (nin, nx, ny, nout) = seed_shape(spec)?;
            shaped = DemoConfig {
                nin,
                nx,
                ny,
                nout,
                ..config.clone()
            };
            &shaped
        }
        (Some(_), Engine::HandWritten) => {
            return Err(invalid("a spec runs on --engine pipeline only".into()))
        }
        _ => config,
    };
    let kind = match config.backend {
        BackendKind::Auto if config.chaos.is_some() => BackendKind::Host,
        BackendKind::Auto => seqsync::AnyBackend::auto()?.kind(),
        k => k,
    };
    if config.chaos.is_some() && kind != BackendKind::Host {
        return Err(invalid("--chaos needs the host backend".into()));
    }
    let batch_bytes = config.batch_bytes.unwrap_or(if kind == BackendKind::Cuda {
        64 << 20
    } else {
        256 << 10
    });
    let graphed;
    // The graph and resident engines' own slot counts, the same in every buffer: from options
    // checked first (a depth off the range would overflow the graph engines' product).
    let slots = if config.engine.slots_everywhere() {
        config.validate_graph_options()?;
        Some(match config.engine {
            Engine::Resident => config
                .slots
                .unwrap_or_else(|| resident_engine::auto_slots(batch_bytes)),
            // Depth groups of K batches.
            _ => graph_depth(config, batch_bytes) * graph_k(config, batch_bytes),
        })
    } else {
        None
    };
    let config = match slots {
        Some(slots) => {
            graphed = DemoConfig {
                nin: slots,
                nx: slots,
                ny: slots,
                nout: slots,
                ..config.clone()
            };
            &graphed
        }
        None => config,
    };
    config.validate(batch_bytes, kind)?;
    let lags = [
        config.nin,
        config.nx,
        config.ny,
        config.nout,
        config.host_slots,
    ];
    let layout = Layout {
        n: batch_bytes / 4,
        nin: config.nin,
        nx: config.nx,
        ny: config.ny,
        nout: config.nout,
        npatterns: if config.engine.slots_everywhere() {
            config.nin
        } else {
            workload::prime_above(lags.into_iter().max().unwrap_or(1))
        },
        nhout: if config.engine.slots_everywhere() {
            config.nin
        } else if config.variant == Variant::HostRing {
            config.host_slots
        } else {
            1
        },
        intensity: config.intensity,
        verify_samples: config.verify_samples,
        // The graph engines' node copies and the resident kernel's (the others copy on
        // streams, by the copy engines).
        copy_by: config
            .copy_by
            .or(CopyBy::auto_for(config.engine, batch_bytes))
            .unwrap_or(CopyBy::Memcpy),
    };
    Ok((config.clone(), kind, layout, batch_bytes))
}

/// K of a graph engine: batches per graph ([`Engine::Graph`]) or most batches per launch
/// ([`Engine::Adaptive`], rounded down to a power of two), given or automatic.
pub(crate) fn graph_k(config: &DemoConfig, batch_bytes: usize) -> usize {
    let auto = match config.engine {
        Engine::Adaptive => adaptive_engine::auto_launch_batches(batch_bytes),
        _ => auto_graph_batches(batch_bytes),
    };
    let k = config
        .graph_batches
        .unwrap_or(auto)
        .clamp(1, graph_engine::MAX_GRAPH_BATCHES);
    match config.engine {
        Engine::Adaptive => adaptive_engine::launch_batches(k),
        _ => k,
    }
}

/// Batches a node of an [`Engine::Adaptive`] launch covers: `graph_span` or the automatic K,
/// rounded down to a power of two, at most the engine's K.
pub(crate) fn graph_span(config: &DemoConfig, batch_bytes: usize) -> usize {
    let span = config
        .graph_span
        .unwrap_or_else(|| adaptive_engine::auto_launch_batches(batch_bytes));
    adaptive_engine::launch_batches(span.min(graph_k(config, batch_bytes)))
}

/// Launch groups of K in flight: [`graph_engine::DEPTH`]; for [`Engine::Adaptive`]
/// `graph_depth`, or by default [`adaptive_engine::auto_depth`] of the batch size and K.
pub(crate) fn graph_depth(config: &DemoConfig, batch_bytes: usize) -> usize {
    match config.engine {
        Engine::Adaptive => config.graph_depth.unwrap_or_else(|| {
            adaptive_engine::auto_depth(batch_bytes, graph_k(config, batch_bytes))
        }),
        _ => graph_engine::DEPTH,
    }
}

/// Run the demo: the pipeline, then (if asked) the baselines, on the backend the config picks.
///
/// # Errors
/// [`Error::InvalidArgument`](seqsync::Error::InvalidArgument) for a bad config,
/// [`Error::NoDevice`](seqsync::Error::NoDevice) for `--backend cuda` without a GPU, and any
/// error of the pipeline's rings or backend.
pub fn run(config: &DemoConfig) -> Result<DemoReport> {
    let (config, kind, layout, batch_bytes) = resolve(config)?;
    let config = &config;
    match kind {
        BackendKind::Cuda => run_cuda(config, layout, batch_bytes),
        _ => {
            let host = match config.chaos {
                Some(seed) => HostBackend::with_chaos(Chaos::new(seed)),
                None => HostBackend::new(),
            };
            run_on(
                &HostDevice::new(host, layout),
                "host".into(),
                config,
                batch_bytes,
            )
        }
    }
}

#[cfg(feature = "cuda")]
fn run_cuda(config: &DemoConfig, mut layout: Layout, batch_bytes: usize) -> Result<DemoReport> {
    let gpu = seqsync::backend::cuda::CudaBackend::new(0)?;
    let name = gpu.device_name()?;
    if config.engine == Engine::Resident
        && config.copy_by.is_none()
        && layout.copy_by == CopyBy::Memcpy
        && gpu.stream_memory_ops().is_err()
    {
        // Copies on streams were only the automatic choice, and they need stream memory
        // operations, which this device does not run: the kernel copies in place instead.
        // (Asked for with --copy memcpy, the run is refused with the reason.)
        layout.copy_by = CopyBy::Kernel;
    }
    run_on(
        &super::cuda_device::CudaDevice::new(gpu, layout)?,
        name,
        config,
        batch_bytes,
    )
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(_: &DemoConfig, _: Layout, _: usize) -> Result<DemoReport> {
    Err(seqsync::Error::NoDevice(
        "seqsync was built without the `cuda` feature".into(),
    ))
}
