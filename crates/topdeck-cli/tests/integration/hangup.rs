// SPDX-License-Identifier: Apache-2.0
//! No observer outlives its user: `watch` and `agent` end within
//! [`GONE_WITHIN`] of a stop signal (dying of it, so the status says which)
//! or of their stdout's reader going away (quietly, status 0), with
//! intervals far longer than that, so that sleeping one out would fail.
//! `top`'s hang-up tests live in `top.rs`, next to its terminal helpers.
//!
//! Each waits in a poll loop up to the deadline and asserts on the process
//! having ended, never on how fast.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use std::os::unix::process::ExitStatusExt;

use super::*;

/// How long a stop may take: the spec's bound, used as a deadline.
pub const GONE_WITHIN: Duration = Duration::from_secs(3);

/// An interval no test may wait out.
const LONG_INTERVAL: &str = "60s";

/// Whether `pid` ended within `within`: no longer in /proc, or a zombie
/// (ended, not yet reaped by whoever inherited it). On a timeout, says
/// what the process was doing: its state and CPU time.
pub fn ended_within(pid: u32, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(s) => s,
            Err(_) => return Ok(()),
        };
        // The state is the field after the command name, in parentheses.
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        if rest.starts_with('Z') || rest.starts_with('X') {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let f: Vec<&str> = rest.split(' ').collect();
            return Err(format!(
                "pid {pid} still running after {within:?}: state {}, utime {} stime {} ticks",
                f[0], f[11], f[12]
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asserts that `pid` (not our child) ends within [`GONE_WITHIN`]; kills
/// it first if not, so that a failure leaves no spinning process behind.
pub fn assert_ends(pid: u32) {
    if let Err(e) = ended_within(pid, GONE_WITHIN) {
        // SAFETY: kill only sends a signal, to the process under test.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        panic!("{e}");
    }
}

/// Waits for our child to end within [`GONE_WITHIN`]; kills it and fails otherwise.
fn exits_within(child: &mut Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return status;
        }
        if Instant::now() >= deadline {
            let state = ended_within(child.id(), Duration::ZERO).unwrap_err();
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: {state}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` to our child.
fn signal(child: &Child, sig: i32) {
    // SAFETY: kill only sends a signal, to a child we have not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// `topdeck watch` of this process's registry in `dir`, every
/// [`LONG_INTERVAL`], stdout piped; returns once its first line is out.
fn watch(dir: &Path) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = super::with_default_signals(&mut std::process::Command::new(env!(
        "CARGO_BIN_EXE_topdeck"
    )))
    .args(["watch", &std::process::id().to_string()])
    .args(["--interval", LONG_INTERVAL])
    .env("TOPDECK_DIR", dir)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start topdeck watch");
    let mut out = BufReader::new(child.stdout.take().expect("its stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("read its first line");
    assert!(first.starts_with("watching "), "{first:?}");
    (child, out)
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

#[test]
fn watch_ends_quietly_when_its_reader_goes_away() {
    let ns = namespace();
    let r = registry(ns.path(), "watched");
    r.counter("jobs_total", &[], "", "").unwrap().inc();
    // `topdeck watch ... | head -1`: the reader takes one line and leaves.
    let (mut child, out) = watch(ns.path());
    drop(out);
    let status = exits_within(&mut child, "watch with its reader gone");
    assert!(status.success(), "{status:?}: {}", stderr_of(&mut child));
    assert_eq!(stderr_of(&mut child), "", "a closed pipe is not an error");
}

#[test]
fn stop_signals_end_watch_with_their_status() {
    let ns = namespace();
    let r = registry(ns.path(), "watched");
    r.counter("jobs_total", &[], "", "").unwrap().inc();
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        let (mut child, _out) = watch(ns.path());
        signal(&child, sig);
        let status = exits_within(&mut child, &format!("watch after signal {sig}"));
        // Died of it, after stopping: the shell shows 128 + signal.
        assert_eq!(status.signal(), Some(sig), "{status:?}");
    }
}

/// `topdeck agent` in `dir`, every [`LONG_INTERVAL`]; returns once it
/// says how it runs (probe or coarse fallback) and its registry exists.
fn agent(dir: &Path) -> (Child, BufReader<std::process::ChildStdout>, PathBuf) {
    let mut child = super::with_default_signals(&mut std::process::Command::new(env!(
        "CARGO_BIN_EXE_topdeck"
    )))
    .args([
        "agent",
        "--thread-waits",
        "off",
        "--interval",
        LONG_INTERVAL,
    ])
    .env("TOPDECK_DIR", dir)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start topdeck agent");
    let mut out = BufReader::new(child.stdout.take().expect("its stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("read its first line");
    assert!(
        first.starts_with("topdeck agent: "),
        "{first:?}: {}",
        stderr_of(&mut child)
    );
    // Both ways of running create the registry before their first line.
    let file = std::fs::read_dir(dir)
        .expect("list the namespace")
        .map(|e| e.expect("an entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "topdeck"))
        .unwrap_or_else(|| panic!("no registry after {first:?}"));
    (child, out, file)
}

/// As root it runs the probe, as anyone else the coarse fallback: both
/// must stop the same way.
#[test]
fn sigterm_stops_the_agent_at_once_and_removes_its_registry() {
    let ns = namespace();
    let (mut child, _out, file) = agent(ns.path());
    signal(&child, libc::SIGTERM);
    let status = exits_within(&mut child, "agent after SIGTERM");
    assert_eq!(
        status.signal(),
        Some(libc::SIGTERM),
        "{status:?}: {}",
        stderr_of(&mut child)
    );
    assert!(!file.exists(), "a stopped agent leaves {}", file.display());
}

#[test]
fn the_agent_stops_when_its_stdout_closes() {
    let ns = namespace();
    let (mut child, out, file) = agent(ns.path());
    drop(out);
    let status = exits_within(&mut child, "agent with its stdout closed");
    assert!(status.success(), "{status:?}: {}", stderr_of(&mut child));
    assert!(!file.exists(), "a stopped agent leaves {}", file.display());
}

#[test]
fn json_output_ends_quietly_when_its_reader_goes_away() {
    let ns = namespace();
    let r = registry(ns.path(), "shown");
    // Enough series that the JSON outgrows the pipe buffer: the write fails
    // inside serde_json, which keeps only the error's kind.
    for i in 0..2000 {
        r.counter(&format!("jobs_{i}_total"), &[], "", "")
            .unwrap()
            .inc();
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_topdeck"))
        .arg("show")
        .arg(r.path())
        .arg("--json")
        .env("TOPDECK_DIR", ns.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start topdeck show");
    // `topdeck show --json | head -c 1`.
    let mut first = [0u8; 1];
    let read = child.stdout.take().unwrap().read_exact(&mut first);
    assert!(read.is_ok(), "no output: {}", stderr_of(&mut child));
    let status = exits_within(&mut child, "show --json with its reader gone");
    assert!(status.success(), "{status:?}: {}", stderr_of(&mut child));
    assert_eq!(stderr_of(&mut child), "", "a closed pipe is not an error");
}
