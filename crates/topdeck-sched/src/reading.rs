// SPDX-License-Identifier: Apache-2.0
//! The typed reader of the agent's registry: one snapshot parsed, by the
//! names of [`crate::schema`], into per-cgroup figures, the verdicts in
//! force with their evidence, and the agent's own counters. `topdeck
//! sched` ([`crate::SchedView`]) and `topdeck top` read the agent through
//! it; figures over a window are the difference of two readings (for
//! histograms, [`topdeck::HistogramValue::since`]).
//!
//! What it does not know: whether the registry is the agent's at all
//! ([`crate::trust`] says), and how many impostors there were (counted by
//! whoever listed the namespace).

use std::collections::BTreeMap;

use topdeck::{HistogramValue, MetricInfo, Snapshot, Value};

use crate::schema::{self, key, value};
use crate::verdict::{Thresholds, Verdict, VerdictKind};

/// One cgroup's series, cumulative since the agent started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CgroupReading {
    /// Container, pod or service name, as the agent labels it.
    pub container: String,
    /// Run-queue waits.
    pub runq: Option<HistogramValue>,
    /// Switch-outs while runnable, by cause ([`crate::maps::CAUSES`]).
    pub switch_out: BTreeMap<String, u64>,
    /// Time on CPU, nanoseconds.
    pub oncpu_ns: Option<u64>,
    /// Wait charged to each culprit label (a cgroup path, the cgroup's
    /// own path, [`value::SYSTEM`] or [`value::UNRESOLVED`]), nanoseconds.
    pub wait_behind_ns: BTreeMap<String, u64>,
}

/// One snapshot of the agent's registry, typed.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// use topdeck_sched::schema::{VERDICT, VERDICT_SHARE};
/// use topdeck_sched::verdict::VerdictKind;
/// let registry = topdeck::Registry::builder().dir(dir.path()).build()?;
/// registry
///     .gauge(VERDICT.name, &[("cgroup", "/web"), ("culprit", "/batch"), ("kind", "noisy_neighbour")], "", "")?
///     .set(1);
/// registry
///     .gauge_f64(VERDICT_SHARE.name, &[("cgroup", "/web"), ("culprit", "/batch")], "", "")?
///     .set(0.8);
/// let snapshot = topdeck::RegistryReader::open(registry.path())?.snapshot()?;
/// let reading = topdeck_sched::AgentReading::parse(&snapshot);
/// let v = &reading.verdicts[0];
/// assert_eq!((v.kind, v.victim.as_str()), (VerdictKind::NoisyNeighbour, "/web"));
/// assert_eq!(v.culprits, [("/batch".to_string(), 0.8)]);
/// # Ok::<(), topdeck::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentReading {
    /// By `cgroup` label.
    pub cgroups: BTreeMap<String, CgroupReading>,
    /// Verdicts in force in the agent's last interval, by victim then
    /// kind; culprits largest share first. The registry carries no
    /// throttling nor share behind others: those are `None`.
    pub verdicts: Vec<Verdict>,
    /// Samples lost or not measured, by reason ([`schema::DropReason`]).
    pub dropped: BTreeMap<String, u64>,
    /// Series the agent had no room for, by what they were ([`schema::Unpublished`]).
    pub unpublished: BTreeMap<String, u64>,
    /// Fresh registry files the agent started.
    pub rotations: u64,
    /// The probe's cost per program, mean seconds per event, when measured.
    pub bpf_seconds_per_event: BTreeMap<String, f64>,
    /// The verdict rule the agent applies, when it publishes it.
    pub rule: Option<Rule>,
}

/// The verdict rule an agent applies, as it publishes it
/// ([`schema::THRESHOLD`]), for views to print beside its verdicts.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Its thresholds (those it publishes; the others are the defaults).
    pub thresholds: Thresholds,
    /// The length of the windows it judges, seconds.
    pub window_seconds: f64,
}

impl std::fmt::Display for Rule {
    /// The thresholds' line and the windows' length.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (windows of {})",
            self.thresholds,
            topdeck::human::seconds(self.window_seconds)
        )
    }
}

impl Rule {
    /// The rule from its published numbers, if all are there.
    fn of(numbers: &BTreeMap<String, f64>) -> Option<Self> {
        let n = |k: &str| numbers.get(k).copied();
        Some(Rule {
            thresholds: Thresholds {
                rise_factor: n("rise_factor")?,
                min_p99_seconds: n("floor_seconds")?,
                min_other_share: n("other_share")?,
                suspect_rise_factor: n("suspect_rise_factor")?,
                suspect_other_share: n("suspect_other_share")?,
                hold: n("hold_windows")? as u32,
                ..Thresholds::default()
            },
            window_seconds: n("window_seconds")?,
        })
    }
}

fn label<'a>(m: &'a MetricInfo, k: &str) -> &'a str {
    topdeck::label_value(&m.labels, k).unwrap_or("")
}

fn row<'a>(rows: &'a mut BTreeMap<String, CgroupReading>, cgroup: &str) -> &'a mut CgroupReading {
    rows.entry(cgroup.to_string()).or_default()
}

