// SPDX-License-Identifier: Apache-2.0
//! `topdeck explain` on real processes and the real kernel (root): a
//! victim whose timer measures each request's CPU wait, pinned with a CPU
//! hog in another cgroup, is explained as waiting behind the hog; a victim
//! whose latency rises from its own sleeping is not; and the waits its
//! requests recorded add up to what the probe saw its thread wait.
//!
//! Workloads are this test binary re-run in a role (`TD_EXPLAIN_ROLE`),
//! in cgroups and on the CPU of `topdeck_sched::testing`.

use std::io::{BufRead, BufReader};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use topdeck_procfs::testing::root_or_skip;
use topdeck_sched::testing::{spawn_in, CgroupGuard, Worker};
use topdeck_sched::Hierarchy;

use super::sched::AgentProcess;
use super::*;

/// The kernel tests of this binary that contend for one CPU; one at a time.
pub(super) static SERIAL: Mutex<()> = Mutex::new(());

const ROLE: &str = "TD_EXPLAIN_ROLE";
/// Seconds after which the `own_work` victim starts sleeping in each request.
const SLEEP_AFTER: &str = "TD_EXPLAIN_SLEEP_AFTER";
/// Seconds a victim rests between requests (a quiet service); back to back without.
pub(super) const PACE: &str = "TD_EXPLAIN_PACE";
/// CPU time each request does.
const WORK: Duration = Duration::from_micros(300);
/// What the `own_work` victim adds to each request once it starts to.
const OWN_SLEEP: Duration = Duration::from_millis(2);

/// Spends `d` of this thread's CPU time (not wall-clock time: a request
/// that waits for the CPU takes longer, as a real one does).
fn work(d: Duration) {
    let cpu = || {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec to write.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    };
    let start = cpu();
    while cpu() - start < d {
        for _ in 0..200 {
            std::hint::spin_loop();
        }
    }
}

/// Not a test: the body of the workload processes (`victim`, `own_work`,
/// `hog`), run in a child; ignored in a normal run. A victim prints its
/// request thread's id, then serves back to back until killed.
#[test]
#[ignore = "workload body, run by `role` in a child process"]
fn explain_role() {
    let role = std::env::var(ROLE).expect("TD_EXPLAIN_ROLE names the workload");
    if role == "hog" {
        loop {
            topdeck_sched::testing::spin(Duration::from_secs(1));
        }
    }
    let registry = topdeck::Registry::builder()
        .name("victim")
        .build()
        .expect("the victim's registry");
    let timer = registry
        .timer("victim_request_seconds", &[], "Requests served.")
        .expect("a timer");
    let sleep_after = std::env::var(SLEEP_AFTER)
        .ok()
        .map(|s| Duration::from_secs_f64(s.parse().unwrap()));
    let pace = std::env::var(PACE)
        .ok()
        .map(|s| Duration::from_secs_f64(s.parse().unwrap()));
    // SAFETY: gettid has no preconditions.
    println!("tid {}", unsafe { libc::gettid() });
    let started = Instant::now();
    loop {
        let sleep = sleep_after.is_some_and(|after| started.elapsed() >= after);
        timer.time(|| {
            work(WORK);
            if sleep {
                std::thread::sleep(OWN_SLEEP);
            }
        });
        if let Some(pace) = pace {
            std::thread::sleep(pace);
        }
    }
}

/// A role of this binary in `cgroup`, on the test CPU, in namespace `dir`
/// with the agent's array at `pin`.
fn start(role: &str, cgroup: &CgroupGuard, dir: &Path, pin: &Path, env: &[(&str, &str)]) -> Worker {
    start_on(None, role, cgroup, dir, pin, env)
}

