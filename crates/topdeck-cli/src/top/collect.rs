// SPDX-License-Identifier: Apache-2.0
//! Collection for `topdeck top`: one pass over an [`Origin`]'s sources
//! produces a [`Harvest`], the only thing the rest of the view sees.
//! Counters become rates over the time between two snapshots of the same
//! source, histograms become p50/p99 of the observations made in that
//! time (bucket differences, not since start), gauges stay values. Each
//! series keeps a short history (counter rate, histogram p99, gauge
//! value) for sparklines. The origin is the host as it runs
//! ([`Live`]), or a recording, one moment a pass: the diffing, the
//! agent's figures and the census are the same for both.
//!
//! Live readers stay open between passes, so a pass costs one snapshot
//! per registry plus one directory listing. Files that cannot be read
//! become rows in state `broken` with the reason: the view shows them
//! instead of failing.
//!
//! A registry named `topdeck-agent` feeds the scheduler panel only when
//! `topdeck_sched::trust` accepts it as the agent's (the origin asks);
//! any other user can pick that name. An impostor stays in the list like
//! any registry, with the reason in `untrusted`, and is counted in
//! `spoofed_agents`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use topdeck::{Change, Liveness, Namespace, SeriesChange, Snapshot, Snapshots, Value};
use topdeck_sched::AgentReading;
use topdeck_sources::{Portholes, Source};

use super::agent::{scheduler, AGENT_REGISTRY};
use super::census::Census;
use super::event::{Cancel, Event};
use super::harvest::{Harvest, History, Meta, Reading, RegistryHarvest, Series, State};
use super::origin::{Found, Live, Origin};

/// The one clock of this module's schedule, so that the topdeck clock can
/// replace `std::time::Instant` in one place.
fn now() -> Instant {
    Instant::now()
}

/// Reads an origin's sources pass after pass, keeping the last snapshot
/// of each with what top keeps of it ([`Followed`]), so that the next
/// pass can compute rates.
pub struct Collector<O = Live> {
    origin: O,
    /// Every source of the last pass, by path.
    followed: HashMap<PathBuf, Followed>,
    /// The processes and containers, with their last CPU readings.
    census: Census,
}

impl Collector<Live> {
    /// A collector of the host as it runs: `ns` and other runtimes'
    /// `portholes`; nothing is read until [`Collector::harvest`].
    pub fn new(ns: Namespace, portholes: Option<Portholes>) -> Self {
        Self::of(Live::new(ns, portholes))
    }
}

impl<O: Origin> Collector<O> {
    /// A collector of `origin`'s sources.
    pub fn of(origin: O) -> Self {
        let census = Census::new(origin.procfs());
        Self {
            origin,
            followed: HashMap::new(),
            census,
        }
    }

    /// The origin, to feed or ask.
    pub fn origin_mut(&mut self) -> &mut O {
        &mut self.origin
    }

    /// One pass: finds every source and reads each once.
    pub fn harvest(&mut self) -> Harvest {
        let mut heirs = Heirs::new();
        let followed = &mut self.followed;
        let look = self.origin.look(&mut |path| {
            if let Some(gone) = followed.remove(path) {
                bequeath(&mut heirs, path.to_owned(), gone);
            }
        });
        if !heirs.is_empty() {
            // A file replaced at its own path is another source, not a
            // successor: it starts afresh.
            heirs.retain(|_, h| !look.sources.iter().any(|f| f.source.path == h.path));
        }
        let mut registries = Vec::with_capacity(look.sources.len() + look.errors.len());
        for found in look.sources {
            let row = self.read(found, &mut heirs, look.at_ns);
            registries.push(row);
        }
        for (path, e) in look.errors {
            registries.push(RegistryHarvest::broken(path, e));
        }
        let scheduler = scheduler(&registries);
        let (processes, containers) = self.census.pass(&registries, scheduler.as_ref());
        let spoofed_agents = registries.iter().filter(|r| r.untrusted.is_some()).count();
        Harvest {
            host: self.origin.host(),
            taken: Some(look.taken),
            dirs: look.dirs,
            registries,
            processes,
            containers,
            scheduler,
            spoofed_agents,
            recorded: look.recorded,
        }
    }

