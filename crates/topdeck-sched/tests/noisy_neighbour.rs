// SPDX-License-Identifier: Apache-2.0
//! Kernel tests of the whole path (root only): real cgroups, real
//! processes pinned to one CPU, the agent publishing into a temporary
//! namespace, and assertions on what a reader of that namespace sees.
//!
//! Workloads are this test binary re-run in a role (`TOPDECK_SCHED_ROLE`):
//! `sleeper` wakes every millisecond (latency-sensitive), `hog` spins,
//! `burster` spins 2 ms and sleeps 1 ms. Cgroups, processes and the agent
//! are owned by guards that clean up on drop, so a failing assertion leaves
//! nothing behind.

use std::fs;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use topdeck_procfs::testing::root_or_skip;
use topdeck_sched::testing::{spawn_in, AgentGuard, CgroupGuard, Worker};
use topdeck_sched::verdict::{Thresholds, VerdictKind};
use topdeck_sched::{Agent, AgentConfig, AgentReading, Hierarchy, SchedView};

/// The kernel tests share CPU 0; one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const ROLE: &str = "TOPDECK_SCHED_ROLE";
const TICK: Duration = Duration::from_millis(500);

/// Not a test: the body of the workload processes, run by `worker`
/// in a child (`--ignored --exact role`); ignored in a normal run.
#[test]
#[ignore = "workload body, run by `worker` in a child process"]
fn role() {
    let role = std::env::var(ROLE).expect("TOPDECK_SCHED_ROLE names the workload");
    let spin = |d: Duration| {
        let t = std::time::Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    };
    loop {
        match role.as_str() {
            "sleeper" => std::thread::sleep(Duration::from_millis(1)),
            "hog" => spin(Duration::from_secs(1)),
            "burster" => {
                spin(Duration::from_millis(2));
                std::thread::sleep(Duration::from_millis(1));
            }
            other => panic!("unknown role {other}"),
        }
    }
}

/// A test process in `role`, pinned to CPU 0 and in `cgroup` before it
/// execs (its threads, the harness's included, inherit both).
fn worker(role: &str, cgroup: &CgroupGuard) -> Worker {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "role",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ROLE, role)
    .stdout(std::process::Stdio::null());
    Worker(spawn_in(cmd, &[cgroup.dir.join("cgroup.procs")]).expect("spawning a workload"))
}

/// The agent at this file's tick, with the default thresholds.
fn start_agent() -> AgentGuard {
    AgentGuard::start(AgentConfig {
        interval: TICK,
        thresholds: Thresholds::default(),
        cost_every: None,
        flavour: None,
        clock: topdeck_sched::Clock::default(),
        ..AgentConfig::default()
    })
}

fn wait_ticks(n: u32) {
    std::thread::sleep(TICK * n);
}

fn row<'a>(view: &'a SchedView, cgroup: &str) -> &'a topdeck_sched::view::CgroupView {
    view.cgroups
        .iter()
        .find(|c| c.cgroup == cgroup)
        .unwrap_or_else(|| panic!("{cgroup} has no waits in {view:#?}"))
}

