//! How the graph engines and the device bound copy a batch between host and device memory.

use serde::Serialize;

use seqsync::{Error, Result};

/// How a graph node copies batches between pinned host memory and the device.
///
/// On CUDA a copy node costs more to launch than a kernel node and stands longer between the
/// nodes around it (BENCHMARKS.md §13, run I): with [`CopyBy::Kernel`] a batch's graph is five
/// kernel nodes, its copies kernels that read or write the pinned host buffers in place
/// (unified addressing). On the host backend both are the same copy.
///
/// ```
/// use seqsync_demo::demo::CopyBy;
/// assert_eq!("kernel".parse::<CopyBy>().unwrap(), CopyBy::Kernel);
/// let e = "dma".parse::<CopyBy>().unwrap_err().to_string();
/// assert!(e.contains("unknown copy 'dma'"), "{e}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CopyBy {
    /// Copy nodes (`cuMemcpyAsync` in a graph): the copy engines.
    #[default]
    Memcpy,
    /// Kernel nodes that copy over the host buffers' device addresses (zero-copy).
    Kernel,
}

impl CopyBy {
    /// Both, the default first.
    pub const ALL: [CopyBy; 2] = [CopyBy::Memcpy, CopyBy::Kernel];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CopyBy::Memcpy => "memcpy",
            CopyBy::Kernel => "kernel",
        }
    }
}

impl std::str::FromStr for CopyBy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        CopyBy::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                crate::invalid(
                    "demo",
                    format!("unknown copy '{s}': expected memcpy or kernel"),
                )
            })
    }
}
