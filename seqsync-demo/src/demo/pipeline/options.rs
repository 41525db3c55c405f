//! What a run of the hand-written pipeline is told: the variant, the test-only dropped wait,
//! tracing and progress.

use serde::Serialize;

use crate::demo::names::parse_name;
use crate::demo::trace::HostSpans;
use seqsync::{Error, Result};

/// Which of the seed's designs runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The seed's main example: host input batches live long enough by construction (here: a
    /// pool of pinned input buffers, each reused only after an event says its copy finished).
    Seed,
    /// Variant (1): a third thread consumes the h2g ring (`synchronize`) and releases each host
    /// input batch; h2g gets nconsumers = 3 and a blocking record.
    KeepInput,
    /// Variant (2): a ring of `host_slots` output batches in host memory; one g2h thread
    /// launches copies into free host slots, another synchronizes and processes.
    HostRing,
    /// Seed 004: each batch's device buffers come from a stream-ordered pool (allocated on the
    /// copy-in stream, freed after their last reader) instead of fixed ring buffers.
    Pool,
}

impl std::str::FromStr for Variant {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "seed" => Ok(Variant::Seed),
            "keep-input" => Ok(Variant::KeepInput),
            "host-ring" => Ok(Variant::HostRing),
            "pool" => Ok(Variant::Pool),
            o => Err(crate::invalid(
                "demo",
                format!("unknown variant '{o}': expected seed, keep-input, host-ring or pool"),
            )),
        }
    }
}

/// The pipeline's waits (and the g2h synchronize), by name: a test-only switch drops one to
/// prove that verification catches a missing wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DroppedWait {
    /// h2g copy waits on f at s - nin (`in` slot free).
    CopyWaitsF,
    /// h2g copy waits on g at s - nin.
    CopyWaitsG,
    /// f waits on the h2g copy at s (its input).
    FWaitsCopy,
    /// f waits on h at s - nx (`x` slot free).
    FWaitsH,
    /// g waits on the h2g copy at s.
    GWaitsCopy,
    /// g waits on h at s - ny.
    GWaitsH,
    /// h waits on f at s.
    HWaitsF,
    /// h waits on g at s.
    HWaitsG,
    /// h waits on the g2h copy at s - nout (`out` slot free).
    HWaitsCopyOut,
    /// the g2h copy waits on h at s.
    CopyOutWaitsH,
    /// process_data synchronizes on the g2h copy at s.
    ProcessSyncs,
}

impl DroppedWait {
    /// Every wait, in the seed's order.
    pub const ALL: [DroppedWait; 11] = [
        DroppedWait::CopyWaitsF,
        DroppedWait::CopyWaitsG,
        DroppedWait::FWaitsCopy,
        DroppedWait::FWaitsH,
        DroppedWait::GWaitsCopy,
        DroppedWait::GWaitsH,
        DroppedWait::HWaitsF,
        DroppedWait::HWaitsG,
        DroppedWait::HWaitsCopyOut,
        DroppedWait::CopyOutWaitsH,
        DroppedWait::ProcessSyncs,
    ];

    /// Where the wait sits: the ring waited on, and its consumer (the stream that waits, as
    /// [`Streams::new`](super::Streams::new) names it, or `"host"` for the synchronize).
    pub(crate) fn site(self) -> (&'static str, &'static str) {
        match self {
            DroppedWait::CopyWaitsF => ("f", "s_h2g"),
            DroppedWait::CopyWaitsG => ("g", "s_h2g"),
            DroppedWait::FWaitsCopy => ("h2g", "s_f"),
            DroppedWait::FWaitsH => ("h", "s_f"),
            DroppedWait::GWaitsCopy => ("h2g", "s_g"),
            DroppedWait::GWaitsH => ("h", "s_g"),
            DroppedWait::HWaitsF => ("f", "s_h"),
            DroppedWait::HWaitsG => ("g", "s_h"),
            DroppedWait::HWaitsCopyOut => ("g2h", "s_h"),
            DroppedWait::CopyOutWaitsH => ("h", "s_g2h"),
            DroppedWait::ProcessSyncs => ("g2h", "host"),
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DroppedWait::CopyWaitsF => "copy-waits-f",
            DroppedWait::CopyWaitsG => "copy-waits-g",
            DroppedWait::FWaitsCopy => "f-waits-copy",
            DroppedWait::FWaitsH => "f-waits-h",
            DroppedWait::GWaitsCopy => "g-waits-copy",
            DroppedWait::GWaitsH => "g-waits-h",
            DroppedWait::HWaitsF => "h-waits-f",
            DroppedWait::HWaitsG => "h-waits-g",
            DroppedWait::HWaitsCopyOut => "h-waits-copy-out",
            DroppedWait::CopyOutWaitsH => "copy-out-waits-h",
            DroppedWait::ProcessSyncs => "process-syncs",
        }
    }
}

impl std::str::FromStr for DroppedWait {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        parse_name(s, "wait", &DroppedWait::ALL, DroppedWait::name)
    }
}

/// How one run goes.
pub(crate) struct RunOptions<'a> {
    pub batches: i64,
    pub variant: Variant,
    /// Host output batches (variant HostRing).
    pub host_slots: usize,
    pub drop: Option<DroppedWait>,
    pub spans: Option<&'a HostSpans>,
    pub progress: Option<&'a (dyn Fn(i64) + Sync)>,
    /// Open-loop arrivals, batches per second (`None`: as fast as possible).
    pub rate: Option<f64>,
}
