// SPDX-License-Identifier: Apache-2.0
//! Integration tests of the `topdeck` binary: real registries written by
//! this test process (and, for dead writers, by a child process that
//! aborts), read by the real binary in a private `TOPDECK_DIR`.

mod agent_spoof;
mod clock;
mod deck;
mod explain;
mod gc;
mod hangup;
mod ls;
mod mmv;
// Shared with tests/ (included there), which uses helpers these do not.
#[allow(dead_code)]
mod prometheus;
mod push;
mod recorded;
mod sched;
mod serve;
mod show;
mod top;
mod watch;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use assert_cmd::Command;
use tempfile::TempDir;
use topdeck::Registry;

/// Set (to a namespace directory) in the child that plays a crashed writer.
const DEAD_WRITER_DIR: &str = "TOPDECK_CLI_TEST_DEAD_WRITER_DIR";

/// Counter value the crashed writer leaves behind.
pub const DEAD_JOBS: u64 = 4242;

/// Starts `cmd` with the stop signals at their default dispositions: a
/// test run under `nohup` (or a CI runner that ignores SIGHUP) would
/// otherwise pass its ignored SIGHUP on, which the commands keep ignoring
/// by design.
pub fn with_default_signals(cmd: &mut std::process::Command) -> &mut std::process::Command {
    // SAFETY: signal(2) is async-signal-safe and touches only the child.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            for sig in [libc::SIGHUP, libc::SIGINT, libc::SIGTERM] {
                libc::signal(sig, libc::SIG_DFL);
            }
            Ok(())
        })
    }
}

/// topdeck's cache of other runtimes and tools (scripts/reach/*.sh).
pub fn topdeck_cache() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache")
        })
        .join("topdeck")
}

/// `path`, a tool a scripts/reach script installs, if it is there;
/// otherwise `None` with "SKIPPED" and what to run printed, or, under CI
/// (where it must be installed), a failure.
pub fn reach_tool(path: PathBuf, script: &str) -> Option<PathBuf> {
    if path.exists() {
        return Some(path);
    }
    let why = format!("{} is missing", path.display());
    assert!(std::env::var_os("CI").is_none(), "{why}; run {script}");
    eprintln!("SKIPPED: {why}; run {script}");
    None
}

/// A private namespace directory.
pub fn namespace() -> TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// `topdeck` reading the namespace `dir`.
pub fn topdeck(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_topdeck"));
    c.env("TOPDECK_DIR", dir);
    c
}

/// A registry of this process in `dir`.
pub fn registry(dir: &Path, name: &str) -> Registry {
    Registry::builder()
        .dir(dir)
        .name(name)
        .build()
        .expect("a registry")
}

/// The process name the library records for this process.
pub fn own_name() -> String {
    let argv0 = std::env::args_os().next().expect("argv[0]");
    Path::new(&argv0)
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned()
}

/// Parses a command's stdout as JSON.
pub fn json(stdout: &[u8]) -> serde_json::Value {
    serde_json::from_slice(stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", String::from_utf8_lossy(stdout)))
}

/// Stdout or stderr as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Writes a file of pseudo-random bytes named like a registry.
pub fn corrupt_file(dir: &Path) -> PathBuf {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let bytes: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let path = dir.join("1-1-0.topdeck");
    std::fs::write(&path, bytes).expect("write the corrupt file");
    path
}

/// Makes a registry in a child process that then aborts, so its file stays
/// behind with nobody holding its lock. Returns the file and the child's pid.
pub fn dead_registry(dir: &Path) -> (PathBuf, u32) {
    let child = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "dead_writer_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DEAD_WRITER_DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the dead writer");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for the dead writer");
    assert!(
        !out.status.success(),
        "the writer was meant to abort:\n{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let prefix = format!("{pid}-");
    let path = std::fs::read_dir(dir)
        .expect("list the namespace")
        .map(|e| e.expect("an entry").path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".topdeck"))
        })
        .unwrap_or_else(|| panic!("no file of pid {pid}: {}", text(&out.stdout)));
    (path, pid)
}

/// Not a test of its own: the body of the child that `dead_registry` starts.
#[test]
#[ignore = "run by `dead_registry` in a child process, which it aborts"]
fn dead_writer_helper() {
    let dir = std::env::var_os(DEAD_WRITER_DIR)
        .unwrap_or_else(|| panic!("{DEAD_WRITER_DIR} names the namespace to write in"));
    let r = registry(Path::new(&dir), "crashed");
    r.counter("jobs_total", &[], "Jobs done.", "")
        .unwrap()
        .add(DEAD_JOBS);
    r.gauge("temperature_celsius", &[], "Last reading.", "")
        .unwrap()
        .set(-3);
    println!("{}", r.path().display());
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads the struct we pass; no core file is left behind.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    std::process::abort();
}
