// SPDX-License-Identifier: Apache-2.0
//! prometheus_client 0.26.0's `MultiProcessCollector._read_metrics` and
//! `_accumulate_metrics`, step for step: the same first-seen orders (its
//! dicts keep insertion order, and the text follows them), the same
//! comparisons (a `mostrecent` sample with timestamp 0 never wins) and the
//! same float arithmetic.

use std::collections::HashMap;
use std::hash::Hash;

use super::files::{GaugeMode, Kind};
use super::float::float_to_go_string;
use super::parse::Entry;

/// Labels in upstream's order: sorted, then `pid` (gauges) or `le`
/// (buckets) appended. Kept as a list, not a map, because the output's
/// `dict(labels)` lets a later duplicate win.
pub(crate) type Labels = Vec<(String, String)>;

/// One merged metric family, in the order upstream's collector yields it.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The family's name as in the files (a counter's, without `_total`).
    pub name: String,
    /// Help text of the first entry seen.
    pub help: String,
    /// `counter`, `gauge`, `histogram` or `summary`: from the first file
    /// seen holding this family.
    pub kind: &'static str,
    /// The merged samples.
    pub samples: Vec<Sample>,
}

/// One merged sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// `reqs_total`, `lat_bucket`, …
    pub name: String,
    /// Labels in merge order; a duplicate name's last value is the one shown.
    pub labels: Labels,
    /// The merged value.
    pub value: f64,
}

struct Raw {
    name: String,
    labels: Labels,
    value: f64,
    timestamp: f64,
}

struct Collected {
    help: String,
    kind: &'static str,
    mode: Option<GaugeMode>,
    samples: Vec<Raw>,
}

/// A `dict` with Python's insertion order.
struct Ordered<K, V> {
    index: HashMap<K, usize>,
    items: Vec<(K, V)>,
}

impl<K: Hash + Eq + Clone, V> Ordered<K, V> {
    fn new() -> Self {
        Ordered {
            index: HashMap::new(),
            items: Vec::new(),
        }
    }

    fn entry(&mut self, key: &K, init: impl FnOnce() -> V) -> &mut V {
        let i = match self.index.get(key) {
            Some(&i) => i,
            None => {
                self.index.insert(key.clone(), self.items.len());
                self.items.push((key.clone(), init()));
                self.items.len() - 1
            }
        };
        &mut self.items[i].1
    }
}

/// The families read so far, in first-seen order.
pub(crate) struct Merger {
    metrics: Ordered<String, Collected>,
}

impl Merger {
    pub(crate) fn new() -> Self {
        Merger {
            metrics: Ordered::new(),
        }
    }

    /// Adds one file's entries, as `_read_metrics` does.
    pub(crate) fn add(&mut self, kind: Kind, pid: &str, entries: Vec<Entry>) {
        for e in entries {
            let metric = self.metrics.entry(&e.metric, || Collected {
                help: e.help.clone(),
                kind: kind.type_name(),
                mode: None,
                samples: Vec::new(),
            });
            let mut labels = e.labels;
            if let Kind::Gauge(mode) = kind {
                // The last gauge file read decides the whole family's mode.
                metric.mode = Some(mode);
                labels.push(("pid".into(), pid.into()));
            }
            metric.samples.push(Raw {
                name: e.sample,
                labels,
                value: e.value,
                timestamp: e.timestamp,
            });
        }
    }

    /// `_accumulate_metrics(accumulate=True)`. Returns the families and, for
    /// a histogram bucket whose `le` is not a number (only a foreign file
    /// sharing a histogram's name can hold one), a note of what was skipped.
    pub(crate) fn finish(self) -> (Vec<Family>, Vec<String>) {
        let mut skipped = Vec::new();
        let families = self
            .metrics
            .items
            .into_iter()
            .map(|(name, m)| {
                let samples = accumulate(&name, &m, &mut skipped);
                Family {
                    name,
                    help: m.help,
                    kind: m.kind,
                    samples,
                }
            })
            .collect();
        (families, skipped)
    }
}

type BySample = Ordered<(String, Labels), f64>;