impl AgentReading {
    /// Parses a snapshot of the agent's registry; metrics it does not know
    /// are left out.
    pub fn parse(snapshot: &Snapshot) -> Self {
        Self::from_metrics(snapshot.iter())
    }

    /// [`AgentReading::parse`] over metrics and values however they were
    /// read.
    pub fn from_metrics<'a>(
        metrics: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>,
    ) -> Self {
        let mut r = Self::default();
        // (victim, kind) -> culprits; (victim, culprit) -> share; (victim, when) -> p99.
        let mut holding: BTreeMap<(String, VerdictKind), Vec<String>> = BTreeMap::new();
        let mut shares: BTreeMap<(String, String), f64> = BTreeMap::new();
        let mut p99s: BTreeMap<(String, String), f64> = BTreeMap::new();
        let mut rule: BTreeMap<String, f64> = BTreeMap::new();
        for (m, v) in metrics {
            let cgroup = label(m, key::CGROUP);
            let name = m.name.as_str();
            match (name, v) {
                (n, Value::Histogram(h)) if n == schema::RUNQ_LATENCY.name => {
                    let c = row(&mut r.cgroups, cgroup);
                    c.container = label(m, key::CONTAINER).to_string();
                    c.runq = Some((**h).clone());
                }
                (n, Value::Counter(x)) if n == schema::SWITCH_OUT.name => {
                    row(&mut r.cgroups, cgroup)
                        .switch_out
                        .insert(label(m, key::CAUSE).to_string(), *x);
                }
                (n, Value::Counter(x)) if n == schema::ONCPU.name => {
                    row(&mut r.cgroups, cgroup).oncpu_ns = Some(*x);
                }
                (n, Value::Counter(x)) if n == schema::WAIT_BEHIND.name => {
                    row(&mut r.cgroups, cgroup)
                        .wait_behind_ns
                        .insert(label(m, key::CULPRIT).to_string(), *x);
                }
                (n, Value::Gauge(1)) if n == schema::VERDICT.name => {
                    if let Some(kind) = VerdictKind::parse(label(m, key::KIND)) {
                        holding
                            .entry((cgroup.to_string(), kind))
                            .or_default()
                            .push(label(m, key::CULPRIT).to_string());
                    }
                }
                (n, Value::GaugeF64(x)) if n == schema::VERDICT_SHARE.name => {
                    let culprit = label(m, key::CULPRIT).to_string();
                    shares.insert((cgroup.to_string(), culprit), *x);
                }
                (n, Value::GaugeF64(x)) if n == schema::VERDICT_P99.name => {
                    let when = label(m, key::WHEN).to_string();
                    p99s.insert((cgroup.to_string(), when), *x);
                }
                (n, Value::Counter(x)) if n == schema::DROPPED.name => {
                    r.dropped.insert(label(m, key::REASON).to_string(), *x);
                }
                (n, Value::Counter(x)) if n == schema::UNPUBLISHED.name => {
                    r.unpublished.insert(label(m, key::WHAT).to_string(), *x);
                }
                (n, Value::Counter(x)) if n == schema::ROTATIONS.name => r.rotations = *x,
                (n, Value::GaugeF64(x)) if n == schema::THRESHOLD.name => {
                    rule.insert(label(m, key::RULE).to_string(), *x);
                }
                (n, Value::GaugeF64(x)) if n == schema::BPF_COST.name => {
                    r.bpf_seconds_per_event
                        .insert(label(m, key::PROGRAM).to_string(), *x);
                }
                _ => {}
            }
        }
        r.rule = Rule::of(&rule);
        for ((victim, kind), culprits) in holding {
            let p99 = |when: &str| {
                p99s.get(&(victim.clone(), when.to_string()))
                    .copied()
                    .filter(|x| x.is_finite())
            };
            let mut culprits: Vec<(String, f64)> = culprits
                .into_iter()
                .filter(|c| c != value::SELF)
                .map(|c| {
                    let share = shares.get(&(victim.clone(), c.clone())).copied();
                    (c, share.unwrap_or(f64::NAN))
                })
                .collect();
            // Largest first; an unknown share (NaN) last.
            culprits.sort_by(|a, b| {
                let key = |s: f64| if s.is_nan() { f64::NEG_INFINITY } else { s };
                key(b.1).total_cmp(&key(a.1)).then_with(|| a.0.cmp(&b.0))
            });
            r.verdicts.push(Verdict {
                kind,
                p99_before: p99(value::BASELINE),
                p99_after: p99(value::NOW),
                victim,
                culprits,
                other_share: None,
                throttled: None,
            });
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::*;
    use topdeck::{Registry, RegistryReader};

    #[test]
    fn a_snapshot_of_the_agents_families_reads_back_typed() {
        let d = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(d.path()).build().unwrap();
        let f = |m: MetricSpec| r.gauge_f64_family(m.name, m.keys, m.help, m.unit).unwrap();
        let c = |m: MetricSpec| r.counter_family(m.name, m.keys, m.help, m.unit).unwrap();
        let runq = r
            .histogram_family(
                RUNQ_LATENCY.name,
                RUNQ_LATENCY.keys,
                "",
                "seconds",
                crate::BucketTable::topdeck_buckets(),
            )
            .unwrap();
        runq.with(&["/web", "web"]).unwrap().record(0.002);
        c(SWITCH_OUT)
            .with(&["/web", "other_cgroup"])
            .unwrap()
            .add(7);
        c(ONCPU).with(&["/web"]).unwrap().add(1_500_000_000);
        let behind = c(WAIT_BEHIND);
        behind.with(&["/web", "/batch"]).unwrap().add(900_000_000);
        behind.with(&["/web", "/web"]).unwrap().add(100_000_000);
        let verdict = r.gauge_family(VERDICT.name, VERDICT.keys, "", "").unwrap();
        verdict
            .with(&["/web", "/batch", "noisy_neighbour"])
            .unwrap()
            .set(1);
        verdict
            .with(&["/web", "/etl", "noisy_neighbour"])
            .unwrap()
            .set(1);
        verdict.with(&["/api", "self", "own_quota"]).unwrap().set(1);
        // Cleared: not in force.
        verdict
            .with(&["/old", "/batch", "noisy_neighbour"])
            .unwrap()
            .set(0);
        let share = f(VERDICT_SHARE);
        share.with(&["/web", "/batch"]).unwrap().set(0.7);
        share.with(&["/web", "/etl"]).unwrap().set(0.2);
        let p99 = f(VERDICT_P99);
        p99.with(&["/web", "baseline"]).unwrap().set(40e-6);
        p99.with(&["/web", "now"]).unwrap().set(3e-3);
        p99.with(&["/api", "baseline"]).unwrap().set(f64::NAN);
        c(DROPPED).with(&["pair_full"]).unwrap().add(2);
        c(UNPUBLISHED).with(&["cgroup"]).unwrap().add(3);
        r.counter(ROTATIONS.name, &[], "", "").unwrap().add(4);
        f(BPF_COST).with(&["td_switch"]).unwrap().set(95e-9);

        let snap = RegistryReader::open(r.path()).unwrap().snapshot().unwrap();
        let got = AgentReading::parse(&snap);
        let web = &got.cgroups["/web"];
        assert_eq!(web.container, "web");
        assert_eq!(web.runq.as_ref().map(|h| h.count), Some(1));
        assert_eq!(web.switch_out["other_cgroup"], 7);
        assert_eq!(web.oncpu_ns, Some(1_500_000_000));
        assert_eq!(web.wait_behind_ns["/batch"], 900_000_000);
        assert_eq!(web.wait_behind_ns["/web"], 100_000_000);
        assert_eq!(got.dropped["pair_full"], 2);
        assert_eq!(got.unpublished["cgroup"], 3);
        assert_eq!(got.rotations, 4);
        assert_eq!(got.bpf_seconds_per_event["td_switch"], 95e-9);

        let [api, web] = got.verdicts.as_slice() else {
            panic!("two verdicts: {:?}", got.verdicts);
        };
        assert_eq!(api.kind, VerdictKind::OwnQuota);
        assert!(api.culprits.is_empty(), "self is no culprit");
        assert_eq!((api.p99_before, api.p99_after), (None, None));
        assert_eq!(web.kind, VerdictKind::NoisyNeighbour);
        assert_eq!(
            web.culprits,
            [("/batch".to_string(), 0.7), ("/etl".to_string(), 0.2)]
        );
        assert_eq!((web.p99_before, web.p99_after), (Some(40e-6), Some(3e-3)));
        assert_eq!(
            web.to_string(),
            "/web: noisy neighbour /batch (70% of its wait), /etl (20% of its wait); \
             run-queue p99 40.0µs -> 3.0ms"
        );
        assert_eq!(
            api.to_string(),
            "/api: held by its own CPU quota; run-queue p99 ? -> ?"
        );
    }

    #[test]
    fn a_culprit_without_its_share_is_named_last_with_an_unknown_share() {
        let d = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(d.path()).build().unwrap();
        let verdict = r.gauge_family(VERDICT.name, VERDICT.keys, "", "").unwrap();
        for c in ["/a", "/b"] {
            verdict.with(&["/v", c, "noisy_neighbour"]).unwrap().set(1);
        }
        r.gauge_f64(
            VERDICT_SHARE.name,
            &[("cgroup", "/v"), ("culprit", "/b")],
            "",
            "",
        )
        .unwrap()
        .set(0.6);
        let snap = RegistryReader::open(r.path()).unwrap().snapshot().unwrap();
        let v = &AgentReading::parse(&snap).verdicts[0];
        assert_eq!(v.culprits[0], ("/b".to_string(), 0.6));
        assert_eq!(v.culprits[1].0, "/a");
        assert!(v.culprits[1].1.is_nan());
        assert!(v.to_string().contains("/a (? of its wait)"), "{v}");
    }
}
