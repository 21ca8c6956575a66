// SPDX-License-Identifier: Apache-2.0
//! Kernel test (root only) of where the probe keeps each cgroup's
//! statistics: slots of a per-CPU array while there are free ones, a hash
//! for the rest, a forgotten cgroup's slot handed to the next new cgroup
//! empty, and a cgroup forgotten while it still has tasks placed again.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use topdeck::Value;
use topdeck_procfs::testing::root_or_skip;
use topdeck_sched::testing::{spawn_in, AgentGuard, Worker};
use topdeck_sched::{AgentConfig, Clock, Flavour, Hierarchy, Probe};

/// The tests watch each other's cgroups appear: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const ROLE: &str = "TOPDECK_SLOTS_ROLE";

/// Not a test: the body of the sleeper process; ignored in a normal run.
#[test]
#[ignore = "workload body, run by `Group::sleeper` in a child process"]
fn role() {
    if std::env::var(ROLE).as_deref() == Ok("sleeper") {
        loop {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A cgroup directory in the probe's hierarchy, removed on drop.
struct Group(PathBuf);

impl Group {
    fn new(h: &Hierarchy, name: &str) -> Self {
        let dir = h
            .mount
            .join(format!("td-slots-{}-{name}", std::process::id()));
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Self(dir)
    }

    /// Its cgroup id: the directory's kernfs inode number.
    fn id(&self) -> u64 {
        fs::metadata(&self.0).unwrap().ino()
    }

    /// Runs `sleeps` one-millisecond `sleep` processes in turn inside it
    /// (each one at least two waits: its first run and its wake-up), and
    /// waits for them to finish.
    fn run_sleeps(&self, sleeps: u32) {
        let procs = procs_file(&self.0);
        let script = format!("i=0; while [ $i -lt {sleeps} ]; do sleep 0.001; i=$((i+1)); done");
        let mut cmd = Command::new("/bin/sh");
        cmd.args(["-c", &script]).stdin(Stdio::null());
        let mut w = Worker(spawn_in(cmd, &[procs]).expect("spawning a workload"));
        assert!(w.0.wait().unwrap().success());
    }
}

impl Group {
    /// A process inside it that sleeps 1 ms in a loop, for as long as it
    /// lives: one task, no children, so its place stays cached.
    fn sleeper(&self) -> Worker {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--ignored", "--exact", "role", "--test-threads=1"])
            .env(ROLE, "sleeper")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        Worker(spawn_in(cmd, &[procs_file(&self.0)]).expect("spawning a sleeper"))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        topdeck_sched::testing::remove_cgroup(&self.0);
    }
}

fn procs_file(dir: &Path) -> PathBuf {
    ["cgroup.procs", "tasks"]
        .into_iter()
        .map(|f| dir.join(f))
        .find(|p| p.exists())
        .unwrap()
}

/// The probe with `slots` (default when `None`), with the tests' lock held;
/// `None`, said, without root.
fn probe_or_skip(slots: Option<u32>) -> Option<(MutexGuard<'static, ()>, Hierarchy, Probe)> {
    if !root_or_skip("loading BPF programs needs CAP_BPF and CAP_PERFMON") {
        return None;
    }
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let h = Hierarchy::detect().unwrap();
    let probe = Probe::load_with_slots(&h, Some(Flavour::TpBtf), Clock::Ktime, slots).unwrap();
    Some((serial, h, probe))
}

#[test]
fn cgroups_beyond_the_slots_are_counted_in_the_hash() {
    let Some((_serial, h, probe)) = probe_or_skip(Some(1)) else {
        return;
    };
    let groups: Vec<Group> = ["a", "b", "c"].iter().map(|n| Group::new(&h, n)).collect();
    for g in &groups {
        g.run_sleeps(100);
    }
    let totals = probe.read().unwrap();
    let in_hash = groups
        .iter()
        .filter(|g| probe.slot_of(g.id()).is_none())
        .count();
    assert!(
        in_hash >= 2,
        "one slot, three new cgroups: {in_hash} in the hash"
    );
    assert_eq!(
        totals.in_hash,
        totals.cgroups.len() - 1,
        "all but one in the hash"
    );
    for g in &groups {
        let c = totals
            .cgroups
            .get(&g.id())
            .unwrap_or_else(|| panic!("{} not counted: {totals:?}", g.0.display()));
        assert!(c.count >= 200, "{}: {} waits", g.0.display(), c.count);
        assert_eq!(c.buckets.iter().sum::<u64>() + c.zero, c.count);
    }
    assert_eq!(totals.drops[1], 0, "no cgroup was dropped");
}

#[test]
fn a_forgotten_cgroups_slot_starts_the_next_cgroup_from_zero() {
    let Some((_serial, h, probe)) = probe_or_skip(None) else {
        return;
    };
    // A cgroup of the host seen for the first time between the forget and
    // the next one's first switch takes the freed slot instead: try again.
    for attempt in 1..=3 {
        let first = Group::new(&h, &format!("first{attempt}"));
        first.run_sleeps(500);
        let (id, slot) = (first.id(), probe.slot_of(first.id()));
        let before = probe.read().unwrap().cgroups[&id].clone();
        assert!(before.count >= 1000, "{} waits", before.count);
        let slot = slot.expect("a new cgroup gets a slot while there are free ones");
        drop(first);
        probe.forget(id, &[]).unwrap();
        assert_eq!(probe.slot_of(id), None);

        let next = Group::new(&h, &format!("next{attempt}"));
        next.run_sleeps(5);
        if probe.slot_of(next.id()) != Some(slot) {
            eprintln!("attempt {attempt}: slot {slot} went to another new cgroup first");
            continue;
        }
        let after = probe.read().unwrap();
        assert!(
            !after.cgroups.contains_key(&id),
            "the forgotten cgroup is gone"
        );
        let c = &after.cgroups[&next.id()];
        // Five sleeps make tens of waits: far from the thousand inherited
        // from a slot that was not zeroed.
        assert!(
            (10..200).contains(&c.count),
            "{} waits in the new cgroup, {} in the old",
            c.count,
            before.count
        );
        assert!(c.wait_ns < before.wait_ns && c.oncpu_ns < before.oncpu_ns);
        return;
    }
    panic!("in three attempts the freed slot never went to the next new cgroup");
}

#[test]
fn a_cgroup_forgotten_while_it_still_has_tasks_is_placed_again() {
    let Some((_serial, h, probe)) = probe_or_skip(None) else {
        return;
    };
    let group = Group::new(&h, "alive");
    let _sleeper = group.sleeper();
    let id = group.id();
    // Placed in a slot and counted there within `patience`.
    let counted = |what: &str, patience: Duration, waits: u64| {
        let start = std::time::Instant::now();
        while start.elapsed() < patience {
            std::thread::sleep(Duration::from_millis(10));
            let totals = probe.read().unwrap();
            let c = totals.cgroups.get(&id).map_or(0, |c| c.count);
            if c >= waits && probe.slot_of(id).is_some() {
                return;
            }
        }
        panic!("{what}: the sleeper's cgroup is not counted in a slot after {patience:?}");
    };
    counted("before", Duration::from_secs(5), 50);
    // As the agent would if it took the cgroup for gone: the sleeper's task
    // still has the freed slot cached.
    probe.forget(id, &[]).unwrap();
    assert_eq!(probe.slot_of(id), None);
    // Its next switch (the sleeper wakes every millisecond) places it
    // again; a slot kept without checking its owner was found again only
    // by chance, hundreds of milliseconds later, with the waits in between
    // written to a freed slot.
    counted("after the forget", Duration::from_millis(200), 1);
}

#[test]
fn the_agent_publishes_how_many_cgroups_are_beyond_its_slots() {
    let Some((_serial, h, probe)) = probe_or_skip(None) else {
        return;
    };
    drop(probe);
    let agent = AgentGuard::start(AgentConfig {
        interval: Duration::from_millis(200),
        cost_every: None,
        cgroup_slots: Some(1),
        ..AgentConfig::default()
    });
    let groups: Vec<Group> = ["x", "y"].iter().map(|n| Group::new(&h, n)).collect();
    for g in &groups {
        g.run_sleeps(20);
    }
    let placed = |place: &str| match agent
        .snapshot()
        .get("topdeck_sched_cgroups", &[("where", place)])
    {
        Some(Value::Gauge(n)) => *n,
        other => panic!("topdeck_sched_cgroups{{where={place:?}}}: {other:?}"),
    };
    for _ in 0..50 {
        if placed("hash") >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(placed("slot"), 1, "one slot, taken");
    assert!(placed("hash") >= 2, "{} in the hash", placed("hash"));
}

/// Waits counted for `id` over `span`, while its tasks run.
fn waits_over(probe: &Probe, id: u64, span: Duration) -> u64 {
    let count = || {
        probe
            .read()
            .unwrap()
            .cgroups
            .get(&id)
            .map_or(0, |c| c.count)
    };
    let start = count();
    std::thread::sleep(span);
    count() - start
}

#[test]
fn a_cgroup_forgotten_from_the_hash_and_placed_in_a_slot_keeps_every_wait() {
    let Some((_serial, h, probe)) = probe_or_skip(Some(8)) else {
        return;
    };
    // New cgroups until one finds no free slot.
    let mut fillers = Vec::new();
    loop {
        assert!(fillers.len() <= 8, "eight slots, and still free ones");
        let g = Group::new(&h, &format!("fill{}", fillers.len()));
        g.run_sleeps(2);
        let placed = probe.slot_of(g.id()).is_some();
        fillers.push(g);
        if !placed {
            break;
        }
    }
    let group = Group::new(&h, "hashed");
    let _sleeper = group.sleeper();
    let id = group.id();
    assert!(waits_over(&probe, id, Duration::from_millis(300)) >= 50);
    assert_eq!(probe.slot_of(id), None, "no free slot: in the hash");
    // A free slot again (an empty filler's, which nothing takes back), then
    // the sleeper's cgroup forgotten, as the agent does with a cgroup it
    // cannot name, and a new task in it.
    let freed = fillers
        .iter()
        .find(|g| probe.slot_of(g.id()).is_some())
        .expect("a filler in a slot");
    probe.forget(freed.id(), &[]).unwrap();
    probe.forget(id, &[]).unwrap();
    group.run_sleeps(2);
    // The sleeper alone waits about once a millisecond: counted whether its
    // place is the hash again or the freed slot, and never half in each
    // with one half unread.
    let waits = waits_over(&probe, id, Duration::from_millis(300));
    assert!(waits >= 50, "{waits} waits counted in 300 ms");
}

#[test]
fn every_placed_cgroup_is_read_however_many_batches_the_slots_take() {
    // 300 slots of 2,304 bytes per CPU are more than one 1 MiB batch on
    // two CPUs or more.
    let Some((_serial, h, probe)) = probe_or_skip(Some(300)) else {
        return;
    };
    let groups: Vec<Group> = (0..260)
        .map(|i| Group::new(&h, &format!("many{i}")))
        .collect();
    for g in &groups {
        g.run_sleeps(1);
    }
    let totals = probe.read().unwrap();
    let highest = groups.iter().filter_map(|g| probe.slot_of(g.id())).max();
    assert!(highest >= Some(250), "highest slot {highest:?}");
    for g in &groups {
        let c = totals
            .cgroups
            .get(&g.id())
            .unwrap_or_else(|| panic!("{} not read", g.0.display()));
        assert!(c.count >= 2, "{}: {} waits", g.0.display(), c.count);
    }
    assert_eq!(totals.in_slots + totals.in_hash, totals.cgroups.len());
}
