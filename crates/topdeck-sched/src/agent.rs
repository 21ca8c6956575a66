// SPDX-License-Identifier: Apache-2.0
//! The agent: reads the probe's maps once per interval and publishes them as
//! ordinary topdeck metrics in a registry named `topdeck-agent`, with the
//! verdicts of [`crate::verdict`].
//!
//! Published metrics (labels in braces):
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `topdeck_runq_latency_seconds{cgroup,container}` | histogram | run-queue waits |
//! | `topdeck_sched_switch_out_total{cgroup,cause}` | counter | switch-outs while runnable, by who ran next: `same_cgroup`, `other_cgroup`, `system` |
//! | `topdeck_sched_wait_behind_seconds_total{cgroup,culprit}` | gauge (f64) | cumulative wait charged to the cgroup that held the CPU before |
//! | `topdeck_sched_oncpu_seconds_total{cgroup}` | gauge (f64) | cumulative time on CPU |
//! | `topdeck_sched_verdict{cgroup,culprit,kind}` | gauge | 1 while the verdict holds, else 0 |
//! | `topdeck_sched_verdict_p99_seconds{cgroup,when}` | gauge (f64) | evidence: `baseline` and `now` p99 |
//! | `topdeck_sched_verdict_share{cgroup,culprit}` | gauge (f64) | evidence: share of the wait behind the culprit |
//! | `topdeck_bpf_run_ns_per_event{program}` | gauge (f64) | the probe's own cost, measured every `cost_every` |
//! | `topdeck_sched_dropped_total{reason}` | counter | samples lost or not measured |
//! | `topdeck_agent_unpublished_total{what}` | counter | series the registry had no room for |
//! | `topdeck_agent_rotations_total` | counter | fresh registry files started (see below) |
//!
//! Histograms are rebuilt from the kernel's bucket counts (each bucket's
//! longest value, as often as the bucket grew): the buckets are exact,
//! `sum` is an upper bound within one bucket width (≈9%).
//!
//! # Cgroup names
//!
//! Series are labelled with the cgroup's path, learnt when the cgroup is
//! made (see [`CgroupNames`]), not when its id first shows up in a map
//! read: by then a short-lived cgroup is gone and no walk can name it. A
//! cgroup whose name is still unknown is [`CgroupName::Unresolved`]: its
//! figures go to the one series set `cgroup="(unresolved)"`, it is never a
//! victim in a verdict, and as a culprit it counts towards the share behind
//! other cgroups but is not named. Series are keyed by path, so a cgroup
//! removed and made again at the same path (a restarted service) continues
//! its series: cumulative per path.
//!
//! # Churn: retiring cgroups and rotating the registry
//!
//! A registry's descriptors are append-only (docs/FORMAT.md): a series
//! cannot be removed, and its labels cannot be changed, so a series cannot
//! honestly be handed to another cgroup. On a host that makes and removes
//! cgroups all day the agent therefore:
//!
//! 1. *retires* a cgroup once it has been gone (its directory removed, or
//!    never named) for [`AgentConfig::grace`] (default 30 s, two scrapes at
//!    15 s) without new figures: it leaves the kernel maps and the judge,
//!    and its series stop changing. The grace period is what lets every
//!    scraper see the last values.
//! 2. *rotates* when the registry is three quarters full, or when a series
//!    did not fit, and retired series are what fills it: a fresh registry
//!    file (same name, `topdeck-agent`, same pid, newer `created_unix_ns`)
//!    is built with the live cgroups' series and every global one, *values
//!    carried over* (counters, gauges and histogram buckets copied from the
//!    old file), and the old file is removed. The exposition of `serve`
//!    (labelled by process, pid and registry name, not by file) continues
//!    without a counter reset; `topdeck sched` and `topdeck top` pick the
//!    newest live agent registry. Retired series are simply not carried.
//!    A reader that lists the namespace in the milliseconds while the new
//!    file is filled may see it partly filled, or both files: it is as if
//!    it had read a moment earlier with fewer cgroups, or read one of two
//!    equal files.
//! 3. If the live set alone does not fit, what does not fit is counted in
//!    `topdeck_agent_unpublished_total{what}` and said once on stderr; the
//!    agent never stops for a full registry. Verdicts are still judged for
//!    every cgroup and returned in [`Tick::verdicts`].
//!
//! Memory stays bounded by the live set plus what was removed within the
//! grace period: names, kernel map entries, judge history and series of
//! retired cgroups are all released.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use topdeck::{Counter, Gauge, GaugeF64, Histogram, HistogramValue, Registry};

use crate::buckets::{BucketTable, SCHEMA};
use crate::cgroupfs::{self, CgroupNames, Hierarchy, Throttling};
use crate::error::{Error, ErrorKind, Result};
use crate::inprogress::InProgress;
use crate::maps::{Totals, CAUSES, CGROUP_SYSTEM, DROPS, NR_CAUSES, NR_DROPS};
use crate::names::container_name;
use crate::probe::{BpfStats, Clock, Flavour, Probe, ProgramStats};
use crate::verdict::{Culprit, Judge, Thresholds, Verdict};

