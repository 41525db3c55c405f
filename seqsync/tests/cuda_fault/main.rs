//! A kernel that faults, on CUDA: alone in its test binary, because the fault poisons the whole
//! CUDA context of the process (every other test in the same process would fail with
//! `CUDA_ERROR_LAUNCH_FAILED`).

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod timeline_cuda_fault;
