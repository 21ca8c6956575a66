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
use super::parse::{Fast, KeyCache, RawEntry};

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

/// One entry as read, its strings numbered in the [`KeyCache`].
struct Raw {
    name: u32,
    labels: u32,
    /// The file's pid (numbered as a string), for a gauge file's entries.
    pid: Option<u32>,
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
    index: HashMap<K, usize, Fast>,
    items: Vec<(K, V)>,
}

impl<K: Hash + Eq + Copy, V> Ordered<K, V> {
    fn new() -> Self {
        Ordered {
            index: HashMap::default(),
            items: Vec::new(),
        }
    }

    fn entry(&mut self, key: K, init: impl FnOnce() -> V) -> &mut V {
        let i = *self.index.entry(key).or_insert_with(|| {
            self.items.push((key, init()));
            self.items.len() - 1
        });
        &mut self.items[i].1
    }
}

/// The families read so far, in first-seen order, and the keys and
/// strings their entries refer to by number.
pub(crate) struct Merger {
    keys: KeyCache,
    metrics: Ordered<u32, Collected>,
}

impl Merger {
    pub(crate) fn new() -> Self {
        Merger {
            keys: KeyCache::default(),
            metrics: Ordered::new(),
        }
    }

    /// The cache the files' entries are to be parsed with.
    pub(crate) fn keys(&mut self) -> &mut KeyCache {
        &mut self.keys
    }

    /// Adds one file's entries (parsed with [`Merger::keys`]), as
    /// `_read_metrics` does.
    pub(crate) fn add(&mut self, kind: Kind, pid: &str, entries: &[RawEntry]) {
        let pid = match kind {
            Kind::Gauge(_) => Some(self.keys.strings.id(pid.to_string())),
            _ => None,
        };
        for e in entries {
            let key = &self.keys.keys[e.key as usize];
            let metric = self.metrics.entry(key.metric, || Collected {
                help: key.help.clone(),
                kind: kind.type_name(),
                mode: None,
                samples: Vec::new(),
            });
            if let Kind::Gauge(mode) = kind {
                // The last gauge file read decides the whole family's mode.
                metric.mode = Some(mode);
            }
            metric.samples.push(Raw {
                name: key.sample,
                labels: key.labels,
                pid,
                value: e.value,
                timestamp: e.timestamp,
            });
        }
    }

