// SPDX-License-Identifier: Apache-2.0
//! Collection for `topdeck top`: one pass over the namespace produces a
//! [`Harvest`], the only thing the rest of the view sees. Counters become
//! rates over the time between two reads of the same registry, histograms
//! become p50/p99 of the observations made in that time (bucket
//! differences, not since start), gauges stay values. Each series keeps a
//! short history (counter rate, histogram p99, gauge value) for sparklines.
//!
//! Readers stay open between passes, so a pass costs one snapshot per
//! registry plus one directory listing. Files that cannot be read become
//! rows in state `broken` with the reason: the view shows them instead of
//! failing.
//!
//! A registry named `topdeck-agent` feeds the scheduler panel only when
//! `topdeck_sched::trust` accepts it as the agent's; any other user can
//! pick that name. An impostor stays in the list like any registry, with
//! the reason in `untrusted`, and is counted in `spoofed_agents`.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};
use topdeck::{Liveness, MetricInfo, Namespace, RegistryEntry, RegistryReader, Snapshot, Value};
use topdeck_sched::trust::{self, Untrusted};

use super::event::{Cancel, Event};

/// How many past readings each series keeps for its sparkline: two minutes
/// at the default interval, wider than any sparkline drawn in 80 columns.
pub const HISTORY: usize = 120;

/// The registry name under which the scheduler agent publishes.
pub const AGENT_REGISTRY: &str = "topdeck-agent";
/// Run-queue latency per container, a histogram labelled `cgroup`, `container`.
pub const RUNQ_METRIC: &str = "topdeck_runq_latency_seconds";
/// A scheduler verdict, a gauge labelled `cgroup`, `culprit`, `kind`; 1 while it holds.
pub const VERDICT_METRIC: &str = "topdeck_sched_verdict";

/// The one clock of this module, so that the topdeck clock can replace
/// `std::time::Instant` in one place.
fn now() -> Instant {
    Instant::now()
}

/// A series' past readings, oldest first: counter rates, histogram p99s
/// (0 when nothing was observed), gauge values.
///
/// The collection thread appends one reading per pass to a ring it shares
/// with every harvest, and a harvest holds the ring plus how many readings
/// it had then. Handing over a handle instead of a copy keeps a pass's cost
/// independent of the history's length (a copy of 120 readings of 100,000
/// series would be 96 MB a pass); the view reads only the few it draws, and
/// sees them as of its harvest, not newer.
#[derive(Clone, Default)]
pub struct History {
    ring: Arc<Mutex<Ring>>,
    upto: u64,
}

/// The last [`HISTORY`] readings and how many were ever pushed.
#[derive(Default)]
struct Ring {
    values: VecDeque<f64>,
    pushed: u64,
}

impl History {
    /// A history of these readings.
    #[cfg(test)]
    pub fn of(values: &[f64]) -> Self {
        let h = Self::default();
        for &v in values {
            h.push(v);
        }
        h.current()
    }

    /// Appends a reading; the oldest goes beyond [`HISTORY`].
    fn push(&self, v: f64) {
        let mut r = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if r.values.len() == HISTORY {
            r.values.pop_front();
        }
        r.values.push_back(v);
        r.pushed = r.pushed.saturating_add(1);
    }

    /// This ring as of now: what a harvest hands over.
    fn current(&self) -> Self {
        let upto = self.ring.lock().unwrap_or_else(|p| p.into_inner()).pushed;
        Self {
            ring: Arc::clone(&self.ring),
            upto,
        }
    }

    /// The last `n` (at most) readings as of this harvest, oldest first.
    pub fn last(&self, n: usize) -> Vec<f64> {
        let r = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        // Readings pushed after this harvest are not its own.
        let newer = usize::try_from(r.pushed.saturating_sub(self.upto)).unwrap_or(usize::MAX);
        let end = r.values.len().saturating_sub(newer);
        r.values
            .range(end.saturating_sub(n)..end)
            .copied()
            .collect()
    }
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("upto", &self.upto)
            .finish_non_exhaustive()
    }
}

impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        self.last(HISTORY) == other.last(HISTORY)
    }
}

