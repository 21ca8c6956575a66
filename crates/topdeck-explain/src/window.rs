// SPDX-License-Identifier: Apache-2.0
//! One window of a service joined: each latency series' requests and
//! percentiles beside the CPU its threads waited for over the same window,
//! who held the CPU, and a verdict line.
//!
//! The wait comes from the timer itself when it measured each request's
//! (the per-request level: `_cpu_wait_seconds` beside the latency), else
//! from the threads' growth over the window (the window level, which
//! assumes the threads do nothing but requests: a share is capped at
//! 100%). Who held the CPU comes from the agent's charges to culprits for
//! the service's cgroup; without the agent, from the thread-waits array's
//! split (own cgroup, another, system); with neither, nobody is named.
//!
//! A recorded reading ([`Level::Unrecorded`]) has no threads' wait: the
//! window's is unknown (`None`, never zero), and so is every row's that
//! its timer did not measure.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use topdeck_format::waits::Waits;

use crate::wait::{Level, ThreadSample};
use topdeck_sources::{Dist, Latency};

/// Share of latency spent waiting for a CPU from which a window's verdict
/// says the CPU is the cause.
pub const CPU_SHARE: f64 = 0.25;

/// A p99 this much above its baseline is a rise worth explaining.
pub const RISE: f64 = 1.2;

/// Everything read of one service at one moment.
#[derive(Debug, Clone)]
pub struct Reading {
    /// `CLOCK_MONOTONIC`-like seconds, for the window's length.
    pub at_secs: f64,
    /// Its latency series, cumulative.
    pub latencies: Vec<Latency>,
    /// Its threads' cumulative waits (none for [`Level::Unrecorded`]).
    pub threads: ThreadSample,
    /// Where the threads' waits came from.
    pub level: Level,
    /// The cgroup the service's threads are keyed by, as the agent labels it.
    pub cgroup: Option<String>,
    /// The agent's cumulative wait charged to each culprit of that cgroup
    /// (ns), when an agent publishes it.
    pub culprits: Option<BTreeMap<String, u64>>,
}

/// Who held the CPU while the service waited, and its share of the wait.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Culprit {
    /// A cgroup path, `system`, or what the split could tell (`own cgroup`,
    /// `other cgroups`).
    pub who: String,
    /// Share of the service's wait in the window, 0..=1.
    pub share: f64,
}

/// What a window says of one latency series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finding {
    /// No request ended in the window.
    NoRequests,
    /// At least [`CPU_SHARE`] of the latency was CPU wait.
    Cpu,
    /// Less than that.
    NotCpu,
    /// The wait of no request could be known: the agent's array was gone
    /// while the timer measured, or, in a recording, the timer measured
    /// none and the threads' wait was not recorded.
    Unknown,
}

/// One latency series over one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// `name{labels}`.
    pub series: String,
    /// Requests that ended in the window.
    pub requests: u64,
    /// Latency percentiles and mean, seconds.
    pub p50: Option<f64>,
    /// See `p50`.
    pub p99: Option<f64>,
    /// See `p50`.
    pub mean: Option<f64>,
    /// The wait is each request's own (the timer measured it), not the
    /// threads' wait spread over the requests.
    pub per_request: bool,
    /// Mean CPU wait per request, seconds.
    pub wait_per_request: Option<f64>,
    /// The p99 of the requests' waits (per-request level only).
    pub wait_p99: Option<f64>,
    /// Share of the latency that was CPU wait, 0..=1.
    pub share: Option<f64>,
    /// Requests whose wait could not be known (the agent was gone).
    pub unknown: u64,
    /// The lowest p99 of the windows before, with requests.
    pub baseline_p99: Option<f64>,
    /// Share of the rise over the baseline that is CPU wait, 0..=1, when
    /// p99 rose at least [`RISE`]-fold.
    pub rise_explained: Option<f64>,
    /// What the window says.
    pub finding: Finding,
    /// The verdict, one line.
    pub verdict: String,
}

/// One window of a service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// Its length, seconds.
    pub seconds: f64,
    /// Where the threads' wait came from.
    pub level: Level,
    /// Threads sampled at its end; `None` when unknown ([`Level::Unrecorded`]).
    pub threads: Option<usize>,
    /// The threads' CPU wait in the window, seconds; `None` when unknown
    /// ([`Level::Unrecorded`]).
    pub wait: Option<f64>,
    /// Who held the CPU, largest share first.
    pub culprits: Vec<Culprit>,
    /// Each latency series.
    pub rows: Vec<Row>,
}

/// What a series looked like in its calmest window: the baseline.
#[derive(Debug, Clone, Copy)]
struct Baseline {
    p99: f64,
    mean: f64,
    wait_p99: Option<f64>,
    wait_per_request: f64,
}

