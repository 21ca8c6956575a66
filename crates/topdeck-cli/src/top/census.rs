// SPDX-License-Identifier: Apache-2.0
//! The host as it runs, from one pass's sources and the agent's view: the
//! processes (each with its sources, CPU and threads) and the containers
//! they run in (each with what it used and was given of the CPU, its
//! run-queue latency, whom it waited behind, its verdict and its apps'
//! latency). A container is a cgroup as the scheduler probe keys tasks
//! (`topdeck_procfs::cgroup::cgroup_of`), so that the agent's rows and the
//! processes' meet on one path; the root cgroup is the `system` row.
//!
//! Costs per pass: per container, three or four small cgroupfs files; per
//! process listed, its `stat` and one `sched_getaffinity`. The system
//! row lists only processes with a source, not every task in the root.
//!
//! Of a recorded moment, procfs and cgroupfs say nothing (they describe
//! the host now): a process is placed by the container its source named
//! when recorded, and what only they tell (a process's CPU and threads, a
//! container's limits, its other processes) is left unknown.

use std::collections::HashMap;
use std::time::Instant;

use topdeck_procfs::usage::{self, Usage};
use topdeck_sched::cgroupfs::{self, Hierarchy};
use topdeck_sched::verdict::VerdictKind;
use topdeck_sources::latency::is_latency;

use super::harvest::{
    AppLatency, ContainerRow, ProcessRow, Reading, RegistryHarvest, SchedulerHarvest, State, SYSTEM,
};

/// What the census keeps between passes.
pub struct Census {
    /// The host's processes and cgroups; `None` for recorded moments.
    procfs: Option<Procfs>,
}

/// What the census reads of the host as it runs, and keeps of it: each
/// process's last CPU reading.
struct Procfs {
    hierarchy: Option<Hierarchy>,
    last: HashMap<u32, (Usage, Instant)>,
}

impl Census {
    /// A census that has read nothing yet; of the host as it runs when
    /// `procfs`, else of recorded moments.
    pub fn new(procfs: bool) -> Self {
        Self {
            procfs: procfs.then(|| Procfs {
                hierarchy: Hierarchy::detect().ok(),
                last: HashMap::new(),
            }),
        }
    }