/// Everything one collection pass saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Harvest {
    /// The namespace directories read.
    pub dirs: Vec<String>,
    /// Every registry file, readable or not, in namespace order (pid, path).
    pub registries: Vec<RegistryHarvest>,
    /// The scheduler agent's view, when a trusted `topdeck-agent` registry exists.
    pub scheduler: Option<SchedulerHarvest>,
    /// Registries named `topdeck-agent` that are not the agent's, ignored.
    pub spoofed_agents: usize,
}

/// Whether a registry's writer runs, or whether its file could be read at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The writer holds its file: values move.
    Alive,
    /// The writer is gone: values are frozen, rates are zero.
    Dead,
    /// The file could not be read; `error` says why.
    Broken,
}

/// One registry file as of this pass.
#[derive(Debug, Clone, Serialize)]
pub struct RegistryHarvest {
    /// The file, or for a broken file that could not be named, its error.
    pub path: String,
    /// Writer's pid; `None` when the header could not be read.
    pub pid: Option<u32>,
    /// Writer's process name (`?` when unknown).
    pub process: String,
    /// Registry name (`?` when unknown).
    pub registry: String,
    /// Alive, dead or broken.
    pub state: State,
    /// Metrics published.
    pub metrics: usize,
    /// Why the file (or this pass's read of it) failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Its metrics, in registration order.
    pub series: Vec<Series>,
    /// For a registry named `topdeck-agent` that is not the agent's: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub untrusted: Option<Untrusted>,
    /// For a registry named `topdeck-agent` that is the agent's: the uid it
    /// belongs to (root, or the reader itself).
    #[serde(skip)]
    pub agent_owner: Option<u32>,
}

impl RegistryHarvest {
    /// The counter with the highest rate, and that rate.
    pub fn busiest(&self) -> Option<(&Series, f64)> {
        self.series
            .iter()
            .filter_map(|s| match s.reading {
                Reading::Counter { rate: Some(r), .. } => Some((s, r)),
                _ => None,
            })
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    fn broken(path: String, error: String) -> Self {
        Self {
            path,
            pid: None,
            process: "?".into(),
            registry: "?".into(),
            state: State::Broken,
            metrics: 0,
            error: Some(error),
            series: Vec::new(),
            untrusted: None,
            agent_owner: None,
        }
    }
}

/// What a metric is, as opposed to what it did: made once when the metric
/// is first seen and shared by every later pass, so that a pass over
/// 100,000 series copies no strings.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub struct Meta {
    /// Metric name.
    pub name: String,
    /// Labels, in registration order.
    #[serde(serialize_with = "labels_as_object")]
    pub labels: Vec<(String, String)>,
    /// Unit (may be empty).
    pub unit: String,
}

impl Meta {
    fn of(m: &MetricInfo) -> Arc<Self> {
        Arc::new(Self {
            name: m.name.clone(),
            labels: m.labels.clone(),
            unit: m.unit.clone(),
        })
    }
}

/// One metric (name and labels) as of this pass.
#[derive(Debug, Clone, Serialize)]
pub struct Series {
    /// Name, labels and unit.
    #[serde(flatten)]
    pub meta: Arc<Meta>,
    /// What it did over the interval.
    #[serde(flatten)]
    pub reading: Reading,
    /// Past readings, this pass's last.
    #[serde(skip)]
    pub history: History,
}

impl Series {
    /// `name{k="v",...}`: the series' identity, as a person reads it.
    pub fn id(&self) -> String {
        let m = &self.meta;
        if m.labels.is_empty() {
            return m.name.clone();
        }
        let labels: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        format!("{}{{{}}}", m.name, labels.join(","))
    }

    /// The value of label `key`, or `""`.
    pub fn label(&self, key: &str) -> &str {
        self.meta
            .labels
            .iter()
            .find(|(k, _)| k == key)
            .map_or("", |(_, v)| v.as_str())
    }

    /// Events per second: a counter's rate, a histogram's observation rate.
    pub fn rate(&self) -> Option<f64> {
        match self.reading {
            Reading::Counter { rate, .. } | Reading::Histogram { rate, .. } => rate,
            Reading::Gauge { .. } => None,
        }
    }
}

fn labels_as_object<S: Serializer>(labels: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(labels.iter().map(|(k, v)| (k, v)))
}

