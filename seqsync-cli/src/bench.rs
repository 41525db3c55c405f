//! `seqsync bench`: placeholder replaced below.
use crate::Failure;
use clap::Args;

#[derive(Args)]
pub(crate) struct BenchArgs {}

pub(crate) fn run(_a: BenchArgs) -> Result<(), Failure> {
    Ok(())
}