    /// This pass's processes and containers.
    pub fn pass(
        &mut self,
        registries: &[RegistryHarvest],
        sched: Option<&SchedulerHarvest>,
    ) -> (Vec<ProcessRow>, Vec<ContainerRow>) {
        let mut procs: Vec<ProcessRow> = Vec::new();
        let mut by_pid: HashMap<u32, usize> = HashMap::new();
        for (i, r) in registries.iter().enumerate() {
            match (r.state, r.pid) {
                (State::Alive, Some(pid)) => {
                    let at = *by_pid.entry(pid).or_insert_with(|| {
                        procs.push(process(pid, r.process.clone(), r.uid));
                        procs.len() - 1
                    });
                    procs[at].sources.push(i);
                    procs[at].source_paths.push(r.path.clone());
                }
                _ => procs.push(ProcessRow {
                    key: r.path.clone(),
                    state: r.state,
                    container: r.container.clone(),
                    sources: vec![i],
                    source_paths: vec![r.path.clone()],
                    ..process(r.pid.unwrap_or(0), r.process.clone(), r.uid)
                }),
            }
        }
        let mut rows: Vec<ContainerRow> = Vec::new();
        let mut by_cgroup: HashMap<String, usize> = HashMap::new();
        let mut agent_cpu: HashMap<usize, f64> = HashMap::new();
        if let Some(s) = sched {
            for c in &s.cgroups {
                let at = row_at(&mut rows, &mut by_cgroup, &c.container, &c.cgroup);
                rows[at].runq = c.runq.clone();
                rows[at].behind = c.behind.clone();
                if let Some(cpu) = c.cpu {
                    agent_cpu.insert(at, cpu);
                }
            }
            for v in &s.verdicts {
                let victim = if v.victim == "/" {
                    SYSTEM
                } else {
                    v.victim.as_str()
                };
                if let Some(&at) = by_cgroup.get(victim) {
                    // A noisy neighbour or own quota outranks a suspect.
                    let keep = rows[at]
                        .verdict
                        .as_ref()
                        .is_some_and(|k| k.kind != VerdictKind::Suspect);
                    if !keep {
                        rows[at].verdict = Some(v.clone());
                    }
                }
            }
        }
        // Each running process in the container its cgroup names (or, when
        // recorded, the container its source named then).
        for p in procs.iter_mut().filter(|p| p.state == State::Alive) {
            let Some(pid) = p.pid else { continue };
            let (cgroup, container) = match &self.procfs {
                Some(_) => match topdeck_procfs::cgroup::cgroup_of(pid).as_deref() {
                    Some("/") => (SYSTEM.to_owned(), SYSTEM.to_owned()),
                    Some(c) => (c.to_owned(), topdeck_procfs::cgroup::container_name(c)),
                    None => continue,
                },
                None => recorded_place(p, registries, &rows),
            };
            (p.cgroup, p.container) = (Some(cgroup), Some(container));
        }
        for p in &procs {
            if let (Some(cg), Some(name)) = (&p.cgroup, &p.container) {
                row_at(&mut rows, &mut by_cgroup, name, cg);
            }
        }
        // Each container's limits and the processes it has without a source.
        let mut complete = vec![false; rows.len()];
        let hierarchy = self.procfs.as_ref().and_then(|p| p.hierarchy.as_ref());
        for (at, row) in rows.iter_mut().enumerate() {
            if row.is_system() {
                continue;
            }
            let Some(dir) = hierarchy.and_then(|h| h.find(&row.cgroup)) else {
                continue;
            };
            let Some(limits) = cgroupfs::limits(&dir) else {
                continue;
            };
            (row.weight, row.quota) = (limits.weight, limits.quota);
            complete[at] = limits.pids.len() < cgroupfs::MAX_PIDS;
            for pid in limits.pids {
                if by_pid.contains_key(&pid) {
                    continue;
                }
                let mut p = process(pid, String::new(), None);
                (p.cgroup, p.container) = (Some(row.cgroup.clone()), Some(row.container.clone()));
                by_pid.insert(pid, procs.len());
                procs.push(p);
            }
        }
        self.measure(&mut procs);
        // Each container's processes, their CPU and the CPUs they may use.
        let mut members: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, p) in procs.iter().enumerate() {
            if let Some(cg) = &p.cgroup {
                members.entry(cg.as_str()).or_default().push(i);
            }
        }
        for (at, row) in rows.iter_mut().enumerate() {
            let mine = members
                .get(row.cgroup.as_str())
                .map_or(&[][..], Vec::as_slice);
            let alive = || {
                mine.iter()
                    .map(|&i| &procs[i])
                    .filter(|p| p.state == State::Alive)
            };
            row.processes = mine.iter().map(|&i| procs[i].key.clone()).collect();
            // Its processes' own CPU time, read on this pass's clock, when
            // all of them are listed; else the agent's on-CPU time (the
            // system row, which lists only processes with a source): a
            // counter published in steps, which a reader on another period
            // sees jitter.
            row.cpu = match complete[at] {
                true => Some(alive().filter_map(|p| p.cpu).sum()),
                false => agent_cpu.get(&at).copied(),
            };
            let mut allowed: Vec<usize> = alive()
                .filter(|_| self.procfs.is_some())
                .filter_map(|p| usage::cpus_allowed(p.pid?))
                .flatten()
                .collect();
            allowed.sort_unstable();
            allowed.dedup();
            row.cpus = (!allowed.is_empty()).then(|| usage::cpu_list(&allowed));
            row.latency = busiest_latency(
                mine.iter()
                    .flat_map(|&i| procs[i].sources.iter().map(|&s| &registries[s])),
            );
        }
        (procs, rows)
    }

    /// Reads each running process's CPU time and threads; its CPU use is
    /// measured against the last pass's reading of the same process.
    /// Recorded moments have neither.
    fn measure(&mut self, procs: &mut [ProcessRow]) {
        let Some(procfs) = &mut self.procfs else {
            return;
        };
        let now = Instant::now();
        let mut seen = HashMap::with_capacity(procs.len());
        for p in procs.iter_mut().filter(|p| p.state == State::Alive) {
            let Some(pid) = p.pid else { continue };
            let Some(u) = usage::usage(pid) else { continue };
            p.key = format!("{pid}:{}", u.start_ticks);
            p.threads = Some(u.threads);
            if p.command.is_empty() {
                p.command = u.comm.clone();
            }
            p.cpu = procfs
                .last
                .get(&pid)
                .and_then(|(before, at)| u.cpus_since(before, now.duration_since(*at)));
            seen.insert(pid, (u, now));
        }
        procfs.last = seen;
    }
}

