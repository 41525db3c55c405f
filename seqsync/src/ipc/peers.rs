//! Which processes share a ring or timeline, and whether they are still alive: each registers its pid and
//! start time in the segment's peer table; a blocked call checks the others (by `/proc`) every
//! [`CHECK_EVERY`], so a process killed with the ring open is noticed within that time.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::segment::{Header, Peer, MAX_PEERS};
use crate::error::{Error, Result};

/// How often a blocked call checks that its peers live: a dead peer is reported within this
/// (plus one wake-up), well inside the second the contract allows.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(100);

/// A process's role in a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Producer = 0,
    Consumer = 1,
    /// A timeline's creator.
    Creator = 2,
    /// A process that opened a timeline.
    Opener = 3,
}

impl Role {
    /// The role code of a role's name (as [`Error::PeerLost`] gives it).
    pub(crate) fn code_of(name: &str) -> u32 {
        [Role::Producer, Role::Consumer, Role::Creator, Role::Opener]
            .into_iter()
            .find(|r| Role::name(*r as u32) == name)
            .unwrap_or(Role::Consumer) as u32
    }

    pub(crate) fn name(raw: u32) -> &'static str {
        match raw {
            0 => "producer",
            2 => "creating",
            3 => "opening",
            _ => "consumer",
        }
    }
}

/// What `/proc` says of a process.
enum Seen {
    /// It runs, started this many clock ticks after boot.
    Running(u64),
    /// It no longer runs (no such process, or a zombie).
    Gone,
    /// `/proc` could not tell (out of file descriptors, say): taken for alive, since a
    /// process taken for dead has its holds dropped for good.
    Unknown,
}

fn seen(pid: u32) -> Seen {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) =>
        {
            return Seen::Gone
        }
        Err(_) => return Seen::Unknown,
    };
    // The command name is in parentheses and may hold spaces: fields count from the last ')'.
    let Some(close) = stat.rfind(')') else {
        return Seen::Unknown;
    };
    let mut fields = stat[close + 1..].split_whitespace();
    match fields.next() {
        Some("Z" | "X") => return Seen::Gone,
        None => return Seen::Unknown,
        Some(_) => {}
    }
    // After the state, field 22 of the line (starttime) is the 19th.
    match fields.nth(18).and_then(|f| f.parse().ok()) {
        Some(t) => Seen::Running(t),
        None => Seen::Unknown,
    }
}

/// The start time of process `pid` (clock ticks after boot), `None` when it no longer runs
/// (gone, or a zombie) or `/proc` cannot tell.
fn start_time(pid: u32) -> Option<u64> {
    match seen(pid) {
        Seen::Running(t) => Some(t),
        Seen::Gone | Seen::Unknown => None,
    }
}

pub(crate) fn me() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

/// Claim an entry of the table for this process; its index.
pub(crate) fn register(h: &Header, ring: &str, role: Role) -> Result<usize> {
    let (pid, start) = (me(), start_time(me()).unwrap_or(0));
    for (i, p) in h.peers.iter().enumerate() {
        if p.state
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            fill(p, pid, start, role);
            return Ok(i);
        }
    }
    Err(full(ring))
}

/// As [`register`], and where every entry is taken, take over the entry of an opener whose
/// process is dead: for buffers and pools, whose dead importers hold nothing (a ring or a
/// timeline stops at a dead peer instead). `forget(i)` runs before the entry is this
/// process's, to clear what the dead one left in the segment under index `i`. A creator's
/// entry is never taken over (its death is what its peers look for).
pub(crate) fn register_over_dead(
    h: &Header,
    ring: &str,
    role: Role,
    forget: impl Fn(usize),
) -> Result<usize> {
    match register(h, ring, role) {
        Err(e) => {
            let (pid, start) = (me(), start_time(me()).unwrap_or(0));
            for (i, p) in h.peers.iter().enumerate() {
                let dead_opener = p.state.load(Ordering::SeqCst) == 2
                    && p.role.load(Ordering::Relaxed) == Role::Opener as u32
                    && !alive(p);
                if dead_opener
                    && p.state
                        .compare_exchange(2, 1, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                {
                    forget(i);
                    fill(p, pid, start, role);
                    return Ok(i);
                }
            }
            Err(e)
        }
        ok => ok,
    }
}

/// Make claimed entry `p` (state 1) this process's.
fn fill(p: &Peer, pid: u32, start: u64, role: Role) {
    p.pid.store(pid, Ordering::Relaxed);
    p.role.store(role as u32, Ordering::Relaxed);
    // A timeline raises it from the value once registered (`shared_timeline`).
    p.gpu.store(0, Ordering::SeqCst);
    p.may_signal.store(1, Ordering::SeqCst);
    p.start.store(start, Ordering::Relaxed);
    // SeqCst: against a stop (a buffer being freed counts this entry, or its opener sees the
    // stop).
    p.state.store(2, Ordering::SeqCst);
}

fn full(ring: &str) -> Error {
    Error::invalid(
        ring,
        format!("{MAX_PEERS} processes share it already (the most a segment takes)"),
    )
}

/// Whether the process of entry `p` still runs (the same process: its start time matches).
pub(crate) fn alive(p: &Peer) -> bool {
    let pid = p.pid.load(Ordering::Relaxed);
    match seen(pid) {
        Seen::Gone => false,
        Seen::Unknown => true,
        Seen::Running(t) => {
            let registered = p.start.load(Ordering::Relaxed);
            registered == 0 || t == registered
        }
    }
}

/// Living entries other than `own` (the asking handle's) that say they can still signal a
/// timeline: other processes, and other opens of it in this process (each open has an entry
/// of its own, which says so while it has handles or signals pending).
pub(crate) fn signallers_elsewhere(h: &Header, own: usize) -> usize {
    h.peers
        .iter()
        .enumerate()
        .filter(|&(i, p)| i != own && p.state.load(Ordering::SeqCst) == 2)
        .filter(|(_, p)| p.may_signal.load(Ordering::SeqCst) != 0 && alive(p))
        .count()
}

/// Give back the entry held in `entry` (once: it then holds `usize::MAX`).
pub(crate) fn leave(h: &Header, entry: &std::sync::atomic::AtomicUsize) {
    let i = entry.swap(usize::MAX, Ordering::AcqRel);
    if i != usize::MAX {
        unregister(h, i);
    }
}

/// Give entry `i` back (this process closes the ring).
pub(crate) fn unregister(h: &Header, i: usize) {
    if let Some(p) = h.peers.get(i) {
        p.state.store(0, Ordering::Release);
    }
}

/// [`Error::PeerLost`] for the first registered process (other than this one) that no longer
/// runs.
pub(crate) fn check(h: &Header, ring: &str) -> Result<()> {
    let mine = me();
    for p in &h.peers {
        if p.state.load(Ordering::Acquire) != 2 {
            continue;
        }
        let pid = p.pid.load(Ordering::Relaxed);
        if pid == mine || pid == 0 {
            continue;
        }
        let alive = alive(p);
        // Still registered? (It may have closed the ring while we looked.)
        if !alive && p.state.load(Ordering::Acquire) == 2 && p.pid.load(Ordering::Relaxed) == pid {
            return Err(Error::PeerLost {
                ring: ring.to_owned(),
                pid,
                role: Role::name(p.role.load(Ordering::Relaxed)),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_start_time_and_a_reaped_child_has_none() {
        assert!(start_time(me()).is_some());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(start_time(pid), None);
    }
}
