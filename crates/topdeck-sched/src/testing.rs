// SPDX-License-Identifier: Apache-2.0
//! What the workspace's kernel tests share (feature `testing`, not part of
//! the API): cgroups and workloads that clean up after themselves, pinned
//! to one CPU so that they contend, and the agent on a thread of the test.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use topdeck::{Namespace, Snapshot};

use crate::{Agent, AgentConfig, Hierarchy, REGISTRY_NAME};

/// The CPU contending workloads are pinned to.
pub const CPU: usize = 0;

/// The agent on its own thread, publishing into a temporary namespace;
/// stopped (programs detached, maps freed) on drop.
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

/// A cgroup in the cpu controller's hierarchy, removed on drop (after the
/// processes in it, which must be dropped first).
pub struct CgroupGuard {
    /// Its directory.
    pub dir: PathBuf,
    /// Its path in the hierarchy, as the agent labels it.
    pub path: String,
    cpu_v1: bool,
}

impl CgroupGuard {
    /// `/topdeck-test-<pid>-<name>`.
    pub fn new(h: &Hierarchy, name: &str) -> Self {
        Self::at(h, &format!("/topdeck-test-{}-{name}", std::process::id()))
    }

    /// The cgroup `path` (`/a`), made here: the caller makes it unique.
    pub fn at(h: &Hierarchy, path: &str) -> Self {
        let path = path.to_owned();
        let dir = h.dir(&path);
        if !h.cpu_v1 {
            // cgroup v2: the cpu controller must be enabled for children.
            let _ = fs::write(h.mount.join("cgroup.subtree_control"), "+cpu");
        }
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Self {
            dir,
            path,
            cpu_v1: h.cpu_v1,
        }
    }

    /// The file processes are moved in with.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The heaviest CPU weight: a neighbour that takes what it can.
    pub fn set_max_weight(&self) {
        self.write_weight("262144", "10000");
    }

    /// The lightest CPU weight: a victim that gets what is left over.
    pub fn set_min_weight(&self) {
        self.write_weight("2", "1");
    }

    fn write_weight(&self, shares: &str, weight: &str) {
        let (file, text) = match self.cpu_v1 {
            true => ("cpu.shares", shares),
            false => ("cpu.weight", weight),
        };
        fs::write(self.dir.join(file), text).unwrap();
    }

    /// A CFS quota of `quota_us` per `period_us`.
    pub fn set_quota(&self, quota_us: u64, period_us: u64) {
        if self.cpu_v1 {
            fs::write(self.dir.join("cpu.cfs_period_us"), period_us.to_string()).unwrap();
            fs::write(self.dir.join("cpu.cfs_quota_us"), quota_us.to_string()).unwrap();
        } else {
            fs::write(self.dir.join("cpu.max"), format!("{quota_us} {period_us}")).unwrap();
        }
    }
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        remove_cgroup(&self.dir);
    }
}

/// Starts `cmd` inside every cgroup whose `cgroup.procs` (or `tasks`) file
/// is in `procs`, pinned to [`CPU`], before it runs anything.
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
            libc::CPU_SET(CPU, &mut set);
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
        if fs::remove_dir(dir).is_ok() || !dir.exists() {
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

/// Spins on the CPU for `d` of wall-clock time.
pub fn spin(d: std::time::Duration) {
    let t = std::time::Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}
