//! The `seqsync graph` file format.
//!
//! ```toml
//! [[command]]            # commands in order
//! name = "upload"
//! kind = "copy"          # kernel, copy, fill or host
//!
//! [[command]]
//! name = "a"
//! kind = "kernel"
//! after = ["upload"]     # optional: explicit dependencies (names, earlier or later)
//! us = 200               # optional, kernel and host commands: how long it runs
//!                        # (a spinning kernel on CUDA, a sleep on the host backend)
//!
//! [[command]]
//! barrier = true         # an execution barrier: everything after waits for everything before
//! ```
//!
//! Unknown keys are errors; every error names the entry (1-based, barriers included).

use serde::Deserialize;

use super::dag::{CommandKind, Dag, DagBuilder};
use super::error::GraphError;

/// A graph read from a file: its structure and each command's duration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphSpec {
    /// The structure.
    pub dag: Dag,
    /// How long each command runs, in microseconds (0 when not given).
    pub us: Vec<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    command: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    after: Vec<String>,
    us: Option<u64>,
    #[serde(default)]
    barrier: bool,
}

/// Parse a graph file.
///
/// ```
/// let spec = seqsync::internal::graph::spec_toml::from_str(r#"
///     [[command]]
///     name = "a"
///     kind = "fill"
///     [[command]]
///     barrier = true
///     [[command]]
///     name = "b"
///     kind = "kernel"
///     us = 50
/// "#)?;
/// assert_eq!(spec.dag.preds(1), [0]);
/// assert_eq!(spec.us, [0, 50]);
/// let err = seqsync::internal::graph::spec_toml::from_str("[[command]]\nname = \"a\"\nkind = \"sort\"\n");
/// assert_eq!(err.unwrap_err().to_string(),
///            "entry 1 (`a`): unknown kind 'sort': expected kernel, copy, fill or host");
/// # Ok::<(), seqsync::graph::GraphError>(())
/// ```
///
/// # Errors
/// [`GraphError::Toml`] for invalid TOML, [`GraphError::Entry`] for an incomplete entry, and
/// the validation errors of [`DagBuilder::build`].
pub fn from_str(text: &str) -> Result<GraphSpec, GraphError> {
    check_size(text.len() as u64)?;
    let file: File = toml::from_str(text).map_err(|e| GraphError::Toml {
        message: e.message().trim().replace('\n', "; ")
            + &e.span()
                .map(|s| format!(" (line {})", line_of(text, s.start)))
                .unwrap_or_default(),
    })?;
    if file.command.is_empty() {
        return Err(GraphError::Toml {
            message: "no [[command]] entries".into(),
        });
    }
    let mut b = DagBuilder::new();
    let mut us = Vec::new();
    for (i, e) in file.command.into_iter().enumerate() {
        let entry = i + 1;
        let bad = |name: Option<&String>, message: String| GraphError::Entry {
            entry,
            name: name.cloned(),
            message,
        };
        if e.barrier {
            if e.name.is_some() || e.kind.is_some() || !e.after.is_empty() || e.us.is_some() {
                return Err(bad(
                    e.name.as_ref(),
                    "a barrier entry takes no name, kind, after or us".into(),
                ));
            }
            b.barrier();
            continue;
        }
        if us.len() == super::dag::MAX_COMMANDS {
            return Err(GraphError::TooLarge {
                commands: us.len() + 1,
                max: super::dag::MAX_COMMANDS,
            });
        }
        let name = e
            .name
            .ok_or_else(|| bad(None, "a command needs a name (or barrier = true)".into()))?;
        if let Some(problem) = crate::name::problem(&name) {
            return Err(bad(Some(&name), format!("bad name: {problem}")));
        }
        let kind = e
            .kind
            .ok_or_else(|| bad(Some(&name), "a command needs a kind".into()))?;
        let kind = CommandKind::parse(&kind).ok_or_else(|| {
            bad(
                Some(&name),
                format!("unknown kind '{kind}': expected kernel, copy, fill or host"),
            )
        })?;
        if e.us.is_some() && matches!(kind, CommandKind::Copy | CommandKind::Fill) {
            return Err(bad(
                Some(&name),
                "us applies to kernel and host commands (a copy or fill moves its data)".into(),
            ));
        }
        if let Some(t) = e.us.filter(|&t| t > MAX_COMMAND_US) {
            return Err(bad(
                Some(&name),
                format!("us = {t} is above the {MAX_COMMAND_US} µs (10 s) a command may run"),
            ));
        }
        b.command(&name, kind, &e.after);
        us.push(e.us.unwrap_or(0));
    }
    Ok(GraphSpec {
        dag: b.build()?,
        us,
    })
}

/// The largest graph file: 4 MiB (about 60 000 entries, far more than the commands a graph
/// may hold).
pub const MAX_FILE_BYTES: usize = 4 << 20;

/// A graph file of `bytes` bytes is within [`MAX_FILE_BYTES`] (callers that read a file check
/// its size first, so that a larger one is not even read).
///
/// # Errors
/// [`GraphError::Toml`] naming the size and the limit.
pub fn check_size(bytes: u64) -> Result<(), GraphError> {
    if bytes <= MAX_FILE_BYTES as u64 {
        return Ok(());
    }
    Err(GraphError::Toml {
        message: format!(
            "the file is {bytes} bytes, more than the {MAX_FILE_BYTES} (4 MiB) a graph file may be"
        ),
    })
}

/// The longest a command of a graph file may run (`us`): 10 s.
pub const MAX_COMMAND_US: u64 = 10_000_000;

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}
