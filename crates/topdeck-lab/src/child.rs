// SPDX-License-Identifier: Apache-2.0
//! Helper processes. Work that must live in another process (holding tens
//! of thousands of sockets and threads, sitting idle while its wake-ups are
//! counted) is done by re-executing a helper binary, normally `topdeck-lab
//! child ...`. The protocol is tiny: the child sets up, prints one line
//! starting with `ready` on stdout, then blocks reading stdin and exits at
//! end of file, so closing its stdin (or the parent dying) ends it.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::{timing, Error, ErrorKind, Result};

/// The binary and leading arguments that reach [`crate::tasks::run`] in a child.
#[derive(Debug, Clone)]
pub struct Helper {
    program: PathBuf,
    prefix: Vec<OsString>,
}

impl Helper {
    /// `program prefix... <task args>` runs [`crate::tasks::run`] with the task args.
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
