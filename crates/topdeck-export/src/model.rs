// SPDX-License-Identifier: Apache-2.0
//! What the encoders take: sources (one registry's metrics with the labels
//! that say where they come from), grouped into metric families across
//! sources, so that the same name published by a hundred processes is one
//! family with one `# HELP` and one `# TYPE`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Write};

use topdeck::{MetricInfo, RegistryEntry, Snapshot, Value};

use crate::histogram::LeCache;
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
    index: u32,
    len: usize,
}

impl Family<'_> {
    /// Number of series.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the family has no series (never true for a grouped family).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Marks a series left out of every family (a type clash).
const SKIPPED: u32 = u32::MAX;

impl Buffers {
    /// The per-family buffers and the formatted bounds, borrowed apart.
    pub(crate) fn split(&mut self) -> (&mut Vec<Vec<u8>>, &mut LeCache) {
        (&mut self.families, &mut self.les)
    }
}

/// Sources grouped into families.
///
/// Encoders write series in source order, each into its family's buffer,
/// and then the families in name order. Reading the sources in the order
/// they sit in memory, rather than family by family, is what keeps a scrape
/// of 100,000 series within a few cache misses per series: the family-major
/// order jumped between a hundred sources' descriptors at every series.
#[derive(Debug)]
pub struct Exposition<'a> {
    pub(crate) sources: &'a [Source<'a>],
    /// In the order first seen.
    families: Vec<Family<'a>>,
    /// Indices into `families`, sorted by name.
    order: Vec<u32>,
    /// For each source, the family of each of its metrics, or [`SKIPPED`].
    assign: Vec<Vec<u32>>,
    conflicts: u64,
}

/// Buffers an encoder fills, one per family; kept between encodings (by
/// the [`Scraper`](crate::Scraper), for one), they stop allocating once
/// they have grown to the exposition's size.
/// The bucket bounds already formatted are kept with them.
#[derive(Debug, Default)]
pub struct Buffers {
    families: Vec<Vec<u8>>,
    pub(crate) les: LeCache,
}

impl<'a> Exposition<'a> {
    /// Groups the series of `sources` by exposed name. The first source to
    /// publish a name decides its type, help and unit; series of another
    /// type under the same name are left out and counted in
    /// [`conflicts`](Self::conflicts).
    pub fn group(sources: &'a [Source<'a>]) -> Self {
        let mut index: HashMap<Cow<'a, str>, u32> = HashMap::new();
        let mut families: Vec<Family<'a>> = Vec::new();
        let mut assign: Vec<Vec<u32>> = Vec::with_capacity(sources.len());
        let mut conflicts = 0;
        for source in sources {
            let mut current = Vec::with_capacity(source.metrics.len());
            // Processes of one service publish the same names in the same
            // order: the previous source's family at the same position is
            // usually right, and cheaper to check than a hash lookup.
            let previous = assign.last();
            for (pos, &(info, value)) in source.metrics.iter().enumerate() {
                let kind = Kind::of(value);
                let name = match kind {
                    Kind::Counter => rules::counter_sample_name(&info.name),
                    _ => Cow::Borrowed(info.name.as_str()),
                };
                let hint = previous
                    .and_then(|p| p.get(pos).copied())
                    .filter(|&f| f != SKIPPED && families[f as usize].name == name);
                let slot = match hint.or_else(|| index.get(name.as_ref()).copied()) {
                    Some(i) => i,
                    None => {
                        let i = families.len() as u32;
                        index.insert(name.clone(), i);
                        families.push(Family {
                            name,
                            kind,
                            help: &info.help,
                            unit: &info.unit,
                            index: i,
                            len: 0,
                        });
                        i
                    }
                };
                let f = &mut families[slot as usize];
                if f.kind == kind {
                    f.len += 1;
                    current.push(slot);
                } else {
                    conflicts += 1;
                    current.push(SKIPPED);
                }
            }
            assign.push(current);
        }
        let mut order: Vec<u32> = (0..families.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| families[a as usize].name.cmp(&families[b as usize].name));
        Self {
            sources,
            families,
            order,
            assign,
            conflicts,
        }
    }

    /// The families, sorted by name.
    pub fn families(&self) -> impl Iterator<Item = &Family<'a>> + '_ {
        self.order.iter().map(|&f| &self.families[f as usize])
    }

    /// The series of one family, in source order. This scans every source:
    /// for building messages one family at a time, not for encoders.
    pub fn series_of<'s>(&'s self, family: &Family<'_>) -> impl Iterator<Item = Series<'a>> + 's {
        let want = family.index;
        self.assign.iter().enumerate().flat_map(move |(si, fams)| {
            let metrics = &self.sources[si].metrics;
            fams.iter()
                .zip(metrics)
                .filter(move |(f, _)| **f == want)
                .map(move |(_, &(info, value))| Series {
                    source: si as u32,
                    info,
                    value,
                })
        })
    }

    /// Series left out because their name was already taken by another type.
    pub fn conflicts(&self) -> u64 {
        self.conflicts
    }

    /// The encoders' common loop: `series` appends each series, in source
    /// order, to its family's buffer; then `family` writes each family, in
    /// name order, given its filled buffer.
    pub(crate) fn encode_by_family<W: Write>(
        &self,
        w: &mut W,
        buffers: &mut Vec<Vec<u8>>,
        mut series: impl FnMut(&mut Vec<u8>, &Family<'a>, &Series<'a>) -> io::Result<()>,
        mut family: impl FnMut(&mut W, &Family<'a>, &[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let bufs = buffers;
        if bufs.len() < self.families.len() {
            bufs.resize_with(self.families.len(), Vec::new);
        }
        for b in bufs.iter_mut() {
            b.clear();
        }
        for (si, (source, fams)) in self.sources.iter().zip(&self.assign).enumerate() {
            for (&(info, value), &f) in source.metrics.iter().zip(fams) {
                if f == SKIPPED {
                    continue;
                }
                let s = Series {
                    source: si as u32,
                    info,
                    value,
                };
                series(&mut bufs[f as usize], &self.families[f as usize], &s)?;
            }
        }
        for &f in &self.order {
            family(w, &self.families[f as usize], &bufs[f as usize])?;
        }
        Ok(())
    }

    /// Writes the labels of a series, escaped and comma-separated, without
    /// braces: the source's, then its own (renamed where they collide).
    pub(crate) fn series_labels(&self, s: &Series<'_>, histogram: bool, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.sources[s.source as usize].label_text);
        for (k, v) in &s.info.labels {
            if !out.is_empty() {
                out.push(b',');
            }
            out.extend_from_slice(rules::own_label_name(k, histogram).as_bytes());
            out.extend_from_slice(b"=\"");
            // Writing into a Vec cannot fail.
            let _ = rules::write_label_value(out, v);
            out.push(b'"');
        }
    }
}
