//! [`GraphError`]: why a command buffer (recorded in Rust or read from TOML) is malformed.
//!
//! Every variant names the entry it is about: its 1-based position in the recording (barriers
//! count as entries, as they do in a TOML file's `[[command]]` list) and its name.

use thiserror::Error;

fn named(name: &Option<String>) -> String {
    name.as_ref()
        .map(|n| format!(" ({})", q(n)))
        .unwrap_or_default()
}

/// A name as messages show it: quoted, escaped, cut short.
fn q(name: &str) -> String {
    crate::name::quoted(name)
}

/// Why a command buffer could not be recorded or read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum GraphError {
    /// The TOML text is not valid TOML or not of the expected shape.
    #[error("invalid graph file: {message}")]
    Toml {
        /// The parser's message (it names the line).
        message: String,
    },
    /// An entry lacks something it needs, or has something it must not.
    #[error("entry {entry}{}: {message}", named(.name))]
    Entry {
        /// 1-based position of the entry.
        entry: usize,
        /// The entry's name, if it has one.
        name: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// Two commands have the same name.
    #[error("entry {entry} ({}): duplicate name, first used by entry {first}", q(.name))]
    Duplicate {
        /// 1-based position of the second command with the name.
        entry: usize,
        /// The name.
        name: String,
        /// 1-based position of the first.
        first: usize,
    },
    /// `after` names a command that does not exist.
    #[error("entry {entry} ({}): after names unknown command {}", q(.name), q(.unknown))]
    UnknownName {
        /// 1-based position of the command.
        entry: usize,
        /// The command.
        name: String,
        /// The unknown name.
        unknown: String,
    },
    /// The dependencies form a cycle.
    #[error("entry {entry} ({}): dependency cycle {}", q(.name), .cycle.iter().map(|c| q(c)).collect::<Vec<_>>().join(" -> "))]
    Cycle {
        /// 1-based position of a command on the cycle.
        entry: usize,
        /// That command.
        name: String,
        /// The cycle, starting and ending at `name`, each command after the ones it waits for.
        cycle: Vec<String>,
    },
    /// More commands than a graph may hold ([`MAX_COMMANDS`](crate::graph::dag::MAX_COMMANDS)):
    /// the analysis (transitive closure and reduction) is quadratic in the commands.
    #[error("a graph holds at most {max} commands; this one has {commands} or more")]
    TooLarge {
        /// Commands recorded (or read) when the limit was passed.
        commands: usize,
        /// The limit.
        max: usize,
    },
    /// A command was referred to that this buffer does not hold.
    #[error("command {index} is not in this buffer of {len} commands")]
    NoSuchCommand {
        /// The index asked for.
        index: usize,
        /// How many commands the buffer holds.
        len: usize,
    },
    /// A schedule made elsewhere ([`Graph::with_schedule`](crate::graph::Graph::with_schedule))
    /// that does not run this graph: not every command once, a wait before what it waits for,
    /// or a dependency of the graph it does not honour.
    #[error("the schedule does not run this graph: {message}")]
    Schedule {
        /// What is wrong.
        message: String,
    },
    /// The kernel to replace is not a kernel command.
    #[error("command {} is a {kind} command, not a kernel", q(.name))]
    NotAKernel {
        /// The command.
        name: String,
        /// What it is.
        kind: &'static str,
    },
}
