//! The ipc layer across processes: `SharedRing`, `SharedTimeline`, `SharedBuffer` and
//! `SharedPool` on the host backend, and `SharedRing` (memops, IPC events), `SharedTimeline`
//! (memops) and `SharedPool` on CUDA. The multi-process cases re-execute this test binary as
//! the other process (`harness`).
#![cfg(target_os = "linux")]

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod cuda_pool;
mod cuda_ring;
mod cuda_timeline;
mod harness;
mod shared_buffer;
mod shared_pool;
mod shared_ring;
mod shared_timeline;