/// [`start`] on `cpu` instead of the test CPU, when given.
fn start_on(
    cpu: Option<usize>,
    role: &str,
    cgroup: &CgroupGuard,
    dir: &Path,
    pin: &Path,
    env: &[(&str, &str)],
) -> Worker {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = match cpu {
        // spawn_in pins to the test CPU before exec; taskset moves it on.
        Some(cpu) => {
            let mut c = std::process::Command::new("taskset");
            c.args(["-c", &cpu.to_string()]).arg(exe);
            c
        }
        None => std::process::Command::new(exe),
    };
    cmd.args([
        "--ignored",
        "--exact",
        "explain::explain_role",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .env("TOPDECK_DIR", dir)
    .env(topdeck_format::waits::PIN_ENV, pin)
    .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Worker(spawn_in(cmd, &[cgroup.procs()]).expect("spawning a workload"))
}

/// The request thread's id a victim prints first.
fn victim_tid(victim: &mut Worker) -> u32 {
    let out = victim.0.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(out).lines();
    let mut seen = Vec::new();
    loop {
        let Some(Ok(line)) = lines.next() else {
            panic!(
                "the victim ({:?}) printed no tid: {seen:?}",
                victim.0.try_wait()
            );
        };
        seen.push(line.clone());
        // The harness has printed the test's name on the same line.
        if let Some((_, tid)) = line.split_once("tid ") {
            return tid.trim().parse().unwrap();
        }
    }
}

/// `topdeck explain <pid> --json` over `count` windows of `window`.
fn explain(dir: &Path, pin: &Path, pid: u32, window: &str, count: u32) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_topdeck"))
        .args([
            "explain",
            &pid.to_string(),
            "--window",
            window,
            "--count",
            &count.to_string(),
            "--json",
        ])
        .env("TOPDECK_DIR", dir)
        .env(topdeck_format::waits::PIN_ENV, pin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning topdeck explain")
}

/// The windows `explain --json` printed, each also on stderr for a failing
/// test's log.
fn windows(child: std::process::Child) -> Vec<serde_json::Value> {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "explain failed: {}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    eprintln!("{stdout}");
    stdout.lines().map(|l| json(l.as_bytes())).collect()
}

/// A unique pin for one test's agent, in a bpffs directory of its own.
pub(super) struct Pin(pub(super) PathBuf);

impl Pin {
    fn new(what: &str) -> Self {
        let dir = PathBuf::from(format!(
            "/sys/fs/bpf/topdeck-test-{}-{what}",
            std::process::id()
        ));
        Pin(dir.join("thread_waits"))
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        if let Some(d) = self.0.parent() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn agent(dir: &Path, pin: &Pin) -> AgentProcess {
    let agent = AgentProcess::start(
        dir,
        &[
            "--interval",
            "500ms",
            "--thread-waits",
            pin.0.to_str().unwrap(),
        ],
    );
    agent.wait_for_registry(dir);
    // The array is pinned before the agent publishes.
    assert!(
        pin.0.exists(),
        "the agent pinned no array at {}",
        pin.0.display()
    );
    agent
}

/// What every test here starts from: root, the test CPU to itself, a
/// namespace, and an agent pinning its array where only this test looks.
/// Fields drop in order: the agent, then its pin, the lock last.
pub(super) struct Scene {
    agent: Option<AgentProcess>,
    pub(super) pin: Pin,
    pub(super) ns: TempDir,
    pub(super) h: Hierarchy,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Scene {
    /// `None` (the test skipped, saying why) without root.
    pub(super) fn new(what: &str) -> Option<Self> {
        if !root_or_skip("it loads BPF programs and creates cgroups") {
            return None;
        }
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let (ns, pin) = (namespace(), Pin::new(what));
        Some(Scene {
            agent: Some(agent(ns.path(), &pin)),
            pin,
            ns,
            h: Hierarchy::detect().unwrap(),
            _serial: serial,
        })
    }

    /// A role of this binary in `cgroup`, reading this scene's agent.
    pub(super) fn start(&self, role: &str, cgroup: &CgroupGuard, env: &[(&str, &str)]) -> Worker {
        start(role, cgroup, self.ns.path(), &self.pin.0, env)
    }

    /// [`Scene::start`] on `cpu`.
    pub(super) fn start_on(
        &self,
        cpu: usize,
        role: &str,
        cgroup: &CgroupGuard,
        env: &[(&str, &str)],
    ) -> Worker {
        start_on(Some(cpu), role, cgroup, self.ns.path(), &self.pin.0, env)
    }

    /// The registry of process `pid` now.
    fn snapshot_of(&self, pid: u32) -> topdeck::Snapshot {
        topdeck::Namespace::at(self.ns.path())
            .list()
            .entries
            .iter()
            .find(|e| e.pid == pid)
            .unwrap_or_else(|| panic!("no registry of pid {pid}"))
            .open()
            .unwrap()
            .snapshot()
            .unwrap()
    }
}

#[test]
fn a_victim_behind_a_hog_is_explained_as_waiting_for_the_cpu_behind_it() {
    let Some(scene) = Scene::new("hog") else {
        return;
    };
    let (victim_cg, hog_cg) = (
        CgroupGuard::new(&scene.h, "victim"),
        CgroupGuard::new(&scene.h, "hog"),
    );
    let mut victim = scene.start("victim", &victim_cg, &[]);
    let tid = victim_tid(&mut victim);
    let waits = topdeck::ThreadWaits::open(&scene.pin.0).expect("the array maps");
    // Two calm windows for the baseline, then the hog, then three windows.
    let explaining = explain(scene.ns.path(), &scene.pin.0, victim.0.id(), "2s", 6);
    std::thread::sleep(Duration::from_millis(4_500));
    let _hog = scene.start("hog", &hog_cg, &[]);
    // The per-request waits against the probe's count for the thread, over
    // the same span, while the hog runs.
    std::thread::sleep(Duration::from_secs(1));
    let read = || {
        let snap = scene.snapshot_of(victim.0.id());
        let slot = waits.slot(tid).expect("the thread has a slot");
        let Some(topdeck::Value::Histogram(h)) = snap.get("victim_request_cpu_wait_seconds", &[])
        else {
            panic!("no wait companion in {snap:?}");
        };
        (slot.total, h.sum)
    };
    let (slot0, sum0) = read();
    std::thread::sleep(Duration::from_secs(4));
    let (slot1, sum1) = read();
    let probe = (slot1 - slot0) as f64 * 1e-9;
    let requests = sum1 - sum0;
    eprintln!(
        "over 4 s the probe saw the thread wait {probe} s; its requests recorded {requests} s"
    );
    assert!(probe > 0.5, "the thread waited behind the hog: {probe} s");
    assert!(
        (requests - probe).abs() <= 0.05 * probe,
        "the requests' waits ({requests} s) add up to the thread's ({probe} s) within 5%"
    );

    let w = windows(explaining);
    assert_eq!(w.len(), 6);
    let last = &w[5];
    assert_eq!(last["level"], "thread_waits", "{last}");
    let row = &last["rows"][0];
    assert_eq!(row["series"], "victim_request_seconds", "{last}");
    assert_eq!(row["per_request"], true, "{last}");
    assert_eq!(row["finding"], "cpu", "{last}");
    let explained = row["rise_explained"]
        .as_f64()
        .expect("a rise over the baseline");
    assert!(
        explained >= 0.8,
        "at least 80% of the p99 rise is CPU wait: {row}"
    );
    assert_eq!(last["culprits"][0]["who"], hog_cg.path.as_str(), "{last}");
    let verdict = row["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("waiting for a CPU")
            && verdict.contains(&format!("behind {}", hog_cg.path)),
        "{verdict}"
    );
}

#[test]
fn a_victim_slowed_by_its_own_sleeping_is_not_the_cpu() {
    let Some(scene) = Scene::new("own") else {
        return;
    };
    let cg = CgroupGuard::new(&scene.h, "own-work");
    let mut victim = scene.start("own_work", &cg, &[(SLEEP_AFTER, "4.5")]);
    victim_tid(&mut victim);
    let w = windows(explain(
        scene.ns.path(),
        &scene.pin.0,
        victim.0.id(),
        "2s",
        5,
    ));
    let last = &w[4];
    let row = &last["rows"][0];
    assert_eq!(row["per_request"], true, "{last}");
    assert_eq!(row["finding"], "not_cpu", "{last}");
    assert!(
        row["share"].as_f64().unwrap() <= 0.10,
        "CPU wait at most 10% of latency: {row}"
    );
    // Its mean latency rose from its 300 µs of work by its 2 ms of sleep
    // (means: a p99 moves with whatever else the test host runs).
    let mean = |w: &serde_json::Value| w["rows"][0]["mean"].as_f64().unwrap();
    assert!(
        mean(&w[0]) < 0.001 && mean(last) > 0.002,
        "its latency rose: {} -> {}",
        w[0],
        last
    );
    let verdict = row["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("not the CPU") && !verdict.contains("behind"),
        "{verdict}"
    );
}

#[test]
fn a_restarted_agent_leaves_a_gap_of_unknown_waits_and_is_picked_up_again() {
    let Some(mut scene) = Scene::new("restart") else {
        return;
    };
    let cg = CgroupGuard::new(&scene.h, "restart");
    let mut victim = scene.start("victim", &cg, &[]);
    victim_tid(&mut victim);
    // (requests, with their wait known, with it unknown)
    let pid = victim.0.id();
    let counts = |scene: &Scene| {
        let snap = scene.snapshot_of(pid);
        let count = |name: &str| match snap.get(name, &[]) {
            Some(topdeck::Value::Histogram(h)) => h.count,
            other => panic!("{name}: {other:?}"),
        };
        (
            count("victim_request_seconds"),
            count("victim_request_cpu_wait_seconds"),
            count("victim_request_cpu_wait_unknown_seconds"),
        )
    };
    std::thread::sleep(Duration::from_secs(1));
    let (_, known0, unknown0) = counts(&scene);
    assert!(known0 > 0, "waits are known while the agent runs");
    assert_eq!(unknown0, 0, "none unknown while the agent runs");
    // The agent is killed: the probe marks its array gone as the agent's
    // last thread exits, and the pin stays until the next agent replaces it.
    drop(scene.agent.take());
    std::thread::sleep(Duration::from_secs(2));
    let (all1, known1, unknown1) = counts(&scene);
    eprintln!("after the stop: {all1} requests, {known1} known, {unknown1} unknown");
    assert!(
        unknown1 > 1_000,
        "requests in the gap are unknown, not zero waits"
    );
    // A new agent pins a new array; the victim opens it again within a
    // second of a request that found the old one gone.
    scene.agent = Some(agent(scene.ns.path(), &scene.pin));
    std::thread::sleep(Duration::from_secs(3));
    let (all2, known2, unknown2) = counts(&scene);
    eprintln!("after the restart: {all2} requests, {known2} known, {unknown2} unknown");
    assert!(
        known2 - known1 > 1_000,
        "known again after the restart: {known1} -> {known2}"
    );
    assert!(
        unknown2 - unknown1 < (all2 - all1) / 2,
        "the gap ended: {unknown1} -> {unknown2} unknown of {all1} -> {all2}"
    );
}

/// A pre-forked prometheus_client server: two workers, each serving
/// requests of 300 µs of CPU time 2 ms apart into one histogram; the
/// workers die with the parent.
const PREFORK: &str = r#"
import ctypes, os, sys, time
from prometheus_client import Histogram
h = Histogram("shop_request_seconds", "Requests served.")
def serve():
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    while True:
        t, c = time.perf_counter(), time.thread_time()
        while time.thread_time() - c < 0.0003:
            pass
        h.observe(time.perf_counter() - t)
        time.sleep(0.002)
for _ in range(2):
    if os.fork() == 0:
        serve()
print("ready", flush=True)
sys.stdin.read()
"#;

#[test]
fn a_preforked_prometheus_client_service_behind_a_hog_is_explained_from_its_porthole() {
    let Some(py) = super::serve::prommp_python() else {
        return;
    };
    let Some(scene) = Scene::new("prefork") else {
        return;
    };
    let (shop_cg, hog_cg) = (
        CgroupGuard::new(&scene.h, "shop"),
        CgroupGuard::new(&scene.h, "heavy"),
    );
    // A sleeper at equal weight preempts a hog at once (EEVDF): the
    // neighbour that hurts holds a heavy weight.
    hog_cg.set_max_weight();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("prefork.py");
    std::fs::write(&script, PREFORK).unwrap();
    let files = dir.path().join("metrics");
    std::fs::create_dir(&files).unwrap();
    let mut cmd = std::process::Command::new(&py);
    cmd.arg(&script)
        .env("PROMETHEUS_MULTIPROC_DIR", &files)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut server = Worker(spawn_in(cmd, &[shop_cg.procs()]).expect("start the server"));
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    // Two calm windows, then the hog.
    let mut explaining = std::process::Command::new(env!("CARGO_BIN_EXE_topdeck"));
    explaining
        .args([
            "explain",
            files.to_str().unwrap(),
            "--portholes",
            "--window",
            "2s",
            "--count",
            "5",
            "--json",
        ])
        .env("TOPDECK_DIR", scene.ns.path())
        .env(topdeck_format::waits::PIN_ENV, &scene.pin.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let explaining = explaining.spawn().expect("spawning topdeck explain");
    std::thread::sleep(Duration::from_millis(4_500));
    let _hog = scene.start("hog", &hog_cg, &[]);
    let w = windows(explaining);
    let last = &w[4];
    assert_eq!(
        last["service"]["pids"].as_array().unwrap().len(),
        3,
        "the server and its workers: {last}"
    );
    assert_eq!(last["level"], "thread_waits", "{last}");
    let row = &last["rows"][0];
    assert_eq!(row["series"], "shop_request_seconds", "{last}");
    assert_eq!(
        row["per_request"], false,
        "prometheus_client's timer measures no wait: {last}"
    );
    assert_eq!(row["finding"], "cpu", "{last}");
    assert_eq!(last["culprits"][0]["who"], hog_cg.path.as_str(), "{last}");
    assert!(
        row["verdict"]
            .as_str()
            .unwrap()
            .contains(&format!("behind {}", hog_cg.path)),
        "{row}"
    );
    // Before the hog, the same service was not waiting for a CPU.
    assert_eq!(w[1]["rows"][0]["finding"], "not_cpu", "{}", w[1]);
}