/// The registry name the agent publishes under.
pub const REGISTRY_NAME: &str = "topdeck-agent";

/// The `cgroup` (and `culprit`) label of cgroups whose path is unknown.
pub const UNRESOLVED_LABEL: &str = "(unresolved)";

/// What `topdeck_agent_unpublished_total` counts, by `what`.
pub const UNPUBLISHED: [&str; 5] = ["cgroup", "wait_behind", "verdict", "evidence", "cost"];
const U_CGROUP: usize = 0;
const U_WAIT_BEHIND: usize = 1;
const U_VERDICT: usize = 2;
const U_EVIDENCE: usize = 3;
const U_COST: usize = 4;

/// Rotate when this share of the registry's metrics is used (and retired
/// series would free at least [`ROTATE_GAIN`] of it).
const ROTATE_AT: f64 = 0.75;
/// The least share of the registry a rotation must free to be worth a new
/// file: rotations stay rare however the live set hovers.
const ROTATE_GAIN: f64 = 0.125;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Namespace directory (default: `TOPDECK_DIR`, else the host's).
    pub dir: Option<PathBuf>,
    /// Time between map reads.
    pub interval: Duration,
    /// Verdict thresholds.
    pub thresholds: Thresholds,
    /// How often to measure the probe's own cost (BPF run-time stats are on
    /// for one interval each time); `None` never.
    pub cost_every: Option<Duration>,
    /// Force tp_btf or raw_tp.
    pub flavour: Option<Flavour>,
    /// Where the probe's timestamps come from.
    pub clock: Clock,
    /// How long a cgroup stays published after it is gone, before it is
    /// retired: at least two scrape intervals, so that every scraper sees
    /// its last values.
    pub grace: Duration,
    /// Metrics the registry holds; a rotation makes room when retired
    /// cgroups fill it.
    pub max_series: u32,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            dir: None,
            interval: Duration::from_secs(1),
            thresholds: Thresholds::default(),
            cost_every: Some(Duration::from_secs(60)),
            flavour: None,
            clock: Clock::default(),
            grace: Duration::from_secs(30),
            max_series: 16_384,
        }
    }
}

/// A cgroup as the agent names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CgroupName {
    /// Idle CPUs, kernel threads and root-cgroup tasks, as a culprit.
    System,
    /// A cgroup path, `/` or `/a/b`.
    Path(String),
    /// A cgroup that was gone before its path could be learnt.
    Unresolved,
}

impl CgroupName {
    /// The label value it is published under.
    pub fn label(&self) -> &str {
        match self {
            Self::System => "system",
            Self::Path(p) => p,
            Self::Unresolved => UNRESOLVED_LABEL,
        }
    }
}

/// One cgroup id the agent follows.
#[derive(Debug)]
struct Tracked {
    name: CgroupName,
    /// When it was first found gone; `None` while it exists.
    gone_since: Option<Instant>,
}

/// One label's series; shared by every id with that label.
struct CgroupMetrics {
    hist: Histogram,
    switch_out: [Counter; NR_CAUSES],
    oncpu: GaugeF64,
    /// What the histogram holds, to carry it to a new registry.
    zero: u64,
    buckets: Vec<u64>,
}

/// What one tick saw.
#[derive(Debug, Clone, Default)]
pub struct Tick {
    /// Verdicts in force after this tick.
    pub verdicts: Vec<Verdict>,
    /// Cgroups with waits in this tick.
    pub active_cgroups: usize,
}

/// The registry file being written and what is used of it.
struct Publisher {
    registry: Registry,
    used: u32,
    capacity: u32,
    /// A series did not fit since the last rotation.
    full: bool,
}

const HELP_RUNQ: &str = "Time runnable tasks of the cgroup waited for a CPU (run-queue latency).";
const HELP_SWITCH: &str =
    "Times a task of the cgroup lost the CPU while still runnable, by who ran next.";
const HELP_ONCPU: &str = "Time the cgroup's tasks spent on a CPU since the agent started.";
const HELP_WAIT_BEHIND: &str = "Run-queue wait of the cgroup charged to the cgroup that held the CPU just before it ran (system: idle or kernel).";
const HELP_VERDICT: &str = "1 while the verdict holds: the cgroup's run-queue latency rose because of the culprit (noisy_neighbour) or its own CPU quota (own_quota).";
const HELP_DROPS: &str = "Scheduler samples lost or not measured, by reason.";
const HELP_UNPUBLISHED: &str =
    "Series the agent could not publish because its registry was full, by what they were.";
const HELP_ROTATIONS: &str =
    "Times the agent started a fresh registry file to drop the series of retired cgroups.";
const HELP_COST: &str = "Mean run time of the probe's BPF program per event, from kernel BPF stats (enabled only while measuring).";
const EVIDENCE_P99: &str = "topdeck_sched_verdict_p99_seconds";
const HELP_EVIDENCE_P99: &str =
    "Evidence of a verdict: run-queue p99 of the cgroup, baseline and in the last window.";
