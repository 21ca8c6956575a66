// SPDX-License-Identifier: Apache-2.0
//! What the encoders take: [`Source`]s grouped into metric families across
//! sources, so that the same name published by a hundred processes is one
//! family with one `# HELP` and one `# TYPE`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use topdeck::{MetricInfo, Value};

use crate::body::Sink;
use crate::policy::series_bytes;
use crate::rules;
use crate::source::{LabelEncoding, Source};

/// The Prometheus type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic counter.
    Counter,
    /// Gauge (integer or float).
    Gauge,
    /// Histogram: classic buckets in the text formats, native in protobuf
    /// (fixed-bucket histograms of other runtimes: classic in all three).
    Histogram,
    /// Summary: count and sum, no quantiles (other runtimes' summaries).
    Summary,
}

impl Kind {
    fn of(v: &Value) -> Self {
        match v {
            Value::Counter(_) | Value::CounterF64(_) => Self::Counter,
            Value::Gauge(_) | Value::GaugeF64(_) => Self::Gauge,
            Value::Histogram(_) | Value::Buckets(_) => Self::Histogram,
            Value::Summary { .. } => Self::Summary,
        }
    }
}

/// Whether a series' own `le` label is renamed `exported_le`: for every
/// value whose metric kind is `Histogram` (summaries of other runtimes
/// included), as [`Prepared`](crate::Prepared) decides from the kind.
pub(crate) fn has_buckets(v: &Value) -> bool {
    matches!(
        v,
        Value::Histogram(_) | Value::Buckets(_) | Value::Summary { .. }
    )
}

/// One series: a metric of one source.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    /// Index of the source in the exposition.
    pub(crate) source: u32,
    /// Position of the metric in its source.
    pub(crate) pos: u32,
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
    /// Where the first series of the family is: `(source, position)`.
    first: (u32, u32),
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

impl<'a> Family<'a> {
    /// The name OpenMetrics gives the family: a counter's without `_total`.
    pub(crate) fn openmetrics_name(&self) -> &str {
        match self.kind {
            Kind::Counter => rules::counter_family_name(&self.name),
            _ => &self.name,
        }
    }

    /// The unit declared for the family (OpenMetrics' `# UNIT`, protobuf's
    /// `unit`), if its name allows one.
    pub(crate) fn declared_unit(&self) -> Option<&'a str> {
        let unit = rules::exposed_unit(self.kind == Kind::Counter, self.unit);
        rules::openmetrics_unit(self.openmetrics_name(), unit)
    }
}

/// The outcome of [`Exposition::group`] without its borrowed strings, to
/// group the same sources again at the next scrape (see
/// [`Exposition::regroup`]).
/// Cloning it shares it: the scraper keeps one, and every scrape in flight
/// encodes from it.
#[derive(Debug, Clone, Default)]
pub struct Shape(Arc<Grouping>);

impl Shape {
    /// Series the grouping left out for a type clash.
    pub fn conflicts(&self) -> u64 {
        self.0.conflicts
    }
}

/// What grouping decided, by index: no borrowed string in it.
#[derive(Debug, Default)]
struct Grouping {
    /// For each family: its first series, its kind and its length.
    families: Vec<((u32, u32), Kind, usize)>,
    /// Indices into `families`, sorted by name.
    order: Vec<u32>,
    /// For each family, its place in `order`.
    rank: Vec<u32>,
    /// For each source, the family of each of its metrics, or [`SKIPPED`].
    assign: Vec<Vec<u32>>,
    /// For each source, the positions of its grouped metrics by their
    /// family's place in the name order, then position: the series a run
    /// holds from one source are one slice of it, found by two binary
    /// searches, so a body encoded a run at a time reads each series once.
    /// Made by the first run that needs it: a body encoded whole never does.
    by_rank: OnceLock<Vec<Vec<u32>>>,
    conflicts: u64,
}

