//! [`Executable`]: a graph lowered to a [`Schedule`] of streams and events, ready for a
//! [`Queues`](super::Queues) to submit any number of times.

use super::record::Graph;
use super::reduce::Analysis;
use super::schedule::Wait;
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
        self.executable(schedule)
    }

    /// The executable of a schedule made here (a lowering's: well formed by construction).
    fn executable(self, schedule: Schedule) -> Executable<B> {
        let report = schedule.report(&self.dag, &self.analysis);
        self.with_report(schedule, report)
    }

    /// Run on a schedule made elsewhere: it must run every command once, on a stream of its
    /// own numbering (below the number of commands), each wait after what it waits for, and
    /// honour every dependency of the graph (its report's `missing_dependencies` is 0).
    ///
    /// # Errors
    /// [`GraphError::Schedule`], saying what is wrong.
    pub fn with_schedule(self, schedule: Schedule) -> Result<Executable<B>, GraphError> {
        let exe = self.with_schedule_unchecked(schedule)?;
        match exe.report.missing_dependencies {
            0 => Ok(exe),
            missing => Err(GraphError::Schedule {
                message: format!("{missing} dependencies of the graph are not honoured"),
            }),
        }
    }

    /// [`with_schedule`](Self::with_schedule) that lets dependencies go unhonoured (its report
    /// counts them): for a test that wants a misordered schedule run (the hazard checker's).
    /// The schedule's shape is checked as there.
    ///
    /// # Errors
    /// [`GraphError::Schedule`].
    pub(crate) fn with_schedule_unchecked(
        self,
        schedule: Schedule,
    ) -> Result<Executable<B>, GraphError> {
        let schedule = checked(schedule, self.dag.len())?;
        let report = schedule.report(&self.dag, &self.analysis);
        Ok(self.with_report(schedule, report))
    }

    fn with_report(self, schedule: Schedule, report: Report) -> Executable<B> {
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

/// `schedule`, rebuilt from its order, streams, waits and joins (its other fields follow from
/// them), if it runs each of `n` commands once, on streams numbered below `n`, with every wait
/// and join after the command it is on in the order (else it would wait for an event not
/// recorded yet, which holds nothing).
fn checked(schedule: Schedule, n: usize) -> Result<Schedule, GraphError> {
    let bad = |message: String| GraphError::Schedule { message };
    if schedule.stream_of.len() != n || schedule.order.len() != n {
        return Err(bad(format!(
            "{} streams and {} commands in order for a graph of {n} commands",
            schedule.stream_of.len(),
            schedule.order.len()
        )));
    }
    if let Some(&s) = schedule.stream_of.iter().find(|&&s| s >= n.max(1)) {
        return Err(bad(format!(
            "stream {s} of {n} commands (at most one each)"
        )));
    }
    let mut position = vec![usize::MAX; n];
    for (i, &c) in schedule.order.iter().enumerate() {
        match position.get_mut(c) {
            Some(p) if *p == usize::MAX => *p = i,
            Some(_) => return Err(bad(format!("command {c} is in the order twice"))),
            None => return Err(bad(format!("command {c} of {n} in the order"))),
        }
    }
    let misplaced = |w: &Wait| w.from >= n || w.to >= n || position[w.from] >= position[w.to];
    for (what, list) in [("wait", &schedule.waits), ("join", &schedule.joins)] {
        if let Some(w) = list.iter().find(|w| misplaced(w)) {
            return Err(bad(format!(
                "a {what} of command {} on command {} that does not come before it",
                w.to, w.from
            )));
        }
    }
    let Schedule {
        order,
        stream_of,
        waits,
        joins,
        ..
    } = schedule;
    Ok(Schedule::new(order, stream_of, waits).with_joins(joins))
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

/// [`Graph::with_schedule`] that runs a schedule missing dependencies of the graph (its report
/// counts them), for tests that want a misordered schedule run (the hazard checker's); its
/// shape is checked as there.
///
/// # Errors
/// [`GraphError::Schedule`].
pub fn with_schedule_allowing_missing<B: CommandBackend>(
    graph: Graph<B>,
    schedule: Schedule,
) -> Result<Executable<B>, GraphError> {
    graph.with_schedule_unchecked(schedule)
}