const EVIDENCE_SHARE: &str = "topdeck_sched_verdict_share";
const HELP_EVIDENCE_SHARE: &str =
    "Evidence of a verdict: share of the cgroup's wait behind the culprit in the last window.";

/// Evidence gauges: (metric, victim, label name, label value).
type EvidenceKey = (&'static str, String, &'static str, String);

/// The running agent: probe, registry and state between ticks.
pub struct Agent {
    config: AgentConfig,
    probe: Probe,
    out: Publisher,
    hierarchy: Hierarchy,
    names: CgroupNames,
    table: BucketTable,
    judge: Judge,
    in_progress: InProgress,
    prev: Totals,
    tracked: HashMap<u64, Tracked>,
    series: HashMap<String, CgroupMetrics>,
    wait_behind: HashMap<(String, String), GaugeF64>,
    verdict_gauges: HashMap<(String, String, &'static str), Gauge>,
    evidence: HashMap<EvidenceKey, GaugeF64>,
    active: HashSet<(String, String, &'static str)>,
    throttling: HashMap<u64, Throttling>,
    drops: Vec<Counter>,
    unpublished: Vec<Counter>,
    rotations: Counter,
    said_full: bool,
    rotated_at: Option<Instant>,
    named: u64,
    unnamed: u64,
    recursion_misses: u64,
    cost: HashMap<String, GaugeF64>,
    measuring: Option<(BpfStats, Vec<ProgramStats>)>,
    last_cost: Option<Instant>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("probe", &self.probe)
            .field("registry", &self.out.registry.path())
            .finish_non_exhaustive()
    }
}

fn reg_err(what: String) -> impl FnOnce(topdeck::Error) -> Error {
    move |e| Error::with_source(ErrorKind::Registry, what, e)
}

fn build_registry(config: &AgentConfig) -> Result<Registry> {
    let mut b = Registry::builder()
        .name(REGISTRY_NAME)
        .metrics(config.max_series)
        .shards(2)
        .shard_bytes(32 << 20)
        .string_bytes(4 << 20)
        .gauge_bytes(1 << 20);
    if let Some(d) = &config.dir {
        b = b.dir(d);
    }
    b.build().map_err(|e| {
        crate::nsdir::registry_error(
            config.dir.as_deref(),
            "creating the topdeck-agent registry",
            e,
        )
    })
}

impl Publisher {
    fn new(registry: Registry, capacity: u32) -> Self {
        Self {
            registry,
            used: 0,
            capacity,
            full: false,
        }
    }

    /// Notes the outcome of one registration.
    fn note<T>(&mut self, r: topdeck::Result<T>) -> topdeck::Result<T> {
        match &r {
            Ok(_) => self.used += 1,
            Err(e) if e.kind() == topdeck::ErrorKind::RegistryFull => self.full = true,
            Err(_) => {}
        }
        r
    }

    fn counter(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
    ) -> topdeck::Result<Counter> {
        let r = self.registry.counter(name, labels, help, "");
        self.note(r)
    }

    fn gauge(&mut self, name: &str, labels: &[(&str, &str)], help: &str) -> topdeck::Result<Gauge> {
        let r = self.registry.gauge(name, labels, help, "");
        self.note(r)
    }

    fn gauge_f64(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
        unit: &str,
    ) -> topdeck::Result<GaugeF64> {
        let r = self.registry.gauge_f64(name, labels, help, unit);
        self.note(r)
    }

    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
    ) -> topdeck::Result<Histogram> {
        let r = self.registry.histogram_with(
            name,
            labels,
            help,
            "seconds",
            BucketTable::topdeck_buckets(),
        );
        self.note(r)
    }

    /// The agent's own counters, in this order: drops (the kernel's
    /// reasons, then recursion misses), unpublished, rotations.
    fn globals(&mut self) -> topdeck::Result<(Vec<Counter>, Vec<Counter>, Counter)> {
        let mut drops = Vec::new();
        for reason in DROPS.iter().chain(["recursion_miss"].iter()) {
            drops.push(self.counter(
                "topdeck_sched_dropped_total",
                &[("reason", reason)],
                HELP_DROPS,
            )?);
        }
        let mut unpublished = Vec::new();
        for what in UNPUBLISHED {
            unpublished.push(self.counter(
                "topdeck_agent_unpublished_total",
                &[("what", what)],
                HELP_UNPUBLISHED,
            )?);
        }
        let rotations = self.counter("topdeck_agent_rotations_total", &[], HELP_ROTATIONS)?;
        Ok((drops, unpublished, rotations))
    }

