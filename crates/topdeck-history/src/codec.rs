// SPDX-License-Identifier: Apache-2.0
//! What a frame holds, source by source: who the source is, its series'
//! names once, and each value as the change since the frame before.
//!
//! A key frame holds every value whole; the frames after it hold what
//! changed since the frame before (`Same` for a value that did not, one
//! byte before compression): counters as increments, integer gauges as
//! differences, floats as the XOR of their bits, histograms bucket by
//! bucket. Every change can be undone ([`unapply`]), so a frame lost to
//! damage costs that frame only: the frames after it are rebuilt
//! backwards from the next key frame.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use topdeck::{BucketsValue, HistogramValue, Liveness, MetricInfo, MetricKind, Value};
use topdeck_sources::{Kind, Source};

/// A source as recorded: everything the views show of it but its series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Meta {
    kind: u8,
    path: Vec<u8>,
    pid: Option<u32>,
    start_ticks: Option<u64>,
    uid: Option<u32>,
    process: String,
    registry: Option<String>,
    container: Option<String>,
    alive: bool,
    created_unix_ns: Option<u64>,
    texts: Vec<(String, String)>,
}

impl Meta {
    pub(crate) fn of(s: &Source) -> Self {
        use std::os::unix::ffi::OsStrExt;
        Self {
            kind: match s.kind {
                Kind::Topdeck => 0,
                Kind::Jvm => 1,
                Kind::Python => 2,
                Kind::Aeron => 3,
                Kind::Mmv => 4,
            },
            path: s.path.as_os_str().as_bytes().to_vec(),
            pid: s.pid,
            start_ticks: s.start_ticks,
            uid: s.uid,
            process: s.process.clone(),
            registry: s.registry.clone(),
            container: s.container.clone(),
            alive: s.liveness == Liveness::Alive,
            created_unix_ns: s.created_unix_ns,
            texts: s.texts.clone(),
        }
    }

    /// The source it records, with `metrics` series.
    pub(crate) fn source(&self, metrics: usize) -> Source {
        use std::os::unix::ffi::OsStringExt;
        let kind = match self.kind {
            1 => Kind::Jvm,
            2 => Kind::Python,
            3 => Kind::Aeron,
            4 => Kind::Mmv,
            _ => Kind::Topdeck,
        };
        let path = PathBuf::from(std::ffi::OsString::from_vec(self.path.clone()));
        let mut s = Source::new(kind, path, self.process.clone());
        s.pid = self.pid;
        s.start_ticks = self.start_ticks;
        s.uid = self.uid;
        s.registry = self.registry.clone();
        s.container = self.container.clone();
        s.liveness = match self.alive {
            true => Liveness::Alive,
            false => Liveness::Dead,
        };
        s.metrics = metrics;
        s.texts = self.texts.clone();
        s.created_unix_ns = self.created_unix_ns;
        s
    }

    /// Whether `other` is another file (or another writer) at the path:
    /// another source, not this one changed.
    pub(crate) fn same_writer(&self, other: &Meta) -> bool {
        (self.kind, self.pid, self.start_ticks, self.created_unix_ns)
            == (
                other.kind,
                other.pid,
                other.start_ticks,
                other.created_unix_ns,
            )
    }
}

/// A series' name and what it is, recorded once per segment stretch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Def {
    kind: u8,
    name: String,
    labels: Vec<(String, String)>,
    help: String,
    unit: String,
}

impl Def {
    pub(crate) fn of(m: &MetricInfo) -> Self {
        Self {
            kind: m.kind as u8,
            name: m.name.clone(),
            labels: m.labels.clone(),
            help: m.help.clone(),
            unit: m.unit.clone(),
        }
    }

    pub(crate) fn info(&self) -> MetricInfo {
        MetricInfo {
            kind: match self.kind {
                2 => MetricKind::GaugeI64,
                3 => MetricKind::GaugeF64,
                4 => MetricKind::Histogram,
                _ => MetricKind::Counter,
            },
            name: self.name.clone(),
            labels: self.labels.clone(),
            help: self.help.clone(),
            unit: self.unit.clone(),
        }
    }
}

/// A value whole, as a key frame (or a series' first frame) holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Whole {
    Counter(u64),
    Gauge(i64),
    GaugeF64(f64),
    Histogram {
        schema: i8,
        zero_threshold: f64,
        zero_count: u64,
        min_index: i32,
        buckets: Vec<u64>,
        sum: f64,
        max: Option<f64>,
    },
    CounterF64(f64),
    Buckets {
        buckets: Vec<(f64, f64)>,
        sum: f64,
    },
    Summary {
        count: f64,
        sum: f64,
    },
}