impl Grouping {
    fn new(
        families: Vec<((u32, u32), Kind, usize)>,
        order: Vec<u32>,
        assign: Vec<Vec<u32>>,
        conflicts: u64,
    ) -> Self {
        let mut rank = vec![0u32; families.len()];
        for (r, &f) in order.iter().enumerate() {
            rank[f as usize] = r as u32;
        }
        Self {
            families,
            order,
            rank,
            assign,
            by_rank: OnceLock::new(),
            conflicts,
        }
    }

    /// The positions in source `si` of the series of the families at
    /// places `ranks` of the name order.
    fn positions(&self, si: usize, ranks: &Range<usize>) -> &[u32] {
        let by_rank = self.by_rank.get_or_init(|| {
            self.assign
                .iter()
                .map(|fams| {
                    let mut positions: Vec<u32> = (0..fams.len() as u32)
                        .filter(|&p| fams[p as usize] != SKIPPED)
                        .collect();
                    // Stable: a family's series in one source stay in position order.
                    positions.sort_by_key(|&p| self.rank[fams[p as usize] as usize]);
                    positions
                })
                .collect()
        });
        let fams = &self.assign[si];
        let all = &by_rank[si];
        let rank_of = |p: &u32| self.rank[fams[*p as usize] as usize] as usize;
        let lo = all.partition_point(|p| rank_of(p) < ranks.start);
        let hi = lo + all[lo..].partition_point(|p| rank_of(p) < ranks.end);
        &all[lo..hi]
    }
}

/// Some of an exposition's families, to be encoded together: see
/// [`Exposition::runs`]. Its series are those of the families at positions
/// `families` of the name order, except that a run cut out of one family
/// holds only that family's series from the `from`-th (counted in source
/// order, from 0) to before the `to`-th, and writes its header only if it
/// holds the first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    families: Range<usize>,
    from: usize,
    to: Option<usize>,
}

impl Run {
    /// The whole families at positions `families` of the name order.
    pub fn whole(families: Range<usize>) -> Self {
        Self {
            families,
            from: 0,
            to: None,
        }
    }

    /// Whether the run holds the last family's last series.
    pub(crate) fn ends(&self, families: usize) -> bool {
        self.families.end >= families && self.to.is_none()
    }

    /// Positions, in the name order, of the families it holds.
    pub fn families(&self) -> Range<usize> {
        self.families.clone()
    }
}

