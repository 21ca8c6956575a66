// SPDX-License-Identifier: Apache-2.0
//! Kernel tests (root, hybrid host only) of which hierarchy names a task
//! when the cpu controller is v1 and cgroup v2 is mounted beside it (see
//! the `cgroupfs` module documentation): a task in its own v1 cpu group is
//! named by that group; a task in the v1 cpu root but its own v2 group is
//! named by its v2 path, not lumped into `/` and "system".
//!
//! Assertions are on names in the agent's published registry, read as
//! `topdeck sched` reads it, never on timings: the host may be busy.

use std::ffi::CString;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use topdeck::Namespace;
use topdeck_sched::{Agent, AgentConfig, Hierarchy, SchedView, REGISTRY_NAME};

/// The tests pin to CPU 0 and start their own agent; one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const ROLE: &str = "TOPDECK_HYBRID_ROLE";
/// How long a test waits for the names it expects before it fails.
const PATIENCE: Duration = Duration::from_secs(12);

/// The host's hierarchy when these tests can run here, else why not,
/// printed: a skipped test says so.
fn hybrid_or_skip() -> Option<Hierarchy> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root because it loads BPF programs and creates cgroups");
        return None;
    }
    let h = Hierarchy::detect().unwrap();
    if !h.cpu_v1 || h.unified.is_none() {
        eprintln!(
            "skipped: not a hybrid host (cpu controller at {}, v1: {}, unified mount: {:?})",
            h.mount.display(),
            h.cpu_v1,
            h.unified
        );
        return None;
    }
    Some(h)
}

/// Not a test: the body of the workload processes; ignored in a normal run.
#[test]
#[ignore = "workload body, run by Worker::spawn in a child process"]
fn role() {
    match std::env::var(ROLE).as_deref() {
        Ok("sleeper") => loop {
            std::thread::sleep(Duration::from_millis(1));
        },
        Ok("hog") => loop {
            std::hint::spin_loop();
        },
        other => panic!("unknown role {other:?}"),
    }
}

/// A cgroup directory (in either hierarchy), removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(mount: &std::path::Path, path: &str) -> Self {
        let dir = mount.join(path.trim_start_matches('/'));
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Self(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // The workers are killed and reaped first (declared later, dropped
        // earlier); a dying task may linger in the group for a moment.
        for _ in 0..100 {
            if fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: could not remove {}", self.0.display());
    }
}

/// A workload pinned to CPU 0 that joins `procs` (cgroup.procs files, one
/// per hierarchy) before it execs; killed on drop.
struct Worker(Child);

impl Worker {
    fn spawn(role: &str, procs: &[PathBuf]) -> Self {
        let procs: Vec<CString> = procs
            .iter()
            .map(|p| CString::new(p.to_str().unwrap()).unwrap())
            .collect();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--ignored", "--exact", "role", "--test-threads=1"])
            .env(ROLE, role)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
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
        Self(cmd.spawn().expect("spawning a workload"))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The agent on its own thread, publishing into a temporary namespace.
struct AgentGuard {
    dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AgentGuard {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let config = AgentConfig {
            dir: Some(dir.path().to_path_buf()),
            interval: Duration::from_millis(500),
            cost_every: None,
            ..AgentConfig::default()
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

    /// Everything published since the agent started.
    fn view(&self) -> SchedView {
        let listing = Namespace::at(self.dir.path()).list();
        let Some(entry) = listing
            .entries
            .iter()
            .find(|e| e.registry_name == REGISTRY_NAME)
        else {
            return SchedView::default();
        };
        SchedView::between(None, &entry.open().unwrap().snapshot().unwrap())
    }

    /// The first view in which `done` holds, or the last one after
    /// [`PATIENCE`]: the host may be too busy for the first ticks to show
    /// everything.
    fn view_until(&self, done: impl Fn(&SchedView) -> bool) -> SchedView {
        let t = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let v = self.view();
            if done(&v) || t.elapsed() > PATIENCE {
                return v;
            }
        }
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

fn has_row(v: &SchedView, cgroup: &str) -> bool {
    v.cgroups
        .iter()
        .any(|c| c.cgroup == cgroup && c.samples > 0)
}

#[test]
fn a_task_in_its_own_v1_cpu_group_is_named_by_that_group() {
    let Some(h) = hybrid_or_skip() else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let unified = h.unified.clone().unwrap();
    // A runtime's systemd driver gives a container the same path in both
    // hierarchies; distinct paths here show which hierarchy named it.
    let base = format!("/topdeck-hybrid-{}", std::process::id());
    let (cpu_path, v2_path) = (format!("{base}-a-cpu"), format!("{base}-a-v2"));
    let agent = AgentGuard::start();
    let cpu = Dir::new(&h.mount, &cpu_path);
    let v2 = Dir::new(&unified, &v2_path);
    let _sleeper = Worker::spawn(
        "sleeper",
        &[cpu.0.join("cgroup.procs"), v2.0.join("cgroup.procs")],
    );
    let v = agent.view_until(|v| has_row(v, &cpu_path));
    let names: Vec<&str> = v.cgroups.iter().map(|c| c.cgroup.as_str()).collect();
    assert!(
        has_row(&v, &cpu_path),
        "the task's waits go to its v1 cpu group {cpu_path}: {names:?}"
    );
    assert!(
        !names.contains(&v2_path.as_str()),
        "its v2 group {v2_path} does not name it when the cpu group does: {names:?}"
    );
}

#[test]
fn a_task_in_the_v1_cpu_root_is_named_by_its_own_v2_group() {
    let Some(h) = hybrid_or_skip() else { return };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let unified = h.unified.clone().unwrap();
    // Like systemd services without CPU accounting: each in its own v2
    // group, both in the v1 cpu root (joined explicitly, whatever group
    // this test runs in).
    let base = format!("/topdeck-hybrid-{}", std::process::id());
    let (sleeper_path, hog_path) = (format!("{base}-b-sleeper"), format!("{base}-b-hog"));
    let agent = AgentGuard::start();
    let v1_root = h.mount.join("cgroup.procs");
    let sleeper_dir = Dir::new(&unified, &sleeper_path);
    let hog_dir = Dir::new(&unified, &hog_path);
    let _sleeper = Worker::spawn(
        "sleeper",
        &[v1_root.clone(), sleeper_dir.0.join("cgroup.procs")],
    );
    let _hog = Worker::spawn("hog", &[v1_root, hog_dir.0.join("cgroup.procs")]);
    let blamed = |v: &SchedView| {
        v.cgroups
            .iter()
            .find(|c| c.cgroup == sleeper_path)
            .is_some_and(|c| c.culprits.iter().any(|(k, _)| *k == hog_path))
    };
    let v = agent.view_until(|v| blamed(v) && has_row(v, &hog_path));
    let names: Vec<&str> = v.cgroups.iter().map(|c| c.cgroup.as_str()).collect();
    assert!(
        has_row(&v, &sleeper_path) && has_row(&v, &hog_path),
        "both tasks are named by their v2 paths, not \"/\": {names:?}"
    );
    let row = v.cgroups.iter().find(|c| c.cgroup == sleeper_path).unwrap();
    eprintln!("{sleeper_path} waited behind {:?}", row.culprits);
    assert!(
        blamed(&v),
        "the sleeper's wait behind the hog is charged to {hog_path}, not to system: {:?}",
        row.culprits
    );
}
