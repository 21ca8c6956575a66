// SPDX-License-Identifier: Apache-2.0
//! Kernel test (root only) of the agent under container churn: thousands
//! of short-lived cgroups, each running a short busy task on CPU 0 next to
//! a latency-sensitive sleeper, while the agent runs with a small registry
//! and a short grace period. The agent must stay up, keep its memory and
//! its series bounded (by retiring gone cgroups and rotating its registry),
//! and name the cgroups it publishes and blames by path.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use topdeck::{Namespace, Value};
use topdeck_procfs::testing::root_or_skip;
use topdeck_sched::verdict::Thresholds;
use topdeck_sched::{Agent, AgentConfig, Hierarchy, REGISTRY_NAME};

const CHURN: Duration = Duration::from_secs(25);
const WORKERS: usize = 6;
const MAX_SERIES: u32 = 8192;

fn rss_kib() -> u64 {
    let s = fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// A child that runs `script` in the cgroup at `procs` (its
/// `cgroup.procs`), pinned to CPU 0; it joins before it execs, so every
/// cycle it spends is the cgroup's.
fn spawn_in(procs: &Path, script: &str) -> std::io::Result<Child> {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    topdeck_sched::testing::spawn_in(cmd, &[procs.to_path_buf()])
}

/// What the agent thread reports after each tick.
struct Report {
    tracked: usize,
    series: u32,
    named: u64,
    unnamed: u64,
    culprits: Vec<String>,
    victims: Vec<String>,
}

#[test]
fn thousands_of_short_lived_cgroups_neither_fill_the_registry_nor_go_unnamed() {
    if !root_or_skip("it loads BPF programs and creates cgroups") {
        return;
    }
    let h = Hierarchy::detect().unwrap();
    let prefix = format!("/topdeck-churn-{}", std::process::id());
    let ns_dir = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Report>();
    let config = AgentConfig {
        dir: Some(ns_dir.path().to_path_buf()),
        interval: Duration::from_millis(250),
        thresholds: Thresholds {
            min_culprit_share: 0.05,
            ..Thresholds::default()
        },
        cost_every: None,
        grace: Duration::from_secs(1),
        max_series: MAX_SERIES,
        // Tests never pin at the default path (they run side by side).
        thread_waits: None,
        ..AgentConfig::default()
    };
    let interval = config.interval;
    let s = stop.clone();
    // Ticks driven here rather than by `run`, to report after each one;
    // an error ends the thread, which the test sees as the agent going down.
    let agent = std::thread::spawn(move || -> Result<(), String> {
        let mut agent = Agent::start(config).map_err(|e| format!("{e:#}"))?;
        while !s.load(Ordering::Relaxed) {
            std::thread::sleep(interval);
            let tick = agent.tick().map_err(|e| format!("{e:#}"))?;
            let (named, unnamed) = agent.names_seen();
            let r = Report {
                tracked: agent.tracked_cgroups(),
                series: agent.published_series(),
                named,
                unnamed,
                culprits: tick
                    .verdicts
                    .iter()
                    .flat_map(|v| v.culprits.iter().map(|c| c.0.clone()))
                    .collect(),
                victims: tick.verdicts.iter().map(|v| v.victim.clone()).collect(),
            };
            if tx.send(r).is_err() {
                break;
            }
        }
        Ok(())
    });
    let first = rx.recv_timeout(Duration::from_secs(10));
    assert!(first.is_ok(), "the agent did not start: {:?}", agent.join());

    // The victim: a sleeper in a cgroup of its own on CPU 0, quiet for a
    // few windows so that the judge has a baseline.
    let victim_dir = h.dir(&format!("{prefix}-victim"));
    fs::create_dir(&victim_dir).unwrap();
    let mut victim = spawn_in(
        &victim_dir.join("cgroup.procs"),
        "while :; do sleep 0.001; done",
    )
    .unwrap();
    std::thread::sleep(Duration::from_secs(2));

    let made = Arc::new(AtomicU64::new(0));
    let churn_stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (h, prefix, made, churn_stop) =
                (h.clone(), prefix.clone(), made.clone(), churn_stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !churn_stop.load(Ordering::Relaxed) {
                    let dir = h.dir(&format!("{prefix}-{w}-{n}"));
                    n += 1;
                    fs::create_dir(&dir).unwrap();
                    // A heavy neighbour, as in noisy_neighbour.rs: with equal
                    // weights the sleeper would preempt it at once.
                    let (file, text) = match h.cpu_v1 {
                        true => ("cpu.shares", "262144"),
                        false => ("cpu.weight", "10000"),
                    };
                    let _ = fs::write(dir.join(file), text);
                    // About 10 ms of shell arithmetic, then gone.
                    if let Ok(mut c) = spawn_in(
                        &dir.join("cgroup.procs"),
                        "i=0; while [ $i -lt 12000 ]; do i=$((i+1)); done",
                    ) {
                        let _ = c.wait();
                    }
                    topdeck_sched::testing::remove_cgroup(&dir);
                    made.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    let started = Instant::now();
    let mut reports = Vec::new();
    let mut rss = Vec::new();
    let mut rotated_files = std::collections::HashSet::new();
    let mut labels = std::collections::HashSet::new();
    while started.elapsed() < CHURN {
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(r) => reports.push(r),
            Err(_) => {
                churn_stop.store(true, Ordering::Relaxed);
                panic!("the agent stopped ticking: {:?}", agent.join());
            }
        }
        rss.push((started.elapsed(), rss_kib()));
        // What a reader sees: exactly the newest live agent file.
        let listing = Namespace::at(ns_dir.path()).list();
        let live: Vec<_> = listing
            .entries
            .iter()
            .filter(|e| e.registry_name == REGISTRY_NAME)
            .collect();
        if let Some(e) = live.iter().max_by_key(|e| e.created_unix_ns) {
            rotated_files.insert(e.path.clone());
            if let Ok(snap) = e.open().and_then(|mut r| r.snapshot()) {
                for (info, _) in snap.iter() {
                    if info.name == "topdeck_runq_latency_seconds" {
                        for (k, v) in &info.labels {
                            if k == "cgroup" {
                                labels.insert(v.clone());
                            }
                        }
                    }
                }
            }
        }
    }
    churn_stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let _ = victim.kill();
    let _ = victim.wait();
    topdeck_sched::testing::remove_cgroup(&victim_dir);

    // The final state as a reader sees it.
    let listing = Namespace::at(ns_dir.path()).list();
    let agents: Vec<_> = listing
        .entries
        .iter()
        .filter(|e| e.registry_name == REGISTRY_NAME)
        .collect();
    let snap = agents[0].open().unwrap().snapshot().unwrap();
    let counter = |name: &str, label: Option<(&str, &str)>| -> u64 {
        snap.iter()
            .filter(|(i, _)| i.name == name)
            .filter(|(i, _)| {
                label.is_none_or(|(k, v)| i.labels.iter().any(|(a, b)| a == k && b == v))
            })
            .map(|(_, v)| match v {
                Value::Counter(n) => *n,
                _ => 0,
            })
            .sum()
    };
    let rotations = counter("topdeck_agent_rotations_total", None);
    let unpublished = counter("topdeck_agent_unpublished_total", None);
    stop.store(true, Ordering::Relaxed);
    drop(rx);
    let ended = agent.join().unwrap();

    let made = made.load(Ordering::Relaxed);
    let last = reports.last().unwrap();
    let max_series = reports.iter().map(|r| r.series).max().unwrap();
    let max_tracked = reports.iter().map(|r| r.tracked).max().unwrap();
    let (named, unnamed) = (last.named, last.unnamed);
    let culprits: Vec<&String> = reports.iter().flat_map(|r| &r.culprits).collect();
    let victims: Vec<&String> = reports.iter().flat_map(|r| &r.victims).collect();
    let churn_culprits = culprits
        .iter()
        .filter(|c| c.starts_with(&format!("{prefix}-")))
        .count();
    let ours: Vec<&String> = labels.iter().filter(|l| l.starts_with(&prefix)).collect();
    let rss_mid = rss
        .iter()
        .find(|(t, _)| *t >= CHURN / 4)
        .map_or(0, |(_, k)| *k);
    let rss_max = rss.iter().map(|(_, k)| *k).max().unwrap();
    let rss_end = rss.last().unwrap().1;
    eprintln!(
        "{made} cgroups in {:?}; agent: {} ticks, at most {max_tracked} cgroups tracked and \
         {max_series} of {MAX_SERIES} series, {rotations} rotations ({} files seen), \
         {unpublished} unpublished; ids named {named}, unresolved {unnamed}; \
         {} churn cgroups published by path, unresolved label published: {}; \
         verdicts named {} culprits ({churn_culprits} churn cgroups), \
         id: labels {}; RSS {rss_mid} KiB at a quarter, {rss_max} KiB max, {rss_end} KiB at the end",
        CHURN,
        reports.len(),
        rotated_files.len(),
        ours.len(),
        labels.contains(topdeck_sched::agent::UNRESOLVED_LABEL),
        culprits.len(),
        culprits
            .iter()
            .chain(victims.iter())
            .filter(|c| c.starts_with("id:"))
            .count(),
    );
    assert_eq!(ended, Ok(()), "the agent ran to the end");
    assert!(made >= 1000, "only {made} cgroups were made");
    assert!(
        max_series <= MAX_SERIES,
        "series beyond the registry's capacity"
    );
    assert!(rotations >= 1, "the registry never rotated");
    assert_eq!(agents.len(), 1, "old registry files are removed");
    assert!(
        max_tracked < 600,
        "tracked cgroups are bounded by the live set and the grace period: {max_tracked}"
    );
    assert!(
        rss_max < rss_mid + 64 * 1024,
        "RSS grew from {rss_mid} KiB to {rss_max} KiB"
    );
    assert!(
        named >= made / 2,
        "most churn cgroups are seen and named: {named} of {made}"
    );
    assert!(
        unnamed * 50 <= named,
        "at most 2% of cgroups go unnamed: {unnamed} of {}",
        named + unnamed
    );
    assert!(
        culprits
            .iter()
            .chain(victims.iter())
            .all(|c| c.starts_with('/')),
        "verdicts name paths: {culprits:?} {victims:?}"
    );
    assert!(
        churn_culprits > 0,
        "a churn cgroup was named as a noisy neighbour: {culprits:?}"
    );
}
