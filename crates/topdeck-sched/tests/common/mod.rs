// SPDX-License-Identifier: Apache-2.0
//! What the kernel tests share: the agent on a thread of the test, and
//! workloads started inside cgroups, pinned to CPU 0 so that they contend.
#![allow(dead_code)] // each test binary uses its own part

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use topdeck::{Namespace, Snapshot};
use topdeck_sched::{Agent, AgentConfig, REGISTRY_NAME};

/// The agent on its own thread, publishing into a temporary namespace,
/// with thread waits off; stopped (programs detached, maps freed) on drop.
pub struct AgentGuard {
    dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AgentGuard {
    /// Starts an agent with `config`, its directory set to a new temporary
    /// one; panics with the agent's error if it cannot start.
    pub fn start(config: AgentConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        // Never the default pin: test agents run side by side, and one
        // running here must not refuse because of another.
        let config = AgentConfig {
            dir: Some(dir.path().to_path_buf()),
            thread_waits: None,
            ..config
        };
        let s = stop.clone();
        let thread = std::thread::spawn(move || match Agent::start(config) {
            Ok(mut agent) => {
                tx.send(Ok(())).unwrap();
                agent.run(&s, |_| {}).expect("agent tick");
            }
            Err(e) => tx.send(Err(format!("{e:#}"))).unwrap(),
        });
        rx.recv().unwrap().expect("the agent starts");
        Self {
            dir,
            stop,
            thread: Some(thread),
        }
    }

    /// The agent's namespace directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A snapshot of the agent's registry, if it is published yet.
    pub fn try_snapshot(&self) -> Option<Snapshot> {
        let listing = Namespace::at(self.dir.path()).list();
        let entry = listing
            .entries
            .iter()
            .find(|e| e.registry_name == REGISTRY_NAME)?;
        Some(entry.open().unwrap().snapshot().unwrap())
    }

    /// A snapshot of the agent's registry, which must be published.
    pub fn snapshot(&self) -> Snapshot {
        self.try_snapshot()
            .expect("the agent's registry is published")
    }
}

impl Drop for AgentGuard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts `cmd` inside every cgroup whose `cgroup.procs` (or `tasks`) file
/// is in `procs`, pinned to CPU 0, before it runs anything.
pub fn spawn_in(mut cmd: Command, procs: &[PathBuf]) -> std::io::Result<Child> {
    let procs: Vec<std::ffi::CString> = procs
        .iter()
        .map(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap())
        .collect();
    // SAFETY: only async-signal-safe calls (open, write, close,
    // sched_setaffinity) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for p in &procs {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" is the writing process itself.
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                libc::close(fd);
                if !ok {
                    return Err(std::io::Error::last_os_error());
                }
            }
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
            Ok(())
        });
    }
    cmd.spawn()
}

/// Removes the cgroup directory `dir`, waiting up to 2 s for tasks that
/// were just killed to leave it; says so if it could not.
pub fn remove_cgroup(dir: &Path) {
    for _ in 0..1000 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    eprintln!("warning: could not remove {}", dir.display());
}

/// A workload process, killed and reaped on drop.
pub struct Worker(pub Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
