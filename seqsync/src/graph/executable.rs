//! [`Executable`]: a graph lowered to a [`Schedule`] of streams and events, ready for a
//! [`Queues`](super::Queues) to submit any number of times.

use super::record::Graph;
use super::reduce::Analysis;
use super::schedule::{Report, Schedule};
use super::GraphError;
use super::{lower, Lowering};
use crate::backend::command::CommandBackend;

/// A graph lowered to streams, ready to submit any number of times.
pub struct Executable<B: CommandBackend> {
    pub(super) graph: Graph<B>,
    pub(super) schedule: Schedule,
    report: Report,
    /// Per command, the commands whose events it waits for.
    pub(super) waits_into: Vec<Vec<usize>>,
    /// Per command, whether other streams wait for it (it gets an event).
    pub(super) recorded: Vec<bool>,
    /// One event per command that other streams wait for (created at the first submission).
    pub(super) events: Vec<Option<B::Event>>,
    /// Per command, the commands whose joins it waits for.
    pub(super) joins_into: Vec<Vec<usize>>,
    /// Per command, whether other streams wait for its join (an event right before it).
    pub(super) joined: Vec<bool>,
    /// One event per command whose join other streams wait for (created at the first
    /// submission).
    pub(super) join_events: Vec<Option<B::Event>>,
    /// Its copies and fills were found in bounds (at the first submission; a kernel swapped
    /// in by [`set_kernel`](Self::set_kernel) changes none of them).
    pub(super) commands_checked: bool,
}

impl<B: CommandBackend> Graph<B> {
    /// Lower to streams (+ events): [`Lowering::Streams`] or [`Lowering::Levels`].
    pub fn lower(self, lowering: Lowering) -> Executable<B> {
        let schedule = lower(&self.dag, &self.analysis, lowering);
        self.with_schedule(schedule)
    }

    /// Run on a schedule made elsewhere (its report tells whether it honours the graph:
    /// `missing_dependencies` must be 0).
    ///
    /// # Panics
    /// If the schedule is for a different number of commands.
    pub fn with_schedule(self, schedule: Schedule) -> Executable<B> {
        assert_eq!(
            schedule.stream_of.len(),
            self.dag.len(),
            "one stream per command"
        );
        let report = schedule.report(&self.dag, &self.analysis);
        let waits_into = schedule.waits_into();
        let recorded = schedule.recorded();
        let joins_into = schedule.joins_into();
        let joined = schedule.joined();
        let n = self.dag.len();
        Executable {
            graph: self,
            schedule,
            report,
            waits_into,
            recorded,
            events: (0..n).map(|_| None).collect(),
            joins_into,
            joined,
            join_events: (0..n).map(|_| None).collect(),
            commands_checked: false,
        }
    }
}

impl<B: CommandBackend> Executable<B> {
    /// The graph.
    pub fn graph(&self) -> &Graph<B> {
        &self.graph
    }

    /// Replace the kernel (its parameters) of command `i` for later submissions; the graph's
    /// shape, and so its schedule, stay as lowered.
    ///
    /// # Errors
    /// [`GraphError::NoSuchCommand`], [`GraphError::NotAKernel`].
    pub fn set_kernel(&mut self, i: usize, kernel: B::Kernel) -> Result<(), GraphError> {
        self.graph.set_kernel(i, kernel)
    }

    /// The schedule (virtual streams and waits).
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Width, streams, events, false dependencies, assignment, waits.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The analysis of the graph.
    pub fn analysis(&self) -> &Analysis {
        &self.graph.analysis
    }
}