#[test]
fn a_cpu_hog_in_another_cgroup_is_named_as_the_noisy_neighbour() {
    if !root_or_skip("it loads BPF programs and creates cgroups") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = Hierarchy::detect().unwrap();
    let agent = start_agent();
    let victim = CgroupGuard::new(&h, "victim");
    let noisy = CgroupGuard::new(&h, "hog");
    // With equal weights, the scheduler (EEVDF, 6.18) lets a light sleeper
    // preempt a hog at once; a neighbour that is noisy holds a heavy weight.
    // That also makes the effect stand out from whatever else the host runs.
    noisy.set_max_weight();
    let _sleeper = worker("sleeper", &victim);
    wait_ticks(1);
    let start = agent.snapshot();
    wait_ticks(8);
    let quiet = agent.snapshot();
    let hogs = [worker("hog", &noisy), worker("hog", &noisy)];
    wait_ticks(8);
    let loud = agent.snapshot();

    let before = SchedView::between(Some(&start), &quiet);
    let during = SchedView::between(Some(&quiet), &loud);
    let p99_before = row(&before, &victim.path).p99_seconds.unwrap();
    let v = row(&during, &victim.path);
    let p99_during = v.p99_seconds.unwrap();
    eprintln!(
        "victim p99 {p99_before:e} s -> {p99_during:e} s; culprits {:?}",
        v.culprits
    );
    // Over the whole window, one burst of the host's own load can lift the
    // quiet p99; the large factor is asserted on the agent's baseline (the
    // median of its quiet windows' p99s) below.
    assert!(
        p99_during > 2.0 * p99_before,
        "the victim's p99 rose only from {p99_before:e} s to {p99_during:e} s"
    );
    let total: f64 = v.culprits.iter().map(|c| c.1).sum();
    let (top, secs) = &v.culprits[0];
    assert_eq!(
        top, &noisy.path,
        "the wait is charged to the hog's cgroup: {:?}",
        v.culprits
    );
    assert!(
        secs / total > 0.5,
        "the hog holds most of the wait: {:?}",
        v.culprits
    );

    let verdicts: Vec<_> = during
        .verdicts
        .iter()
        .filter(|x| x.victim == victim.path)
        .collect();
    eprintln!("verdicts {verdicts:?}");
    assert_eq!(
        verdicts.len(),
        1,
        "one verdict on the victim: {:?}",
        during.verdicts
    );
    assert_eq!(verdicts[0].kind, VerdictKind::NoisyNeighbour);
    let [(culprit, share)] = verdicts[0].culprits.as_slice() else {
        panic!("one culprit: {:?}", verdicts[0]);
    };
    assert_eq!(*culprit, noisy.path);
    assert!(*share > 0.5);
    let (base, now) = (
        verdicts[0].p99_before.unwrap(),
        verdicts[0].p99_after.unwrap(),
    );
    assert!(
        now >= 4.0 * base,
        "the evidence shows a large rise: {base:e} s -> {now:e} s"
    );

    drop(hogs);
    wait_ticks(4);
    let after = SchedView::between(Some(&loud), &agent.snapshot());
    assert!(
        after.verdicts.iter().all(|x| x.victim != victim.path),
        "the verdict clears when the hog stops: {:?}",
        after.verdicts
    );
}

#[test]
fn a_victim_held_by_its_own_quota_blames_no_neighbour() {
    if !root_or_skip("it loads BPF programs and creates cgroups") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = Hierarchy::detect().unwrap();
    let agent = start_agent();
    let victim = CgroupGuard::new(&h, "quota");
    let _burster = worker("burster", &victim);
    wait_ticks(8);
    let quiet = agent.snapshot();
    victim.set_quota(20_000, 100_000);
    wait_ticks(8);
    let view = SchedView::between(Some(&quiet), &agent.snapshot());
    let mine: Vec<_> = view
        .verdicts
        .iter()
        .filter(|x| x.victim == victim.path)
        .collect();
    eprintln!(
        "p99 {:?}; verdicts {mine:?}",
        row(&view, &victim.path).p99_seconds
    );
    assert!(
        mine.iter().all(|x| x.kind != VerdictKind::NoisyNeighbour),
        "a quota is not a neighbour: {mine:?}"
    );
    assert!(
        mine.iter()
            .any(|x| x.kind == VerdictKind::OwnQuota && x.culprits.is_empty()),
        "the verdict says own_quota: {:?}",
        view.verdicts
    );
}

#[test]
fn a_hog_in_the_victims_own_cgroup_is_same_cgroup() {
    if !root_or_skip("it loads BPF programs and creates cgroups") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = Hierarchy::detect().unwrap();
    let agent = start_agent();
    let shared = CgroupGuard::new(&h, "shared");
    let _sleeper = worker("sleeper", &shared);
    wait_ticks(6);
    let quiet = agent.snapshot();
    let _hogs = [worker("hog", &shared), worker("hog", &shared)];
    wait_ticks(6);
    let view = SchedView::between(Some(&quiet), &agent.snapshot());
    let r = row(&view, &shared.path);
    eprintln!("switch-outs {:?}; culprits {:?}", r.switch_out, r.culprits);
    let same = r.switch_out.get("same_cgroup").copied().unwrap_or(0);
    let other = r.switch_out.get("other_cgroup").copied().unwrap_or(0);
    assert!(
        same > 0 && same > other,
        "preempted within its own cgroup: {:?}",
        r.switch_out
    );
    assert_eq!(
        r.culprits[0].0, "(own cgroup)",
        "waiting behind itself: {:?}",
        r.culprits
    );
    assert!(
        view.verdicts
            .iter()
            .all(|x| !(x.victim == shared.path && x.kind == VerdictKind::NoisyNeighbour)),
        "no neighbour is blamed: {:?}",
        view.verdicts
    );
}

