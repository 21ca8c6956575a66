// SPDX-License-Identifier: Apache-2.0
//! What `topdeck sched` shows, built from the agent's published metrics
//! like any other reader would: two snapshots of the `topdeck-agent`
//! registry, and the difference between them.

use std::collections::BTreeMap;

use serde::Serialize;
use topdeck::{Change, Snapshot, Value};

use crate::reading::AgentReading;
use crate::schema;
use crate::verdict::Verdict;

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

/// Everything `topdeck sched` prints.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedView {
    /// Cgroups with waits in the window, highest p99 first.
    pub cgroups: Vec<CgroupView>,
    /// Verdicts in force at the end of the window.
    pub verdicts: Vec<Verdict>,
    /// Samples lost so far, by reason.
    pub dropped: BTreeMap<String, u64>,
    /// The probe's cost per program, mean seconds per event, when measured.
    pub bpf_seconds_per_event: BTreeMap<String, f64>,
    /// The rule the verdicts follow, as the agent publishes it, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

fn label<'a>(labels: &'a [(String, String)], key: &str) -> &'a str {
    topdeck::label_value(labels, key).unwrap_or("")
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

impl SchedView {
    /// The view of the window between `before` and `after`, two snapshots
    /// of the agent's registry; everything since the agent started when
    /// `before` is `None`.
    pub fn between(before: Option<&Snapshot>, after: &Snapshot) -> Self {
        let start = Snapshot::default();
        let changes = after.since(before.unwrap_or(&start));
        // What holds at the end of the window needs no pairing.
        let now = AgentReading::parse(after);
        let mut view = SchedView {
            verdicts: now.verdicts,
            rule: now.rule.map(|r| r.to_string()),
            dropped: now.dropped,
            bpf_seconds_per_event: now.bpf_seconds_per_event,
            ..SchedView::default()
        };
        let mut rows: BTreeMap<String, CgroupView> = BTreeMap::new();
        for series in changes.iter() {
            let (info, value) = (series.info, series.value);
            let l = &info.labels;
            let cgroup = label(l, schema::key::CGROUP).to_string();
            match (info.name.as_str(), value) {
                (n, Value::Histogram(_)) if n == schema::RUNQ_LATENCY.name => {
                    let Change::Histogram(d) = series.change() else {
                        continue;
                    };
                    let r = row(&mut rows, &cgroup);
                    r.container = label(l, "container").to_string();
                    r.samples = d.count;
                    r.p50_seconds = d.quantile(0.5);
                    r.p99_seconds = d.quantile(0.99);
                }
                (name, Value::Counter(_)) if name == schema::SWITCH_OUT.name => {
                    // A counter that went back (an agent restarted) adds nothing.
                    let n = match series.change() {
                        Change::Counter(n) => n,
                        _ => 0,
                    };
                    let r = row(&mut rows, &cgroup);
                    r.switch_out.insert(label(l, "cause").to_string(), n);
                }
                (n, Value::Counter(_)) if n == schema::WAIT_BEHIND.name => {
                    // Nanoseconds; a counter that went back (an agent
                    // restarted) adds nothing.
                    let ns = match series.change() {
                        Change::Counter(n) => n,
                        _ => 0,
                    };
                    let r = row(&mut rows, &cgroup);
                    let culprit = label(l, "culprit");
                    let culprit = if culprit == cgroup {
                        "(own cgroup)"
                    } else {
                        culprit
                    };
                    if ns > 0 {
                        r.culprits.push((culprit.to_string(), ns as f64 / 1e9));
                    }
                }
                _ => {}
            }
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
