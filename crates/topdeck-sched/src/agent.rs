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
//!
//! Histograms are rebuilt from the kernel's bucket counts by recording each
//! bucket's longest value as often as the bucket grew: the buckets are exact,
//! `sum` is an upper bound within one bucket width (≈9%).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use topdeck::{Counter, Gauge, GaugeF64, Histogram, HistogramValue, Registry};

use crate::buckets::{BucketTable, SCHEMA};
use crate::cgroupfs::{self, CgroupNames, Hierarchy, Throttling};
use crate::error::{Error, ErrorKind, Result};
use crate::maps::{CgroupTotals, Totals, CAUSES, CGROUP_SYSTEM, DROPS, NR_CAUSES, NR_DROPS};
use crate::names::container_name;
use crate::probe::{BpfStats, Clock, Flavour, Probe, ProgramStats};
use crate::verdict::{Culprit, Judge, Thresholds, Verdict};

/// Ticks between sweeps for removed cgroups.
const FORGET_EVERY_TICKS: u64 = 60;

/// The registry name the agent publishes under.
pub const REGISTRY_NAME: &str = "topdeck-agent";

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
        }
    }
}

struct CgroupMetrics {
    path: String,
    hist: Histogram,
    switch_out: [Counter; NR_CAUSES],
    oncpu: GaugeF64,
}

/// What one tick saw.
#[derive(Debug, Clone, Default)]
pub struct Tick {
    /// Verdicts in force after this tick.
    pub verdicts: Vec<Verdict>,
    /// Cgroups with waits in this tick.
    pub active_cgroups: usize,
}

/// The running agent: probe, registry and state between ticks.
pub struct Agent {
    config: AgentConfig,
    probe: Probe,
    registry: Registry,
    hierarchy: Hierarchy,
    names: CgroupNames,
    table: BucketTable,
    judge: Judge,
    prev: Totals,
    cgroups: HashMap<u64, CgroupMetrics>,
    wait_behind: HashMap<(u64, u64), GaugeF64>,
    verdict_gauges: HashMap<(String, String, &'static str), Gauge>,
    evidence: HashMap<(String, String), GaugeF64>,
    active: HashSet<(String, String, &'static str)>,
    throttling: HashMap<u64, Throttling>,
    drops: Vec<Counter>,
    recursion_misses: u64,
    ticks: u64,
    cost: HashMap<String, GaugeF64>,
    measuring: Option<(BpfStats, Vec<ProgramStats>)>,
    last_cost: Option<Instant>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("probe", &self.probe)
            .field("registry", &self.registry.path())
            .finish_non_exhaustive()
    }
}

fn reg_err(what: String) -> impl FnOnce(topdeck::Error) -> Error {
    move |e| Error::with_source(ErrorKind::Registry, what, e)
}

impl Agent {
    /// Loads the probe and creates the registry.
    pub fn start(config: AgentConfig) -> Result<Self> {
        let hierarchy = Hierarchy::detect()?;
        let probe = Probe::load_with(&hierarchy, config.flavour, config.clock)?;
        let mut b = Registry::builder()
            .name(REGISTRY_NAME)
            .metrics(16_384)
            .shards(2)
            .shard_bytes(32 << 20)
            .string_bytes(4 << 20)
            .gauge_bytes(1 << 20);
        if let Some(d) = &config.dir {
            b = b.dir(d);
        }
        let registry = b.build().map_err(|e| {
            crate::nsdir::registry_error(
                config.dir.as_deref(),
                "creating the topdeck-agent registry",
                e,
            )
        })?;
        let mut drops = Vec::new();
        // After the kernel's reasons: the programs' recursion misses, and
        // series the registry had no room left for.
        for reason in DROPS
            .iter()
            .chain(["recursion_miss", "registry_full"].iter())
        {
            drops.push(
                registry
                    .counter(
                        "topdeck_sched_dropped_total",
                        &[("reason", reason)],
                        "Scheduler samples lost or not measured, by reason.",
                        "",
                    )
                    .map_err(reg_err(format!("registering drops {reason}")))?,
            );
        }
        Ok(Self {
            table: probe.buckets().clone(),
            judge: Judge::new(config.thresholds.clone()),
            names: CgroupNames::new(hierarchy.clone()),
            config,
            probe,
            registry,
            hierarchy,
            prev: Totals::default(),
            cgroups: HashMap::new(),
            wait_behind: HashMap::new(),
            verdict_gauges: HashMap::new(),
            evidence: HashMap::new(),
            active: HashSet::new(),
            throttling: HashMap::new(),
            drops,
            recursion_misses: 0,
            ticks: 0,
            cost: HashMap::new(),
            measuring: None,
            last_cost: None,
        })
    }

    /// The probe the agent runs.
    pub fn probe(&self) -> &Probe {
        &self.probe
    }