/// Joins successive readings of one service into windows, keeping each
/// series' baseline across them.
///
/// ```
/// use topdeck_explain::{Explainer, Reading, Level};
/// let reading = |at_secs| Reading {
///     at_secs,
///     latencies: vec![],
///     threads: Default::default(),
///     level: Level::Schedstat,
///     cgroup: None,
///     culprits: None,
/// };
/// let w = Explainer::default().window(&reading(0.0), &reading(10.0));
/// assert_eq!((w.seconds, w.rows.len()), (10.0, 0));
/// ```
#[derive(Debug, Default)]
pub struct Explainer {
    baselines: HashMap<String, Baseline>,
}

impl Explainer {
    /// The window from `before` to `after`.
    pub fn window(&mut self, before: &Reading, after: &Reading) -> Window {
        let known = ![before.level, after.level].contains(&Level::Unrecorded);
        let waited = known.then(|| before.threads.growth(&after.threads, after.level));
        let culprits = culprits(before, after, waited.as_ref());
        let mut rows = Vec::new();
        for now in &after.latencies {
            let then = before.latencies.iter().find(|l| l.same_series(now));
            rows.push(self.row(now, then, waited.as_ref(), &culprits));
        }
        Window {
            seconds: after.at_secs - before.at_secs,
            level: after.level,
            threads: known.then(|| after.threads.threads()),
            wait: waited.map(|w| w.total as f64 * 1e-9),
            culprits,
            rows,
        }
    }

    fn row(
        &mut self,
        now: &Latency,
        then: Option<&Latency>,
        waited: Option<&Waits>,
        culprits: &[Culprit],
    ) -> Row {
        let delta = |n: Option<&Dist>, t: Option<&Dist>| -> Option<Dist> {
            let n = n?;
            Some(match t {
                Some(t) => n.since(t),
                None => n.clone(),
            })
        };
        let latency = match then {
            Some(t) => now.latency.since(&t.latency),
            None => now.latency.clone(),
        };
        let wait = delta(now.wait.as_ref(), then.and_then(|t| t.wait.as_ref()));
        let unknown = delta(now.unknown.as_ref(), then.and_then(|t| t.unknown.as_ref()));
        let series = now.display_name();
        let requests = latency.count();
        let (p50, p99, mean) = (
            latency.quantile(0.5),
            latency.quantile(0.99),
            (requests > 0).then(|| latency.sum() / requests as f64),
        );
        let unknown_n = unknown.as_ref().map_or(0, Dist::count);
        let per_request = wait.is_some();
        let (wait_per_request, wait_p99, share) = match &wait {
            Some(w) => {
                let known_latency = latency.sum() - unknown.as_ref().map_or(0.0, Dist::sum);
                (
                    (w.count() > 0).then(|| w.sum() / w.count() as f64),
                    w.quantile(0.99),
                    (w.count() > 0 && known_latency > 0.0)
                        .then(|| (w.sum() / known_latency).min(1.0)),
                )
            }
            None => match waited {
                Some(waited) => {
                    let secs = waited.total as f64 * 1e-9;
                    (
                        (requests > 0).then(|| secs / requests as f64),
                        None,
                        (requests > 0 && latency.sum() > 0.0)
                            .then(|| (secs / latency.sum()).min(1.0)),
                    )
                }
                // Neither the requests' wait nor the threads' is known.
                None => (None, None, None),
            },
        };
        let baseline = self.baselines.get(&series).copied();
        let rise_explained = match (baseline, p99, mean, wait_per_request) {
            (Some(b), Some(p99), Some(mean), Some(wpr)) if p99 >= b.p99 * RISE => {
                let part = match (wait_p99, b.wait_p99) {
                    (Some(w), Some(bw)) => (w - bw) / (p99 - b.p99),
                    _ if mean > b.mean => (wpr - b.wait_per_request) / (mean - b.mean),
                    _ => 0.0,
                };
                Some(part.clamp(0.0, 1.0))
            }
            _ => None,
        };
        // A calmer window becomes the baseline.
        if let (Some(p99), Some(mean), Some(wpr)) = (p99, mean, wait_per_request) {
            if baseline.is_none_or(|b| p99 < b.p99) {
                self.baselines.insert(
                    series.clone(),
                    Baseline {
                        p99,
                        mean,
                        wait_p99,
                        wait_per_request: wpr,
                    },
                );
            }
        }
        let finding = if requests == 0 {
            Finding::NoRequests
        } else if (per_request && unknown_n >= requests) || (!per_request && waited.is_none()) {
            Finding::Unknown
        } else if share.is_some_and(|s| s >= CPU_SHARE) {
            Finding::Cpu
        } else {
            Finding::NotCpu
        };
        let mut row = Row {
            series,
            requests,
            p50,
            p99,
            mean,
            per_request,
            wait_per_request,
            wait_p99,
            share,
            unknown: unknown_n,
            baseline_p99: baseline.map(|b| b.p99),
            rise_explained,
            finding,
            verdict: String::new(),
        };
        row.verdict = crate::verdict::line(&row, culprits, waited.map(|w| w.total as f64 * 1e-9));
        row
    }
}

