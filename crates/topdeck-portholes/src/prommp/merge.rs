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
use super::parse::{Fast, KeyCache, Labels, RawEntry};

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
    /// Its key in the [`KeyCache`].
    key: u32,
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
        let i = self.index(key, init);
        &mut self.items[i].1
    }

    /// The position of `key`, inserted with `init()` if it is new.
    fn index(&mut self, key: K, init: impl FnOnce() -> V) -> usize {
        *self.index.entry(key).or_insert_with(|| {
            self.items.push((key, init()));
            self.items.len() - 1
        })
    }
}

/// The families read so far, in first-seen order, and the keys and
/// strings their entries refer to by number.
pub(crate) struct Merger {
    keys: KeyCache,
    metrics: Ordered<u32, Collected>,
    /// The position in `metrics` of each key's family, once seen
    /// (`usize::MAX` before): one lookup per key, not per entry.
    metric_of: Vec<usize>,
}

impl Merger {
    pub(crate) fn new() -> Self {
        Merger {
            keys: KeyCache::default(),
            metrics: Ordered::new(),
            metric_of: Vec::new(),
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
        self.metric_of.resize(self.keys.keys.len(), usize::MAX);
        for e in entries {
            let at = e.key as usize;
            if self.metric_of[at] == usize::MAX {
                let key = &self.keys.keys[at];
                self.metric_of[at] = self.metrics.index(key.metric, || Collected {
                    help: key.help.clone(),
                    kind: kind.type_name(),
                    mode: None,
                    samples: Vec::new(),
                });
            }
            let metric = &mut self.metrics.items[self.metric_of[at]].1;
            if let Kind::Gauge(mode) = kind {
                // The last gauge file read decides the whole family's mode.
                metric.mode = Some(mode);
            }
            metric.samples.push(Raw {
                key: e.key,
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
        let Merger {
            mut keys, metrics, ..
        } = self;
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

/// Where a sample's value goes, worked out once per (key, pid): most of a
/// directory is the same keys over and over, so each sample after the
/// first costs one lookup.
#[derive(Clone)]
enum Slot {
    /// Combined into `values[i]` by the family's operation.
    Value(usize),
    /// A `mostrecent` gauge: replaces the sample `(labels, key)` when its
    /// timestamp is newer than `newest[i]`, the newest seen for that sample.
    Recent(usize, u32, (u32, u32)),
    /// Added to bucket `bound` of label set `set` (without `le`).
    Bucket { set: usize, bound: usize },
    /// A bucket whose `le` is not a number: noted, left out.
    Invalid(String),
}

/// Samples by label set, then by (sample name, label set), each holding
/// its index in `values`: upstream's nested dicts, in their order.
struct Table {
    samples: Ordered<u32, Ordered<(u32, u32), usize>>,
    values: Vec<f64>,
}

impl Table {
    /// The index of sample `key` under `labels`, added with `init` if new.
    fn index(&mut self, labels: u32, key: (u32, u32), init: f64) -> usize {
        let values = &mut self.values;
        *self.samples.entry(labels, Ordered::new).entry(key, || {
            values.push(init);
            values.len() - 1
        })
    }
}

/// How a family combines the values that meet in one sample.
#[derive(Clone, Copy, PartialEq)]
enum Op {
    Min,
    Max,
    Sum,
    MostRecent,
    Last,
}

fn accumulate(
    metric: &str,
    m: &Collected,
    keys: &mut KeyCache,
    skipped: &mut Vec<String>,
) -> Vec<Sample> {
    let KeyCache {
        keys: decoded,
        strings,
        label_sets,
        ..
    } = keys;
    let mut table = Table {
        samples: Ordered::new(),
        values: Vec::new(),
    };
    let mut newest: Vec<f64> = Vec::new();
    let mut newest_of: HashMap<(u32, u32), usize, Fast> = HashMap::default();
    let mut buckets: Ordered<u32, Vec<(f64, f64)>> = Ordered::new();
    let gauge_mode = if m.kind == "gauge" { m.mode } else { None };
    let drop_pid =
        gauge_mode.is_some_and(|mode| !matches!(mode, GaugeMode::All | GaugeMode::LiveAll));
    let op = match (m.kind, gauge_mode) {
        ("gauge", Some(GaugeMode::Min | GaugeMode::LiveMin)) => Op::Min,
        ("gauge", Some(GaugeMode::Max | GaugeMode::LiveMax)) => Op::Max,
        ("gauge", Some(GaugeMode::Sum | GaugeMode::LiveSum)) => Op::Sum,
        ("gauge", Some(GaugeMode::MostRecent | GaugeMode::LiveMostRecent)) => Op::MostRecent,
        ("gauge", _) => Op::Last,
        _ => Op::Sum,
    };
    let mut slots: HashMap<(u32, Option<u32>), Slot, Fast> = HashMap::default();
    // Each bucket set's bounds by value (-0 as 0, as `==` finds them): a
    // search of the bounds per new `le` was quadratic in a file's bounds.
    let mut bound_at: HashMap<(usize, u64), usize, Fast> = HashMap::default();
    for s in &m.samples {
        let slot = slots.entry((s.key, s.pid)).or_insert_with(|| {
            let key = &decoded[s.key as usize];
            // The key's sorted labels, then `pid` (gauges), then without
            // any `pid` unless the mode keeps one sample per worker.
            let mut set = label_sets.get(key.labels).clone();
            if let Some(pid) = s.pid {
                set.push(("pid".into(), strings.get(pid).clone()));
            }
            if drop_pid {
                set.retain(|(n, _)| n != "pid");
            }
            if m.kind == "histogram" {
                if let Some((_, le)) = set.iter().find(|(n, _)| n == "le") {
                    let Some(bound) = parse_python_float(le) else {
                        return Slot::Invalid(le.clone());
                    };
                    let without_le: Labels =
                        set.iter().filter(|(n, _)| n != "le").cloned().collect();
                    let without_le = label_sets.id(without_le);
                    let set = buckets.index(without_le, Vec::new);
                    let bounds = &mut buckets.items[set].1;
                    let next = bounds.len();
                    let at = match bound {
                        // Equal to nothing, as with `==`.
                        b if b.is_nan() => next,
                        b => *bound_at.entry((set, (b + 0.0).to_bits())).or_insert(next),
                    };
                    if at == next {
                        bounds.push((bound, 0.0));
                    }
                    return Slot::Bucket { set, bound: at };
                }
            }
            let labels = label_sets.id(set);
            let sample = (key.sample, labels);
            if op == Op::MostRecent {
                // Shared by every (key, pid) that meets in this sample.
                let i = *newest_of.entry(sample).or_insert_with(|| {
                    newest.push(0.0);
                    newest.len() - 1
                });
                return Slot::Recent(i, labels, sample);
            }
            let init = if matches!(op, Op::Min | Op::Max) {
                s.value
            } else {
                0.0
            };
            Slot::Value(table.index(labels, sample, init))
        });
        match slot {
            Slot::Value(i) => {
                let v = &mut table.values[*i];
                match op {
                    Op::Min if s.value < *v => *v = s.value,
                    Op::Max if s.value > *v => *v = s.value,
                    Op::Sum => *v += s.value,
                    Op::Last => *v = s.value,
                    _ => {}
                }
            }
            Slot::Recent(i, labels, sample) => {
                // A sample with timestamp 0 never wins, and creates nothing.
                if newest[*i] < s.timestamp {
                    let at = table.index(*labels, *sample, 0.0);
                    table.values[at] = s.value;
                    newest[*i] = s.timestamp;
                }
            }
            Slot::Bucket { set, bound } => buckets.items[*set].1[*bound].1 += s.value,
            Slot::Invalid(le) => skipped.push(format!(
                "{metric}: a bucket with le={le:?}, which is not a number, was left out"
            )),
        }
    }
    if !buckets.items.is_empty() {
        let bucket = strings.id(format!("{metric}_bucket"));
        let count = strings.id(format!("{metric}_count"));
        for (labels, mut bounds) in buckets.items {
            bounds.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut acc = 0.0;
            for (bound, value) in bounds {
                let mut with_le = label_sets.get(labels).clone();
                with_le.push(("le".into(), float_to_go_string(bound)));
                let with_le = label_sets.id(with_le);
                acc += value;
                let at = table.index(labels, (bucket, with_le), 0.0);
                table.values[at] = acc;
            }
            let at = table.index(labels, (count, labels), 0.0);
            table.values[at] = acc;
        }
    }
    let Table { samples, values } = table;
    samples
        .items
        .into_iter()
        .flat_map(|(_, by)| by.items)
        .map(|((name, labels), at)| Sample {
            name: strings.get(name).clone(),
            labels: label_sets.get(labels).clone(),
            value: values[at],
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
