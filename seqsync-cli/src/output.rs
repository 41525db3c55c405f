//! Output files that are complete or absent, and what Ctrl-C does.
//!
//! A file the command writes (a trace, a sweep's table and plot) is written to a temporary
//! file beside it and renamed into place once complete. Ctrl-C (SIGINT, or SIGTERM) removes
//! those temporary files, prints one line and ends the process at once with exit code 130:
//! every thread stops with it (rings included), and the operating system releases what the
//! process held (the driver its GPU work).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Temporary files being written now (removed if the command is interrupted).
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn pending() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Install the Ctrl-C handler (once, first thing in `main`).
pub(crate) fn handle_interrupts() {
    // Without a handler (it could not be installed) Ctrl-C still ends the process, by the
    // signal's default; only the temporary files may then stay behind.
    let _ = ctrlc::set_handler(|| {
        for p in pending().iter() {
            let _ = std::fs::remove_file(p);
        }
        eprintln!("seqsync: interrupted");
        // SAFETY: `_exit` ends the process at once, running no atexit handler or destructor
        // (another thread may hold locks they would take); it has no precondition.
        unsafe { libc::_exit(130) }
    });
}

/// A file that appears at its path only once complete.
pub(crate) struct PendingFile {
    tmp: PathBuf,
    dest: PathBuf,
}

impl PendingFile {
    /// Start writing `dest`: its temporary file is created now, so that an unwritable place
    /// fails before any work.
    pub(crate) fn create(dest: &Path) -> std::io::Result<Self> {
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        let tmp = dest.with_file_name(format!(".{name}.seqsync-{}.tmp", std::process::id()));
        pending().push(tmp.clone());
        let f = PendingFile {
            tmp,
            dest: dest.to_path_buf(),
        };
        std::fs::File::create(&f.tmp)?;
        Ok(f)
    }

    /// Write `bytes` and move the file into place.
    pub(crate) fn commit(self, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::write(&self.tmp, bytes)?;
        std::fs::rename(&self.tmp, &self.dest)
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        // Committed: renamed away already; else give up on it.
        let _ = std::fs::remove_file(&self.tmp);
        pending().retain(|p| p != &self.tmp);
    }
}