    /// One source's row: its snapshot, diffed against the last.
    fn read(&mut self, found: Found, heirs: &mut Heirs, at_ns: u64) -> RegistryHarvest {
        let Found {
            source,
            snapshot,
            agent,
        } = found;
        let path = source.path.display().to_string();
        let followed = self.followed.entry(source.path.clone()).or_default();
        if followed.open.owner.is_none() {
            inherit(followed, &source, heirs);
        }
        let state = match source.liveness {
            Liveness::Alive => State::Alive,
            Liveness::Dead => State::Dead,
        };
        let registry = source.registry_or_kind();
        let mut out = RegistryHarvest::read(
            path,
            source.pid,
            source.process.clone(),
            registry.to_owned(),
            state,
            Vec::new(),
        );
        out.metrics = source.metrics;
        (out.source, out.uid, out.container) = (
            Some(source.kind.name()),
            source.uid,
            source.container.clone(),
        );
        match agent {
            Some(Ok(t)) => out.agent_owner = Some(t.owner),
            Some(Err(u)) => out.untrusted = Some(u),
            None => {}
        }
        // On an error, what was kept stays as it was.
        let snap = match snapshot {
            Ok(s) => s,
            Err(e) => {
                out.state = State::Broken;
                out.error = Some(e);
                return out;
            }
        };
        let changes = followed.kept.push(snap);
        out.series = series_of(changes, &mut followed.open, at_ns);
        out.metrics = out.series.len();
        out.jvm = followed
            .kept
            .latest()
            .and_then(|snap| source.jvm_summary(snap));
        if registry == AGENT_REGISTRY {
            if let Some(snap) = followed.kept.latest() {
                let reading = AgentReading::parse(snap);
                out.agent_verdicts = reading.verdicts;
                out.agent_rule = reading.rule.map(|r| r.to_string());
            }
        }
        out
    }
}

/// One source followed from pass to pass: its last two snapshots and
/// what top keeps of it.
#[derive(Default)]
struct Followed {
    kept: Snapshots,
    open: Open,
}

/// What top keeps of a source from pass to pass, beside its snapshots.
#[derive(Default)]
struct Open {
    /// Writer and registry name, set on the first read: a newer file of
    /// both takes over what this one kept (see [`bequeath`]).
    owner: Option<Owner>,
    /// When the last snapshot was taken, ns on the origin's clock.
    at_ns: Option<u64>,
    /// What is kept of each metric of the last snapshot, in its order.
    kept: Vec<Kept>,
}

/// A source's writer pid and registry name (its kind, for other runtimes).
type Owner = (u32, String);

/// What the files gone this pass left, by owner, for a new file of the
/// same owner to take over.
type Heirs = HashMap<Owner, Heir>;

/// A gone file's last snapshot and what top kept of it.
struct Heir {
    path: PathBuf,
    latest: Option<Snapshot>,
    open: Open,
}

/// What a metric keeps from pass to pass: its strings and its history.
#[derive(Clone)]
struct Kept {
    meta: Arc<Meta>,
    ring: History,
}

/// Keeps what a source the origin dropped leaves (its file gone, or
/// replaced at its path, which [`Collector::harvest`] then leaves out). A
/// file that went away while a new file of the same writer and registry
/// name appeared hands its last snapshot and histories to the new one
/// ([`inherit`]): the agent rotates to a fresh file with its values
/// carried over, and its rates and sparklines go on across that.
fn bequeath(heirs: &mut Heirs, path: PathBuf, mut gone: Followed) {
    let Some(owner) = gone.open.owner.take() else {
        return;
    };
    let (_, latest) = gone.kept.take();
    heirs.insert(
        owner,
        Heir {
            path,
            latest,
            open: gone.open,
        },
    );
}

/// Marks a source read for the first time as its writer's, taking over
/// what its writer's previous file left in `heirs`, if any. A source with
/// no proven writer has no successor.
fn inherit(followed: &mut Followed, source: &Source, heirs: &mut Heirs) {
    let Some(pid) = source.pid else { return };
    let owner = (pid, source.registry_or_kind().to_owned());
    if let Some(heir) = heirs.remove(&owner) {
        followed.kept.set_latest(heir.latest);
        followed.open = heir.open;
    }
    followed.open.owner = Some(owner);
}