fn accumulate(metric: &str, m: &Collected, skipped: &mut Vec<String>) -> Vec<Sample> {
    let mut samples: Ordered<Labels, BySample> = Ordered::new();
    let mut timestamps: HashMap<(Labels, String), f64> = HashMap::new();
    let mut buckets: Ordered<Labels, Vec<(f64, f64)>> = Ordered::new();
    let gauge_mode = if m.kind == "gauge" { m.mode } else { None };
    for s in &m.samples {
        let mut labels = s.labels.clone();
        if let Some(mode) = gauge_mode {
            if !matches!(mode, GaugeMode::All | GaugeMode::LiveAll) {
                labels.retain(|(n, _)| n != "pid");
            }
        }
        let key = (s.name.clone(), labels.clone());
        match (m.kind, gauge_mode) {
            ("gauge", Some(GaugeMode::Min | GaugeMode::LiveMin)) => {
                let current = samples.entry(&labels, Ordered::new).entry(&key, || s.value);
                if s.value < *current {
                    *current = s.value;
                }
            }
            ("gauge", Some(GaugeMode::Max | GaugeMode::LiveMax)) => {
                let current = samples.entry(&labels, Ordered::new).entry(&key, || s.value);
                if s.value > *current {
                    *current = s.value;
                }
            }
            ("gauge", Some(GaugeMode::Sum | GaugeMode::LiveSum)) => {
                *samples.entry(&labels, Ordered::new).entry(&key, || 0.0) += s.value;
            }
            ("gauge", Some(GaugeMode::MostRecent | GaugeMode::LiveMostRecent)) => {
                let seen = timestamps
                    .entry((labels.clone(), s.name.clone()))
                    .or_insert(0.0);
                if *seen < s.timestamp {
                    *samples.entry(&labels, Ordered::new).entry(&key, || 0.0) = s.value;
                    *seen = s.timestamp;
                }
            }
            ("gauge", _) => {
                *samples.entry(&labels, Ordered::new).entry(&key, || 0.0) = s.value;
            }
            ("histogram", _) => match labels.iter().find(|(n, _)| n == "le") {
                Some((_, le)) => match parse_python_float(le) {
                    Some(bound) => {
                        let without_le: Labels =
                            labels.iter().filter(|(n, _)| n != "le").cloned().collect();
                        let b = buckets.entry(&without_le, Vec::new);
                        match b.iter_mut().find(|(k, _)| *k == bound) {
                            Some((_, v)) => *v += s.value,
                            None => b.push((bound, s.value)),
                        }
                    }
                    None => skipped.push(format!(
                        "{metric}: a bucket with le={le:?}, which is not a number, was left out"
                    )),
                },
                None => *samples.entry(&labels, Ordered::new).entry(&key, || 0.0) += s.value,
            },
            _ => *samples.entry(&labels, Ordered::new).entry(&key, || 0.0) += s.value,
        }
    }
    for (labels, mut values) in buckets.items {
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut acc = 0.0;
        let by_sample = samples.entry(&labels, Ordered::new);
        for (bound, value) in values {
            let mut with_le = labels.clone();
            with_le.push(("le".into(), float_to_go_string(bound)));
            acc += value;
            *by_sample.entry(&(format!("{metric}_bucket"), with_le), || 0.0) = acc;
        }
        *by_sample.entry(&(format!("{metric}_count"), labels.clone()), || 0.0) = acc;
    }
    samples
        .items
        .into_iter()
        .flat_map(|(_, by)| by.items)
        .map(|((name, labels), value)| Sample {
            name,
            labels,
            value,
        })
        .collect()
}

/// Python's `float(str)` for the strings a bucket's `le` holds; `None` for
/// what it refuses, and for NaN, which upstream's dict of bounds cannot
/// merge (each NaN is a key of its own).
pub(crate) fn parse_python_float(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c.is_whitespace());
    let lower = t.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    // Rust also takes "infinity"/"inf"/"nan" as Python does, but not "+nan"
    // spelled differently; digits, dot and exponent only otherwise.
    let ok = matches!(unsigned, "inf" | "infinity")
        || unsigned
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'));
    let v: f64 = if ok { t.parse().ok()? } else { return None };
    (!v.is_nan()).then_some(v)
}
