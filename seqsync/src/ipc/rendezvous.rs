//! How a process finds a ring or timeline by name: the creating process listens on an abstract
//! Unix socket named for the user, the kind and the name, and hands the segment's memory file to every
//! process of the same user that connects (`SCM_RIGHTS`). An abstract socket and a memory
//! file have no path: the kernel frees both when the processes holding them end, however they
//! end, so no segment outlives the processes that used it and a name is free again as soon as
//! its creator is gone.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, Shutdown,
};

use super::segment::Kind;
use crate::error::{Error, Result};

fn address(kind: Kind, name: &str) -> Result<SocketAddr> {
    let uid = rustix::process::getuid().as_raw();
    SocketAddr::from_abstract_name(format!("seqsync/{uid}/{}/{name}", kind.noun()))
        .map_err(|e| Error::invalid(name, format!("no socket address for it: {e}")))
}

fn same_user(fd: BorrowedFd<'_>) -> bool {
    rustix::net::sockopt::socket_peercred(fd).is_ok_and(|c| c.uid == rustix::process::getuid())
}

/// The creator's listener: serves the segment until dropped.
pub(crate) struct Server {
    listener: Arc<UnixListener>,
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Claim `name` (of `kind`) and serve `fd` to every process of this user that asks. A
    /// name another living process serves is [`Error::InvalidArgument`].
    pub(crate) fn start(kind: Kind, name: &str, fd: OwnedFd) -> Result<Server> {
        Server::start_all(kind, name, vec![fd])
    }

    /// As [`start`](Self::start), serving up to [`MAX_FDS`] files at once (a pool's segment
    /// and its driver pool), in this order.
    pub(crate) fn start_all(kind: Kind, name: &str, fds: Vec<OwnedFd>) -> Result<Server> {
        debug_assert!((1..=MAX_FDS).contains(&fds.len()));
        let listener = UnixListener::bind_addr(&address(kind, name)?).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Error::invalid(
                    name,
                    format!(
                        "a shared {} of this name exists (its creating process is alive)",
                        kind.noun()
                    ),
                )
            } else {
                Error::invalid(name, format!("cannot listen for it: {e}"))
            }
        })?;
        let listener = Arc::new(listener);
        let done = Arc::new(AtomicBool::new(false));
        let (l, d) = (listener.clone(), done.clone());
        let thread = std::thread::Builder::new()
            .name(format!("seqsync-{}-serve", kind.noun()))
            .spawn(move || serve(&l, &d, &fds))
            .map_err(|e| Error::invalid(name, format!("cannot spawn its server thread: {e}")))?;
        Ok(Server {
            listener,
            done,
            thread: Some(thread),
        })
    }
}

/// How long `fetch` waits for the creator's answer.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Most files one server hands over.
pub(crate) const MAX_FDS: usize = 2;

fn serve(listener: &UnixListener, done: &AtomicBool, files: &[OwnedFd]) {
    loop {
        let conn = listener.accept();
        if done.load(Ordering::Acquire) {
            return;
        }
        let Ok((conn, _)) = conn else { continue };
        if !same_user(conn.as_fd()) {
            continue; // another user's process: dropped without an answer
        }
        let fds: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        control.push(SendAncillaryMessage::ScmRights(&fds));
        // NOSIGNAL: a client that closed before the answer must not raise SIGPIPE in this
        // process (whose host program may not ignore it).
        let _ = rustix::net::sendmsg(
            &conn,
            &[IoSlice::new(b"S")],
            &mut control,
            SendFlags::NOSIGNAL,
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        // Wakes the accept (Linux returns an error from accept on a shut-down listener).
        let _ = rustix::net::shutdown(self.listener.as_fd(), Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The memory file of `name` (of `kind`), from its creating process.
pub(crate) fn fetch(kind: Kind, name: &str) -> Result<OwnedFd> {
    fetch_all(kind, name)?
        .into_iter()
        .next()
        .ok_or_else(|| Error::BadSegment {
            ring: name.to_owned(),
            message: "its creator sent no memory file".into(),
        })
}

/// Every file `name`'s creator serves ([`Server::start_all`]), in its order (at least one).
pub(crate) fn fetch_all(kind: Kind, name: &str) -> Result<Vec<OwnedFd>> {
    let conn = UnixStream::connect_addr(&address(kind, name)?).map_err(|e| {
        Error::invalid(
            name,
            format!("no shared {} of this name is open ({e})", kind.noun()),
        )
    })?;
    if !same_user(conn.as_fd()) {
        return Err(Error::BadSegment {
            ring: name.to_owned(),
            message: "served by another user's process".into(),
        });
    }
    // A creator that cannot answer (stopped, or not seqsync) is an error, not a hang.
    conn.set_read_timeout(Some(ANSWER_WITHIN))
        .map_err(|e| Error::invalid(name, format!("cannot wait for its creator: {e}")))?;
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(
        &conn,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| Error::invalid(name, format!("its creator did not answer: {e}")))?;
    let mut files = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            files.extend(fds);
        }
    }
    if !files.is_empty() {
        return Ok(files);
    }
    Err(Error::BadSegment {
        ring: name.to_owned(),
        message: "its creator sent no memory file".into(),
    })
}