#[test]
fn removed_cgroups_leave_the_kernel_maps() {
    use std::os::unix::fs::MetadataExt;
    if !root_or_skip("it loads BPF programs and creates cgroups") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = Hierarchy::detect().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(AgentConfig {
        dir: Some(dir.path().to_path_buf()),
        cost_every: None,
        grace: Duration::ZERO,
        // Tests never pin at the default path (they run side by side).
        thread_waits: None,
        ..AgentConfig::default()
    })
    .unwrap();
    let id;
    {
        let gone = CgroupGuard::new(&h, "gone");
        id = fs::metadata(&gone.dir).unwrap().ino();
        let _sleeper = worker("sleeper", &gone);
        std::thread::sleep(Duration::from_millis(300));
        agent.tick().unwrap();
        assert!(agent.probe().read().unwrap().cgroups.contains_key(&id));
    }
    // Without a grace period, a gone cgroup is retired at the first tick
    // that finds it gone and quiet; ticks need not wait for the interval.
    for _ in 0..3 {
        agent.tick().unwrap();
    }
    let totals = agent.probe().read().unwrap();
    assert!(
        !totals.cgroups.contains_key(&id),
        "the removed cgroup is still in the map"
    );
    // As a culprit it may stay in other cgroups' slots (see agent.rs).
    assert!(totals.pairs.keys().all(|(v, _)| *v != id));
}

/// The verdicts in force that name `culprit` as `victim`'s noisy neighbour.
fn names(view: &SchedView, victim: &str, culprit: &str) -> bool {
    view.verdicts.iter().any(|v| {
        v.victim == victim
            && v.kind == VerdictKind::NoisyNeighbour
            && v.culprits.iter().any(|(c, _)| c == culprit)
    })
}

#[test]
fn a_victim_starved_by_a_heavy_neighbour_gets_a_verdict_naming_it() {
    if !root_or_skip("it loads BPF programs and creates cgroups") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = Hierarchy::detect().unwrap();
    let agent = start_agent();
    let victim = CgroupGuard::new(&h, "starved");
    let noisy = CgroupGuard::new(&h, "heavy");
    // Weights 2 against 262144 (v1), or 1 against 10000 (v2): once the
    // neighbour spins, the victim runs a handful of times a second, each
    // time after a wait of the better part of a second, and most windows
    // end with its wait still in progress.
    victim.set_min_weight();
    noisy.set_max_weight();
    let _sleeper = worker("sleeper", &victim);
    // Quiet windows first: the agent's baseline of the victim's p99.
    wait_ticks(8);
    let hogs = [worker("hog", &noisy), worker("hog", &noisy)];
    let start = agent.snapshot();
    let mut named = None;
    for tick in 1..=24 {
        wait_ticks(1);
        let view = SchedView::between(Some(&start), &agent.snapshot());
        if names(&view, &victim.path, &noisy.path) {
            named = Some((tick, view));
            break;
        }
    }
    let Some((tick, view)) = named else {
        let view = SchedView::between(Some(&start), &agent.snapshot());
        panic!(
            "no verdict names {} for the starved {} within 24 windows: {view:#?}",
            noisy.path, victim.path
        );
    };
    eprintln!(
        "named after {tick} windows; victim {:?}; verdicts {:?}",
        view.cgroups.iter().find(|c| c.cgroup == victim.path),
        view.verdicts
    );
    assert!(
        view.verdicts
            .iter()
            .filter(|v| v.victim == victim.path)
            .all(|v| v.kind == VerdictKind::NoisyNeighbour),
        "weights are no quota: {:?}",
        view.verdicts
    );

    drop(hogs);
    for _ in 0..12 {
        wait_ticks(1);
        let view = SchedView::between(None, &agent.snapshot());
        if view.verdicts.iter().all(|v| v.victim != victim.path) {
            return;
        }
    }
    panic!(
        "the verdict on {} did not clear after its neighbour stopped",
        victim.path
    );
}

#[test]
fn a_neighbour_of_equal_weight_is_at_least_a_suspect() {
    if !root_or_skip("it loads BPF programs and creates cgroups") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = Hierarchy::detect().unwrap();
    let agent = start_agent();
    let victim = CgroupGuard::new(&h, "equal-victim");
    let neighbour = CgroupGuard::new(&h, "equal-hog");
    // A victim that computes (2 ms of every 3) beside a hog of the same
    // weight: the scheduler shares the CPU fairly, and the victim waits.
    let _burster = worker("burster", &victim);
    wait_ticks(8);
    let _hog = worker("hog", &neighbour);
    wait_ticks(10);
    let verdicts = AgentReading::parse(&agent.snapshot()).verdicts;
    let mine: Vec<_> = verdicts
        .iter()
        .filter(|v| v.victim == victim.path)
        .collect();
    eprintln!("verdicts {verdicts:?}");
    let [v] = mine.as_slice() else {
        panic!("one verdict on the victim: {verdicts:?}");
    };
    assert!(
        matches!(v.kind, VerdictKind::Suspect | VerdictKind::NoisyNeighbour),
        "{v}"
    );
    assert_eq!(v.culprits[0].0, neighbour.path, "{v}");
}
