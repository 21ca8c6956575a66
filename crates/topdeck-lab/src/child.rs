// SPDX-License-Identifier: Apache-2.0
//! Helper processes. Work that must live in another process (holding tens
//! of thousands of sockets and threads, sitting idle while its wake-ups are
//! counted) is done by re-executing a helper binary, normally `topdeck-lab
//! child ...`. The protocol is tiny: the child sets up, prints one line
//! starting with `ready` on stdout, then blocks reading stdin and exits at
//! end of file, so closing its stdin (or the parent dying) ends it.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{timing, Error, ErrorKind, Result};

/// The binary and leading arguments that reach [`run`] in a child.
#[derive(Debug, Clone)]
pub struct Helper {
    program: PathBuf,
    prefix: Vec<OsString>,
}

impl Helper {
    /// `program prefix... <task args>` runs [`run`] with the task args.
    pub fn new(program: impl Into<PathBuf>, prefix: &[&str]) -> Self {
        Self {
            program: program.into(),
            prefix: prefix.iter().map(OsString::from).collect(),
        }
    }

    /// This executable with `prefix` (e.g. `["child"]`).
    pub fn current_exe(prefix: &[&str]) -> Result<Self> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::io("find this executable to re-run it as a helper", e))?;
        Ok(Self::new(exe, prefix))
    }

    /// The command for one task.
    pub fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(&self.program);
        c.args(&self.prefix).args(args);
        c
    }
}

/// A helper child that has said it is ready. Dropping it ends the child.
#[derive(Debug)]
pub struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    /// The child's pid.
    pub pid: u32,
    /// What the child printed after `ready`.
    pub ready: String,
}

impl Running {
    /// Starts `helper` with `args` and waits for its `ready` line.
    pub fn start(helper: &Helper, args: &[String]) -> Result<Self> {
        let mut cmd = helper.command(args);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let what = format!("{cmd:?}");
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::io(format!("start helper {what}"), e))?;
        let pid = child.id();
        let stdin = child.stdin.take();
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            // Only the first line matters; the child prints nothing after it.
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let Some(ready) = line.trim_end().strip_prefix("ready") else {
            let status = child.wait().ok();
            return Err(Error::new(
                ErrorKind::Child,
                format!(
                    "helper {what} did not get ready (printed {line:?}, exit {status:?}); \
                     its error is on stderr above"
                ),
            ));
        };
        Ok(Self {
            pid,
            stdin,
            ready: ready.trim().to_owned(),
            child,
        })
    }

    /// Closes the child's stdin and waits (up to 10 s, then kills) for it.
    pub fn stop(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        drop(self.stdin.take());
        let deadline = timing::now_ns() + 10_000_000_000;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if timing::now_ns() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(Error::new(
                        ErrorKind::Child,
                        format!("helper {} ignored end of input; killed", self.pid),
                    ));
                }
                Err(e) => return Err(Error::io(format!("wait for helper {}", self.pid), e)),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.finish();
        }
    }
}

/// Period of the time-cache ticker, as in seed 001's `StartTimeTicker`.
pub const TICKER_PERIOD: Duration = Duration::from_millis(1);

/// The time cache the ticker keeps fresh; readers would load it instead of
/// reading the clock.
static CACHED_NS: AtomicU64 = AtomicU64::new(0);

/// The child side: runs the task named by `args[0]` and returns when stdin
/// reaches end of file. Tasks:
/// - `populate SOCKETS THREADS [PROCESSES]`: hold that many Unix sockets,
///   parked threads and sleeping processes;
/// - `idle-topdeck DIR`: a registry in DIR with a counter and a histogram
///   updated once, the clock read once, then nothing;
/// - `idle-ticker`: a thread storing the time every 1 ms, then nothing.
pub fn run(args: &[String]) -> Result<()> {
    let bad = || {
        Error::new(
            ErrorKind::BadInput,
            format!(
                "unknown helper task {args:?}: expected `populate SOCKETS THREADS [PROCESSES]`, \
                 `idle-topdeck DIR` or `idle-ticker`"
            ),
        )
    };
    let num =
        |s: Option<&String>| -> Result<usize> { s.and_then(|v| v.parse().ok()).ok_or_else(bad) };
    match args.first().map(String::as_str) {
        Some("populate") => {
            let sockets = num(args.get(1))?;
            let threads = num(args.get(2))?;
            let processes = args.get(3).map_or(Ok(0), |p| num(Some(p)))?;
            let held = crate::populate::hold(sockets, threads, processes)?;
            ready(&format!(
                "sockets={} threads={} processes={}",
                held.sockets, held.threads, held.processes
            ))?;
            wait_for_eof();
            drop(held);
            Ok(())
        }
        Some("idle-topdeck") => {
            let dir = args.get(1).ok_or_else(bad)?;
            let registry = topdeck::Registry::builder()
                .dir(dir)
                .name("lab-idle")
                .build()?;
            let c = registry.counter("lab_idle_events_total", &[], "Events.", "")?;
            let h = registry.histogram("lab_idle_seconds", &[], "Durations.", "seconds")?;
            let t0 = timing::now_ns();
            c.inc();
            h.record(timing::secs(t0, timing::now_ns()));
            ready(&registry.path().display().to_string())?;
            wait_for_eof();
            Ok(())
        }
        Some("idle-ticker") => {
            std::thread::Builder::new()
                .name("time-ticker".into())
                .spawn(|| loop {
                    CACHED_NS.store(timing::now_ns(), Ordering::Relaxed);
                    std::thread::sleep(TICKER_PERIOD);
                })
                .map_err(|e| Error::io("start the ticker thread", e))?;
            ready("ticker")?;
            wait_for_eof();
            Ok(())
        }
        _ => Err(bad()),
    }
}

fn ready(what: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready {what}")
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("tell the parent we are ready", e))
}

/// Blocks in read(2) on stdin until the parent closes it: no wake-ups.
fn wait_for_eof() {
    let mut buf = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
}