impl Whole {
    pub(crate) fn of(v: &Value) -> Self {
        match v {
            Value::Counter(c) => Whole::Counter(*c),
            Value::Gauge(g) => Whole::Gauge(*g),
            Value::GaugeF64(g) => Whole::GaugeF64(*g),
            Value::Histogram(h) => Whole::Histogram {
                schema: h.schema,
                zero_threshold: h.zero_threshold,
                zero_count: h.zero_count,
                min_index: h.min_index,
                buckets: h.buckets.clone(),
                sum: h.sum,
                max: h.max,
            },
            Value::CounterF64(c) => Whole::CounterF64(*c),
            Value::Buckets(b) => Whole::Buckets {
                buckets: b.buckets.clone(),
                sum: b.sum,
            },
            Value::Summary { count, sum } => Whole::Summary {
                count: *count,
                sum: *sum,
            },
        }
    }

    pub(crate) fn value(self) -> Value {
        match self {
            Whole::Counter(c) => Value::Counter(c),
            Whole::Gauge(g) => Value::Gauge(g),
            Whole::GaugeF64(g) => Value::GaugeF64(g),
            Whole::Histogram {
                schema,
                zero_threshold,
                zero_count,
                min_index,
                buckets,
                sum,
                max,
            } => {
                let count = buckets.iter().fold(zero_count, |a, &b| a.wrapping_add(b));
                Value::Histogram(Box::new(HistogramValue {
                    schema,
                    zero_threshold,
                    zero_count,
                    min_index,
                    buckets,
                    count,
                    sum,
                    max,
                }))
            }
            Whole::CounterF64(c) => Value::CounterF64(c),
            Whole::Buckets { buckets, sum } => Value::Buckets(Box::new(BucketsValue {
                count: buckets.last().map_or(0.0, |b| b.1),
                buckets,
                sum,
            })),
            Whole::Summary { count, sum } => Value::Summary { count, sum },
        }
    }
}

/// A value as the change since the frame before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum Delta {
    /// Unchanged.
    Same,
    /// A counter's increment (wrapping).
    Add(u64),
    /// An integer gauge's difference (wrapping).
    Diff(i64),
    /// A float's bits XOR the previous ones ([`xor_code`]).
    Xor(u128),
    /// A histogram of the same layout: zero bucket's increment, the
    /// changed buckets as (gap from the previous changed one, increment),
    /// sum's and max's bits XOR the previous ones.
    Histogram {
        zero: u64,
        buckets: Vec<(u32, u64)>,
        sum: u128,
        max: u128,
    },
    /// Fixed buckets with the same bounds: each changed cumulative
    /// count as (gap, XOR code), and the sum.
    Buckets { counts: Vec<(u32, u128)>, sum: u128 },
    /// A summary's count and sum, XOR codes.
    Summary { count: u128, sum: u128 },
    /// Whole again: another kind or layout at the same place.
    Whole(Whole),
}

/// The bits of `a` XOR those of `b`, coded so that few bits changed cost
/// few bytes whether they are the low mantissa bits (a noisy sum) or the
/// high ones (a small integer count kept as a float): the XOR or its
/// reversal, whichever is smaller, the low bit saying which.
fn xor_code(a: f64, b: f64) -> u128 {
    let x = a.to_bits() ^ b.to_bits();
    let (plain, reversed) = (u128::from(x) << 1, (u128::from(x.reverse_bits()) << 1) | 1);
    plain.min(reversed)
}

/// `b` with the change [`xor_code`] coded applied (or undone: XOR is its
/// own inverse).
fn xor_apply(code: u128, b: f64) -> f64 {
    let x = (code >> 1) as u64;
    let x = if code & 1 == 1 { x.reverse_bits() } else { x };
    f64::from_bits(b.to_bits() ^ x)
}

/// An absent maximum, as bits: a NaN no histogram records.
const NO_MAX: u64 = u64::MAX;

fn max_bits(m: Option<f64>) -> f64 {
    f64::from_bits(m.map_or(NO_MAX, f64::to_bits))
}

fn max_of(bits: f64) -> Option<f64> {
    (bits.to_bits() != NO_MAX).then_some(bits)
}