    fn cgroup(&mut self, path: &str, nr_buckets: usize) -> topdeck::Result<CgroupMetrics> {
        let container = container_name(path);
        let hist = self.histogram(
            "topdeck_runq_latency_seconds",
            &[("cgroup", path), ("container", &container)],
            HELP_RUNQ,
        )?;
        let mut switch_out = Vec::new();
        for cause in CAUSES {
            switch_out.push(self.counter(
                "topdeck_sched_switch_out_total",
                &[("cgroup", path), ("cause", cause)],
                HELP_SWITCH,
            )?);
        }
        let oncpu = self.gauge_f64(
            "topdeck_sched_oncpu_seconds_total",
            &[("cgroup", path)],
            HELP_ONCPU,
            "seconds",
        )?;
        let Ok(switch_out) = <[Counter; NR_CAUSES]>::try_from(switch_out) else {
            unreachable!("one counter per cause");
        };
        Ok(CgroupMetrics {
            hist,
            switch_out,
            oncpu,
            zero: 0,
            buckets: vec![0; nr_buckets],
        })
    }
}

impl Agent {
    /// Loads the probe and creates the registry.
    pub fn start(config: AgentConfig) -> Result<Self> {
        let hierarchy = Hierarchy::detect()?;
        let probe = Probe::load_with(&hierarchy, config.flavour, config.clock)?;
        let mut out = Publisher::new(build_registry(&config)?, config.max_series);
        let (drops, unpublished, rotations) = out
            .globals()
            .map_err(reg_err("registering the agent's own counters".into()))?;
        // Started before the first map read, so that cgroups made from now
        // on are named the moment they appear.
        let (names, why) = CgroupNames::watching(hierarchy.clone());
        if let Some(why) = why {
            eprintln!("topdeck agent: cannot watch {} for new cgroups ({why}); naming them by walks, so cgroups shorter than an interval may stay unresolved", hierarchy.mount.display());
        }
        Ok(Self {
            table: probe.buckets().clone(),
            judge: Judge::new(config.thresholds.clone()),
            in_progress: InProgress::new(),
            names,
            config,
            probe,
            out,
            hierarchy,
            prev: Totals::default(),
            tracked: HashMap::new(),
            series: HashMap::new(),
            wait_behind: HashMap::new(),
            verdict_gauges: HashMap::new(),
            evidence: HashMap::new(),
            active: HashSet::new(),
            throttling: HashMap::new(),
            drops,
            unpublished,
            rotations,
            said_full: false,
            rotated_at: None,
            named: 0,
            unnamed: 0,
            recursion_misses: 0,
            cost: HashMap::new(),
            measuring: None,
            last_cost: None,
        })
    }

    /// The probe the agent runs.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// The registry file it publishes to (it changes when the agent rotates).
    pub fn registry_path(&self) -> &std::path::Path {
        self.out.registry.path()
    }

    /// Cgroup ids followed now: live ones and those within their grace period.
    pub fn tracked_cgroups(&self) -> usize {
        self.tracked.len()
    }

    /// Cgroup ids named at first sight, and those that could not be.
    pub fn names_seen(&self) -> (u64, u64) {
        (self.named, self.unnamed)
    }

    /// Metrics registered in the current registry file.
    pub fn published_series(&self) -> u32 {
        self.out.used
    }

