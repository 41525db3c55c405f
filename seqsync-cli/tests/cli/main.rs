//! The `seqsync` command: the demo and bench runs, `check` and `graph`.
//!
//! One test binary (each links the whole workspace); a module per suite, named as its file.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod check;
mod cli;
mod cli_graph;
mod flag_fuzz;
mod processes;
mod throughput;