/// The change from `before` to `now`.
pub(crate) fn delta(now: &Value, before: &Value) -> Delta {
    // No change is no change, whatever the bits (NaN != NaN).
    match changes(now, before) {
        Delta::Add(0) | Delta::Diff(0) => Delta::Same,
        Delta::Xor(0) | Delta::Summary { count: 0, sum: 0 } => Delta::Same,
        Delta::Histogram {
            zero: 0,
            ref buckets,
            sum: 0,
            max: 0,
        } if buckets.is_empty() => Delta::Same,
        Delta::Buckets { ref counts, sum: 0 } if counts.is_empty() => Delta::Same,
        d => d,
    }
}

fn changes(now: &Value, before: &Value) -> Delta {
    match (now, before) {
        (Value::Counter(a), Value::Counter(b)) => Delta::Add(a.wrapping_sub(*b)),
        (Value::Gauge(a), Value::Gauge(b)) => Delta::Diff(a.wrapping_sub(*b)),
        (Value::GaugeF64(a), Value::GaugeF64(b)) | (Value::CounterF64(a), Value::CounterF64(b)) => {
            Delta::Xor(xor_code(*a, *b))
        }
        (Value::Histogram(a), Value::Histogram(b))
            if (
                a.schema,
                a.min_index,
                a.buckets.len(),
                a.zero_threshold.to_bits(),
            ) == (
                b.schema,
                b.min_index,
                b.buckets.len(),
                b.zero_threshold.to_bits(),
            ) =>
        {
            Delta::Histogram {
                zero: a.zero_count.wrapping_sub(b.zero_count),
                buckets: gaps(
                    a.buckets
                        .iter()
                        .zip(&b.buckets)
                        .map(|(x, y)| x.wrapping_sub(*y)),
                ),
                sum: xor_code(a.sum, b.sum),
                max: xor_code(max_bits(a.max), max_bits(b.max)),
            }
        }
        (Value::Buckets(a), Value::Buckets(b))
            if a.buckets.len() == b.buckets.len()
                && a.buckets
                    .iter()
                    .zip(&b.buckets)
                    .all(|(x, y)| x.0.to_bits() == y.0.to_bits()) =>
        {
            let codes = a
                .buckets
                .iter()
                .zip(&b.buckets)
                .map(|(x, y)| xor_code(x.1, y.1));
            Delta::Buckets {
                counts: gaps(codes),
                sum: xor_code(a.sum, b.sum),
            }
        }
        (Value::Summary { count: c, sum: s }, Value::Summary { count: d, sum: t }) => {
            Delta::Summary {
                count: xor_code(*c, *d),
                sum: xor_code(*s, *t),
            }
        }
        _ => Delta::Whole(Whole::of(now)),
    }
}

/// The non-zero changes of a sequence as (gap from the previous one,
/// change): the first's gap is its index.
fn gaps<C: Default + PartialEq>(changes: impl Iterator<Item = C>) -> Vec<(u32, C)> {
    let mut last = 0u32;
    let mut out = Vec::new();
    for (i, c) in changes.enumerate() {
        if c != C::default() {
            let i = i as u32;
            out.push((i - last, c));
            last = i;
        }
    }
    out
}

/// Indexes of (gap, change) pairs.
fn indexed<C: Copy>(gaps: &[(u32, C)]) -> impl Iterator<Item = (usize, C)> + '_ {
    let mut at = 0usize;
    gaps.iter().map(move |&(g, c)| {
        at += g as usize;
        (at, c)
    })
}

/// Why a change could not be applied: the value it changes is of
/// another shape (a damaged or foreign frame).
#[derive(Debug)]
pub(crate) struct Mismatch;

/// Applies `d` to `v` (forward: the frame's value from the one before);
/// `undo` takes it back (the one before from the frame's). `Whole` cannot
/// be undone.
pub(crate) fn apply(v: &mut Value, d: &Delta, undo: bool) -> Result<(), Mismatch> {
    fn add(x: u64, d: u64, undo: bool) -> u64 {
        match undo {
            false => x.wrapping_add(d),
            true => x.wrapping_sub(d),
        }
    }
    match (v, d) {
        (_, Delta::Same) => {}
        (Value::Counter(c), Delta::Add(d)) => *c = add(*c, *d, undo),
        (Value::Gauge(g), Delta::Diff(d)) => {
            *g = match undo {
                false => g.wrapping_add(*d),
                true => g.wrapping_sub(*d),
            }
        }
        (Value::GaugeF64(f) | Value::CounterF64(f), Delta::Xor(x)) => *f = xor_apply(*x, *f),
        (
            Value::Histogram(h),
            Delta::Histogram {
                zero,
                buckets,
                sum,
                max,
            },
        ) => {
            h.zero_count = add(h.zero_count, *zero, undo);
            for (i, inc) in indexed(buckets) {
                let b = h.buckets.get_mut(i).ok_or(Mismatch)?;
                *b = add(*b, inc, undo);
            }
            h.count = h
                .buckets
                .iter()
                .fold(h.zero_count, |a, &b| a.wrapping_add(b));
            h.sum = xor_apply(*sum, h.sum);
            h.max = max_of(xor_apply(*max, max_bits(h.max)));
        }
        (Value::Buckets(b), Delta::Buckets { counts, sum }) => {
            for (i, code) in indexed(counts) {
                let c = &mut b.buckets.get_mut(i).ok_or(Mismatch)?.1;
                *c = xor_apply(code, *c);
            }
            b.count = b.buckets.last().map_or(0.0, |x| x.1);
            b.sum = xor_apply(*sum, b.sum);
        }
        (Value::Summary { count, sum }, Delta::Summary { count: c, sum: s }) => {
            *count = xor_apply(*c, *count);
            *sum = xor_apply(*s, *sum);
        }
        (v, Delta::Whole(w)) if !undo => *v = w.clone().value(),
        _ => return Err(Mismatch),
    }
    Ok(())
}