/// Marks a series left out of every family (a type clash).
const SKIPPED: u32 = u32::MAX;

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
    /// The rest of what grouping decided, shared with the [`Shape`].
    grouping: Arc<Grouping>,
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
                            first: (assign.len() as u32, pos as u32),
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
        let shape = families.iter().map(|f| (f.first, f.kind, f.len)).collect();
        Self {
            sources,
            families,
            grouping: Arc::new(Grouping::new(shape, order, assign, conflicts)),
        }
    }

    /// What grouping decided, without the borrowed strings: enough to
    /// group the same sources again without looking at a name.
    pub fn shape(&self) -> Shape {
        Shape(self.grouping.clone())
    }

    /// Groups `sources` as `shape` says, without comparing a single name.
    /// `sources` must be the sources `shape` was taken from, in the same
    /// order (the same registries, read through the same readers) with at
    /// least as many metrics each: registration only appends, so then
    /// every metric the shape covers is the one it was made from. `None`
    /// if a source's metric count differs (a new metric: group afresh).
    pub fn regroup(sources: &'a [Source<'a>], shape: &Shape) -> Option<Self> {
        let grouping = &shape.0;
        if sources.len() != grouping.assign.len()
            || sources
                .iter()
                .zip(&grouping.assign)
                .any(|(s, a)| s.metrics.len() != a.len())
        {
            return None;
        }
        let families = grouping
            .families
            .iter()
            .enumerate()
            .map(|(i, &((src, pos), kind, len))| {
                let info = sources[src as usize].metrics[pos as usize].0;
                Family {
                    name: match kind {
                        Kind::Counter => rules::counter_sample_name(&info.name),
                        _ => Cow::Borrowed(info.name.as_str()),
                    },
                    kind,
                    help: &info.help,
                    unit: &info.unit,
                    index: i as u32,
                    len,
                    first: (src, pos),
                }
            })
            .collect();
        Some(Self {
            sources,
            families,
            grouping: grouping.clone(),
        })
    }

    /// The families, sorted by name.
    pub fn families(&self) -> impl Iterator<Item = &Family<'a>> + '_ {
        self.grouping
            .order
            .iter()
            .map(|&f| &self.families[f as usize])
    }

    /// The series of one family, in source order. This scans every source:
    /// for building messages one family at a time, not for encoders.
    pub fn series_of<'s>(&'s self, family: &Family<'_>) -> impl Iterator<Item = Series<'a>> + 's {
        let want = family.index;
        let assign = &self.grouping.assign;
        assign.iter().enumerate().flat_map(move |(si, fams)| {
            let metrics = &self.sources[si].metrics;
            fams.iter()
                .zip(metrics)
                .enumerate()
                .filter(move |(_, (f, _))| **f == want)
                .map(move |(pos, (_, &(info, value)))| Series {
                    source: si as u32,
                    pos: pos as u32,
                    info,
                    value,
                })
        })
    }

    /// Series left out because their name was already taken by another type.
    pub fn conflicts(&self) -> u64 {
        self.grouping.conflicts
    }

    /// Number of families.
    pub fn len(&self) -> usize {
        self.families.len()
    }

    /// Whether there is no family at all.
    pub fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// The families in name order cut into runs whose encodings are each
    /// about `window` bytes or less, for an encoder to write one run at a
    /// time ([`Format::encode_families`](crate::Format::encode_families)):
    /// the size of each family is estimated from its names and labels as
    /// the [`Policy`](crate::Policy)'s caps estimate it (escaped at worst,
    /// one line per classic bucket). A family larger than `window` is cut
    /// into runs of as many series each if `split` (the text formats),
    /// else is a run of its own (protobuf: a family is one message).
    pub fn runs(&self, window: usize, split: bool) -> Vec<Run> {
        let window = window.max(1);
        let mut bytes = vec![0usize; self.families.len()];
        let order = &self.grouping.order;
        for (source, fams) in self.sources.iter().zip(&self.grouping.assign) {
            let labels = source.label_text_len();
            for (&(info, value), &f) in source.metrics.iter().zip(fams) {
                if f != SKIPPED {
                    let b = &mut bytes[f as usize];
                    *b = b.saturating_add(labels.saturating_add(series_bytes(info, value)));
                }
            }
        }
        let mut runs = Vec::new();
        let (mut start, mut size) = (0, 0usize);
        for (i, &f) in order.iter().enumerate() {
            let b = bytes[f as usize];
            if i > start && size.saturating_add(b) > window {
                runs.push(Run::whole(start..i));
                (start, size) = (i, 0);
            }
            let len = self.families[f as usize].len;
            if split && b > window && len > 1 {
                if i > start {
                    runs.push(Run::whole(start..i));
                }
                let pieces = b.div_ceil(window).min(len);
                let each = len.div_ceil(pieces);
                let mut from = 0;
                while from < len {
                    let to = (from + each).min(len);
                    runs.push(Run {
                        families: i..i + 1,
                        from,
                        to: (to < len).then_some(to),
                    });
                    from = to;
                }
                (start, size) = (i + 1, 0);
                continue;
            }
            size = size.saturating_add(b);
        }
        if start < order.len() || runs.is_empty() {
            runs.push(Run::whole(start..order.len()));
        }
        runs
    }

    /// The encoders' common loop: `series` appends each series, in source
    /// order, to its family's buffer; then `family` is called for each
    /// family in name order, to write its header and trailer around it
    /// (with [`Sink::family`] placing the buffer between them). Only the
    /// families at positions `run` of the name order are written: the
    /// whole exposition is every run of [`runs`](Self::runs) in turn.
    pub(crate) fn encode_by_family(
        &self,
        sink: &mut Sink,
        run: &Run,
        mut series: impl FnMut(&mut Vec<u8>, &Family<'a>, &Series<'a>) -> io::Result<()>,
        mut family: impl FnMut(&mut Sink, usize, &Family<'a>, bool) -> io::Result<()>,
    ) -> io::Result<()> {
        sink.reset(self.families.len());
        let g = &*self.grouping;
        let order = &g.order[run.families.clone()];
        let mut write =
            |si: usize, pos: usize, f: u32, &(info, value): &(&'a MetricInfo, &'a Value)| {
                let s = Series {
                    source: si as u32,
                    pos: pos as u32,
                    info,
                    value,
                };
                let f = f as usize;
                series(&mut sink.families[f], &self.families[f], &s)
            };
        let whole = order.len() == self.families.len() && run.from == 0 && run.to.is_none();
        if whole {
            // Every series, in the order the sources hold them.
            for (si, (source, fams)) in self.sources.iter().zip(&g.assign).enumerate() {
                for (pos, (metric, &f)) in source.metrics.iter().zip(fams).enumerate() {
                    if f != SKIPPED {
                        write(si, pos, f, metric)?;
                    }
                }
            }
        } else {
            // A run holding part of one family takes its series from the
            // `from`-th to before the `to`-th, counted across sources.
            let mut seen = 0usize;
            for si in 0..self.sources.len() {
                let mut positions = g.positions(si, &run.families);
                if run.from > 0 || run.to.is_some() {
                    let n = positions.len();
                    let start = run.from.saturating_sub(seen).min(n);
                    let end = run.to.map_or(n, |to| to.saturating_sub(seen).min(n));
                    seen += n;
                    positions = &positions[start..end.max(start)];
                }
                let (metrics, fams) = (&self.sources[si].metrics, &g.assign[si]);
                for &pos in positions {
                    let pos = pos as usize;
                    write(si, pos, fams[pos], &metrics[pos])?;
                }
            }
        }
        for (i, &f) in order.iter().enumerate() {
            let head = i > 0 || run.from == 0;
            family(sink, f as usize, &self.families[f as usize], head)?;
        }
        Ok(())
    }

    /// The labels of a series as `encoding` writes them, prepared or
    /// rendered into `scratch` (see [`Source::labels`]).
    pub(crate) fn labels<'s>(
        &'s self,
        s: &Series<'_>,
        encoding: LabelEncoding,
        histogram: bool,
        scratch: &'s mut Vec<u8>,
    ) -> &'s [u8] {
        self.sources[s.source as usize].labels(encoding, s.pos as usize, s.info, histogram, scratch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::fixture;
    use crate::Format;

    #[test]
    fn regrouping_by_shape_encodes_exactly_as_grouping() {
        let f = fixture();
        let mut with_clash = f.sources();
        with_clash.push(Source::new("o", 3, "main", [(&f.clash.0, &f.clash.1)]));
        let grouped = Exposition::group(&with_clash);
        let shape = grouped.shape();
        let regrouped = Exposition::regroup(&with_clash, &shape).expect("same sources");
        assert_eq!(regrouped.conflicts(), 1);
        for format in [Format::Text, Format::OpenMetrics, Format::Protobuf] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            format.encode(&mut a, &grouped).unwrap();
            format.encode(&mut b, &regrouped).unwrap();
            assert_eq!(a, b, "{format:?}");
        }
    }

    #[test]
    fn a_shape_does_not_fit_sources_with_other_metric_counts() {
        let f = fixture();
        let sources = f.sources();
        let shape = Exposition::group(&sources).shape();
        let fewer = [
            Source::new(
                "worker",
                10,
                "main",
                f.a.iter().take(2).map(|(i, v)| (i, v)),
            ),
            Source::new("worker \"b\"", 11, "side", f.b.iter().map(|(i, v)| (i, v))),
        ];
        assert!(Exposition::regroup(&fewer, &shape).is_none());
        assert!(Exposition::regroup(&sources[..1], &shape).is_none());
    }
}
