//! The user's side of a run: one closure per stage ([`Stages`]), what each is told
//! ([`StageCtx`]), and an observer of blocking ring calls ([`BlockingCall`]).

use std::collections::HashMap;
use std::time::Instant;

use crate::backend::Backend;
use crate::error::Result;

/// A stage's closure: launches the stage's work for one seq.
pub(super) type StageFn<'a, B> = Box<dyn Fn(&StageCtx<'_, B>) -> Result<()> + Sync + 'a>;
/// Host work after a stage's own synchronize.
pub(super) type AfterFn<'a> = Box<dyn Fn(i64) -> Result<()> + Sync + 'a>;

/// What a stage's closure is told.
pub struct StageCtx<'a, B: Backend> {
    /// The batch.
    pub seq: i64,
    /// The stage's name.
    pub stage: &'a str,
    /// The host thread running it.
    pub thread: &'a str,
    /// The stage's stream; `None` for a host stage, whose work is done when the closure
    /// returns.
    pub stream: Option<&'a B::Stream>,
}

/// A ring call made with `Blocking::Yes` (one that may have waited), for tracing.
#[derive(Debug, Clone, Copy)]
pub struct BlockingCall<'a> {
    /// The host thread that made it.
    pub thread: &'a str,
    /// `"wait"`, `"synchronize"` or `"record"`.
    pub call: &'static str,
    /// The ring.
    pub ring: &'a str,
    /// The seq passed to the call.
    pub seq: i64,
    /// When the call started and returned.
    pub start: Instant,
    /// See `start`.
    pub end: Instant,
}

pub(super) type ObserverFn<'a> = Box<dyn Fn(&BlockingCall<'_>) + Sync + 'a>;

/// The user's work: one closure per stage, and optional host work after a stage's `sync`.
pub struct Stages<'a, B: Backend> {
    pub(super) launch: HashMap<String, StageFn<'a, B>>,
    pub(super) after_sync: HashMap<String, AfterFn<'a>>,
    pub(super) observer: Option<ObserverFn<'a>>,
}

impl<B: Backend> Default for Stages<'_, B> {
    fn default() -> Self {
        Stages {
            launch: HashMap::new(),
            after_sync: HashMap::new(),
            observer: None,
        }
    }
}

impl<'a, B: Backend> Stages<'a, B> {
    /// No stages yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the closure that launches stage `name`'s work for one seq: enqueue it on
    /// `cx.stream`, or do it right there for a host stage. Replaces an earlier one.
    pub fn stage(
        mut self,
        name: impl Into<String>,
        f: impl Fn(&StageCtx<'_, B>) -> Result<()> + Sync + 'a,
    ) -> Self {
        self.launch.insert(name.into(), Box::new(f));
        self
    }

    /// Sets a closure told of every blocking ring call (`Blocking::Yes`) once it returns:
    /// which thread, ring and seq, and how long it took. For traces; `None` by default.
    pub fn observe(mut self, f: impl Fn(&BlockingCall<'_>) + Sync + 'a) -> Self {
        self.observer = Some(Box::new(f));
        self
    }

    /// Sets host work run right after the thread's synchronize on stage `name`'s own ring
    /// (a `sync = true` stage), e.g. the seed's `process_data`. Called with the seq.
    pub fn after_sync(
        mut self,
        name: impl Into<String>,
        f: impl Fn(i64) -> Result<()> + Sync + 'a,
    ) -> Self {
        self.after_sync.insert(name.into(), Box::new(f));
        self
    }
}
