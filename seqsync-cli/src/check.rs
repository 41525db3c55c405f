//! `seqsync check`: placeholder replaced below.
use crate::Failure;
use clap::Args;

#[derive(Args)]
pub(crate) struct CheckArgs {}

pub(crate) fn run(_a: CheckArgs) -> Result<(), Failure> {
    Ok(())
}