    /// `_accumulate_metrics(accumulate=True)`. Returns the families and, for
    /// a histogram bucket whose `le` is not a number (only a foreign file
    /// sharing a histogram's name can hold one), a note of what was skipped.
    pub(crate) fn finish(self) -> (Vec<Family>, Vec<String>) {
        let Merger { mut keys, metrics } = self;
        let mut skipped = Vec::new();
        let families = metrics
            .items
            .into_iter()
            .map(|(name, m)| {
                let name = keys.strings.get(name).clone();
                let samples = accumulate(&name, &m, &mut keys, &mut skipped);
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

/// What a label set's `le` says, for a histogram sample.
#[derive(Clone)]
enum Le {
    /// No `le`: `_sum`, or a foreign sample.
    Absent,
    /// A bucket of this bound; the labels without `le`.
    Bound(f64, u32),
    /// An `le` that is not a number.
    Invalid(String),
}

/// Samples by their label set, then by (sample name, label set): numbers
/// in the [`KeyCache`].
type BySample = Ordered<(u32, u32), f64>;

fn accumulate(
    metric: &str,
    m: &Collected,
    keys: &mut KeyCache,
    skipped: &mut Vec<String>,
) -> Vec<Sample> {
    let KeyCache {
        strings,
        label_sets,
        ..
    } = keys;
    let mut samples: Ordered<u32, BySample> = Ordered::new();
    let mut timestamps: HashMap<(u32, u32), f64, Fast> = HashMap::default();
    let mut buckets: Ordered<u32, Vec<(f64, f64)>> = Ordered::new();
    let gauge_mode = if m.kind == "gauge" { m.mode } else { None };
    let drop_pid = gauge_mode.is_some_and(|mode| !matches!(mode, GaugeMode::All | GaugeMode::LiveAll));
    // The label set a sample merges under, per (labels, pid): the key's
    // sorted labels, then `pid` (gauges), then without any `pid` unless
    // the mode keeps one sample per worker.
    let mut merged_labels: HashMap<(u32, Option<u32>), u32, Fast> = HashMap::default();
    let mut le_of: HashMap<u32, Le, Fast> = HashMap::default();
    for s in &m.samples {
        let labels = *merged_labels.entry((s.labels, s.pid)).or_insert_with(|| {
            let mut labels = label_sets.get(s.labels).clone();
            if let Some(pid) = s.pid {
                labels.push(("pid".into(), strings.get(pid).clone()));
            }
            if drop_pid {
                labels.retain(|(n, _)| n != "pid");
            }
            label_sets.id(labels)
        });
        let key = (s.name, labels);
        match (m.kind, gauge_mode) {
            ("gauge", Some(GaugeMode::Min | GaugeMode::LiveMin)) => {
                let current = samples.entry(labels, Ordered::new).entry(key, || s.value);
                if s.value < *current {
                    *current = s.value;
                }
            }
            ("gauge", Some(GaugeMode::Max | GaugeMode::LiveMax)) => {
                let current = samples.entry(labels, Ordered::new).entry(key, || s.value);
                if s.value > *current {
                    *current = s.value;
                }
            }
            ("gauge", Some(GaugeMode::Sum | GaugeMode::LiveSum)) => {
                *samples.entry(labels, Ordered::new).entry(key, || 0.0) += s.value;
            }
            ("gauge", Some(GaugeMode::MostRecent | GaugeMode::LiveMostRecent)) => {
                let seen = timestamps.entry((labels, s.name)).or_insert(0.0);
                if *seen < s.timestamp {
                    *samples.entry(labels, Ordered::new).entry(key, || 0.0) = s.value;
                    *seen = s.timestamp;
                }
            }
            ("gauge", _) => {
                *samples.entry(labels, Ordered::new).entry(key, || 0.0) = s.value;
            }
            ("histogram", _) => {
                let le = le_of.entry(labels).or_insert_with(|| {
                    let set = label_sets.get(labels);
                    match set.iter().find(|(n, _)| n == "le") {
                        Some((_, le)) => match parse_python_float(le) {
                            Some(bound) => {
                                let without_le: Labels =
                                    set.iter().filter(|(n, _)| n != "le").cloned().collect();
                                Le::Bound(bound, label_sets.id(without_le))
                            }
                            None => Le::Invalid(le.clone()),
                        },
                        None => Le::Absent,
                    }
                });
                match le {
                    Le::Bound(bound, without_le) => {
                        let b = buckets.entry(*without_le, Vec::new);
                        match b.iter_mut().find(|(k, _)| k == bound) {
                            Some((_, v)) => *v += s.value,
                            None => b.push((*bound, s.value)),
                        }
                    }
                    Le::Invalid(le) => skipped.push(format!(
                        "{metric}: a bucket with le={le:?}, which is not a number, was left out"
                    )),
                    Le::Absent => {
                        *samples.entry(labels, Ordered::new).entry(key, || 0.0) += s.value
                    }
                }
            }
            _ => *samples.entry(labels, Ordered::new).entry(key, || 0.0) += s.value,
        }
    }
    if !buckets.items.is_empty() {
        let bucket = strings.id(format!("{metric}_bucket"));
        let count = strings.id(format!("{metric}_count"));
        for (labels, mut values) in buckets.items {
            values.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut acc = 0.0;
            let by_sample = samples.entry(labels, Ordered::new);
            for (bound, value) in values {
                let mut with_le = label_sets.get(labels).clone();
                with_le.push(("le".into(), float_to_go_string(bound)));
                let with_le = label_sets.id(with_le);
                acc += value;
                *by_sample.entry((bucket, with_le), || 0.0) = acc;
            }
            *by_sample.entry((count, labels), || 0.0) = acc;
        }
    }
    samples
        .items
        .into_iter()
        .flat_map(|(_, by)| by.items)
        .map(|((name, labels), value)| Sample {
            name: strings.get(name).clone(),
            labels: label_sets.get(labels).clone(),
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
