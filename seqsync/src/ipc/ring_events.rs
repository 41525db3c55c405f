//! The IPC-event mechanism of a [`SharedRing`](super::SharedRing) (CUDA): one event per slot,
//! made by the producer with [`Backend::ipc_event_create`], its handle written into the
//! segment before the segment is handed to anyone; a consumer process opens a slot's event
//! from its handle at the slot's first use. A consumer in the creating process itself uses the
//! creator's events (found by the ring's name in this process's registry of created rings),
//! as the driver opens a handle only in another process.
//!
//! A host wait on such an event polls it (nothing tells the host it completed) by the
//! backend's interruptible synchronize, and the [`Watch`] below cuts it short when the ring
//! stops or a peer dies.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::peers::{self, CHECK_EVERY};
use super::segment::{Header, Segment};
use super::wake;
use crate::backend::{Backend, Interrupt};
use crate::error::{Error, Result};

/// The rings this process created with events: name → their events (`Arc<Vec<B::Event>>`).
static CREATED: Mutex<Vec<(String, Weak<dyn Any + Send + Sync>)>> = Mutex::new(Vec::new());

/// A ring's events, in this process.
pub(crate) enum Events<E> {
    /// The creator's own (or, in the creating process, shared with it).
    Own(Arc<Vec<E>>),
    /// Opened from the segment's handles, each at its slot's first use.
    Opened(Vec<OnceLock<E>>),
}

impl<E: Send + Sync + 'static> Events<E> {
    /// `max_size` new events, their handles written into `seg` by the caller's `write`.
    pub(crate) fn create<B: Backend<Event = E>>(
        backend: &B,
        name: &str,
        max_size: usize,
    ) -> Result<(Self, Vec<[u8; 64]>)> {
        let mut events = Vec::with_capacity(max_size);
        let mut handles = Vec::with_capacity(max_size);
        for _ in 0..max_size {
            let (e, h) = backend.ipc_event_create()?;
            events.push(e);
            handles.push(h);
        }
        let events = Arc::new(events);
        let mut created = CREATED.lock().unwrap_or_else(|e| e.into_inner());
        created.retain(|(_, w)| w.strong_count() > 0);
        let erased: Arc<dyn Any + Send + Sync> = events.clone();
        created.push((name.to_owned(), Arc::downgrade(&erased)));
        Ok((Events::Own(events), handles))
    }

    /// The events of ring `name` for a consumer: the creator's, if this process created it,
    /// else opened from `seg`'s handles as they are used.
    pub(crate) fn open(name: &str, seg: &Segment, created_here: bool) -> Self {
        if created_here {
            let created = CREATED.lock().unwrap_or_else(|e| e.into_inner());
            let mine = created
                .iter()
                .rev()
                .filter(|(n, _)| n == name)
                .find_map(|(_, w)| w.upgrade()?.downcast::<Vec<E>>().ok());
            if let Some(events) = mine {
                return Events::Own(events);
            }
        }
        Events::Opened((0..seg.sizes.max_size).map(|_| OnceLock::new()).collect())
    }

    /// Slot `idx`'s event, opened now if this is its first use here.
    pub(crate) fn get<B: Backend<Event = E>>(
        &self,
        backend: &B,
        seg: &Segment,
        idx: usize,
    ) -> Result<&E> {
        match self {
            Events::Own(v) => Ok(&v[idx]),
            Events::Opened(v) => {
                if let Some(e) = v[idx].get() {
                    return Ok(e);
                }
                let e = backend.ipc_event_open(&seg.event_handle(idx))?;
                Ok(v[idx].get_or_init(|| e))
            }
        }
    }
}

/// What cuts a consumer's host wait on an event short: the ring stopping (any process), or a
/// peer found dead (checked every [`CHECK_EVERY`]; it stops the ring). Sleeps on the
/// segment's futex, so a stop wakes it at once.
pub(crate) struct Watch<'a> {
    h: &'a Header,
    ring: &'a str,
    stopped: &'a dyn Fn() -> bool,
    stop: &'a dyn Fn(&Error),
    checked: Cell<Instant>,
    /// The dead peer's error, once found.
    pub(crate) lost: RefCell<Option<Error>>,
}

impl<'a> Watch<'a> {
    pub(crate) fn new(
        h: &'a Header,
        ring: &'a str,
        stopped: &'a dyn Fn() -> bool,
        stop: &'a dyn Fn(&Error),
    ) -> Self {
        Watch {
            h,
            ring,
            stopped,
            stop,
            checked: Cell::new(Instant::now()),
            lost: RefCell::new(None),
        }
    }
}

impl Interrupt for Watch<'_> {
    fn interrupted(&self) -> bool {
        if self.lost.borrow().is_some() || (self.stopped)() {
            return true;
        }
        if self.checked.get().elapsed() >= CHECK_EVERY {
            self.checked.set(Instant::now());
            if let Err(e) = peers::check(self.h, self.ring) {
                (self.stop)(&e);
                *self.lost.borrow_mut() = Some(e);
                return true;
            }
        }
        false
    }

    fn sleep(&self, timeout: Duration) -> bool {
        wake::sleep_for(self.h, timeout);
        self.interrupted()
    }
}
