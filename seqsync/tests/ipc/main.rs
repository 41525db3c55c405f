//! The ipc layer across processes on the host backend: `SharedRing` and `SharedTimeline`. The
//! multi-process cases re-execute this test binary as the other process (`harness`).
#![cfg(target_os = "linux")]

mod harness;
mod shared_ring;
mod shared_timeline;
