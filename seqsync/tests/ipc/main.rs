//! The ipc layer across processes: `SharedRing` and `SharedTimeline` on the host backend, and
//! `SharedRing` on CUDA (IPC events). The multi-process cases re-execute this test binary as
//! the other process (`harness`).
#![cfg(target_os = "linux")]

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod cuda_ring;
mod harness;
mod shared_ring;
mod shared_timeline;