/// What each series did in `changes`, taken at `at_ns`, its history in
/// `open` one reading longer.
fn series_of(changes: topdeck::Changes<'_>, open: &mut Open, at_ns: u64) -> Vec<Series> {
    let kept = std::mem::take(&mut open.kept);
    let secs = open
        .at_ns
        .map(|b| at_ns.saturating_sub(b) as f64 / 1e9)
        .filter(|s| *s > 0.0);
    // A series keeps its strings and ring; a new one gets its own; a
    // vanished one's go.
    let mut next = Vec::with_capacity(changes.len());
    let mut series: Vec<Series> = changes
        .iter()
        .map(|s| {
            let k = s
                .before
                .and_then(|(j, _)| kept.get(j).cloned())
                .unwrap_or_else(|| Kept {
                    meta: Meta::of(s.info),
                    ring: History::default(),
                });
            let reading = reading(&s, secs);
            if let Some(v) = reading.plotted() {
                k.ring.push(v);
            }
            let series = Series {
                meta: Arc::clone(&k.meta),
                reading,
                history: k.ring.current(),
            };
            next.push(k);
            series
        })
        .collect();
    open.kept = next;
    open.at_ns = Some(at_ns);
    join_cpu_wait(&mut series);
    series
}

/// Sets each timer's share of its interval latency spent waiting for a
/// CPU, from its companions: the wait of its requests whose wait was known,
/// over their latency (all but the unknown ones').
fn join_cpu_wait(series: &mut [Series]) {
    /// A series by name and labels.
    type Id<'a> = (&'a str, &'a [(String, String)]);
    let sums: HashMap<Id<'_>, f64> = series
        .iter()
        .filter_map(|s| match s.reading {
            Reading::Histogram { sum, .. } => {
                Some(((s.meta.name.as_str(), s.meta.labels.as_slice()), sum))
            }
            _ => None,
        })
        .collect();
    let shares: Vec<Option<f64>> = series
        .iter()
        .map(|s| {
            let Reading::Histogram { sum, count, .. } = s.reading else {
                return None;
            };
            let (wait, unknown) = topdeck_format::waits::companions(&s.meta.name);
            let labels = s.meta.labels.as_slice();
            let wait = *sums.get(&(wait.as_str(), labels))?;
            let known = sum
                - sums
                    .get(&(unknown.as_str(), labels))
                    .copied()
                    .unwrap_or(0.0);
            (count > 0 && known > 0.0).then(|| (wait / known).clamp(0.0, 1.0))
        })
        .collect();
    for (s, share) in series.iter_mut().zip(shares) {
        if let Reading::Histogram { cpu_wait, .. } = &mut s.reading {
            *cpu_wait = share;
        }
    }
}

