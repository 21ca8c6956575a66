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

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use topdeck::{Liveness, MetricInfo, Namespace, RegistryEntry, RegistryReader, Snapshot, Value};
use topdeck_sched::{trust, AgentReading};

use super::agent::{scheduler, AGENT_REGISTRY};
use super::event::{Cancel, Event};
use super::harvest::{Harvest, History, Meta, Reading, RegistryHarvest, Series, State};

/// The one clock of this module, so that the topdeck clock can replace
/// `std::time::Instant` in one place.
fn now() -> Instant {
    Instant::now()
}

/// Reads the namespace pass after pass: each registry's reader stays open
/// ([`Readers`]) with its last snapshot ([`Baseline`]), so that the next
/// pass can compute rates.
pub struct Collector {
    ns: Namespace,
    readers: Readers,
}

impl Collector {
    /// A collector over `ns`; nothing is read until [`Collector::harvest`].
    pub fn new(ns: Namespace) -> Self {
        Self {
            ns,
            readers: Readers::default(),
        }
    }

    /// One pass: lists the namespace and reads every registry once.
    pub fn harvest(&mut self) -> Harvest {
        let listing = self.ns.list();
        let mut registries = Vec::with_capacity(listing.entries.len() + listing.errors.len());
        let mut heirs = self.readers.retire(&listing.entries);
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

    /// One registry's row: a snapshot of its reader, diffed against the last.
    fn read(&mut self, entry: &RegistryEntry, heirs: &mut Heirs) -> RegistryHarvest {
        let path = entry.path.display().to_string();
        let open = match self.readers.open(entry, heirs) {
            Ok(o) => o,
            Err(e) => return RegistryHarvest::broken(path, format!("{e:#}")),
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
            agent_verdicts: Vec::new(),
        };
        let snap = match open.reader.snapshot() {
            Ok(s) => s,
            Err(e) => {
                out.state = State::Broken;
                out.error = Some(format!("{e:#}"));
                return out;
            }
        };
        out.metrics = snap.len();
        if entry.registry_name == AGENT_REGISTRY {
            out.agent_verdicts = AgentReading::parse(&snap).verdicts;
        }
        out.series = open.baseline.diff(snap, now());
        out
    }
}

/// The reader cache: every listed registry file kept open between passes,
/// so that a pass costs one snapshot per registry plus the listing.
#[derive(Default)]
struct Readers {
    by_path: HashMap<PathBuf, Open>,
}

/// A registry kept open between passes.
struct Open {
    /// Writer and registry name: a newer file of both takes over (see
    /// [`Readers::retire`]).
    owner: Owner,
    reader: RegistryReader,
    baseline: Baseline,
}

/// A registry's writer pid and registry name.
type Owner = (u32, String);

/// The baselines of files gone this pass, by owner, for a new file of the
/// same owner to take over.
type Heirs = HashMap<Owner, Baseline>;

impl Readers {
    /// Drops the readers of files no longer `listed` (and their mappings
    /// with them) and returns their baselines. A file that went away while
    /// a new file of the same writer and registry name appeared hands its
    /// last snapshot and histories to the new one: the agent rotates to a
    /// fresh file with its values carried over, and its rates and
    /// sparklines go on across that.
    fn retire(&mut self, listed: &[RegistryEntry]) -> Heirs {
        let listed: HashSet<&PathBuf> = listed.iter().map(|e| &e.path).collect();
        let gone: Vec<PathBuf> = self
            .by_path
            .keys()
            .filter(|p| !listed.contains(p))
            .cloned()
            .collect();
        let mut heirs = Heirs::new();
        for p in gone {
            if let Some(o) = self.by_path.remove(&p) {
                heirs.insert(o.owner, o.baseline);
            }
        }
        heirs
    }

    /// The open reader of `entry`, opened now when its file is new, with
    /// the baseline its owner left in `heirs`, if any.
    fn open(&mut self, entry: &RegistryEntry, heirs: &mut Heirs) -> topdeck::Result<&mut Open> {
        match self.by_path.entry(entry.path.clone()) {
            Entry::Occupied(o) => Ok(o.into_mut()),
            Entry::Vacant(v) => {
                let mut reader = entry.open()?;
                // Kept across passes: no descriptor per registry (liveness
                // comes from the listing).
                reader.detach();
                let owner = (entry.pid, entry.registry_name.clone());
                let baseline = heirs.remove(&owner).unwrap_or_default();
                Ok(v.insert(Open {
                    owner,
                    reader,
                    baseline,
                }))
            }
        }
    }
}

/// What a registry's next snapshot is diffed against: the last one, when
/// it was taken, and what each of its metrics keeps from pass to pass.
#[derive(Default)]
struct Baseline {
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

impl Baseline {
    /// The series of `snap`, taken at `at`: what each did since the last
    /// snapshot, its history one reading longer. `snap` becomes the last.
    fn diff(&mut self, snap: Snapshot, at: Instant) -> Vec<Series> {
        let now_m: Vec<(&MetricInfo, &Value)> = snap.iter().collect();
        let before_m: Vec<(&MetricInfo, &Value)> = self
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
                w.and_then(|j| self.kept.get(j).cloned())
                    .unwrap_or_else(|| Kept {
                        meta: Meta::of(m),
                        ring: History::default(),
                    })
            })
            .collect();
        let before = self
            .prev
            .as_ref()
            .map(|(_, t)| (before_m.as_slice(), at.duration_since(*t)));
        let mut series = readings_aligned(before, &now_m, &was, kept.iter().map(|k| &k.meta));
        for (s, k) in series.iter_mut().zip(&kept) {
            if let Some(v) = s.reading.plotted() {
                k.ring.push(v);
            }
            s.history = k.ring.current();
        }
        drop((now_m, before_m));
        self.kept = kept;
        self.prev = Some((snap, at));
        series
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
    use topdeck_sched::schema;
    use topdeck_sched::verdict::VerdictKind;
    const RUNQ_METRIC: &str = schema::RUNQ_LATENCY.name;
    const VERDICT_METRIC: &str = schema::VERDICT.name;
    use crate::top::history::HISTORY;
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
        let verdicts: Vec<(&str, VerdictKind, Vec<&str>)> = view
            .verdicts
            .iter()
            .map(|v| {
                let culprits = v.culprits.iter().map(|(c, _)| c.as_str()).collect();
                (v.victim.as_str(), v.kind, culprits)
            })
            .collect();
        assert_eq!(
            verdicts,
            [("/web", VerdictKind::NoisyNeighbour, vec!["/batch"])],
            "the verdict that holds, not the one set to 0"
        );
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
}