/// One source in one frame, as the frame lists it: its number and, when
/// said, who it is, so that a reader that wants only some sources decodes
/// only theirs.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Entry<'a> {
    /// The source's number in its segment.
    pub id: u32,
    /// Who it is: in a key frame, the source's first frame, and whenever
    /// that changed (its writer died).
    pub meta: Option<Meta>,
    /// A [`Chunk`], encoded.
    #[serde(borrow)]
    pub chunk: &'a [u8],
}

/// A frame's payload before compression.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Payload<'a> {
    #[serde(borrow)]
    pub entries: Vec<Entry<'a>>,
}

/// One source's series in one frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Chunk {
    /// Whether `defs` replace the series known so far (a key frame, a new
    /// source, a source whose series were renumbered) rather than extend
    /// them.
    pub reset: bool,
    /// Series new in this frame, in order after the known ones.
    pub defs: Vec<Def>,
    /// One per series: the known ones' changes, then the new ones whole.
    pub values: Vec<Delta>,
    /// In a key frame, for a source the frame before had too: its series'
    /// changes since that frame, so that a reader can step back from the
    /// key frame past a damaged one.
    pub undo: Vec<Delta>,
}

/// A source as a reader rebuilds it frame after frame.
#[derive(Debug)]
pub(crate) struct State {
    pub meta: Meta,
    pub infos: Arc<Vec<MetricInfo>>,
    pub values: Vec<Value>,
    /// Snapshots of one state share a lineage while its series only grow.
    pub reader: topdeck::ForeignReader,
}

impl State {
    /// The state after `chunk` (with `meta`, when its entry said) from
    /// the state before it, if any: a mismatch when the chunk changes a
    /// state it was not given.
    pub(crate) fn next(
        meta: Option<&Meta>,
        chunk: &Chunk,
        before: Option<State>,
    ) -> Result<State, Mismatch> {
        let meta = match (meta, &before) {
            (Some(m), _) => m.clone(),
            (None, Some(b)) => b.meta.clone(),
            (None, None) => return Err(Mismatch),
        };
        let mut state = match (chunk.reset, before) {
            (false, Some(b)) => State { meta, ..b },
            (false, None) => return Err(Mismatch),
            (true, _) => State {
                meta,
                infos: Arc::new(Vec::new()),
                values: Vec::new(),
                reader: topdeck::ForeignReader::new(),
            },
        };
        state.forward(chunk)?;
        Ok(state)
    }

    /// Applies the chunk's changes to the known series and appends the new.
    fn forward(&mut self, chunk: &Chunk) -> Result<(), Mismatch> {
        let known = self.values.len();
        if chunk.values.len() != known + chunk.defs.len() {
            return Err(Mismatch);
        }
        for (v, d) in self.values.iter_mut().zip(&chunk.values) {
            apply(v, d, false)?;
        }
        for d in &chunk.values[known..] {
            match d {
                Delta::Whole(w) => self.values.push(w.clone().value()),
                _ => return Err(Mismatch),
            }
        }
        if !chunk.defs.is_empty() {
            let mut infos = (*self.infos).clone();
            infos.extend(chunk.defs.iter().map(Def::info));
            self.infos = Arc::new(infos);
        }
        Ok(())
    }

