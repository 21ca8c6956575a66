// SPDX-License-Identifier: Apache-2.0
//! What the encoders take: sources (one registry's metrics with the labels
//! that say where they come from), grouped into metric families across
//! sources, so that the same name published by a hundred processes is one
//! family with one `# HELP` and one `# TYPE`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Write;

use topdeck::{MetricInfo, RegistryEntry, Snapshot, Value};

use crate::rules;

/// One registry's metrics (or any other set of metrics, such as the
/// endpoint's own), with the labels every one of its series carries.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// registry.counter("jobs_total", &[], "Jobs done.", "").unwrap().add(3);
/// let mut reader = topdeck::RegistryReader::open(registry.path()).unwrap();
/// let snap = reader.snapshot().unwrap();
///
/// let sources = [topdeck_export::Source::new("worker", 42, "main", snap.iter())];
/// let exposition = topdeck_export::Exposition::group(&sources);
/// let mut out = Vec::new();
/// topdeck_export::text::encode(&mut out, &exposition).unwrap();
/// assert!(String::from_utf8(out).unwrap()
///     .contains("jobs_total{process=\"worker\",pid=\"42\"} 3\n"));
/// ```
#[derive(Debug)]
pub struct Source<'a> {
    /// `(name, value)` of the source labels, unescaped (for protobuf).
    pub(crate) labels: Vec<(&'static str, Cow<'a, str>)>,
    /// The same labels as text, escaped, comma-separated, without braces.
    pub(crate) label_text: Vec<u8>,
    pub(crate) metrics: Vec<(&'a MetricInfo, &'a Value)>,
}

impl<'a> Source<'a> {
    /// The metrics of a registry written by `process` (`pid`), in the
    /// registry named `registry`.
    pub fn new(
        process: &'a str,
        pid: u32,
        registry: &'a str,
        metrics: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>,
    ) -> Self {
        let mut labels = vec![
            (rules::PROCESS_LABEL, Cow::Borrowed(process)),
            (rules::PID_LABEL, Cow::Owned(pid.to_string())),
        ];
        if registry != rules::DEFAULT_REGISTRY {
            labels.push((rules::REGISTRY_LABEL, Cow::Borrowed(registry)));
        }
        Self::with_labels(labels, metrics)
    }

    /// A registry's snapshot, labelled from its namespace entry.
    pub fn from_snapshot(entry: &'a RegistryEntry, snapshot: &'a Snapshot) -> Self {
        Self::new(
            &entry.process_name,
            entry.pid,
            &entry.registry_name,
            snapshot.iter(),
        )
    }

    /// Metrics with no source labels (the endpoint's own, for instance).
    pub fn unlabelled(metrics: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>) -> Self {
        Self::with_labels(Vec::new(), metrics)
    }

    fn with_labels(
        labels: Vec<(&'static str, Cow<'a, str>)>,
        metrics: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>,
    ) -> Self {
        let mut label_text = Vec::new();
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                label_text.push(b',');
            }
            label_text.extend_from_slice(k.as_bytes());
            label_text.extend_from_slice(b"=\"");
            // Writing into a Vec cannot fail.
            let _ = rules::write_label_value(&mut label_text, v);
            label_text.push(b'"');
        }
        Self {
            labels,
            label_text,
            metrics: metrics.into_iter().collect(),
        }
    }
}

/// The Prometheus type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic counter.
    Counter,
    /// Gauge (integer or float).
    Gauge,
    /// Histogram: classic buckets in the text formats, native in protobuf.
    Histogram,
}

impl Kind {
    fn of(v: &Value) -> Self {
        match v {
            Value::Counter(_) => Self::Counter,
            Value::Gauge(_) | Value::GaugeF64(_) => Self::Gauge,
            Value::Histogram(_) => Self::Histogram,
        }
    }
}

/// One series: a metric of one source.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// Index of the source in the exposition.
    pub(crate) source: u32,
    pub(crate) info: &'a MetricInfo,
    pub(crate) value: &'a Value,
}

/// Every series of one exposed name.
#[derive(Debug)]
pub struct Family<'a> {
    /// The exposed name (for counters, with `_total`).
    pub name: Cow<'a, str>,
    /// The type.
    pub kind: Kind,
    /// Help text of the first series seen.
    pub help: &'a str,
    /// Unit of the first series seen.
    pub unit: &'a str,
    pub(crate) series: Vec<Series<'a>>,
}

impl Family<'_> {
    /// Number of series.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// Whether the family has no series (never true for a grouped family).
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

/// Sources grouped into families, sorted by name.
#[derive(Debug)]
pub struct Exposition<'a> {
    pub(crate) sources: &'a [Source<'a>],
    pub(crate) families: Vec<Family<'a>>,
    conflicts: u64,
}

impl<'a> Exposition<'a> {
    /// Groups the series of `sources` by exposed name. The first source to
    /// publish a name decides its type, help and unit; series of another
    /// type under the same name are left out and counted in
    /// [`conflicts`](Self::conflicts).
    pub fn group(sources: &'a [Source<'a>]) -> Self {
        let mut index: HashMap<Cow<'a, str>, usize> = HashMap::new();
        let mut families: Vec<Family<'a>> = Vec::new();
        let mut conflicts = 0;
        for (s, source) in sources.iter().enumerate() {
            for &(info, value) in &source.metrics {
                let kind = Kind::of(value);
                let series = Series {
                    source: s as u32,
                    info,
                    value,
                };
                let name = match kind {
                    Kind::Counter => rules::counter_sample_name(&info.name),
                    _ => Cow::Borrowed(info.name.as_str()),
                };
                let slot = match index.get(name.as_ref()) {
                    Some(&i) => i,
                    None => {
                        index.insert(name.clone(), families.len());
                        families.push(Family {
                            name,
                            kind,
                            help: &info.help,
                            unit: &info.unit,
                            series: Vec::new(),
                        });
                        families.len() - 1
                    }
                };
                let f = &mut families[slot];
                if f.kind == kind {
                    f.series.push(series);
                } else {
                    conflicts += 1;
                }
            }
        }
        families.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Self {
            sources,
            families,
            conflicts,
        }
    }

    /// The families, sorted by name.
    pub fn families(&self) -> &[Family<'a>] {
        &self.families
    }

    /// Series left out because their name was already taken by another type.
    pub fn conflicts(&self) -> u64 {
        self.conflicts
    }

    /// Writes the label set of a series (source labels, then its own, then
    /// `extra`), with braces, into a text exposition.
    pub(crate) fn write_labels(
        &self,
        w: &mut impl Write,
        s: &Series<'_>,
        histogram: bool,
        extra: Option<(&str, &[u8])>,
    ) -> std::io::Result<()> {
        let source = &self.sources[s.source as usize];
        let mut first = source.label_text.is_empty();
        if first && s.info.labels.is_empty() && extra.is_none() {
            return Ok(());
        }
        w.write_all(b"{")?;
        w.write_all(&source.label_text)?;
        for (k, v) in &s.info.labels {
            if !first {
                w.write_all(b",")?;
            }
            first = false;
            w.write_all(rules::own_label_name(k, histogram).as_bytes())?;
            w.write_all(b"=\"")?;
            rules::write_label_value(w, v)?;
            w.write_all(b"\"")?;
        }
        if let Some((k, v)) = extra {
            if !first {
                w.write_all(b",")?;
            }
            w.write_all(k.as_bytes())?;
            w.write_all(b"=\"")?;
            w.write_all(v)?;
            w.write_all(b"\"")?;
        }
        w.write_all(b"}")
    }
}