/// A metric's reading over one interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reading {
    /// A counter: its total, and its rate per second over the interval
    /// (`None` on the first read, or when it went backwards: a reset).
    Counter {
        /// Total since the writer started.
        total: u64,
        /// Increase per second over the interval.
        rate: Option<f64>,
    },
    /// A gauge's current value.
    Gauge {
        /// The value (integer gauges converted).
        value: f64,
    },
    /// A histogram over the interval (since start on the first read).
    Histogram {
        /// Observations in the interval.
        count: u64,
        /// Observations per second (`None` on the first read).
        rate: Option<f64>,
        /// Median of the interval's observations.
        p50: Option<f64>,
        /// 99th percentile of the interval's observations.
        p99: Option<f64>,
    },
}

impl Reading {
    /// The number a sparkline plots for this reading; none for a first
    /// read (a histogram's then covers everything since start, not an
    /// interval, and would plot as a spike) or a counter reset.
    fn plotted(&self) -> Option<f64> {
        match *self {
            Reading::Counter { rate, .. } => rate,
            Reading::Gauge { value } => Some(value),
            Reading::Histogram { rate: None, .. } => None,
            Reading::Histogram { p99, .. } => Some(p99.unwrap_or(0.0)),
        }
    }
}

/// The scheduler agent's metrics, read generically from their names.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedulerHarvest {
    /// Pid of the agent whose registry this is.
    pub pid: Option<u32>,
    /// Whether that agent still runs.
    pub state: Option<State>,
    /// Run-queue latency per container, worst p99 first.
    pub containers: Vec<ContainerRunq>,
    /// Verdicts that hold now.
    pub verdicts: Vec<Verdict>,
}

/// One container's run-queue latency over the interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerRunq {
    /// Container name as the agent labels it.
    pub container: String,
    /// Its cgroup path.
    pub cgroup: String,
    /// Run-queue waits per second.
    pub rate: Option<f64>,
    /// Median wait, seconds.
    pub p50: Option<f64>,
    /// 99th percentile wait, seconds.
    pub p99: Option<f64>,
    /// Past p99s.
    #[serde(skip)]
    pub history: History,
}

/// A verdict the agent holds: `cgroup` suffers, `culprit` is why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// The cgroup that waits.
    pub cgroup: String,
    /// Who it waits behind (a cgroup, or the cgroup itself for quota).
    pub culprit: String,
    /// `noisy_neighbour` or `own_quota` (shown as the agent names it).
    pub kind: String,
}

/// The agent's view from the registries of one pass: the live trusted
/// `topdeck-agent` registry if there is one (root's before the reader's
/// own), else a dead one; `None` when there is no such registry.
pub fn scheduler(registries: &[RegistryHarvest]) -> Option<SchedulerHarvest> {
    let agent = registries
        .iter()
        .filter(|r| r.registry == AGENT_REGISTRY && r.state != State::Broken)
        .filter_map(|r| r.agent_owner.map(|owner| (r, owner)))
        .min_by_key(|(r, owner)| (r.state != State::Alive, *owner != 0))
        .map(|(r, _)| r)?;
    let mut view = SchedulerHarvest {
        pid: agent.pid,
        state: Some(agent.state),
        ..SchedulerHarvest::default()
    };
    for s in &agent.series {
        match (s.meta.name.as_str(), &s.reading) {
            (RUNQ_METRIC, Reading::Histogram { rate, p50, p99, .. }) => {
                view.containers.push(ContainerRunq {
                    container: s.label("container").to_owned(),
                    cgroup: s.label("cgroup").to_owned(),
                    rate: *rate,
                    p50: *p50,
                    p99: *p99,
                    history: s.history.clone(),
                });
            }
            (VERDICT_METRIC, Reading::Gauge { value }) if *value == 1.0 => {
                view.verdicts.push(Verdict {
                    cgroup: s.label("cgroup").to_owned(),
                    culprit: s.label("culprit").to_owned(),
                    kind: s.label("kind").to_owned(),
                });
            }
            _ => {}
        }
    }
    // Worst first; containers with nothing observed last, then by name.
    view.containers.sort_by(|a, b| {
        let (pa, pb) = (a.p99.unwrap_or(-1.0), b.p99.unwrap_or(-1.0));
        pb.total_cmp(&pa)
            .then_with(|| a.container.cmp(&b.container))
    });
    Some(view)
}