/// A recorded running process's cgroup and container: the container its
/// first source named (the system's when none), at the agent's cgroup of
/// that name when the agent published one; else known by its name alone.
fn recorded_place(
    p: &ProcessRow,
    registries: &[RegistryHarvest],
    rows: &[ContainerRow],
) -> (String, String) {
    let named = p
        .sources
        .iter()
        .find_map(|&i| registries.get(i)?.container.clone());
    match named {
        None => (SYSTEM.to_owned(), SYSTEM.to_owned()),
        Some(name) => {
            let cgroup = rows
                .iter()
                .find(|r| r.container == name && !r.is_system())
                .map_or_else(|| name.clone(), |r| r.cgroup.clone());
            (cgroup, name)
        }
    }
}

/// The row of `cgroup`, made (named `name`) when it is new.
fn row_at(
    rows: &mut Vec<ContainerRow>,
    index: &mut HashMap<String, usize>,
    name: &str,
    cgroup: &str,
) -> usize {
    *index.entry(cgroup.to_owned()).or_insert_with(|| {
        rows.push(ContainerRow::new(name.to_owned(), cgroup.to_owned()));
        rows.len() - 1
    })
}

/// A running process's row before it is measured.
fn process(pid: u32, command: String, uid: Option<u32>) -> ProcessRow {
    ProcessRow {
        key: pid.to_string(),
        pid: Some(pid).filter(|&p| p != 0),
        command,
        cpu: None,
        threads: None,
        uid,
        cgroup: None,
        container: None,
        state: State::Alive,
        sources: Vec::new(),
        source_paths: Vec::new(),
    }
}

/// The busiest latency histogram (most observations per second over the
/// interval) among `sources`' series.
fn busiest_latency<'a>(sources: impl Iterator<Item = &'a RegistryHarvest>) -> Option<AppLatency> {
    let mut best: Option<(f64, AppLatency)> = None;
    // The agent's run-queue histograms are not an app's latency.
    for r in sources.filter(|r| r.registry != super::agent::AGENT_REGISTRY) {
        for s in &r.series {
            if !is_latency(&s.meta.name, &s.meta.unit) {
                continue;
            }
            let (rate, p99, cpu_wait) = match s.reading {
                Reading::Histogram {
                    rate: Some(rate),
                    p99: Some(p99),
                    cpu_wait,
                    ..
                } => (rate, p99, cpu_wait),
                Reading::Buckets {
                    rate: Some(rate),
                    p99: Some(p99),
                    ..
                } => (rate, p99, None),
                _ => continue,
            };
            if rate > 0.0 && best.as_ref().is_none_or(|(b, _)| rate > *b) {
                let app = AppLatency {
                    process: r.process.clone(),
                    metric: s.id(),
                    p99,
                    cpu_wait,
                };
                best = Some((rate, app));
            }
        }
    }
    best.map(|(_, a)| a)
}
