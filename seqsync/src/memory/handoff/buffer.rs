//! [`Tracked`]: a value (device memory, or any resource work on streams uses) whose uses the
//! tracker stamps; [`Use`] declares one for a submission, [`Ctx`] hands it out inside it.

use std::sync::Arc;

use crate::lock::{Guard, Lock};

use super::state::State;
use crate::happens_before::AccessKind;

/// The tracker's state, shared by its backend, streams, events and buffers.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    state: Lock<State>,
}

impl Registry {
    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, State> {
        // A panic under the lock leaves at worst a use stamped twice or an epoch closed
        // without its snapshot: more waits later, never fewer.
        self.state.lock()
    }
}

/// A value whose uses on streams are tracked: per stream, the epoch of its last read and of
/// its last write, so that using it on another stream waits only for what no event or
/// synchronize already ordered. Made by
/// [`TrackingBackend::track`](super::TrackingBackend::track).
///
/// The value is reached only inside a submission that declares the use
/// ([`get`](Self::get)), or as a **raw** reference taken out with
/// [`TrackingBackend::raw`](super::TrackingBackend::raw), which is stamped once and gets no
/// shortcut afterwards (see the [module docs](super)). It stays tracked (and shared) as long
/// as the `Tracked` lives; interior mutability (device memory, atomics) is how work writes it.
#[derive(Debug)]
pub struct Tracked<T> {
    value: T,
    id: usize,
    registry: Arc<Registry>,
}

impl<T> Tracked<T> {
    pub(crate) fn new(value: T, registry: Arc<Registry>) -> Self {
        let id = registry.lock().add_buffer();
        Tracked {
            value,
            id,
            registry,
        }
    }

    /// Declare a read for [`submit`](super::TrackingBackend::submit).
    pub fn read(&self) -> Use<'_> {
        self.using(AccessKind::Read)
    }

    /// Declare a write (or a read and a write) for
    /// [`submit`](super::TrackingBackend::submit).
    pub fn write(&self) -> Use<'_> {
        self.using(AccessKind::Write)
    }

    /// Declare a use of the given kind.
    pub fn using(&self, kind: AccessKind) -> Use<'_> {
        Use {
            id: self.id,
            registry: &self.registry,
            kind,
        }
    }

    /// The value, inside a submission that declared a use of it.
    ///
    /// # Panics
    /// If `ctx` is not a submission that declared this buffer.
    pub fn get(&self, ctx: &Ctx<'_>) -> &T {
        assert!(
            ctx.uses
                .iter()
                .any(|u| u.id == self.id && Arc::ptr_eq(u.registry, &self.registry)),
            "handoff: a tracked buffer used in a submission that did not declare it"
        );
        &self.value
    }

    pub(crate) fn raw_value(&self) -> &T {
        &self.value
    }

    pub(crate) fn id(&self) -> usize {
        self.id
    }

    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }
}

impl<T> Drop for Tracked<T> {
    fn drop(&mut self) {
        self.registry.lock().remove_buffer(self.id);
    }
}

/// One declared use of a [`Tracked`] value in a submission.
#[derive(Debug, Clone, Copy)]
pub struct Use<'a> {
    pub(crate) id: usize,
    pub(crate) registry: &'a Arc<Registry>,
    pub(crate) kind: AccessKind,
}

impl Use<'_> {
    /// Read or write.
    pub fn kind(&self) -> AccessKind {
        self.kind
    }
}

/// The inside of a submission: hands out the declared buffers ([`Tracked::get`]).
#[derive(Debug)]
pub struct Ctx<'a> {
    pub(crate) uses: &'a [Use<'a>],
}

/// What [`submit`](super::TrackingBackend::submit) returns: the closure's value and how many
/// stream waits the tracker inserted before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submitted<R> {
    /// What the closure returned.
    pub value: R,
    /// Stream waits inserted (one per earlier stream not already ordered before this work).
    pub waits: usize,
}
