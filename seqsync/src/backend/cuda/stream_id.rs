//! Stream identity: the id of a cudarc stream, given on first sight and kept while the stream
//! lives, for the layers that keep per-stream state (timelines' ledgers, the pools).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use cudarc::driver::CudaStream;

use crate::backend::next_stream_id;

/// The id of a cudarc stream ([`crate::backend::Backend::stream_id`]): given on first sight, kept while
/// the stream lives, never given to another stream. One registry for the process, so the id does
/// not depend on which [`CudaBackend`] (or [`crate::AnyBackend`]) asks.
///
/// Timelines ask on every `signal_on` and `wait_on`, so each thread keeps the last few answers
/// in front of the process-wide registry and its lock.
#[inline(always)]
pub fn stream_id(stream: &Arc<CudaStream>) -> u64 {
    RECENT
        .try_with(|r| r.borrow_mut().id(stream))
        .unwrap_or_else(|_| registry_id(stream))
}

fn registry_id(stream: &Arc<CudaStream>) -> u64 {
    static IDS: Mutex<Option<StreamIds>> = Mutex::new(None);
    let mut gone = Vec::new();
    let id = IDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(StreamIds::default)
        .id(stream, &mut gone);
    // Outside the lock: whoever keeps state per stream id hears of the streams found gone.
    for g in gone {
        crate::backend::stream_gone(g);
    }
    id
}

thread_local! {
    // Const-initialized: an access checks no lazy initialization.
    static RECENT: RefCell<Recent> = const {
        RefCell::new(Recent {
            entries: [const { None }; RECENT_LEN],
            next: 0,
        })
    };
}

/// How many streams a thread's [`Recent`] remembers.
const RECENT_LEN: usize = 4;

/// A thread's last few streams and their ids. An entry holds a `Weak` of its stream, which
/// keeps the stream's allocation (not the stream) alive: while cached, no other stream can be
/// allocated at that address, so an `Arc` at the cached address *is* the cached stream, and a
/// hit needs no atomic operation and no lock.
struct Recent {
    entries: [Option<(Weak<CudaStream>, u64)>; RECENT_LEN],
    /// The entry replaced next (round robin).
    next: usize,
}

impl Recent {
    #[inline(always)]
    fn id(&mut self, stream: &Arc<CudaStream>) -> u64 {
        let at = Arc::as_ptr(stream);
        for (weak, id) in self.entries.iter().flatten() {
            if std::ptr::eq(weak.as_ptr(), at) {
                return *id;
            }
        }
        let id = registry_id(stream);
        self.entries[self.next] = Some((Arc::downgrade(stream), id));
        self.next = (self.next + 1) % RECENT_LEN;
        id
    }
}

/// Ids of the streams seen so far, keyed by the stream's `Arc` address. An entry is valid while
/// its stream lives; a new stream at a dead stream's address gets a new id.
#[derive(Debug, Default)]
struct StreamIds {
    ids: HashMap<usize, (Weak<CudaStream>, u64)>,
    inserted: usize,
}

impl StreamIds {
    /// The id of `stream`; the ids of streams found gone meanwhile go to `gone` (a stream's
    /// entry is looked at as a new stream takes its address, or every 64 new streams).
    fn id(&mut self, stream: &Arc<CudaStream>, gone: &mut Vec<u64>) -> u64 {
        let key = Arc::as_ptr(stream) as usize;
        if let Some((weak, id)) = self.ids.get(&key) {
            // Two live allocations never share an address: a live entry is this stream.
            if weak.strong_count() > 0 {
                return *id;
            }
            gone.push(*id);
        }
        let id = next_stream_id();
        self.ids.insert(key, (Arc::downgrade(stream), id));
        self.inserted += 1;
        if self.inserted.is_multiple_of(64) {
            self.ids.retain(|_, (w, id)| {
                let live = w.strong_count() > 0;
                if !live {
                    gone.push(*id);
                }
                live
            });
        }
        id
    }
}
