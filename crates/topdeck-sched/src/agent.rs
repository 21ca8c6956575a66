// SPDX-License-Identifier: Apache-2.0
//! The agent: reads the probe's maps once per interval and publishes them as
//! ordinary topdeck metrics in a registry named `topdeck-agent`, with the
//! verdicts of [`crate::verdict`].
//!
//! Published metrics (labels in braces; names, keys and help are
//! [`crate::schema`]'s, the one list readers parse with):
//!
//! | name | kind | meaning |
//! |---|---|---|
//! | `topdeck_runq_latency_seconds{cgroup,container}` | histogram | run-queue waits |
//! | `topdeck_sched_switch_out_total{cgroup,cause}` | counter | switch-outs while runnable, by who ran next: `same_cgroup`, `other_cgroup`, `system` |
//! | `topdeck_sched_wait_behind_seconds_total{cgroup,culprit}` | counter (ns, exposed in seconds) | wait charged to the cgroup that held the CPU before |
//! | `topdeck_sched_oncpu_seconds_total{cgroup}` | counter (ns, exposed in seconds) | time on CPU |
//! | `topdeck_sched_verdict{cgroup,culprit,kind}` | gauge | 1 while the verdict holds, else 0 |
//! | `topdeck_sched_verdict_p99_seconds{cgroup,when}` | gauge (f64) | evidence: `baseline` and `now` p99 |
//! | `topdeck_sched_verdict_share{cgroup,culprit}` | gauge (f64) | evidence: share of the wait behind the culprit |
//! | `topdeck_bpf_run_per_event_seconds{program}` | gauge (f64) | the probe's own cost, mean run time per event, measured every `cost_every` |
//! | `topdeck_sched_dropped_total{reason}` | counter | samples lost or not measured |
//! | `topdeck_agent_unpublished_total{what}` | counter | series the registry had no room for |
//! | `topdeck_agent_rotations_total` | counter | fresh registry files started (see below) |
//!
//! Running totals of time are integer nanoseconds in counters, exact and
//! monotonic; exporters show them in seconds, as their names say
//! (`topdeck_export::rules::counter_value`).
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
//!
//! Each tick is the I/O around [`crate::step::step`], which decides what
//! a window publishes and judges, without touching the kernel or a file.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::buckets::BucketTable;
use crate::cgroupfs::{self, CgroupNames, Hierarchy, Throttling};
use crate::error::Result;
use crate::inprogress::InProgress;
use crate::maps::Totals;
use crate::memory;
use crate::probe::{BpfStats, LoadOptions, Probe, ProgramStats};
use crate::publisher::Publisher;
use crate::schema::{self, value, DropReason};
use crate::step::{self, StepInput};
use crate::verdict::{self, Hold, Judge, Verdict};

pub use crate::config::AgentConfig;
pub use crate::schema::REGISTRY_NAME;
pub use crate::step::CgroupName;

/// The `cgroup` (and `culprit`) label of cgroups whose path is unknown.
pub const UNRESOLVED_LABEL: &str = value::UNRESOLVED;

/// Cgroups retired in one sweep after which the agent's maps and heap give
/// back their room: a burst, not the steady trickle of a host's churn.
const TRIM_AFTER: usize = 64;

