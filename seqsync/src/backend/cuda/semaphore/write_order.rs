//! Which writes of a stream-memory-operation word may land out of order, and the value that
//! repairs the word after them (the bookkeeping of `memops`, apart from the driver calls, so
//! that it is tested on the host).
//!
//! Stream writes of a word are plain stores. Two streams' writes, or a stream's write and a
//! host store, can land in either order, so a lower value may land after a higher one: the
//! word *dips*. No stream may wait on the device for another stream's write to prevent it:
//! that makes one stream wait for the other's earlier work, which deadlocks a legal program
//! (the lower signal sits behind a wait that the other stream releases later). Instead a dip is
//! repaired afterwards, on the host:
//!
//! - while one stream writes the word and the host does not store, nothing is at risk: that
//!   stream's writes land in its order, which is value order (the *top* write, unwatched);
//! - once a second writer appears (another stream, or a host store) while the top write may
//!   still be pending, that write and every later stream write are *watched*: each is followed
//!   on its stream by a write of a marker word, so its landing is known from a host load;
//! - the repair thread raises the word to the highest value known landed (host stores and
//!   watched writes whose marker landed) until every watched write has landed; then the word
//!   is monotonic again.
//!
//! A dip never releases a wait early (every value in the word was reached), and lasts until
//! the repairer's next look. Waits for values above the dip's value are held meanwhile.
//!
//! `S` is the stream (compared by identity), `M` the marker.

use crate::backend::semaphore::FAILED_BIT;

/// One stream write followed by a marker write.
pub(crate) struct Watched<S, M> {
    pub(crate) stream: S,
    pub(crate) value: u64,
    pub(crate) marker: M,
}

/// The highest stream write while nothing is watched (under the word's order lock, which
/// serializes its signals and stores): only it can put a value at or above its own into the
/// word, so the word shows when it landed.
pub(crate) struct Top<S>(Option<(S, u64)>);

/// What a stream write must do first.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan<S> {
    /// Write, and it becomes the top write.
    Plain,
    /// Write and watch it; first watch the top write on stream `S`, if given (another stream's,
    /// maybe still pending).
    Watch(Option<S>),
}

impl<S: Clone> Top<S> {
    pub(crate) fn new() -> Self {
        Top(None)
    }

    /// The top write landed if the word (`now`, not failed) is at its value.
    fn settle(&mut self, now: u64) {
        if let Some((_, v)) = &self.0 {
            if now & FAILED_BIT == 0 && now >= *v {
                self.0 = None;
            }
        }
    }

    /// A write is about to be enqueued on `stream`, the word holding `now`, while writes are
    /// watched or not (`watching`).
    pub(crate) fn plan(
        &mut self,
        stream: &S,
        now: u64,
        watching: bool,
        same: impl Fn(&S, &S) -> bool,
    ) -> Plan<S> {
        self.settle(now);
        match &self.0 {
            Some((s, _)) if !same(s, stream) => Plan::Watch(Some(s.clone())),
            _ if watching => Plan::Watch(None),
            _ => Plan::Plain,
        }
    }

    /// A [`Plan::Plain`] write of `value` on `stream` is enqueued.
    pub(crate) fn wrote(&mut self, stream: S, value: u64) {
        self.0 = Some((stream, value));
    }

    /// The top write, to be watched (or covered by a watched write after it on its stream).
    pub(crate) fn take(&mut self) -> Option<(S, u64)> {
        self.0.take()
    }

    /// A host store is about to be made, the word holding `before`: the stream of the top write
    /// to watch first, if it may still be pending.
    pub(crate) fn before_store(&mut self, before: u64) -> Option<S> {
        self.settle(before);
        self.0.as_ref().map(|(s, _)| s.clone())
    }

    pub(crate) fn stream(&self) -> Option<&S> {
        self.0.as_ref().map(|(s, _)| s)
    }
}

/// The watched writes and the value that repairs the word (under a short lock that no driver
/// call is made under: the repair thread takes only it).
pub(crate) struct Watches<S, M> {
    watched: Vec<Watched<S, M>>,
    /// The highest word known reached: host stores, and watched writes whose marker landed.
    landed: u64,
}

impl<S, M> Watches<S, M> {
    pub(crate) fn new(initial: u64) -> Self {
        Watches {
            watched: Vec::new(),
            landed: initial,
        }
    }

    pub(crate) fn watch(&mut self, stream: S, value: u64, marker: M) {
        self.watched.push(Watched {
            stream,
            value,
            marker,
        });
    }

    /// The host stored `word` (a value above every write enqueued, or a failed word).
    pub(crate) fn stored(&mut self, word: u64) {
        self.landed = self.landed.max(word);
    }