/// Who held the CPU over the window. The service's own threads' split
/// (the array: behind its own cgroup, another, the system) when there is
/// one, its "other" part shared out among the cgroups the agent charged
/// for the service's cgroup; else the agent's charges for the whole cgroup
/// (other processes of the cgroup included); else nobody. `waited`: the
/// threads' wait, when known.
fn culprits(before: &Reading, after: &Reading, waited: Option<&Waits>) -> Vec<Culprit> {
    let itself = after.cgroup.as_deref();
    let named = |who: &str| match Some(who) == itself {
        true => format!("{who} (itself)"),
        false => who.to_string(),
    };
    // The agent's charges in the window, by culprit.
    let charged: Option<Vec<(String, u64)>> = match (&before.culprits, &after.culprits) {
        (Some(b), Some(a)) => Some(
            a.iter()
                .map(|(who, &ns)| {
                    (
                        who.clone(),
                        ns.saturating_sub(b.get(who).copied().unwrap_or(0)),
                    )
                })
                .filter(|(_, ns)| *ns > 0)
                .collect(),
        ),
        _ => None,
    };
    let share = |ns: f64, of: f64| Culprit {
        who: String::new(),
        share: ns / of,
    };
    let split = waited.filter(|w| after.level == Level::ThreadWaits && w.total > 0);
    let mut out: Vec<Culprit> = match (split, charged) {
        (Some(waited), charged) => {
            let total = waited.total as f64;
            let mut out = vec![
                Culprit {
                    who: itself.map_or("own cgroup".into(), named),
                    ..share(waited.own as f64, total)
                },
                Culprit {
                    who: "system".into(),
                    ..share(waited.system as f64, total)
                },
            ];
            let others: Vec<(String, u64)> = charged
                .unwrap_or_default()
                .into_iter()
                .filter(|(who, _)| Some(who.as_str()) != itself && who != "system")
                .collect();
            let others_total: u64 = others.iter().map(|(_, ns)| ns).sum();
            if others_total == 0 {
                out.push(Culprit {
                    who: "other cgroups".into(),
                    ..share(waited.other as f64, total)
                });
            } else {
                for (who, ns) in others {
                    let part = waited.other as f64 * ns as f64 / others_total as f64;
                    out.push(Culprit {
                        who,
                        ..share(part, total)
                    });
                }
            }
            out
        }
        (None, Some(grew)) => {
            let total: u64 = grew.iter().map(|(_, ns)| ns).sum();
            grew.into_iter()
                .map(|(who, ns)| Culprit {
                    who: named(&who),
                    ..share(ns as f64, total as f64)
                })
                .collect()
        }
        (None, None) => Vec::new(),
    };
    out.retain(|c| c.share > 0.0);
    out.sort_by(|a, b| b.share.total_cmp(&a.share).then_with(|| a.who.cmp(&b.who)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck_sources::latencies;

    /// A service's timer with its companions, and readings of it.
    struct Service {
        _dir: tempfile::TempDir,
        registry: topdeck::Registry,
        latency: topdeck::Histogram,
        wait: topdeck::Histogram,
    }

    impl Service {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let registry = topdeck::Registry::builder()
                .dir(dir.path())
                .build()
                .unwrap();
            let latency = registry
                .histogram("req_seconds", &[], "", "seconds")
                .unwrap();
            let wait = registry
                .histogram("req_cpu_wait_seconds", &[], "", "seconds")
                .unwrap();
            Self {
                _dir: dir,
                registry,
                latency,
                wait,
            }
        }

        /// `n` requests of `work` seconds that each waited `wait` for a CPU.
        fn serve(&self, n: usize, work: f64, wait: f64) {
            for _ in 0..n {
                self.latency.record(work + wait);
                self.wait.record(wait);
            }
        }

        fn read(&self, at_secs: f64, culprit_ns: u64) -> Reading {
            let snap = topdeck::RegistryReader::open(self.registry.path())
                .unwrap()
                .snapshot()
                .unwrap();
            Reading {
                at_secs,
                latencies: latencies(snap.iter()),
                threads: ThreadSample::default(),
                level: Level::ThreadWaits,
                cgroup: Some("/victim".into()),
                culprits: Some(BTreeMap::from([
                    ("/hog".to_string(), culprit_ns),
                    ("/victim".to_string(), 1_000 + culprit_ns / 100),
                ])),
            }
        }
    }

    #[test]
    fn a_rise_made_of_cpu_wait_is_explained_and_its_culprit_named() {
        let s = Service::new();
        let mut e = Explainer::default();
        let r0 = s.read(0.0, 0);
        s.serve(1000, 0.001, 0.000_01);
        let r1 = s.read(10.0, 0);
        let calm = e.window(&r0, &r1);
        assert_eq!(calm.rows[0].finding, Finding::NotCpu, "{:?}", calm.rows[0]);
        assert!(
            calm.rows[0].verdict.contains("not the CPU"),
            "{}",
            calm.rows[0].verdict
        );
        s.serve(1000, 0.001, 0.003);
        let r2 = s.read(20.0, 9_000_000);
        let hot = e.window(&r1, &r2);
        let row = &hot.rows[0];
        assert_eq!((row.requests, row.per_request), (1000, true));
        assert_eq!(row.finding, Finding::Cpu);
        assert!(row.rise_explained.unwrap() > 0.9, "{row:?}");
        assert!(
            row.share.unwrap() > 0.7 && row.share.unwrap() < 0.8,
            "{row:?}"
        );
        assert_eq!(hot.culprits[0].who, "/hog");
        assert!(hot.culprits[1].who.ends_with("(itself)"));
        assert!(
            row.verdict.contains("waiting for a CPU") && row.verdict.contains("behind /hog"),
            "{}",
            row.verdict
        );
        assert!(row.verdict.contains("(baseline 1."), "{}", row.verdict);
    }

    #[test]
    fn a_recorded_window_knows_each_requests_wait_but_not_the_threads() {
        let s = Service::new();
        let recorded = |r: Reading| Reading {
            threads: ThreadSample::default(),
            level: Level::Unrecorded,
            ..r
        };
        let r0 = recorded(s.read(0.0, 0));
        s.serve(100, 0.001, 0.003);
        let r1 = recorded(s.read(1.0, 9_000_000));
        let w = Explainer::default().window(&r0, &r1);
        assert_eq!(
            (w.level, w.wait, w.threads),
            (Level::Unrecorded, None, None)
        );
        let row = &w.rows[0];
        assert_eq!(
            (row.requests, row.per_request, row.finding),
            (100, true, Finding::Cpu)
        );
        assert!(row.verdict.contains("behind /hog"), "{}", row.verdict);
    }

    #[test]
    fn a_rise_from_its_own_work_is_not_the_cpu() {
        let s = Service::new();
        let mut e = Explainer::default();
        let r0 = s.read(0.0, 0);
        s.serve(500, 0.001, 0.000_01);
        let r1 = s.read(10.0, 0);
        e.window(&r0, &r1);
        s.serve(500, 0.005, 0.000_01);
        let r2 = s.read(20.0, 0);
        let row = &e.window(&r1, &r2).rows[0];
        assert_eq!(row.finding, Finding::NotCpu, "{row:?}");
        assert!(row.rise_explained.unwrap() < 0.1, "{row:?}");
    }

    #[test]
    fn the_services_own_threads_split_names_the_cgroups_the_agent_charged() {
        let at = |total, own, other, system, hog, far| Reading {
            at_secs: 0.0,
            latencies: vec![],
            threads: [(
                7,
                Waits {
                    total,
                    own,
                    other,
                    system,
                },
            )]
            .into_iter()
            .collect(),
            level: Level::ThreadWaits,
            cgroup: Some("/victim".into()),
            culprits: Some(BTreeMap::from([
                ("/hog".to_string(), hog),
                ("/far".to_string(), far),
                ("/victim".to_string(), 5),
                ("system".to_string(), 50),
            ])),
        };
        let before = at(0, 0, 0, 0, 0, 0);
        // The thread: 100 ns, 80 behind other cgroups; the agent charged
        // the cgroup 90 ns to /hog and 10 to /far.
        let after = at(100, 10, 80, 10, 90, 10);
        let w = Explainer::default().window(&before, &after);
        let got: Vec<(String, String)> = w
            .culprits
            .iter()
            .map(|c| (c.who.clone(), format!("{:.2}", c.share)))
            .collect();
        let want = [
            ("/hog", "0.72"),
            ("/victim (itself)", "0.10"),
            ("system", "0.10"),
            ("/far", "0.08"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(got, want);
    }
}
