//! How the resident kernel learns that a batch arrived.

use serde::Serialize;

use super::names::parse_name;
use seqsync::{Error, Result};

/// How [`Engine::Resident`](super::Engine::Resident)'s kernel, copying in place
/// ([`CopyBy::Kernel`](super::CopyBy::Kernel)), learns that get_data stored a batch's arrival.
///
/// With [`ArrivalBy::Poll`] one block of the kernel polls the host's `arrived` word over the
/// link, and that read waits behind the other blocks' reads of the batches before it (at 80 %
/// load on the H200 a read of the host took 3 to 21 µs at the 99th percentile against 1.4 µs
/// idle: BENCHMARKS.md §13, run AB). With [`ArrivalBy::Relay`] a stream relays each arrival
/// to a word in device memory, which every block polls: a `cuStreamWaitValue64` on the host's
/// word and a `cuStreamWriteValue64` of the device's, enqueued ahead of the batch (64 batches
/// a `cuStreamBatchMemOp` call). It needs stream memory operations; the host backend plays the
/// relay on a stream of its own.
///
/// ```
/// use seqsync_demo::demo::ArrivalBy;
/// assert_eq!("relay".parse::<ArrivalBy>().unwrap(), ArrivalBy::Relay);
/// let e = "push".parse::<ArrivalBy>().unwrap_err().to_string();
/// assert!(e.contains("unknown arrival 'push': expected poll or relay"), "{e}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArrivalBy {
    /// The kernel reads the host's `arrived` word itself.
    #[default]
    Poll,
    /// A stream waits on the host's word and writes the device's, which the kernel reads.
    Relay,
}

impl ArrivalBy {
    /// Both, the default first.
    pub const ALL: [ArrivalBy; 2] = [ArrivalBy::Poll, ArrivalBy::Relay];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ArrivalBy::Poll => "poll",
            ArrivalBy::Relay => "relay",
        }
    }
}

impl std::str::FromStr for ArrivalBy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        parse_name(s, "arrival", &ArrivalBy::ALL, ArrivalBy::name)
    }
}