/// Rotate when this share of the registry's metrics is used (and retired
/// series would free at least [`ROTATE_GAIN`] of it).
const ROTATE_AT: f64 = 0.75;
/// The least share of the registry a rotation must free to be worth a new
/// file: rotations stay rare however the live set hovers.
const ROTATE_GAIN: f64 = 0.125;

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
    out: Publisher,
    hierarchy: Hierarchy,
    names: CgroupNames,
    table: BucketTable,
    judge: Judge,
    /// The judge's verdicts, given once they hold ([`Hold`]).
    hold: Hold,
    in_progress: InProgress,
    prev: Totals,
    /// The cgroup ids followed, as named when first seen.
    tracked: HashMap<u64, CgroupName>,
    /// Since when each tracked id that is gone has been gone.
    gone_since: HashMap<u64, Instant>,
    /// `cpu.stat` throttling counters at the last read, by id.
    throttling: HashMap<u64, Throttling>,
    rotated_at: Option<Instant>,
    named: u64,
    unnamed: u64,
    recursion_misses: u64,
    measuring: Option<(BpfStats, Vec<ProgramStats>)>,
    last_cost: Option<Instant>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("probe", &self.probe)
            .field("registry", &self.out.path())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Loads the probe and creates the registry.
    pub fn start(config: AgentConfig) -> Result<Self> {
        let hierarchy = Hierarchy::detect()?;
        let probe = Probe::load_opts(
            &hierarchy,
            &LoadOptions {
                flavour: config.flavour,
                clock: config.clock,
                slots: config.cgroup_slots,
                thread_waits: config.thread_waits.clone(),
                thread_waits_memory: config.thread_waits_memory,
            },
        )?;
        let out = Publisher::create(&config)?;
        // Started before the first map read, so that cgroups made from now
        // on are named the moment they appear.
        let (names, why) = CgroupNames::watching(hierarchy.clone());
        if let Some(why) = why {
            eprintln!("topdeck agent: cannot watch {} for new cgroups ({why}); naming them by walks, so cgroups shorter than an interval may stay unresolved", hierarchy.mount.display());
        }
        Ok(Self {
            table: probe.buckets().clone(),
            judge: Judge::new(config.thresholds.clone()),
            hold: Hold::new(config.thresholds.hold),
            in_progress: InProgress::new(),
            names,
            config,
            probe,
            out,
            hierarchy,
            prev: Totals::default(),
            tracked: HashMap::new(),
            gone_since: HashMap::new(),
            throttling: HashMap::new(),
            rotated_at: None,
            named: 0,
            unnamed: 0,
            recursion_misses: 0,
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
        self.out.path()
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
        self.out.used()
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
        let name = CgroupName::of(id, self.names.path(id));
        match name {
            CgroupName::Path(_) => self.named += 1,
            CgroupName::Unresolved => {
                self.unnamed += 1;
                // A cgroup nobody could name is gone (or beyond every
                // bound): its grace period starts now.
                self.gone_since.insert(id, Instant::now());
            }
            CgroupName::System => {}
        }
        self.tracked.insert(id, name);
    }

    /// Throttling by their own quota since the last read, for the cgroups
    /// in `ids` that have a path and a v1 or v2 cpu controller of their own.
    fn throttled(&mut self, ids: &[u64]) -> HashMap<u64, Throttling> {
        let mut out = HashMap::new();
        for &id in ids {
            let Some(CgroupName::Path(path)) = self.tracked.get(&id) else {
                continue;
            };
            // Named by its v2 group (hybrid hosts): its v1 cpu group is the
            // root, where no quota lives, whatever a v1 directory of the
            // same path may hold.
            if cgroupfs::is_unified(id) {
                continue;
            }
            if let Some(now) = cgroupfs::throttling(&self.hierarchy.dir(path)) {
                let before = self.throttling.insert(id, now).unwrap_or(now);
                out.insert(
                    id,
                    Throttling {
                        nr_throttled: now.nr_throttled.saturating_sub(before.nr_throttled),
                        throttled_ns: now.throttled_ns.saturating_sub(before.throttled_ns),
                    },
                );
            }
        }
        out
    }

    /// Reads the maps once and publishes what changed since the last tick.
    pub fn tick(&mut self) -> Result<Tick> {
        // Waits in progress first, then the totals: see crate::inprogress.
        let waiting = self.probe.waiting()?;
        let waiting = self.in_progress.observe(Instant::now(), &waiting);
        let totals = self.probe.read()?;
        self.out.placed(totals.in_slots, totals.in_hash);
        self.names.refresh_allowed();
        // Names first, for every id in this read, victims and culprits.
        for id in step::mentioned(&self.prev, &totals, &waiting) {
            self.track(id);
        }
        let throttled = self.throttled(&step::judged(&self.prev, &totals, &waiting));
        let out = step::step(
            &StepInput {
                prev: &self.prev,
                now: &totals,
                waiting: &waiting,
                names: &self.tracked,
                throttled: &throttled,
                table: &self.table,
            },
            &mut self.judge,
        );
        for c in &out.cgroups {
            self.out.cgroup(c, &self.table);
        }
        for p in &out.wait_behind {
            self.out.wait_behind(p);
        }
        for &(reason, n) in &out.drops {
            self.out.dropped(reason, n);
        }
        // CPU for its weight, of the cgroups that name each other (rare: a
        // weight is read only for them).
        let oncpu: HashMap<&str, u64> = out
            .cgroups
            .iter()
            .filter_map(|c| match &c.name {
                CgroupName::Path(p) => Some((p.as_str(), c.oncpu_ns)),
                _ => None,
            })
            .collect();
        let hierarchy = &self.hierarchy;
        let judged = verdict::settle_mutual(out.verdicts, |path| {
            let ns = *oncpu.get(path)?;
            let weight = cgroupfs::weight(&hierarchy.find(path)?)?;
            (weight > 0.0).then(|| ns as f64 / weight)
        });
        let verdicts = self.hold.apply(judged);
        self.out.verdicts(&verdicts);
        let totals = self.retire(totals);
        self.maybe_rotate()?;
        self.measure_cost()?;
        self.prev = totals;
        Ok(Tick {
            active_cgroups: out.windows.len(),
            verdicts,
        })
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
        for (&id, name) in &self.tracked {
            if !self.gone_since.contains_key(&id) {
                let gone = match name {
                    CgroupName::System => false,
                    CgroupName::Path(p) => !self.names.exists_at(id, p),
                    CgroupName::Unresolved => true,
                };
                if gone {
                    self.gone_since.insert(id, now);
                }
            }
            let quiet = totals.cgroups.get(&id) == self.prev.cgroups.get(&id);
            if self.gone_since.get(&id).is_some_and(|g| now - *g >= grace) && quiet {
                retire.push(id);
            }
        }
        let retired = retire.len();
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
        let mut unnamed = Vec::new();
        for id in retire {
            if let Err(e) = self
                .probe
                .forget(id, pairs.get(&id).map_or(&[], Vec::as_slice))
            {
                let why = std::error::Error::source(&e).map_or(String::new(), |s| format!(": {s}"));
                eprintln!("topdeck agent: {e}{why}; the probe keeps what it could not remove until the agent restarts");
            }
            totals.cgroups.remove(&id);
            // Pairs where it was the culprit may live on in slots: keep
            // them in the totals so that they show no change next time.
            totals.pairs.retain(|(v, _), _| *v != id);
            self.throttling.remove(&id);
            self.names.forget(id);
            self.gone_since.remove(&id);
            if let Some(name) = self.tracked.remove(&id) {
                unnamed.push(name);
            }
        }
        // A label two cgroups shared (a name reused) is forgotten only once
        // no tracked cgroup has it; looked up once, not per retired cgroup,
        // which made a burst's sweep quadratic.
        if !unnamed.is_empty() {
            let live = self.live_labels();
            for name in unnamed {
                if !live.contains(name.label()) {
                    self.judge.forget(name.label());
                    self.hold.forget(name.label());
                }
            }
        }
        // Names of cgroups removed before the last read could have
        // mentioned them, that the agent never saw.
        self.names.expire(grace.max(self.config.interval * 2));
        if retired >= TRIM_AFTER {
            memory::give_back(&mut self.tracked);
            memory::give_back(&mut self.gone_since);
            memory::give_back(&mut self.throttling);
            self.names.give_back();
            self.judge.give_back();
            memory::trim();
        }
        totals
    }

    /// Labels in use by tracked cgroups.
    fn live_labels(&self) -> HashSet<String> {
        let mut live: HashSet<String> = self
            .tracked
            .values()
            .map(|n| n.label().to_string())
            .collect();
        live.insert(value::SYSTEM.into());
        live.insert(value::SELF.into());
        live
    }

    /// Starts a fresh registry file when retired series fill the current
    /// one (see the module documentation).
    fn maybe_rotate(&mut self) -> Result<()> {
        if !self.out.crowded(ROTATE_AT) {
            return Ok(());
        }
        let live = self.live_labels();
        let cap = f64::from(self.out.capacity());
        let gain = f64::from(self.out.used().saturating_sub(self.out.carried(&live)));
        // At most one rotation per grace period, and only for a real gain:
        // when the live set itself fills the registry, rotating again and
        // again would free nothing and cost every reader a new file, so
        // what does not fit is counted instead.
        let recent = self
            .rotated_at
            .is_some_and(|t| t.elapsed() < self.config.grace);
        if gain < ROTATE_GAIN * cap || recent {
            self.out.forget_full();
            return Ok(());
        }
        self.rotated_at = Some(Instant::now());
        self.out.rotate(&self.config, &live, &self.table)
    }

    /// Every `cost_every`, turns BPF run-time stats on for one tick and
    /// publishes each program's mean run time per event; counts recursion misses always.
    fn measure_cost(&mut self) -> Result<()> {
        let stats = self.probe.program_stats()?;
        let misses: u64 = stats.iter().map(|s| s.recursion_misses).sum();
        self.out.dropped(
            DropReason::RecursionMiss,
            misses.saturating_sub(self.recursion_misses),
        );
        self.recursion_misses = misses;
        if let Some((guard, before)) = self.measuring.take() {
            drop(guard);
            for (s, b) in stats.iter().zip(&before) {
                if let Some(ns) = s.ns_per_run_since(b) {
                    self.out.cost(&s.name, ns / 1e9);
                }
            }
            return Ok(());
        }
        let Some(every) = self.config.cost_every else {
            return Ok(());
        };
        if self.last_cost.is_none_or(|t| t.elapsed() >= every) {
            self.last_cost = Some(Instant::now());
            let guard = match BpfStats::enable() {
                Ok(guard) => guard,
                // Turning the statistics on needs CAP_SYS_ADMIN, which a
                // sandboxed agent need not have: the probe itself runs on,
                // without its cost figure.
                Err(e) => {
                    let why = std::error::Error::source(&e)
                        .map_or_else(|| e.to_string(), |s| format!("{e}: {s}"));
                    eprintln!(
                        "topdeck agent: cannot measure the probe's own cost ({why}); going on \
                         without {} (it needs CAP_SYS_ADMIN; \
                         --cost-every 0s turns the measurement off)",
                        schema::BPF_COST.name
                    );
                    self.config.cost_every = None;
                    return Ok(());
                }
            };
            let before = self.probe.program_stats()?;
            self.measuring = Some((guard, before));
        }
        Ok(())
    }
}