/// What one series did over an interval of `secs` (`None` on the first
/// read, which covers everything since start).
fn reading(s: &SeriesChange, secs: Option<f64>) -> Reading {
    match s.change() {
        // A series registered in between counts from zero.
        Change::Counter(d) => Reading::Counter {
            // The increase is the change; the total, the value now (a
            // counter's change comes only from a counter's value).
            total: match *s.value {
                Value::Counter(c) => c,
                _ => d,
            },
            rate: secs.map(|s| d as f64 / s),
        },
        // A counter that went backwards was reset: no rate for this interval.
        Change::CounterReset { now, .. } => Reading::Counter {
            total: now,
            rate: None,
        },
        Change::Gauge(g) => Reading::Gauge { value: g as f64 },
        Change::GaugeF64(g) => Reading::Gauge { value: g },
        Change::Histogram(d) => Reading::Histogram {
            count: d.count,
            rate: secs.map(|s| d.count as f64 / s),
            p50: d.quantile(0.5),
            p99: d.quantile(0.99),
            sum: d.sum,
            cpu_wait: None,
        },
        Change::CounterF64(d) => Reading::CounterF64 {
            total: match *s.value {
                Value::CounterF64(c) => c,
                _ => d,
            },
            rate: secs.map(|s| d / s),
        },
        Change::CounterF64Reset { now, .. } => Reading::CounterF64 {
            total: now,
            rate: None,
        },
        Change::Buckets(d) => Reading::Buckets {
            count: d.count,
            rate: secs.map(|s| d.count / s),
            p50: d.quantile(0.5),
            p99: d.quantile(0.99),
        },
        Change::Summary { count, sum } => Reading::Summary {
            count,
            rate: secs.map(|s| count / s),
            mean: (count > 0.0).then(|| sum / count),
        },
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
    use crate::top::harvest::ContainerRow;
    use topdeck_sched::schema;
    use topdeck_sched::verdict::VerdictKind;
    const RUNQ_METRIC: &str = schema::RUNQ_LATENCY.name;
    const VERDICT_METRIC: &str = schema::VERDICT.name;
    use crate::top::history::HISTORY;
    use topdeck::{MetricInfo, Registry, RegistryReader};

    fn registry(dir: &std::path::Path, name: &str) -> Registry {
        Registry::builder().dir(dir).name(name).build().unwrap()
    }

    fn counter(total: u64, rate: Option<f64>) -> Reading {
        Reading::Counter { total, rate }
    }

    /// What each metric of `now` did since `before`, taken `elapsed`
    /// earlier (everything since start without one).
    fn readings(before: Option<(&Snapshot, Duration)>, now: &Snapshot) -> Vec<Reading> {
        let start = Snapshot::default();
        let (b, secs) = before.map_or((&start, None), |(b, d)| (b, Some(d.as_secs_f64())));
        now.since(b).iter().map(|s| reading(&s, secs)).collect()
    }

    /// The series `name` of the registry at `path` in `h`.
    fn series<'a>(h: &'a Harvest, path: &std::path::Path, name: &str) -> &'a Series {
        let path = path.display().to_string();
        let r = h.registries.iter().find(|r| r.path == path).unwrap();
        r.series.iter().find(|s| s.meta.name == name).unwrap()
    }

    #[test]
    fn a_timers_interval_share_of_cpu_wait_comes_from_its_companions() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), "svc");
        let route = [("route", "/")];
        let latency = r.histogram("req_seconds", &route, "", "seconds").unwrap();
        let wait = r
            .histogram("req_cpu_wait_seconds", &route, "", "seconds")
            .unwrap();
        let unknown = r
            .histogram("req_cpu_wait_unknown_seconds", &route, "", "seconds")
            .unwrap();
        let other = r.histogram("db_seconds", &[], "", "seconds").unwrap();
        let mut reader = RegistryReader::open(r.path()).unwrap();
        latency.record(1.0);
        wait.record(0.9);
        let before = reader.snapshot().unwrap();
        // In the interval: 2 s of latency whose wait was known, 0.5 s of it
        // waiting; 4 s more whose wait was not.
        latency.record(2.0);
        wait.record(0.5);
        latency.record(4.0);
        unknown.record(4.0);
        other.record(1.0);
        let after = reader.snapshot().unwrap();
        let changes = after.since(&before);
        let mut series: Vec<Series> = changes
            .iter()
            .map(|c| Series {
                meta: Meta::of(c.info),
                reading: reading(&c, Some(1.0)),
                history: Default::default(),
            })
            .collect();
        join_cpu_wait(&mut series);
        let share = |name: &str| {
            let s = series.iter().find(|s| s.meta.name == name).unwrap();
            match s.reading {
                Reading::Histogram { cpu_wait, .. } => cpu_wait,
                _ => panic!("{s:?}"),
            }
        };
        let req = share("req_seconds").unwrap();
        assert!((req - 0.25).abs() < 1e-9, "{req}");
        assert_eq!(share("db_seconds"), None, "no companion, no share");
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
        assert_eq!(s[0], counter(60, Some(100.0)));
        // On the first read there is no rate yet.
        let first = readings(None, &after);
        assert_eq!(first[0], counter(60, None));
    }

    #[test]
    fn a_counter_that_went_backwards_has_no_rate() {
        let info = MetricInfo {
            kind: topdeck::MetricKind::Counter,
            name: "x_total".into(),
            labels: vec![],
            help: String::new(),
            unit: String::new(),
        };
        let s = SeriesChange {
            info: &info,
            value: &Value::Counter(3),
            before: Some((0, &Value::Counter(9))),
        };
        let r = reading(&s, Some(1.0));
        assert_eq!(r, counter(3, None));
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
            ..
        } = s[0]
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
    fn foreign_values_read_as_their_nearest_kinds_with_float_counts() {
        use std::sync::Arc;
        use topdeck::{BucketsValue, ForeignReader, MetricKind};
        let info = |kind, name: &str| MetricInfo {
            kind,
            name: name.into(),
            labels: vec![],
            help: String::new(),
            unit: "seconds".into(),
        };
        let metrics = Arc::new(vec![
            info(MetricKind::Counter, "gc_seconds_total"),
            info(MetricKind::Histogram, "latency_seconds"),
            info(MetricKind::Histogram, "wait_seconds"),
        ]);
        let classic = |low, all, sum| {
            Value::Buckets(Box::new(BucketsValue {
                buckets: vec![(0.1, low), (1.0, all), (f64::INFINITY, all)],
                count: all,
                sum,
            }))
        };
        let reader = ForeignReader::new();
        // (counter, the histogram's count and sum, the summary's count and sum)
        let at = |counter, (all, h_sum), (count, sum)| {
            let values = vec![
                Value::CounterF64(counter),
                classic(10.0, all, h_sum),
                Value::Summary { count, sum },
            ];
            reader.snapshot(Arc::clone(&metrics), values)
        };
        let before = at(1.5, (10.0, 0.5), (2.0, 1.0));
        // The 4 new observations of the histogram are all in (0.1, 1].
        let after = at(2.0, (14.0, 2.5), (6.0, 2.0));
        let s = readings(Some((&before, Duration::from_millis(500))), &after);
        assert_eq!(
            s[0],
            Reading::CounterF64 {
                total: 2.0,
                rate: Some(1.0)
            }
        );
        // Rank 2 of 4, all in (0.1, 1]: halfway.
        assert_eq!(
            s[1],
            Reading::Buckets {
                count: 4.0,
                rate: Some(8.0),
                p50: Some(0.55),
                p99: Some(0.1 + 0.9 * 0.99)
            }
        );
        assert_eq!(
            s[2],
            Reading::Summary {
                count: 4.0,
                rate: Some(8.0),
                mean: Some(0.25)
            }
        );
        // A float counter that went backwards has no rate.
        let reset = readings(Some((&after, Duration::from_secs(1))), &before);
        assert_eq!(
            reset[0],
            Reading::CounterF64 {
                total: 1.5,
                rate: None
            }
        );
        // The JSON kinds are the nearest ones, counts floats.
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json[0]["kind"], "counter");
        assert_eq!(json[1]["kind"], "histogram");
        assert_eq!(json[1]["count"], 4.0);
        assert_eq!(json[2]["kind"], "summary");
        assert_eq!(json[2]["mean"], 0.25);
    }

    #[test]
    fn a_pass_shows_live_dead_and_broken_files_and_keeps_history() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path(), "svc");
        let c = r.counter("jobs_total", &[], "Jobs.", "").unwrap();
        std::fs::write(dir.path().join("1-1-0.topdeck"), b"not a registry").unwrap();
        let mut col = Collector::new(Namespace::at(dir.path()), None);
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
        let behind = |culprit| {
            agent
                .counter(
                    topdeck_sched::schema::WAIT_BEHIND.name,
                    &[("cgroup", "/web"), ("culprit", culprit)],
                    "Wait behind.",
                    "nanoseconds",
                )
                .unwrap()
        };
        let (by_batch, by_self) = (behind("/batch"), behind("/web"));
        let mut col = Collector::new(Namespace::at(dir.path()), None);
        col.harvest();
        for _ in 0..100 {
            web.record(0.010);
            batch.record(0.0001);
        }
        by_batch.add(3_000_000_000);
        by_self.add(1_000_000_000);
        let h = col.harvest();
        let view = h.scheduler.as_ref().expect("a scheduler view");
        assert_eq!(view.state, Some(State::Alive));
        let row = |cgroup: &str| h.containers.iter().find(|c| c.cgroup == cgroup).unwrap();
        let (w, b) = (row("/web"), row("/batch"));
        assert_eq!(
            (w.container.as_str(), b.container.as_str()),
            ("web", "batch")
        );
        let p99 = |c: &ContainerRow| c.runq.as_ref().and_then(|r| r.p99).unwrap();
        assert!(p99(w) > p99(b), "{w:?} {b:?}");
        let shares: Vec<(&str, String)> = w
            .behind
            .iter()
            .map(|c| (c.name.as_str(), format!("{:.3}", c.share)))
            .collect();
        assert_eq!(
            shares,
            [("batch", "0.750".into()), ("itself", "0.250".into())]
        );
        assert_eq!(
            w.verdict.as_ref().map(|v| v.kind),
            Some(VerdictKind::NoisyNeighbour)
        );
        assert!(b.verdict.is_none());
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
        let h = Collector::new(Namespace::at(dir.path()), None).harvest();
        assert!(h.scheduler.is_some());
        assert_eq!(h.spoofed_agents, 0);
        assert!(h.registries[0].untrusted.is_none());
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(json["spoofed_agents"], 0);
    }

    #[test]
    fn a_newer_file_of_the_same_writer_and_registry_takes_over_rates_and_histories() {
        let dir = tempfile::tempdir().unwrap();
        let old = registry(dir.path(), "svc");
        let (a, b) = (
            old.counter("a_total", &[], "", "").unwrap(),
            old.counter("b_total", &[], "", "").unwrap(),
        );
        a.add(10);
        b.add(10);
        let mut col = Collector::new(Namespace::at(dir.path()), None);
        col.harvest();
        a.add(10);
        b.add(10);
        let h = col.harvest();
        assert_eq!(
            series(&h, old.path(), "a_total")
                .history
                .last(HISTORY)
                .len(),
            1
        );
        // The writer rotates: a new file, its series in another order, one
        // more, and `b_total` not carried over (a reset).
        let new = registry(dir.path(), "svc");
        new.counter("c_total", &[], "", "").unwrap().add(1);
        new.counter("b_total", &[], "", "").unwrap().add(3);
        new.counter("a_total", &[], "", "").unwrap().add(50);
        drop(old);
        let h = col.harvest();
        assert_eq!(h.registries.len(), 1);
        let a = series(&h, new.path(), "a_total");
        assert!(
            matches!(a.reading, Reading::Counter { total: 50, rate: Some(r) } if r > 0.0),
            "{a:?}"
        );
        assert_eq!(
            a.history.last(HISTORY).len(),
            2,
            "the old file's ring goes on"
        );
        let b = series(&h, new.path(), "b_total");
        assert_eq!(b.reading, counter(3, None));
        assert_eq!(
            b.history.last(HISTORY).len(),
            1,
            "kept; a reset is not plotted"
        );
        // A series new in the new file counts from zero.
        let c = series(&h, new.path(), "c_total");
        assert!(matches!(c.reading, Reading::Counter { total: 1, rate: Some(r) } if r > 0.0));
        assert_eq!(c.history.last(HISTORY).len(), 1);
    }

    #[test]
    fn a_registry_replaced_at_its_path_starts_afresh() {
        let tmp = tempfile::tempdir().unwrap();
        let ns = tmp.path().join("ns");
        std::fs::create_dir(&ns).unwrap();
        // Both of this process and named alike: only the file tells them apart.
        let first = registry(tmp.path(), "svc");
        first.counter("a_total", &[], "", "").unwrap().add(5);
        let second = registry(tmp.path(), "svc");
        second.counter("a_total", &[], "", "").unwrap().add(1000);
        let at = ns.join("1-1-1.topdeck");
        std::fs::copy(first.path(), &at).unwrap();
        let mut col = Collector::new(Namespace::at(&ns), None);
        col.harvest();
        let h = col.harvest();
        let a = series(&h, &at, "a_total");
        assert_eq!(a.reading, counter(5, Some(0.0)));
        assert_eq!(a.history.last(HISTORY), [0.0]);
        let next = ns.join("next");
        std::fs::copy(second.path(), &next).unwrap();
        std::fs::rename(&next, &at).unwrap();
        let h = col.harvest();
        let a = series(&h, &at, "a_total");
        assert_eq!(
            a.reading,
            counter(1000, None),
            "read afresh: no rate against the other registry's values"
        );
        assert!(
            a.history.last(HISTORY).is_empty(),
            "not the old file's ring"
        );
    }
}