    /// Ticks every interval until `stop` is set, calling `each` after each tick.
    pub fn run(&mut self, stop: &AtomicBool, mut each: impl FnMut(&Tick)) -> Result<()> {
        let mut next = Instant::now() + self.config.interval;
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if next > now {
                // Sleep in short steps so that a stop request is seen promptly.
                std::thread::sleep((next - now).min(Duration::from_millis(100)));
                continue;
            }
            next += self.config.interval;
            let tick = self.tick()?;
            each(&tick);
        }
        Ok(())
    }

    /// Follows `id` from now on, named as it is now: called for every id
    /// of a map read before anything else, so that a name is looked up
    /// while the cgroup is most likely still there.
    fn track(&mut self, id: u64) {
        if self.tracked.contains_key(&id) {
            return;
        }
        let name = match id {
            CGROUP_SYSTEM => CgroupName::System,
            _ => match self.names.path(id) {
                Some(p) => CgroupName::Path(p.to_string()),
                None => CgroupName::Unresolved,
            },
        };
        // A cgroup nobody could name is gone (or beyond every bound):
        // its grace period starts now.
        let gone_since = (name == CgroupName::Unresolved).then(Instant::now);
        match name {
            CgroupName::Path(_) => self.named += 1,
            CgroupName::Unresolved => self.unnamed += 1,
            CgroupName::System => {}
        }
        self.tracked.insert(id, Tracked { name, gone_since });
    }

    fn name_of(&self, id: u64) -> &CgroupName {
        &self.tracked[&id].name
    }

    /// What `victim`'s wait behind cgroup id `culprit` is charged to. An
    /// id no longer tracked (a culprit of a wait in progress at the last
    /// read, retired since) is unresolved.
    fn culprit(&self, victim: u64, culprit: u64) -> Culprit {
        match self.tracked.get(&culprit).map(|t| &t.name) {
            Some(CgroupName::System) => Culprit::System,
            _ if culprit == victim => Culprit::Own,
            Some(CgroupName::Path(p)) => Culprit::Cgroup(p.clone()),
            Some(CgroupName::Unresolved) | None => Culprit::Unresolved,
        }
    }

    /// Counts one series that did not fit, and says so once.
    fn unpublished(&mut self, what: usize, e: &topdeck::Error) {
        self.unpublished[what].inc();
        if !self.said_full {
            self.said_full = true;
            eprintln!(
                "topdeck agent: {e:#}; carrying on without the series that do not fit \
                 (counted in topdeck_agent_unpublished_total); fewer live cgroups, or a larger \
                 registry, would publish them"
            );
        }
    }

    /// The series of `label`, registered on first use.
    fn series_for(&mut self, label: &str) -> Option<&mut CgroupMetrics> {
        if !self.series.contains_key(label) {
            match self.out.cgroup(label, self.table.len()) {
                Ok(m) => {
                    self.series.insert(label.to_string(), m);
                }
                Err(e) => {
                    self.unpublished(U_CGROUP, &e);
                    return None;
                }
            }
        }
        self.series.get_mut(label)
    }

    /// Reads the maps once and publishes what changed since the last tick.
    pub fn tick(&mut self) -> Result<Tick> {
        // Waits in progress first, then the totals: see crate::inprogress.
        let waiting = self.probe.waiting()?;
        let waiting = self.in_progress.observe(Instant::now(), &waiting);
        let totals = self.probe.read()?;
        self.names.refresh_allowed();
        // Names first, for every id in this read, victims and culprits.
        // Only ids with new figures: a retired culprit lives on in its
        // victims' slots, unchanged, and must not be followed again.
        let prev = &self.prev;
        let mut ids: Vec<u64> = totals
            .cgroups
            .iter()
            .filter(|(id, now)| prev.cgroups.get(id) != Some(*now))
            .map(|(id, _)| *id)
            .collect();
        ids.extend(
            totals
                .pairs
                .iter()
                .filter(|(k, now)| prev.pairs.get(k).is_none_or(|b| b.wait_ns != now.wait_ns))
                .flat_map(|(&(v, c), _)| [v, c]),
        );
        // And the victims and culprits of waits in progress: live cgroups.
        ids.extend(waiting.ids());
        ids.sort_unstable();
        ids.dedup();
        for id in ids {
            self.track(id);
        }
        let mut windows: HashMap<u64, crate::verdict::Window> = HashMap::new();

        let mut cgroup_ids: Vec<u64> = totals.cgroups.keys().copied().collect();
        cgroup_ids.sort_unstable();
        for id in cgroup_ids {
            let now = &totals.cgroups[&id];
            let before = self.prev.cgroups.get(&id).cloned().unwrap_or_default();
            let before = &before;
            if before == now && !waiting.has(id) {
                continue;
            }
            let delta = |a: u64, b: u64| a.wrapping_sub(b);
            let mut hv = HistogramValue {
                schema: SCHEMA,
                zero_threshold: self.table.zero_threshold(),
                zero_count: delta(now.zero, before.zero),
                min_index: self.table.min_index(),
                buckets: vec![0; self.table.len()],
                count: 0,
                sum: 0.0,
                max: None,
            };
            for (k, slot) in hv.buckets.iter_mut().enumerate() {
                *slot = delta(now.buckets[k], before.buckets.get(k).copied().unwrap_or(0));
            }
            hv.count = hv.zero_count + hv.buckets.iter().sum::<u64>();
            let label = self.name_of(id).label().to_string();
            let table = self.table.clone();
            if let Some(m) = self.series_for(&label) {
                m.hist.record_n(0.0, hv.zero_count);
                m.zero = m.zero.wrapping_add(hv.zero_count);
                for (k, &d) in hv.buckets.iter().enumerate() {
                    m.hist.record_n(table.seconds_of(k), d);
                    m.buckets[k] = m.buckets[k].wrapping_add(d);
                }
                for (c, counter) in m.switch_out.iter().enumerate() {
                    counter.add(delta(now.switch_out[c], before.switch_out[c]));
                }
                m.oncpu
                    .add(delta(now.oncpu_ns, before.oncpu_ns) as f64 / 1e9);
            }
            windows.insert(
                id,
                crate::verdict::Window {
                    p99_seconds: waiting.p99(id, &hv, &self.table),
                    samples: hv.count,
                    ..Default::default()
                },
            );
        }

        let mut pair_ids: Vec<(u64, u64)> = totals.pairs.keys().copied().collect();
        pair_ids.sort_unstable();
        for key in pair_ids {
            let now = totals.pairs[&key];
            let before = self.prev.pairs.get(&key).copied().unwrap_or_default();
            if now.wait_ns == before.wait_ns {
                continue;
            }
            let (victim, culprit) = key;
            let labels = (
                self.name_of(victim).label().to_string(),
                self.name_of(culprit).label().to_string(),
            );
            let fresh = !self.wait_behind.contains_key(&labels);
            let secs = now.wait_ns.wrapping_sub(before.wait_ns) as f64 / 1e9;
            if fresh {
                let g = self.out.gauge_f64(
                    "topdeck_sched_wait_behind_seconds_total",
                    &[("cgroup", &labels.0), ("culprit", &labels.1)],
                    HELP_WAIT_BEHIND,
                    "seconds",
                );
                match g {
                    Ok(g) => {
                        self.wait_behind.insert(labels.clone(), g);
                    }
                    Err(e) => self.unpublished(U_WAIT_BEHIND, &e),
                }
            }
            if let Some(g) = self.wait_behind.get(&labels) {
                // Added, not set: ids that share a path share the series.
                g.add(secs);
            }
            if let Some(w) = windows.get_mut(&victim) {
                w.wait_behind.push((self.culprit(victim, culprit), secs));
            }
        }

        for (&id, w) in windows.iter_mut() {
            waiting.apply(id, w, |c| self.culprit(id, c));
        }

        // Throttling by the cgroup's own quota, for the cgroups that waited.
        for (id, w) in windows.iter_mut() {
            let CgroupName::Path(path) = &self.tracked[id].name else {
                continue;
            };
            // Named by its v2 group (hybrid hosts): its v1 cpu group is the
            // root, where no quota lives, whatever a v1 directory of the
            // same path may hold.
            if cgroupfs::is_unified(*id) {
                continue;
            }
            if let Some(now) = cgroupfs::throttling(&self.hierarchy.dir(path)) {
                let before = self.throttling.insert(*id, now).unwrap_or(now);
                w.throttled = Some(Throttling {
                    nr_throttled: now.nr_throttled.saturating_sub(before.nr_throttled),
                    throttled_ns: now.throttled_ns.saturating_sub(before.throttled_ns),
                });
            }
        }

        let mut verdicts = Vec::new();
        let mut ids: Vec<u64> = windows.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let CgroupName::Path(path) = &self.tracked[&id].name else {
                continue;
            };
            if let Some(v) = self.judge.judge(path, &windows[&id]) {
                verdicts.push(v);
            }
        }
        self.publish_verdicts(&verdicts);

        for (i, c) in self.drops.iter().enumerate().take(NR_DROPS) {
            c.add(totals.drops[i].wrapping_sub(self.prev.drops[i]));
        }
        let totals = self.retire(totals);
        self.maybe_rotate()?;
        self.measure_cost()?;
        let tick = Tick {
            active_cgroups: windows.len(),
            verdicts,
        };
        self.prev = totals;
        Ok(tick)
    }

    /// Notes which tracked cgroups are gone and retires those gone for the
    /// grace period without new figures: out of the kernel's maps, the
    /// judge, the name cache, and (once no live id has their label) out of
    /// the next registry file. One stat per tracked cgroup, no walk.
    ///
    /// Where a retired cgroup was a culprit, it keeps its slot in its
    /// victims' values (a per-CPU value cannot be edited under the programs
    /// without losing their updates); a victim whose slots are all taken
    /// charges further culprits through the `pairs` hash, which is slower
    /// but as exact.
    fn retire(&mut self, mut totals: Totals) -> Totals {
        let now = Instant::now();
        let grace = self.config.grace;
        let mut retire = Vec::new();
        for (&id, t) in self.tracked.iter_mut() {
            if t.gone_since.is_none() {
                let gone = match &t.name {
                    CgroupName::System => false,
                    CgroupName::Path(p) => !self.names.exists_at(id, p),
                    CgroupName::Unresolved => true,
                };
                if gone {
                    t.gone_since = Some(now);
                }
            }
            let quiet = totals.cgroups.get(&id) == self.prev.cgroups.get(&id);
            if t.gone_since.is_some_and(|g| now - g >= grace) && quiet {
                retire.push(id);
            }
        }
        let retiring: HashSet<u64> = retire.iter().copied().collect();
        // Pairs in the kernel's hash that involve a retiring id.
        let mut pairs: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
        for &(v, c) in totals.pairs.keys() {
            for id in [v, c] {
                if retiring.contains(&id) {
                    pairs.entry(id).or_default().push((v, c));
                }
            }
        }
        for id in retire {
            self.probe
                .forget(id, pairs.get(&id).map_or(&[], Vec::as_slice));
            totals.cgroups.remove(&id);
            // Pairs where it was the culprit may live on in slots: keep
            // them in the totals so that they show no change next time.
            totals.pairs.retain(|(v, _), _| *v != id);
            self.throttling.remove(&id);
            self.names.forget(id);
            if let Some(t) = self.tracked.remove(&id) {
                let label = t.name.label();
                let still = self.tracked.values().any(|o| o.name.label() == label);
                if !still {
                    self.judge.forget(label);
                }
            }
        }
        // Names of cgroups removed before the last read could have
        // mentioned them, that the agent never saw.
        self.names.expire(grace.max(self.config.interval * 2));
        totals
    }

    /// Labels in use by tracked cgroups.
    fn live_labels(&self) -> HashSet<String> {
        let mut live: HashSet<String> = self
            .tracked
            .values()
            .map(|t| t.name.label().to_string())
            .collect();
        live.insert("system".into());
        live.insert("self".into());
        live
    }

    /// Starts a fresh registry file when retired series fill the current
    /// one (see the module documentation).
    fn maybe_rotate(&mut self) -> Result<()> {
        let cap = f64::from(self.out.capacity);
        if !self.out.full && f64::from(self.out.used) < ROTATE_AT * cap {
            return Ok(());
        }
        let live = self.live_labels();
        let keep = self.carried(&live);
        let gain = f64::from(self.out.used.saturating_sub(keep));
        // At most one rotation per grace period, and only for a real gain:
        // when the live set itself fills the registry, rotating again and
        // again would free nothing and cost every reader a new file, so
        // what does not fit is counted instead.
        let recent = self
            .rotated_at
            .is_some_and(|t| t.elapsed() < self.config.grace);
        if gain < ROTATE_GAIN * cap || recent {
            self.out.full = false;
            return Ok(());
        }
        self.rotated_at = Some(Instant::now());
        self.rotate(&live)
    }

    /// Metrics a rotation would carry over.
    fn carried(&self, live: &HashSet<String>) -> u32 {
        let globals = (NR_DROPS + 1 + UNPUBLISHED.len() + 1) as u32;
        let per_cgroup = (1 + NR_CAUSES + 1) as u32;
        let cgroups = self.series.keys().filter(|l| live.contains(*l)).count() as u32;
        let pairs = self
            .wait_behind
            .keys()
            .filter(|(v, c)| live.contains(v) && live.contains(c))
            .count() as u32;
        let verdicts = self
            .verdict_gauges
            .keys()
            .filter(|(v, c, _)| live.contains(v) && live.contains(c))
            .count() as u32;
        let evidence = self
            .evidence
            .keys()
            .filter(|(n, v, _, c)| live.contains(v) && (*n != EVIDENCE_SHARE || live.contains(c)))
            .count() as u32;
        globals + per_cgroup * cgroups + pairs + verdicts + evidence + self.cost.len() as u32
    }

    fn rotate(&mut self, live: &HashSet<String>) -> Result<()> {
        let registry = build_registry(&self.config)?;
        let mut out = Publisher::new(registry, self.config.max_series);
        let fail = reg_err("carrying series over to a new registry".into());
        let (drops, unpublished, rotations) = out.globals().map_err(fail)?;
        for (new, old) in drops.iter().zip(&self.drops) {
            new.add(old.get());
        }
        for (new, old) in unpublished.iter().zip(&self.unpublished) {
            new.add(old.get());
        }
        rotations.add(self.rotations.get() + 1);
        let mut series = HashMap::new();
        for (label, old) in self.series.drain().filter(|(l, _)| live.contains(l)) {
            // What does not fit now is counted as any other unpublished
            // series, and registered again when there is room.
            let Ok(mut m) = out.cgroup(&label, self.table.len()) else {
                self.unpublished[U_CGROUP].inc();
                continue;
            };
            m.hist.record_n(0.0, old.zero);
            for (k, &n) in old.buckets.iter().enumerate() {
                m.hist.record_n(self.table.seconds_of(k), n);
            }
            for (new, old) in m.switch_out.iter().zip(&old.switch_out) {
                new.add(old.get());
            }
            m.oncpu.set(old.oncpu.get());
            m.zero = old.zero;
            m.buckets = old.buckets;
            series.insert(label, m);
        }
        let mut wait_behind = HashMap::new();
        for ((v, c), old) in self.wait_behind.drain() {
            if !(live.contains(&v) && live.contains(&c)) {
                continue;
            }
            if let Ok(g) = out.gauge_f64(
                "topdeck_sched_wait_behind_seconds_total",
                &[("cgroup", &v), ("culprit", &c)],
                HELP_WAIT_BEHIND,
                "seconds",
            ) {
                g.set(old.get());
                wait_behind.insert((v, c), g);
            }
        }
        let mut verdict_gauges = HashMap::new();
        for ((v, c, kind), old) in self.verdict_gauges.drain() {
            if !(live.contains(&v) && live.contains(&c)) {
                continue;
            }
            if let Ok(g) = out.gauge(
                "topdeck_sched_verdict",
                &[("cgroup", &v), ("culprit", &c), ("kind", kind)],
                HELP_VERDICT,
            ) {
                g.set(old.get());
                verdict_gauges.insert((v, c, kind), g);
            }
        }
        let mut evidence = HashMap::new();
        for ((name, v, k, c), old) in self.evidence.drain() {
            if !live.contains(&v) || (name == EVIDENCE_SHARE && !live.contains(&c)) {
                continue;
            }
            let help = if name == EVIDENCE_SHARE {
                HELP_EVIDENCE_SHARE
            } else {
                HELP_EVIDENCE_P99
            };
            if let Ok(g) = out.gauge_f64(name, &[("cgroup", &v), (k, &c)], help, "") {
                g.set(old.get());
                evidence.insert((name, v, k, c), g);
            }
        }
        let mut cost = HashMap::new();
        for (program, old) in self.cost.drain() {
            if let Ok(g) = out.gauge_f64(
                "topdeck_bpf_run_ns_per_event",
                &[("program", &program)],
                HELP_COST,
                "nanoseconds",
            ) {
                g.set(old.get());
                cost.insert(program, g);
            }
        }
        self.active
            .retain(|(v, c, _)| live.contains(v) && live.contains(c));
        // The old file goes when its registry is dropped, here: readers
        // already find the new one, which is newer.
        self.out = out;
        self.series = series;
        self.wait_behind = wait_behind;
        self.verdict_gauges = verdict_gauges;
        self.evidence = evidence;
        self.cost = cost;
        self.drops = drops;
        self.unpublished = unpublished;
        self.rotations = rotations;
        Ok(())
    }

    fn evidence_gauge(
        &mut self,
        name: &'static str,
        victim: &str,
        other: (&'static str, &str),
    ) -> Option<GaugeF64> {
        let key = (name, victim.to_string(), other.0, other.1.to_string());
        if let Some(g) = self.evidence.get(&key) {
            return Some(g.clone());
        }
        let help = if name == EVIDENCE_SHARE {
            HELP_EVIDENCE_SHARE
        } else {
            HELP_EVIDENCE_P99
        };
        match self
            .out
            .gauge_f64(name, &[("cgroup", victim), other], help, "")
        {
            Ok(g) => {
                self.evidence.insert(key, g.clone());
                Some(g)
            }
            Err(e) => {
                self.unpublished(U_EVIDENCE, &e);
                None
            }
        }
    }

    fn publish_verdicts(&mut self, verdicts: &[Verdict]) {
        let mut now_active = HashSet::new();
        for v in verdicts {
            let kind = v.kind.as_str();
            let culprits: Vec<String> = match v.culprits.is_empty() {
                true => vec!["self".to_string()],
                false => v.culprits.iter().map(|(c, _)| c.clone()).collect(),
            };
            for c in culprits {
                now_active.insert((v.victim.clone(), c, kind));
            }
            for (c, share) in &v.culprits {
                if let Some(g) = self.evidence_gauge(EVIDENCE_SHARE, &v.victim, ("culprit", c)) {
                    g.set(*share);
                }
            }
            for (when, p99) in [
                ("baseline", v.p99_before.unwrap_or(f64::NAN)),
                ("now", v.p99_after),
            ] {
                if let Some(g) = self.evidence_gauge(EVIDENCE_P99, &v.victim, ("when", when)) {
                    g.set(p99);
                }
            }
        }
        for key in &now_active {
            if !self.verdict_gauges.contains_key(key) {
                let g = self.out.gauge(
                    "topdeck_sched_verdict",
                    &[("cgroup", &key.0), ("culprit", &key.1), ("kind", key.2)],
                    HELP_VERDICT,
                );
                match g {
                    Ok(g) => {
                        self.verdict_gauges.insert(key.clone(), g);
                    }
                    Err(e) => {
                        self.unpublished(U_VERDICT, &e);
                        continue;
                    }
                }
            }
            self.verdict_gauges[key].set(1);
        }
        for key in self.active.difference(&now_active) {
            if let Some(g) = self.verdict_gauges.get(key) {
                g.set(0);
            }
        }
        self.active = now_active;
    }

    /// Every `cost_every`, turns BPF run-time stats on for one tick and
    /// publishes ns per run of each program; counts recursion misses always.
    fn measure_cost(&mut self) -> Result<()> {
        let stats = self.probe.program_stats()?;
        let misses: u64 = stats.iter().map(|s| s.recursion_misses).sum();
        self.drops[NR_DROPS].add(misses.saturating_sub(self.recursion_misses));
        self.recursion_misses = misses;
        if let Some((guard, before)) = self.measuring.take() {
            drop(guard);
            for (s, b) in stats.iter().zip(&before) {
                if let Some(ns) = s.ns_per_run_since(b) {
                    if !self.cost.contains_key(&s.name) {
                        match self.out.gauge_f64(
                            "topdeck_bpf_run_ns_per_event",
                            &[("program", &s.name)],
                            HELP_COST,
                            "nanoseconds",
                        ) {
                            Ok(g) => {
                                self.cost.insert(s.name.clone(), g);
                            }
                            Err(e) => {
                                self.unpublished(U_COST, &e);
                                continue;
                            }
                        }
                    }
                    self.cost[&s.name].set(ns);
                }
            }
            return Ok(());
        }
        let Some(every) = self.config.cost_every else {
            return Ok(());
        };
        if self.last_cost.is_none_or(|t| t.elapsed() >= every) {
            self.last_cost = Some(Instant::now());
            let guard = BpfStats::enable()?;
            let before = self.probe.program_stats()?;
            self.measuring = Some((guard, before));
        }
        Ok(())
    }
}