    /// Forget the watched writes whose marker `landed` says landed (each handed to `done`);
    /// returns the value to raise the word to, and whether writes are still watched.
    pub(crate) fn repair(
        &mut self,
        landed: impl Fn(&M) -> bool,
        mut done: impl FnMut(Watched<S, M>),
    ) -> (u64, bool) {
        let mut i = 0;
        while i < self.watched.len() {
            if landed(&self.watched[i].marker) {
                let w = self.watched.swap_remove(i);
                self.landed = self.landed.max(w.value);
                done(w);
            } else {
                i += 1;
            }
        }
        (self.landed, !self.watched.is_empty())
    }

    pub(crate) fn watching(&self) -> bool {
        !self.watched.is_empty()
    }

    pub(crate) fn streams(&self) -> impl Iterator<Item = &S> {
        self.watched.iter().map(|w| &w.stream)
    }

    /// The watched writes (the word is going away).
    pub(crate) fn take(&mut self) -> Vec<Watched<S, M>> {
        std::mem::take(&mut self.watched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &&str, b: &&str) -> bool {
        a == b
    }

    struct Word {
        top: Top<&'static str>,
        watches: Watches<&'static str, u32>,
    }

    fn word() -> Word {
        Word {
            top: Top::new(),
            watches: Watches::new(0),
        }
    }

    impl Word {
        fn plan(&mut self, s: &'static str, now: u64) -> Plan<&'static str> {
            self.top.plan(&s, now, self.watches.watching(), same)
        }
    }

    #[test]
    fn one_writer_is_never_watched() {
        let mut w = word();
        for v in 1..=5 {
            assert_eq!(w.plan("s1", v - 1), Plan::Plain);
            w.top.wrote("s1", v);
        }
        assert!(!w.watches.watching());
        assert_eq!(w.top.stream(), Some(&"s1"));
    }

    #[test]
    fn a_second_stream_watches_the_pending_top_and_itself() {
        let mut w = word();
        assert_eq!(w.plan("s1", 0), Plan::Plain);
        w.top.wrote("s1", 1);
        // The word is still 0: s1's write may land after s2's.
        assert_eq!(w.plan("s2", 0), Plan::Watch(Some("s1")));
        let (s, v) = w.top.take().unwrap();
        w.watches.watch(s, v, 10);
        w.watches.watch("s2", 5, 20);
        // While anything is watched, every write is.
        assert_eq!(w.plan("s2", 0), Plan::Watch(None));
        // s2's marker landed first: the word is raised to 5 ...
        let mut gone = vec![];
        assert_eq!(
            w.watches.repair(|m| *m == 20, |x| gone.push(x.value)),
            (5, true)
        );
        // ... and again once s1's write (which may have dipped it to 1) landed.
        assert_eq!(
            w.watches.repair(|_| true, |x| gone.push(x.value)),
            (5, false)
        );
        assert_eq!(gone, [5, 1]);
        assert_eq!(w.plan("s1", 5), Plan::Plain, "nothing at risk any more");
    }

    #[test]
    fn a_landed_top_needs_no_watch() {
        let mut w = word();
        w.plan("s1", 0);
        w.top.wrote("s1", 1);
        assert_eq!(w.plan("s2", 1), Plan::Plain, "the word shows 1 landed");
        w.top.wrote("s2", 2);
        assert_eq!(w.top.before_store(2), None);
    }

    #[test]
    fn a_host_store_watches_a_pending_top_and_repairs_to_the_store() {
        // The case memops got wrong: s1's 1 pending, host 103, s2's 104.
        let mut w = word();
        w.plan("s1", 0);
        w.top.wrote("s1", 1);
        assert_eq!(w.top.before_store(0), Some("s1"));
        let (s, v) = w.top.take().unwrap();
        w.watches.watch(s, v, 1);
        w.watches.stored(103);
        assert_eq!(w.plan("s2", 103), Plan::Watch(None));
        w.watches.watch("s2", 104, 2);
        // 104 landed, then s1's 1 (the word dipped to 1): raised to 104.
        assert_eq!(w.watches.repair(|_| true, drop), (104, false));
    }

    #[test]
    fn a_failed_word_is_never_taken_for_a_landed_top() {
        let mut w = word();
        w.plan("s1", 0);
        w.top.wrote("s1", 7);
        assert_eq!(w.top.before_store(FAILED_BIT), Some("s1"));
        let (s, v) = w.top.take().unwrap();
        w.watches.watch(s, v, 1);
        w.watches.stored(FAILED_BIT);
        assert_eq!(w.watches.repair(|_| true, drop), (FAILED_BIT, false));
    }
}