    /// The state before `chunk` from the state after it; `None` when the
    /// chunk cannot be undone (it started the source, or made a value
    /// whole again).
    pub(crate) fn backward(&self, chunk: &Chunk) -> Option<State> {
        if chunk.values.len() != self.values.len() {
            return None;
        }
        let (known, changes) = match chunk.reset {
            false => (self.values.len() - chunk.defs.len(), &chunk.values),
            true if chunk.undo.is_empty() => return None,
            true => (chunk.undo.len(), &chunk.undo),
        };
        let mut values = self.values.get(..known)?.to_vec();
        for (v, d) in values.iter_mut().zip(changes) {
            apply(v, d, true).ok()?;
        }
        Some(State {
            meta: self.meta.clone(),
            infos: Arc::new(self.infos[..known].to_vec()),
            values,
            reader: topdeck::ForeignReader::new(),
        })
    }

    /// What the views take: the source and its snapshot.
    pub(crate) fn view(&self) -> (Source, topdeck::Snapshot) {
        let snap = self
            .reader
            .snapshot(Arc::clone(&self.infos), self.values.clone());
        (self.meta.source(self.values.len()), snap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(buckets: Vec<u64>, sum: f64, max: Option<f64>) -> Value {
        Whole::Histogram {
            schema: 3,
            zero_threshold: 0.0,
            zero_count: 1,
            min_index: -4,
            buckets,
            sum,
            max,
        }
        .value()
    }

    #[test]
    fn every_change_applies_forward_and_undoes_backward() {
        let inf = f64::INFINITY;
        let classic = |a: f64, b: f64, sum: f64| {
            Value::Buckets(Box::new(BucketsValue {
                buckets: vec![(0.1, a), (inf, b)],
                count: b,
                sum,
            }))
        };
        let pairs = [
            (Value::Counter(5), Value::Counter(9)),
            (Value::Counter(u64::MAX), Value::Counter(2)),
            (Value::Gauge(7), Value::Gauge(-3)),
            (Value::GaugeF64(0.1), Value::GaugeF64(f64::NAN)),
            (Value::CounterF64(3.0), Value::CounterF64(7.0)),
            (
                hist(vec![0, 2, 0, 1], 0.25, Some(0.1)),
                hist(vec![0, 3, 0, 9], 1.75, Some(0.2)),
            ),
            (
                hist(vec![0, 2, 0, 1], 0.25, None),
                hist(vec![1, 2, 0, 1], 0.5, Some(0.01)),
            ),
            (classic(1.0, 2.0, 0.5), classic(4.0, 9.0, 3.25)),
            (
                Value::Summary {
                    count: 1.0,
                    sum: 0.5,
                },
                Value::Summary {
                    count: 3.0,
                    sum: 0.75,
                },
            ),
        ];
        for (before, now) in pairs {
            let d = delta(&now, &before);
            assert!(!matches!(d, Delta::Whole(_)), "{d:?}");
            let mut v = before.clone();
            apply(&mut v, &d, false).unwrap();
            assert_eq!(format!("{v:?}"), format!("{now:?}"));
            apply(&mut v, &d, true).unwrap();
            assert_eq!(format!("{v:?}"), format!("{before:?}"));
            assert_eq!(delta(&now, &now), Delta::Same);
        }
    }

    #[test]
    fn another_kind_or_layout_is_sent_whole() {
        let d = delta(&Value::Gauge(1), &Value::Counter(1));
        assert_eq!(d, Delta::Whole(Whole::Gauge(1)));
        let a = hist(vec![1, 2], 1.0, None);
        let b = hist(vec![1, 2, 3], 1.0, None);
        assert!(matches!(delta(&b, &a), Delta::Whole(_)));
        let mut v = a.clone();
        apply(&mut v, &delta(&b, &a), false).unwrap();
        assert_eq!(v, b);
        assert!(
            apply(&mut v, &delta(&b, &a), true).is_err(),
            "a whole value cannot be undone"
        );
    }

    #[test]
    fn small_changes_cost_few_bytes() {
        let size = |d: &Delta| postcard::to_stdvec(d).unwrap().len();
        assert_eq!(size(&Delta::Same), 1);
        assert_eq!(
            size(&delta(
                &Value::Counter(1_000_007),
                &Value::Counter(1_000_000)
            )),
            2
        );
        // A float count going up by one, and a noisy sum's low bits.
        assert!(size(&delta(&Value::CounterF64(41.0), &Value::CounterF64(40.0))) <= 4);
        let noisy = delta(
            &Value::GaugeF64(0.123_456_789_1),
            &Value::GaugeF64(0.123_456_789_0),
        );
        assert!(size(&noisy) <= 7, "{}", size(&noisy));
    }
}