/// A registry kept open between passes.
struct Tracked {
    /// Writer and registry name: a newer file of both takes over (below).
    owner: (u32, String),
    reader: RegistryReader,
    prev: Option<(Snapshot, Instant)>,
    /// What is kept of each metric of `prev`, in its order.
    kept: Vec<Kept>,
}

/// What a metric keeps from pass to pass: its strings and its history.
#[derive(Clone)]
struct Kept {
    meta: Arc<Meta>,
    ring: History,
}

/// Reads the namespace pass after pass, keeping each registry's reader and
/// last snapshot so that the next pass can compute rates.
pub struct Collector {
    ns: Namespace,
    tracked: HashMap<PathBuf, Tracked>,
}

impl Collector {
    /// A collector over `ns`; nothing is read until [`Collector::harvest`].
    pub fn new(ns: Namespace) -> Self {
        Self {
            ns,
            tracked: HashMap::new(),
        }
    }

    /// One pass: lists the namespace and reads every registry once.
    pub fn harvest(&mut self) -> Harvest {
        let listing = self.ns.list();
        let mut registries = Vec::with_capacity(listing.entries.len() + listing.errors.len());
        // Readers of files that are gone are dropped (and their mappings with them).
        let listed: std::collections::HashSet<&PathBuf> =
            listing.entries.iter().map(|e| &e.path).collect();
        // A file that went away while a new file of the same writer and
        // registry name appeared hands its last snapshot and histories to
        // the new one: the agent rotates to a fresh file with its values
        // carried over, and its rates and sparklines go on across that.
        let gone: Vec<PathBuf> = self
            .tracked
            .keys()
            .filter(|p| !listed.contains(p))
            .cloned()
            .collect();
        let mut heirs: HashMap<(u32, String), Tracked> = HashMap::new();
        for p in gone {
            if let Some(t) = self.tracked.remove(&p) {
                heirs.insert(t.owner.clone(), t);
            }
        }
        for entry in &listing.entries {
            let mut row = self.read(entry, &mut heirs);
            if entry.registry_name == AGENT_REGISTRY {
                // Looked at every pass: a file's owner and writer can change
                // between passes, and the check is a few stat calls.
                match trust::verify_agent(entry) {
                    Ok(t) => row.agent_owner = Some(t.owner),
                    Err(u) => row.untrusted = Some(u),
                }
            }
            registries.push(row);
        }
        for e in &listing.errors {
            let path = e
                .path()
                .map_or_else(|| e.message().to_owned(), |p| p.display().to_string());
            registries.push(RegistryHarvest::broken(path, format!("{e:#}")));
        }
        let scheduler = scheduler(&registries);
        let spoofed_agents = registries.iter().filter(|r| r.untrusted.is_some()).count();
        Harvest {
            dirs: self
                .ns
                .dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect(),
            registries,
            scheduler,
            spoofed_agents,
        }
    }

