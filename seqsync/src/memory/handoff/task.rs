//! Tasks: the host threads that submit work to streams. A stream's epochs count only when the
//! task that closed them is the only live one submitting to it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One task: a host thread from its first tracked call until it exits (or calls
/// [`end_task`]).
#[derive(Debug)]
pub(crate) struct Task {
    alive: AtomicBool,
}

impl Task {
    fn new() -> Arc<Task> {
        Arc::new(Task {
            alive: AtomicBool::new(true),
        })
    }

    fn finish(&self) {
        // Release: every submission the task made happens before a later `is_alive() == false`
        // (the tracker's lock orders them anyway; this keeps the flag honest on its own).
        self.alive.store(false, Ordering::Release);
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

/// The calling thread's task; finished when the thread's thread-locals are destroyed.
struct Current(RefCell<Arc<Task>>);

impl Drop for Current {
    fn drop(&mut self) {
        self.0.borrow().finish();
    }
}

thread_local!(static CURRENT: Current = Current(RefCell::new(Task::new())));

/// Run `f` with the calling thread's task (`None` while the thread's thread-locals are being
/// destroyed: such a call counts as an anonymous task).
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Arc<Task>>) -> R) -> R {
    let mut f = Some(f);
    match CURRENT.try_with(|c| (f.take().expect("called once"))(Some(&c.0.borrow()))) {
        Ok(r) => r,
        Err(_) => (f.take().expect("not called yet"))(None),
    }
}

/// End the calling thread's task now; its next tracked call starts a new task.
///
/// A thread's task ends by itself when the thread exits (after [`JoinHandle::join`]
/// returns); a thread of a pool that runs one job after another calls this at the end of each
/// job, so that the streams the job used can be taken over by other tasks (their epochs count
/// again, see the [module docs](super)).
///
/// [`JoinHandle::join`]: std::thread::JoinHandle::join
pub fn end_task() {
    let _ = CURRENT.try_with(|c| {
        let old = std::mem::replace(&mut *c.0.borrow_mut(), Task::new());
        old.finish();
    });
}

/// The live tasks that submit to one stream.
#[derive(Debug, Default)]
pub(crate) struct Users {
    tasks: Vec<Arc<Task>>,
    /// An anonymous task (a call during thread-local destruction) submitted: the stream's
    /// epochs never count again.
    anonymous: bool,
}

impl Users {
    /// `task` submits to the stream: forget finished tasks (their streams are taken over),
    /// remember `task`. Returns whether `task` is now the only live task using the stream.
    pub(crate) fn enter(&mut self, task: Option<&Arc<Task>>) -> bool {
        let Some(task) = task else {
            self.anonymous = true;
            return false;
        };
        // The caller's own task is alive (a finished task is never current: `end_task` and the
        // thread's exit replace or remove it first), so the fast path reads no task's flag.
        if self.tasks.len() == 1 && Arc::ptr_eq(&self.tasks[0], task) {
            return !self.anonymous;
        }
        self.tasks.retain(|t| t.is_alive());
        if !self.tasks.iter().any(|t| Arc::ptr_eq(t, task)) {
            self.tasks.push(task.clone());
        }
        self.tasks.len() == 1 && !self.anonymous
    }
}