    /// The registry file it publishes to.
    pub fn registry_path(&self) -> &std::path::Path {
        self.registry.path()
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

    fn path_of(&mut self, id: u64) -> String {
        match id {
            CGROUP_SYSTEM => "system".to_string(),
            _ => self
                .names
                .path(id)
                .map_or_else(|| format!("id:{id}"), str::to_string),
        }
    }

    /// Reads the maps once and publishes what changed since the last tick.
    pub fn tick(&mut self) -> Result<Tick> {
        let totals = self.probe.read()?;
        self.names.refresh_allowed();
        let mut windows: HashMap<u64, crate::verdict::Window> = HashMap::new();

        for (&id, now) in &totals.cgroups {
            let unchanged = self.prev.cgroups.get(&id).is_some_and(|b| b == now);
            if unchanged && self.cgroups.contains_key(&id) {
                continue;
            }
            if !self.cgroups.contains_key(&id) {
                let path = self.path_of(id);
                match self.register_cgroup(&path) {
                    Ok(m) => self.cgroups.insert(id, m),
                    Err(_) => {
                        self.drops[NR_DROPS + 1].inc();
                        continue;
                    }
                };
            }
            let empty = CgroupTotals::default();
            let before = self.prev.cgroups.get(&id).unwrap_or(&empty);
            let m = &self.cgroups[&id];
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
            for _ in 0..hv.zero_count {
                m.hist.record(0.0);
            }
            for (k, slot) in hv.buckets.iter_mut().enumerate() {
                let d = delta(now.buckets[k], before.buckets.get(k).copied().unwrap_or(0));
                *slot = d;
                let v = self.table.seconds_of(k);
                for _ in 0..d {
                    m.hist.record(v);
                }
            }
            hv.count = hv.zero_count + hv.buckets.iter().sum::<u64>();
            for (c, counter) in m.switch_out.iter().enumerate() {
                counter.add(delta(now.switch_out[c], before.switch_out[c]));
            }
            m.oncpu.set(now.oncpu_ns as f64 / 1e9);
            windows.insert(
                id,
                crate::verdict::Window {
                    p99_seconds: hv.quantile(0.99),
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
            if now.wait_ns == before.wait_ns && self.wait_behind.contains_key(&key) {
                continue;
            }
            let (victim, culprit) = key;
            if !self.wait_behind.contains_key(&key) {
                let (v, c) = (self.path_of(victim), self.path_of(culprit));
                let g = self.registry.gauge_f64(
                    "topdeck_sched_wait_behind_seconds_total",
                    &[("cgroup", &v), ("culprit", &c)],
                    "Run-queue wait of the cgroup charged to the cgroup that held the CPU just before it ran (system: idle or kernel).",
                    "seconds",
                );
                match g {
                    Ok(g) => self.wait_behind.insert(key, g),
                    Err(_) => {
                        self.drops[NR_DROPS + 1].inc();
                        None
                    }
                };
            }
            if let Some(g) = self.wait_behind.get(&key) {
                g.set(now.wait_ns as f64 / 1e9);
            }
            if let Some(w) = windows.get_mut(&victim) {
                let culprit = match culprit {
                    CGROUP_SYSTEM => Culprit::System,
                    c if c == victim => Culprit::Own,
                    c => Culprit::Cgroup(self.path_of(c)),
                };
                let secs = now.wait_ns.wrapping_sub(before.wait_ns) as f64 / 1e9;
                w.wait_behind.push((culprit, secs));
            }
        }

        // Throttling by the cgroup's own quota, for the cgroups that waited.
        for (id, w) in windows.iter_mut() {
            let path = self.cgroups[id].path.clone();
            if path.starts_with("id:") {
                continue;
            }
            if let Some(now) = cgroupfs::throttling(&self.hierarchy.dir(&path)) {
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
            let path = self.cgroups[&id].path.clone();
            if id == CGROUP_SYSTEM || path.starts_with("id:") {
                continue;
            }
            if let Some(v) = self.judge.judge(&path, &windows[&id]) {
                verdicts.push(v);
            }
        }
        self.publish_verdicts(&verdicts)?;

        for (i, c) in self.drops.iter().enumerate().take(NR_DROPS) {
            c.add(totals.drops[i].wrapping_sub(self.prev.drops[i]));
        }
        self.ticks += 1;
        let totals = if self.ticks % FORGET_EVERY_TICKS == 0 {
            self.forget_removed(totals)
        } else {
            totals
        };
        self.measure_cost()?;
        let tick = Tick {
            active_cgroups: windows.len(),
            verdicts,
        };
        self.prev = totals;
        Ok(tick)
    }

    /// Drops, from the kernel's maps and from the judge, the cgroups that
    /// no longer exist and did not change in this tick, so that the maps do
    /// not fill up with the dead on a host that makes and removes cgroups.
    /// Their published series keep their last values. Where such a cgroup
    /// was a culprit, it keeps its slot in its victims' values (a per-CPU
    /// value cannot be edited under the programs without losing their
    /// updates); a victim whose slots are all taken charges further culprits
    /// through the `pairs` hash, which is slower but as exact.
    fn forget_removed(&mut self, mut totals: Totals) -> Totals {
        self.names.rescan();
        let dead: Vec<u64> = totals
            .cgroups
            .iter()
            .filter(|(id, now)| !self.names.exists(**id) && self.prev.cgroups.get(id) == Some(*now))
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            let pairs: Vec<(u64, u64)> = totals
                .pairs
                .keys()
                .filter(|(v, c)| *v == id || *c == id)
                .copied()
                .collect();
            self.probe.forget(id, &pairs);
            totals.cgroups.remove(&id);
            // Pairs where it was the culprit may live on in slots: keep
            // them in the totals so that they show no change next time.
            totals.pairs.retain(|(v, _), _| *v != id);
            if let Some(m) = self.cgroups.remove(&id) {
                self.judge.forget(&m.path);
            }
            self.throttling.remove(&id);
        }
        totals
    }

    fn register_cgroup(&self, path: &str) -> Result<CgroupMetrics> {
        let container = container_name(path);
        let r = &self.registry;
        let hist = r
            .histogram_with(
                "topdeck_runq_latency_seconds",
                &[("cgroup", path), ("container", &container)],
                "Time runnable tasks of the cgroup waited for a CPU (run-queue latency).",
                "seconds",
                BucketTable::topdeck_buckets(),
            )
            .map_err(reg_err(format!("registering the histogram of {path}")))?;
        let mut switch_out = Vec::new();
        for cause in CAUSES {
            switch_out.push(
                r.counter(
                    "topdeck_sched_switch_out_total",
                    &[("cgroup", path), ("cause", cause)],
                    "Times a task of the cgroup lost the CPU while still runnable, by who ran next.",
                    "",
                )
                .map_err(reg_err(format!("registering switch-outs of {path}")))?,
            );
        }
        let oncpu = r
            .gauge_f64(
                "topdeck_sched_oncpu_seconds_total",
                &[("cgroup", path)],
                "Time the cgroup's tasks spent on a CPU since the agent started.",
                "seconds",
            )
            .map_err(reg_err(format!("registering on-CPU time of {path}")))?;
        Ok(CgroupMetrics {
            path: path.to_string(),
            hist,
            switch_out: switch_out
                .try_into()
                .map_err(|_| Error::new(ErrorKind::Registry, "one counter per cause"))?,
            oncpu,
        })
    }

    fn gauge_f64(
        &mut self,
        name: &str,
        a: (&str, &str),
        b: (&str, &str),
        help: &str,
    ) -> Result<GaugeF64> {
        let key = (
            format!("{name}|{}={}", a.0, a.1),
            format!("{}={}", b.0, b.1),
        );
        if let Some(g) = self.evidence.get(&key) {
            return Ok(g.clone());
        }
        let g = self
            .registry
            .gauge_f64(name, &[a, b], help, "")
            .map_err(reg_err(format!("registering {name}")))?;
        self.evidence.insert(key, g.clone());
        Ok(g)
    }

    fn publish_verdicts(&mut self, verdicts: &[Verdict]) -> Result<()> {
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
                self.gauge_f64(
                    "topdeck_sched_verdict_share",
                    ("cgroup", &v.victim),
                    ("culprit", c),
                    "Evidence of a verdict: share of the cgroup's wait behind the culprit in the last window.",
                )?
                .set(*share);
            }
            for (when, p99) in [
                ("baseline", v.p99_before.unwrap_or(f64::NAN)),
                ("now", v.p99_after),
            ] {
                self.gauge_f64(
                    "topdeck_sched_verdict_p99_seconds",
                    ("cgroup", &v.victim),
                    ("when", when),
                    "Evidence of a verdict: run-queue p99 of the cgroup, baseline and in the last window.",
                )?
                .set(p99);
            }
        }
        for key in &now_active {
            if !self.verdict_gauges.contains_key(key) {
                let g = self
                    .registry
                    .gauge(
                        "topdeck_sched_verdict",
                        &[("cgroup", &key.0), ("culprit", &key.1), ("kind", key.2)],
                        "1 while the verdict holds: the cgroup's run-queue latency rose because of the culprit (noisy_neighbour) or its own CPU quota (own_quota).",
                        "",
                    )
                    .map_err(reg_err(format!("registering a verdict on {}", key.0)))?;
                self.verdict_gauges.insert(key.clone(), g);
            }
            self.verdict_gauges[key].set(1);
        }
        for key in self.active.difference(&now_active) {
            if let Some(g) = self.verdict_gauges.get(key) {
                g.set(0);
            }
        }
        self.active = now_active;
        Ok(())
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
                        let g = self
                            .registry
                            .gauge_f64(
                                "topdeck_bpf_run_ns_per_event",
                                &[("program", &s.name)],
                                "Mean run time of the probe's BPF program per event, from kernel BPF stats (enabled only while measuring).",
                                "nanoseconds",
                            )
                            .map_err(reg_err(format!("registering the cost of {}", s.name)))?;
                        self.cost.insert(s.name.clone(), g);
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
