// SPDX-License-Identifier: Apache-2.0
//! What `topdeck sched` shows, built from the agent's published metrics
//! like any other reader would: two snapshots of the `topdeck-agent`
//! registry, and the difference between them.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use topdeck::{HistogramValue, Snapshot, Value};

/// One cgroup over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CgroupView {
    /// Cgroup path.
    pub cgroup: String,
    /// Container, pod or service name.
    pub container: String,
    /// Run-queue waits in the window.
    pub samples: u64,
    /// Median wait, seconds.
    pub p50_seconds: Option<f64>,
    /// 99th percentile wait, seconds.
    pub p99_seconds: Option<f64>,
    /// Switch-outs while runnable in the window, by cause.
    pub switch_out: BTreeMap<String, u64>,
    /// Wait in the window behind each culprit (seconds), largest first.
    pub culprits: Vec<(String, f64)>,
}

/// A verdict in force.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerdictView {
    /// The cgroup that suffers.
    pub cgroup: String,
    /// The culprit cgroup (`self` for own_quota).
    pub culprit: String,
    /// `noisy_neighbour` or `own_quota`.
    pub kind: String,
    /// Baseline p99, seconds.
    pub p99_baseline_seconds: Option<f64>,
    /// p99 in the agent's last window, seconds.
    pub p99_now_seconds: Option<f64>,
    /// Share of the wait behind the culprit in the agent's last window.
    pub share: Option<f64>,
}

/// Everything `topdeck sched` prints.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedView {
    /// Cgroups with waits in the window, highest p99 first.
    pub cgroups: Vec<CgroupView>,
    /// Verdicts in force at the end of the window.
    pub verdicts: Vec<VerdictView>,
    /// Samples lost so far, by reason.
    pub dropped: BTreeMap<String, u64>,
    /// The probe's cost per program, ns per event, when measured.
    pub bpf_ns_per_event: BTreeMap<String, f64>,
}

fn label<'a>(labels: &'a [(String, String)], key: &str) -> &'a str {
    labels
        .iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

fn row<'a>(rows: &'a mut BTreeMap<String, CgroupView>, cgroup: &str) -> &'a mut CgroupView {
    rows.entry(cgroup.to_string())
        .or_insert_with(|| CgroupView {
            cgroup: cgroup.to_string(),
            container: String::new(),
            samples: 0,
            p50_seconds: None,
            p99_seconds: None,
            switch_out: BTreeMap::new(),
            culprits: Vec::new(),
        })
}

fn minus(after: &HistogramValue, before: Option<&HistogramValue>) -> HistogramValue {
    before.map_or_else(|| after.clone(), |b| after.since(b))
}

impl SchedView {
    /// The view of the window between `before` and `after`, two snapshots
    /// of the agent's registry; everything since the agent started when
    /// `before` is `None`.
    pub fn between(before: Option<&Snapshot>, after: &Snapshot) -> Self {
        type Key = (String, Vec<(String, String)>);
        let old: HashMap<Key, &Value> = before
            .map(|s| {
                s.iter()
                    .map(|(i, v)| ((i.name.clone(), i.labels.clone()), v))
                    .collect()
            })
            .unwrap_or_default();
        let prior = |name: &str, labels: &[(String, String)]| {
            old.get(&(name.to_string(), labels.to_vec())).copied()
        };
        let mut view = SchedView::default();
        let mut rows: BTreeMap<String, CgroupView> = BTreeMap::new();
        let mut verdict_evidence: HashMap<(String, String), f64> = HashMap::new();
        for (info, value) in after.iter() {
            let l = &info.labels;
            let cgroup = label(l, "cgroup").to_string();
            match (info.name.as_str(), value) {
                ("topdeck_runq_latency_seconds", Value::Histogram(h)) => {
                    let before = match prior(&info.name, l) {
                        Some(Value::Histogram(b)) => Some(b),
                        _ => None,
                    };
                    let d = minus(h, before);
                    let r = row(&mut rows, &cgroup);
                    r.container = label(l, "container").to_string();
                    r.samples = d.count;
                    r.p50_seconds = d.quantile(0.5);
                    r.p99_seconds = d.quantile(0.99);
                }
                ("topdeck_sched_switch_out_total", Value::Counter(n)) => {
                    let b = match prior(&info.name, l) {
                        Some(Value::Counter(b)) => *b,
                        _ => 0,
                    };
                    let r = row(&mut rows, &cgroup);
                    r.switch_out
                        .insert(label(l, "cause").to_string(), n.saturating_sub(b));
                }
                ("topdeck_sched_wait_behind_seconds_total", Value::GaugeF64(s)) => {
                    let b = match prior(&info.name, l) {
                        Some(Value::GaugeF64(b)) => *b,
                        _ => 0.0,
                    };
                    let r = row(&mut rows, &cgroup);
                    let culprit = label(l, "culprit");
                    let culprit = if culprit == cgroup {
                        "(own cgroup)"
                    } else {
                        culprit
                    };
                    if s - b > 0.0 {
                        r.culprits.push((culprit.to_string(), s - b));
                    }
                }
                ("topdeck_sched_verdict", Value::Gauge(1)) => view.verdicts.push(VerdictView {
                    cgroup,
                    culprit: label(l, "culprit").to_string(),
                    kind: label(l, "kind").to_string(),
                    p99_baseline_seconds: None,
                    p99_now_seconds: None,
                    share: None,
                }),
                ("topdeck_sched_verdict_p99_seconds", Value::GaugeF64(v)) => {
                    verdict_evidence.insert((cgroup, label(l, "when").to_string()), *v);
                }
                ("topdeck_sched_verdict_share", Value::GaugeF64(v)) => {
                    verdict_evidence.insert((cgroup, format!("share:{}", label(l, "culprit"))), *v);
                }
                ("topdeck_sched_dropped_total", Value::Counter(n)) => {
                    view.dropped.insert(label(l, "reason").to_string(), *n);
                }
                ("topdeck_bpf_run_ns_per_event", Value::GaugeF64(v)) => {
                    view.bpf_ns_per_event
                        .insert(label(l, "program").to_string(), *v);
                }
                _ => {}
            }
        }
        for v in &mut view.verdicts {
            let get = |k: String| verdict_evidence.get(&(v.cgroup.clone(), k)).copied();
            v.p99_baseline_seconds = get("baseline".into()).filter(|x| x.is_finite());
            v.p99_now_seconds = get("now".into());
            v.share = get(format!("share:{}", v.culprit));
        }
        view.cgroups = rows.into_values().filter(|r| r.samples > 0).collect();
        for r in &mut view.cgroups {
            r.culprits.sort_by(|a, b| b.1.total_cmp(&a.1));
        }
        view.cgroups.sort_by(|a, b| {
            b.p99_seconds
                .unwrap_or(0.0)
                .total_cmp(&a.p99_seconds.unwrap_or(0.0))
        });
        view
    }
}
