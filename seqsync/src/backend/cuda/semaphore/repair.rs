//! The thread that repairs stream-memory-operation words after writes that landed out of
//! order (see `write_order`).
//!
//! A word with watched writes is handed to the thread ([`watch`]); the thread looks at every
//! such word every [`POLL`] (or as often as the word asks: a gone word whose writes stay
//! pending for long, less often), raising each to its highest value known landed, and lets a
//! word go once none of its writes is watched. A word whose owner went while writes of it were
//! still watched is kept alive by the thread ([`keep`]) until they landed: a stream waiting on
//! it may be released only by the repair of a dip. It makes no driver call (markers are host loads),
//! so nothing the driver blocks on (a free that waits for the device to drain, behind a stream
//! that waits for a repaired value) can hold it up. It is started by the first word that needs
//! it and then parks whenever no word does.

use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::error::{BackendError, Error, Result};

/// How long the thread sleeps between looks while a word has watched writes (a dip lasts
/// about this long, plus the sleep's own slack).
pub(crate) const POLL: Duration = Duration::from_micros(20);

/// A word the thread repairs.
pub(crate) trait Repair: Send + Sync {
    /// Raise the word to its highest value known landed; while writes are still watched, how
    /// soon to look again (`None`: nothing is watched).
    fn repair(&self) -> Option<Duration>;
}

/// A word handed to the thread: looked at while it lives ([`watch`]), or kept alive until
/// its repair is done ([`keep`]: a word whose owner went with writes still watched).
enum Entry {
    Watched(Weak<dyn Repair>),
    Kept(Arc<dyn Repair>),
}

impl Entry {
    /// Repair it; while it needs looking at again, how soon.
    fn repair(&self) -> Option<Duration> {
        match self {
            Entry::Watched(w) => w.upgrade().and_then(|w: Arc<dyn Repair>| w.repair()),
            Entry::Kept(w) => w.repair(),
        }
    }
}

struct Inbox {
    words: Mutex<Vec<Entry>>,
    wake: Condvar,
}

static INBOX: Inbox = Inbox {
    words: Mutex::new(Vec::new()),
    wake: Condvar::new(),
};
static STARTED: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Start the thread if it is not running (before anything is enqueued that needs it).
///
/// # Errors
/// [`Error::Backend`] if the thread cannot be started.
pub(crate) fn ready() -> Result<()> {
    STARTED
        .get_or_init(|| {
            std::thread::Builder::new()
                .name("seqsync-word-repair".into())
                .spawn(run)
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|why| {
            Error::Backend(BackendError::new(
                "cuda",
                "timeline (stream memory operations)",
                format!("cannot start the thread that repairs words written out of order: {why}"),
            ))
        })
}

/// Repair `word` until its [`Repair::repair`] says nothing is watched ([`ready`] first). A
/// word handed over twice is looked at twice, which is harmless.
pub(crate) fn watch(word: Weak<dyn Repair>) {
    hand_over(Entry::Watched(word));
}

/// Keep `word` alive and repair it until [`Repair::repair`] says nothing is watched: its owner
/// went while writes of it were still watched (the thread runs: [`ready`] came before the
/// first of them).
pub(crate) fn keep(word: Arc<dyn Repair>) {
    hand_over(Entry::Kept(word));
}

fn hand_over(entry: Entry) {
    INBOX
        .words
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(entry);
    INBOX.wake.notify_one();
}

fn run() {
    let mut words: Vec<Entry> = Vec::new();
    // How long to wait before the next look (`None`: until a word is handed over).
    let mut next: Option<Duration> = None;
    loop {
        {
            let mut inbox = INBOX.words.lock().unwrap_or_else(|e| e.into_inner());
            match next {
                // The common case: a short sleep without the lock.
                Some(d) if d <= POLL => {
                    drop(inbox);
                    std::thread::sleep(d);
                    inbox = INBOX.words.lock().unwrap_or_else(|e| e.into_inner());
                }
                // Only words that are looked at rarely (see `Repair::repair`): a word handed
                // over meanwhile ends the wait.
                Some(d) => {
                    if inbox.is_empty() {
                        inbox = INBOX
                            .wake
                            .wait_timeout(inbox, d)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
                None => {
                    while inbox.is_empty() {
                        inbox = INBOX.wake.wait(inbox).unwrap_or_else(|e| e.into_inner());
                    }
                }
            }
            words.append(&mut inbox);
        }
        next = None;
        words.retain(|w| match w.repair() {
            Some(d) => {
                next = Some(next.map_or(d, |n| n.min(d)));
                true
            }
            None => false,
        });
    }
}
