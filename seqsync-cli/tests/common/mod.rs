//! Running the `seqsync` binary from tests, in the workspace and from the GPU bundle.
//!
//! Nothing here depends on where the tests were built: the binary is found next to the test
//! executable when the build-time path does not exist (the GPU bundle keeps tests in `tests/`
//! and binaries in `bin/`), and specs are embedded with `include_str!` and written to a temp
//! file when a command needs a path.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// `specs/seed.toml`, embedded.
pub const SEED_TEXT: &str = include_str!("../../../specs/seed.toml");
/// `specs/fanout.toml`, embedded.
pub const FANOUT_TEXT: &str = include_str!("../../../specs/fanout.toml");

/// The `seqsync` binary: `SEQSYNC_BIN` if set, the one cargo built if it exists, else
/// `../bin/seqsync` beside the test executable (the GPU bundle's layout).
pub fn exe() -> PathBuf {
    if let Some(p) = std::env::var_os("SEQSYNC_BIN") {
        return p.into();
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_seqsync"));
    if built.exists() {
        return built;
    }
    let me = std::env::current_exe().expect("the test executable's path");
    me.parent()
        .and_then(|d| d.parent())
        .map(|root| root.join("bin").join("seqsync"))
        .expect("the bundle's bin directory")
}

/// Run `seqsync ARGS`: (exit code, stdout, stderr).
pub fn seqsync(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(exe()).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Write `text` to a file named `name` in a per-process temp directory, once; its path.
pub fn spec_file(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("seqsync-cli-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    if !path.exists() {
        // Write then rename, so a test running beside this one never reads half a file.
        let tmp = dir.join(format!("{name}.{:?}.tmp", std::thread::current().id()));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
    }
    path.to_str().unwrap().to_string()
}

/// Path of the seed spec.
pub fn seed() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    P.get_or_init(|| spec_file("seed.toml", SEED_TEXT))
}

/// Path of the fanout spec.
pub fn fanout() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    P.get_or_init(|| spec_file("fanout.toml", FANOUT_TEXT))
}