    fn read(
        &mut self,
        entry: &RegistryEntry,
        heirs: &mut HashMap<(u32, String), Tracked>,
    ) -> RegistryHarvest {
        let path = entry.path.display().to_string();
        let tracked = match self.tracked.entry(entry.path.clone()) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => match entry.open() {
                // Kept across passes: no descriptor per registry (liveness
                // comes from the listing).
                Ok(mut reader) => {
                    let owner = (entry.pid, entry.registry_name.clone());
                    let (prev, kept) = match heirs.remove(&owner) {
                        Some(t) => (t.prev, t.kept),
                        None => (None, Vec::new()),
                    };
                    v.insert(Tracked {
                        owner,
                        reader: {
                            reader.detach();
                            reader
                        },
                        prev,
                        kept,
                    })
                }
                Err(e) => return RegistryHarvest::broken(path, format!("{e:#}")),
            },
        };
        let mut out = RegistryHarvest {
            path,
            pid: Some(entry.pid),
            process: entry.process_name.clone(),
            registry: entry.registry_name.clone(),
            state: match entry.liveness {
                Liveness::Alive => State::Alive,
                Liveness::Dead => State::Dead,
            },
            metrics: entry.metrics as usize,
            error: None,
            series: Vec::new(),
            untrusted: None,
            agent_owner: None,
        };
        let snap = match tracked.reader.snapshot() {
            Ok(s) => s,
            Err(e) => {
                out.state = State::Broken;
                out.error = Some(format!("{e:#}"));
                return out;
            }
        };
        let at = now();
        out.metrics = snap.len();
        let now_m: Vec<(&MetricInfo, &Value)> = snap.iter().collect();
        let before_m: Vec<(&MetricInfo, &Value)> = tracked
            .prev
            .as_ref()
            .map(|(b, _)| b.iter().collect())
            .unwrap_or_default();
        let was = align(&before_m, &now_m);
        // A series keeps its strings and ring; a new one gets its own; a
        // vanished one's go.
        let kept: Vec<Kept> = was
            .iter()
            .zip(&now_m)
            .map(|(w, (m, _))| {
                w.and_then(|j| tracked.kept.get(j).cloned())
                    .unwrap_or_else(|| Kept {
                        meta: Meta::of(m),
                        ring: History::default(),
                    })
            })
            .collect();
        let before = tracked
            .prev
            .as_ref()
            .map(|(_, t)| (before_m.as_slice(), at.duration_since(*t)));
        out.series = readings_aligned(before, &now_m, &was, kept.iter().map(|k| &k.meta));
        for (s, k) in out.series.iter_mut().zip(&kept) {
            if let Some(v) = s.reading.plotted() {
                k.ring.push(v);
            }
            s.history = k.ring.current();
        }
        drop((now_m, before_m));
        tracked.kept = kept;
        tracked.prev = Some((snap, at));
        out
    }
}

/// A metric's identity across snapshots: name and labels.
type SeriesKey<'a> = (&'a str, &'a [(String, String)]);

/// For each metric of `now`, its index in `before`, if it was there. Metrics
/// are only ever appended, so the same position almost always holds the same
/// metric and costs one comparison; a lookup table is built only when one
/// does not.
fn align(before: &[(&MetricInfo, &Value)], now: &[(&MetricInfo, &Value)]) -> Vec<Option<usize>> {
    let same = |a: &MetricInfo, b: &MetricInfo| a.name == b.name && a.labels == b.labels;
    let mut index: Option<HashMap<SeriesKey, usize>> = None;
    now.iter()
        .enumerate()
        .map(|(i, (m, _))| {
            if before.get(i).is_some_and(|(p, _)| same(p, m)) {
                return Some(i);
            }
            let index = index.get_or_insert_with(|| {
                before
                    .iter()
                    .enumerate()
                    .map(|(j, (p, _))| ((p.name.as_str(), p.labels.as_slice()), j))
                    .collect()
            });
            index.get(&(m.name.as_str(), m.labels.as_slice())).copied()
        })
        .collect()
}

/// What each metric of `now` did since `before` (taken `elapsed` earlier).
/// A metric registered in between counts from zero; without `before`,
/// counters have no rate and histograms cover everything since start.
#[cfg(test)]
fn readings(before: Option<(&Snapshot, Duration)>, now: &Snapshot) -> Vec<Series> {
    let now_m: Vec<(&MetricInfo, &Value)> = now.iter().collect();
    let metas: Vec<Arc<Meta>> = now_m.iter().map(|(m, _)| Meta::of(m)).collect();
    match before {
        Some((b, elapsed)) => {
            let before_m: Vec<(&MetricInfo, &Value)> = b.iter().collect();
            let was = align(&before_m, &now_m);
            readings_aligned(Some((&before_m, elapsed)), &now_m, &was, metas.iter())
        }
        None => readings_aligned(None, &now_m, &vec![None; now_m.len()], metas.iter()),
    }
}

/// [`readings`] with each metric's index in `before` known (`was`) and
/// its strings at hand (`metas`).
fn readings_aligned<'a>(
    before: Option<(&[(&MetricInfo, &Value)], Duration)>,
    now: &[(&MetricInfo, &Value)],
    was: &[Option<usize>],
    metas: impl Iterator<Item = &'a Arc<Meta>>,
) -> Vec<Series> {
    let secs = before.map(|(_, d)| d.as_secs_f64()).filter(|s| *s > 0.0);
    now.iter()
        .zip(was)
        .zip(metas)
        .map(|((&(_, v), w), meta)| {
            let old = before
                .zip(*w)
                .and_then(|((b, _), j)| b.get(j))
                .map(|(_, v)| *v);
            Series {
                meta: Arc::clone(meta),
                reading: reading(v, old, before.is_some(), secs),
                history: History::default(),
            }
        })
        .collect()
}

