// SPDX-License-Identifier: Apache-2.0
//! Kernel tests (root, hybrid host only) of which hierarchy names a task
//! when the cpu controller is v1 and cgroup v2 is mounted beside it (see
//! the `cgroupfs` module documentation): a task in its own v1 cpu group is
//! named by that group; a task in the v1 cpu root but its own v2 group is
//! named by its v2 path, not lumped into `/` and "system".
//!
//! Assertions are on names in the agent's published registry, read as
//! `topdeck sched` reads it, never on timings: the host may be busy.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use topdeck_procfs::testing::root_or_skip;
use topdeck_sched::testing::{spawn_in, AgentGuard, Worker};
use topdeck_sched::{AgentConfig, Hierarchy, SchedView};

/// The tests pin to CPU 0 and start their own agent; one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const ROLE: &str = "TOPDECK_HYBRID_ROLE";
/// How long a test waits for the names it expects before it fails.
const PATIENCE: Duration = Duration::from_secs(12);

/// The host's hierarchy when these tests can run here, else why not,
/// printed: a skipped test says so.
fn hybrid_or_skip() -> Option<Hierarchy> {
    if !root_or_skip("it loads BPF programs and creates cgroups") {
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
#[ignore = "workload body, run by `worker` in a child process"]
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
        topdeck_sched::testing::remove_cgroup(&self.0);
    }
}

/// A test process in `role`, pinned to CPU 0, that joins `procs`
/// (cgroup.procs files, one per hierarchy) before it execs.
fn worker(role: &str, procs: &[PathBuf]) -> Worker {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--ignored", "--exact", "role", "--test-threads=1"])
        .env(ROLE, role)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    Worker(spawn_in(cmd, procs).expect("spawning a workload"))
}

/// The agent at a 500 ms interval.
fn start_agent() -> AgentGuard {
    AgentGuard::start(AgentConfig {
        interval: Duration::from_millis(500),
        cost_every: None,
        ..AgentConfig::default()
    })
}

/// Views of the agent's registry.
trait Views {
    /// Everything published since the agent started.
    fn view(&self) -> SchedView;
    /// The first view in which `done` holds, or the last one after
    /// [`PATIENCE`]: the host may be too busy for the first ticks to show
    /// everything.
    fn view_until(&self, done: impl Fn(&SchedView) -> bool) -> SchedView;
}

impl Views for AgentGuard {
    fn view(&self) -> SchedView {
        self.try_snapshot()
            .map_or_else(SchedView::default, |s| SchedView::between(None, &s))
    }

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
    let agent = start_agent();
    let cpu = Dir::new(&h.mount, &cpu_path);
    let v2 = Dir::new(&unified, &v2_path);
    let _sleeper = worker(
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
    let agent = start_agent();
    let v1_root = h.mount.join("cgroup.procs");
    let sleeper_dir = Dir::new(&unified, &sleeper_path);
    let hog_dir = Dir::new(&unified, &hog_path);
    let _sleeper = worker(
        "sleeper",
        &[v1_root.clone(), sleeper_dir.0.join("cgroup.procs")],
    );
    let _hog = worker("hog", &[v1_root, hog_dir.0.join("cgroup.procs")]);
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
