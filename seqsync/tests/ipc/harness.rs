//! Running this test binary again as the other process: a `child_*` test is ignored in a
//! normal run and is what the child runs (`--ignored --exact MODULE::child_…`, with the ring's
//! or timeline's name in `SEQSYNC_IPC_RING`); it prints [`READY`] once it has set up.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicI64;
use std::time::{Duration, Instant};

pub const RING: &str = "SEQSYNC_IPC_RING";
pub const DATA: &str = "SEQSYNC_IPC_DATA";
/// What a child prints once it is ready.
pub const READY: &str = "SEQSYNC-CHILD-READY";
/// Words of the shared `Data` (a ring's slots).
pub const SLOTS: usize = 4;

pub fn unique(what: &str) -> String {
    format!("t-{what}-{}", std::process::id())
}

/// This test binary again, running test `name` (ignored in normal runs) as the other process.
pub fn child(name: &str, ring: &str, data: Option<&std::path::Path>) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        name,
        "--nocapture",
        "--test-threads=1",
    ])
    .env(RING, ring)
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if let Some(d) = data {
        cmd.env(DATA, d);
    }
    cmd.spawn().unwrap()
}

/// Reads the child's stdout until it says it is ready (after the harness's `test NAME ... `).
pub fn await_ready(c: &mut Child) {
    let out = c.stdout.as_mut().unwrap();
    let mut line = String::new();
    let mut r = BufReader::new(out);
    loop {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "child ended before it was ready"
        );
        if line.trim_end().ends_with(READY) {
            return;
        }
    }
}

pub fn exit_code(mut c: Child, within: Duration) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s.code().unwrap_or(-1);
        }
        if start.elapsed() > within {
            let _ = c.kill();
            panic!("child still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SIGKILL the child after `after` (not reaped: a zombie counts as dead).
pub fn kill_later(mut c: Child, after: Duration) -> std::thread::JoinHandle<(Instant, Child)> {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        c.kill().unwrap(); // SIGKILL; not reaped yet (a zombie counts as dead)
        (Instant::now(), c)
    })
}

/// Data both processes map: one i64 per slot (`SLOTS`), `seq mod SLOTS`.
pub struct Data {
    _file: std::fs::File,
    map: memmap2::MmapRaw,
}

impl Data {
    pub fn create(path: &std::path::Path) -> Data {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .unwrap();
        file.set_len((SLOTS * 8) as u64).unwrap();
        Data::map(file)
    }
    pub fn open(path: &std::path::Path) -> Data {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        Data::map(file)
    }
    fn map(file: std::fs::File) -> Data {
        let map = memmap2::MmapOptions::new()
            .len(SLOTS * 8)
            .map_raw(&file)
            .unwrap();
        Data { _file: file, map }
    }
    pub fn word(&self, seq: i64) -> &AtomicI64 {
        let i = (seq as usize) % SLOTS;
        // SAFETY: the mapping is SLOTS i64 words, page-aligned; both processes touch it only
        // through atomics.
        unsafe { &*(self.map.as_ptr().add(i * 8) as *const AtomicI64) }
    }
}

pub fn data_path(what: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("seqsync-ipc-{what}-{}", std::process::id()))
}