/// One metric's reading; `had_before` says whether there was a previous
/// snapshot at all (a metric missing from it is new, and counts from zero).
fn reading(now: &Value, was: Option<&Value>, had_before: bool, secs: Option<f64>) -> Reading {
    match now {
        Value::Counter(c) => {
            let prev = match was {
                Some(Value::Counter(p)) => Some(*p),
                _ if had_before => Some(0),
                _ => None,
            };
            // A counter that went backwards was reset: no rate for this interval.
            let rate = prev
                .and_then(|p| c.checked_sub(p))
                .and_then(|d| secs.map(|s| d as f64 / s));
            Reading::Counter { total: *c, rate }
        }
        Value::Gauge(g) => Reading::Gauge { value: *g as f64 },
        Value::GaugeF64(g) => Reading::Gauge { value: *g },
        Value::Histogram(h) => {
            let d = match was {
                Some(Value::Histogram(p)) => h.since(p),
                _ => h.clone(),
            };
            Reading::Histogram {
                count: d.count,
                rate: secs.filter(|_| had_before).map(|s| d.count as f64 / s),
                p50: d.quantile(0.5),
                p99: d.quantile(0.99),
            }
        }
    }
}

/// Starts the collection thread: a harvest now, then one every `interval`
/// until `cancel` fires or the receiver is gone. A panic in a pass is sent
/// as [`Event::Failed`] so that the main loop can stop and say so.
pub fn spawn(
    mut collector: Collector,
    interval: Duration,
    tx: Sender<Event>,
    cancel: Cancel,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("topdeck-collect".into())
        .spawn(move || {
            let mut next = now();
            loop {
                let pass =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| collector.harvest()));
                let event = match pass {
                    Ok(h) => Event::Harvest(Box::new(h)),
                    Err(_) => Event::Failed("the collection thread panicked".into()),
                };
                let failed = matches!(event, Event::Failed(_));
                if tx.send(event).is_err() || failed {
                    return;
                }
                // A fixed schedule, so that intervals do not drift by the pass's own time.
                next += interval;
                let wait = next.saturating_duration_since(now());
                if wait.is_zero() {
                    next = now();
                }
                if cancel.wait(wait) {
                    return;
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck::Registry;

    fn registry(dir: &std::path::Path, name: &str) -> Registry {
        Registry::builder().dir(dir).name(name).build().unwrap()
    }

    #[test]
    fn counters_become_rates_over_the_interval() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), "svc");
        let c = r.counter("jobs_total", &[], "Jobs.", "").unwrap();
        c.add(10);
        let mut reader = RegistryReader::open(r.path()).unwrap();
        let before = reader.snapshot().unwrap();
        c.add(50);
        let after = reader.snapshot().unwrap();
        let s = readings(Some((&before, Duration::from_millis(500))), &after);
        assert_eq!(
            s[0].reading,
            Reading::Counter {
                total: 60,
                rate: Some(100.0)
            }
        );
        // On the first read there is no rate yet.
        let first = readings(None, &after);
        assert_eq!(
            first[0].reading,
            Reading::Counter {
                total: 60,
                rate: None
            }
        );
    }

    #[test]
    fn a_counter_that_went_backwards_has_no_rate() {
        let r = reading(
            &Value::Counter(3),
            Some(&Value::Counter(9)),
            true,
            Some(1.0),
        );
        assert_eq!(
            r,
            Reading::Counter {
                total: 3,
                rate: None
            }
        );
    }

    #[test]
    fn histograms_are_quantiles_of_the_interval_only() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), "svc");
        let h = r
            .histogram("wait_seconds", &[], "Waits.", "seconds")
            .unwrap();
        for _ in 0..1000 {
            h.record(0.001);
        }
        let mut reader = RegistryReader::open(r.path()).unwrap();
        let before = reader.snapshot().unwrap();
        for _ in 0..100 {
            h.record(1.0);
        }
        let after = reader.snapshot().unwrap();
        let s = readings(Some((&before, Duration::from_secs(2))), &after);
        let Reading::Histogram {
            count,
            rate,
            p50,
            p99,
        } = s[0].reading
        else {
            panic!("{:?}", s[0]);
        };
        assert_eq!(count, 100);
        assert_eq!(rate, Some(50.0));
        // Every observation of the interval is 1s: the 1ms ones are history.
        let p50 = p50.unwrap();
        assert!((0.5..=1.0).contains(&p50), "{p50}");
        assert!(p99.unwrap() >= p50);
    }

    #[test]
    fn a_pass_shows_live_dead_and_broken_files_and_keeps_history() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), "svc");
        let c = r.counter("jobs_total", &[], "Jobs.", "").unwrap();
        std::fs::write(dir.path().join("1-1-0.topdeck"), b"not a registry").unwrap();
        let mut col = Collector::new(Namespace::at(dir.path()));
        let first = col.harvest();
        c.add(7);
        let second = col.harvest();
        let svc = second
            .registries
            .iter()
            .find(|r| r.registry == "svc")
            .unwrap();
        assert_eq!(svc.state, State::Alive);
        assert_eq!(svc.pid, Some(std::process::id()));
        // The first read has no interval, so nothing to plot yet.
        assert_eq!(svc.series[0].history.last(HISTORY).len(), 1);
        assert!(matches!(
            svc.series[0].reading,
            Reading::Counter { total: 7, rate: Some(r) } if r > 0.0
        ));
        for h in [&first, &second] {
            let broken = h
                .registries
                .iter()
                .find(|r| r.state == State::Broken)
                .expect("the bad file is shown");
            assert!(broken.error.as_deref().unwrap().contains("1-1-0.topdeck"));
        }
        assert!(second.scheduler.is_none());
    }

    #[test]
    fn the_agent_registry_becomes_a_scheduler_view() {
        let dir = tempfile::tempdir().unwrap();
        let agent = registry(dir.path(), AGENT_REGISTRY);
        let web = agent
            .histogram(
                RUNQ_METRIC,
                &[("cgroup", "/web"), ("container", "web")],
                "Run-queue waits.",
                "seconds",
            )
            .unwrap();
        let batch = agent
            .histogram(
                RUNQ_METRIC,
                &[("cgroup", "/batch"), ("container", "batch")],
                "Run-queue waits.",
                "seconds",
            )
            .unwrap();
        let verdict = |culprit, kind| {
            agent
                .gauge(
                    VERDICT_METRIC,
                    &[("cgroup", "/web"), ("culprit", culprit), ("kind", kind)],
                    "Verdict.",
                    "",
                )
                .unwrap()
        };
        verdict("/batch", "noisy_neighbour").set(1);
        verdict("/web", "own_quota").set(0);
        let mut col = Collector::new(Namespace::at(dir.path()));
        col.harvest();
        for _ in 0..100 {
            web.record(0.010);
            batch.record(0.0001);
        }
        let view = col.harvest().scheduler.expect("a scheduler view");
        assert_eq!(view.state, Some(State::Alive));
        let names: Vec<&str> = view
            .containers
            .iter()
            .map(|c| c.container.as_str())
            .collect();
        assert_eq!(names, ["web", "batch"], "worst p99 first");
        assert_eq!(view.containers[0].cgroup, "/web");
        assert_eq!(
            view.verdicts,
            [Verdict {
                cgroup: "/web".into(),
                culprit: "/batch".into(),
                kind: "noisy_neighbour".into()
            }]
        );
    }

    #[test]
    fn only_a_trusted_agent_registry_feeds_the_scheduler_view_root_first() {
        let agent = |pid, owner: Option<u32>, untrusted: bool, culprit: &str| {
            let mut r = crate::top::app::tests::registry(pid, "topdeck", vec![]);
            r.registry = AGENT_REGISTRY.into();
            r.agent_owner = owner;
            r.untrusted = untrusted.then(|| {
                let mut f = trust_facts();
                f.path = r.path.clone().into();
                trust::judge(&f, 0).unwrap_err()
            });
            r.series.push(Series {
                meta: Arc::new(Meta {
                    name: VERDICT_METRIC.into(),
                    labels: vec![
                        ("cgroup".into(), "/web".into()),
                        ("culprit".into(), culprit.into()),
                        ("kind".into(), "noisy_neighbour".into()),
                    ],
                    unit: String::new(),
                }),
                reading: Reading::Gauge { value: 1.0 },
                history: History::default(),
            });
            r
        };
        let spoof = agent(1, None, true, "/fabricated");
        let own = agent(2, Some(1001), false, "/own");
        let root = agent(3, Some(0), false, "/real");
        assert_eq!(scheduler(std::slice::from_ref(&spoof)), None);
        let view = scheduler(&[spoof.clone(), own.clone()]).unwrap();
        assert_eq!(view.pid, Some(2));
        let view = scheduler(&[spoof, own, root]).unwrap();
        assert_eq!(view.pid, Some(3), "root's agent before the reader's own");
        assert_eq!(view.verdicts[0].culprit, "/real");
    }

    /// Facts of a registry owned by uid 1001: untrusted by root.
    fn trust_facts() -> trust::Facts {
        let n = |kind, uid, mode| trust::Node { kind, uid, mode };
        trust::Facts {
            path: "/dev/shm/topdeck-1001/1-1-1.topdeck".into(),
            file: Some(n(trust::Kind::File, 1001, 0o644)),
            dir: "/dev/shm/topdeck-1001".into(),
            dir_node: Some(n(trust::Kind::Dir, 1001, 0o755)),
            ancestors: Some(vec![]),
            alive: true,
            pid: 1,
            start_ticks: 1,
            process: None,
        }
    }

    #[test]
    fn a_trusted_agent_registry_is_not_counted_as_spoofed() {
        let dir = tempfile::tempdir().unwrap();
        let _agent = registry(dir.path(), AGENT_REGISTRY);
        let h = Collector::new(Namespace::at(dir.path())).harvest();
        assert!(h.scheduler.is_some());
        assert_eq!(h.spoofed_agents, 0);
        assert!(h.registries[0].untrusted.is_none());
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(json["spoofed_agents"], 0);
    }

    #[test]
    fn a_harvest_sees_its_history_as_it_was_and_the_ring_is_bounded() {
        let ring = History::default();
        ring.push(1.0);
        ring.push(2.0);
        let then = ring.current();
        ring.push(3.0);
        assert_eq!(
            then.last(10),
            [1.0, 2.0],
            "a later reading is not this harvest's"
        );
        assert_eq!(then.last(1), [2.0]);
        assert_eq!(ring.current().last(10), [1.0, 2.0, 3.0]);
        for i in 0..HISTORY * 2 {
            ring.push(i as f64);
        }
        let all = ring.current().last(usize::MAX);
        assert_eq!(all.len(), HISTORY);
        assert_eq!(all.last(), Some(&((HISTORY * 2 - 1) as f64)));
    }

    #[test]
    fn metrics_are_matched_by_position_and_else_by_name_and_labels() {
        let info = |name: &str, l: &str| MetricInfo {
            kind: topdeck::MetricKind::Counter,
            name: name.into(),
            labels: vec![("k".into(), l.into())],
            help: String::new(),
            unit: String::new(),
        };
        let (a, b, b2, c) = (
            info("a", "1"),
            info("b", "1"),
            info("b", "2"),
            info("c", "1"),
        );
        let v = Value::Counter(0);
        let before = [(&a, &v), (&b, &v), (&c, &v)];
        // `b{k="2"}` new in `b`'s place, `b` moved to the end, `a` and `c` where they were.
        let now = [(&a, &v), (&b2, &v), (&c, &v), (&b, &v)];
        assert_eq!(align(&before, &now), [Some(0), None, Some(2), Some(1)]);
    }

    #[test]
    fn harvests_serialize_with_labels_as_objects_and_a_kind_tag() {
        let s = Series {
            meta: Arc::new(Meta {
                name: "x_total".into(),
                labels: vec![("a".into(), "1".into())],
                unit: String::new(),
            }),
            reading: Reading::Counter {
                total: 2,
                rate: Some(1.0),
            },
            history: History::of(&[1.0]),
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["labels"]["a"], "1");
        assert_eq!(v["kind"], "counter");
        assert_eq!(v["rate"], 1.0);
        assert!(v.get("history").is_none());
    }
}
