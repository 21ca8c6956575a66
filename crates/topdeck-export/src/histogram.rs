// SPDX-License-Identifier: Apache-2.0
//! The two views of one exponential histogram that the formats need:
//! classic cumulative buckets (`le`) for classic scrapers (both text
//! formats, and the classic field of protobuf), and the native
//! representation (schema, zero bucket, spans and deltas) for protobuf.
//! Both use the histogram's own bucket bounds, so nothing is re-bucketed.
//!
//! The native view keeps every bucket. The classic view is a fixed set of
//! bounds per histogram, [`ClassicBounds`]: a classic scraper stores one
//! series per `le`, so a set that grew as new buckets filled (one `le` per
//! populated bucket, 127 to 202 per cgroup for the agent's run-queue
//! latency) made the series count unbounded and churn. The set depends
//! only on the histogram's layout (schema, first index, bucket count) and
//! unit, never on its counts: the same from the first scrape on, empty
//! histograms included. It has at most [`MAX_CLASSIC_BOUNDS`] finite
//! bounds, then `+Inf`; each is a bucket bound of the histogram's own
//! schema, so every cumulative count is exact, not interpolated. What is
//! lost is resolution: for seconds, one bound per power of two from 2^-20 s
//! (about 0.95 µs) to 2^11 s (about 34 min), where the native view has
//! eight per power of two over the writer's whole range.
//!
//! What the writer's range implies, and both views say: values at or below
//! the zero threshold (negatives included) are in the zero bucket, and
//! values above the last bucket were counted in the last bucket.

use topdeck::HistogramValue;
use topdeck_format::exponential::upper_bound;

/// The most finite `le` bounds of one histogram's classic view: with
/// `+Inf`, a classic scraper stores at most 33 bucket series per histogram.
pub const MAX_CLASSIC_BOUNDS: u32 = 32;

/// The powers of two (their exponents) that bound the classic view of a
/// histogram of seconds: 2^-20 s (about 0.95 µs) to 2^11 s (about 34 min),
/// one bound per power of two in [`MAX_CLASSIC_BOUNDS`]. A latency below
/// the window is counted at its first bound, one above at `+Inf` only.
const SECONDS_WINDOW: (i64, i64) = (-20, 11);

/// The unit whose histograms get [`SECONDS_WINDOW`].
const SECONDS: &str = "seconds";

/// The upper bound of a classic bucket, computed only when asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// The upper bound of exponential bucket `index` at `schema`.
    Upper {
        /// Bucket schema.
        schema: i8,
        /// Bucket index.
        index: i32,
    },
    /// `+Inf`.
    Inf,
}

impl Bound {
    /// The bound as a number.
    pub fn value(self) -> f64 {
        match self {
            Self::Upper { schema, index } => upper_bound(schema, index),
            Self::Inf => f64::INFINITY,
        }
    }
}

/// The finite bounds of a histogram's classic view: every `step`-th bucket
/// bound of its own schema, at the indices that are multiples of `step`,
/// from `first` on, `len` of them.
///
/// The candidates are the histogram's own bounds, from the zero bucket's
/// (the bound below its first bucket) to its last bucket's, narrowed to
/// the powers of two from 2^-20 s (about 0.95 µs) to 2^11 s (about 34
/// min) for a histogram of seconds that reaches into them.
/// `step` is the smallest power of two that leaves at most
/// [`MAX_CLASSIC_BOUNDS`] of them; aligning to its multiples makes the
/// bounds of every histogram of one schema and unit agree (for seconds at
/// schema 3, the powers of two).
///
/// ```
/// use topdeck::HistogramValue;
/// use topdeck_export::histogram::{ClassicBounds, MAX_CLASSIC_BOUNDS};
/// use topdeck_format::exponential::BucketRange;
///
/// // The default histogram of seconds: schema 3, 1 ns to 10^6 s.
/// let r = BucketRange::covering(3, 1e-9, 1e6);
/// let mut h = HistogramValue::empty(r.schema, r.zero_threshold(), r.min_index, r.bucket_count as usize);
/// let empty = ClassicBounds::of(&h, "seconds");
/// let values: Vec<f64> = empty.bounds().map(|b| b.value()).collect();
/// assert_eq!(values.len(), MAX_CLASSIC_BOUNDS as usize);
/// assert_eq!((values[0], values[31]), ((-20f64).exp2(), 2048.0));
/// // Counts never change the set.
/// h.buckets[100] = 7;
/// assert_eq!(ClassicBounds::of(&h, "seconds"), empty);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassicBounds {
    schema: i8,
    first: i64,
    step: i64,
    len: u32,
}

impl ClassicBounds {
    /// The classic bounds of `h`, a histogram of `unit`.
    pub fn of(h: &HistogramValue, unit: &str) -> Self {
        let schema = h.schema;
        let lo = i64::from(h.min_index) - 1;
        let hi = i64::from(h.min_index) + h.buckets.len() as i64 - 1;
        let (mut lo, mut hi) = (lo, hi);
        if unit == SECONDS {
            let (wlo, whi) = SECONDS_WINDOW;
            let (wlo, whi) = if schema >= 0 {
                (wlo << schema, whi << schema)
            } else {
                let per = 1i64 << -schema;
                (ceil_div(wlo, per), whi.div_euclid(per))
            };
            // A histogram wholly outside the window keeps its own range.
            if lo.max(wlo) <= hi.min(whi) {
                (lo, hi) = (lo.max(wlo), hi.min(whi));
            }
        }
        let mut step = 1i64;
        loop {
            let first = ceil_div(lo, step) * step;
            let last = hi.div_euclid(step) * step;
            let len = if last >= first {
                (last - first) / step + 1
            } else {
                0
            };
            if len <= i64::from(MAX_CLASSIC_BOUNDS) {
                return Self {
                    schema,
                    first,
                    step,
                    len: len as u32,
                };
            }
            step *= 2;
        }
    }

    /// How many finite bounds there are (`+Inf` not counted).
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether there is no finite bound (only `+Inf`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The finite bounds, in increasing order.
    pub fn bounds(&self) -> impl Iterator<Item = Bound> + '_ {
        self.indices().map(|index| self.bound(index))
    }

    /// The bucket indices whose upper bounds are the finite bounds.
    fn indices(&self) -> impl Iterator<Item = i64> + '_ {
        (0..i64::from(self.len)).map(|k| self.first + k * self.step)
    }

    fn bound(&self, index: i64) -> Bound {
        Bound::Upper {
            schema: self.schema,
            // One of the histogram's own indices (or the one below its
            // first), which the reader holds well inside i32.
            index: index as i32,
        }
    }
}

/// `a / b` rounded up, for `b > 0`.
fn ceil_div(a: i64, b: i64) -> i64 {
    -(-a).div_euclid(b)
}

/// Calls `f(bound, cumulative count)` for each bucket of the classic view
/// of `h`, a histogram of `unit` (see [`ClassicBounds`]), `+Inf` last with
/// the count.
pub fn for_each_bound<E>(
    h: &HistogramValue,
    unit: &str,
    mut f: impl FnMut(Bound, u64) -> Result<(), E>,
) -> Result<(), E> {
    let classic = ClassicBounds::of(h, unit);
    let mut cum = h.zero_count;
    // The next bucket (a position in h.buckets) not yet in `cum`.
    let mut next = 0usize;
    for index in classic.indices() {
        // Buckets up to `index` inclusive: the bound is their upper one.
        let upto = (index - i64::from(h.min_index) + 1) as usize;
        for &n in &h.buckets[next..upto] {
            cum = cum.wrapping_add(n);
        }
        next = upto;
        f(classic.bound(index), cum)?;
    }
    f(Bound::Inf, h.count)
}

/// Calls `f(le, cumulative count)` for each classic bucket, `+Inf` last.
pub fn for_each_classic_bucket<E>(
    h: &HistogramValue,
    unit: &str,
    mut f: impl FnMut(f64, u64) -> Result<(), E>,
) -> Result<(), E> {
    for_each_bound(h, unit, |b, c| f(b.value(), c))
}

/// Bucket bounds already written as text. Histograms of one schema share
/// their bounds, so a scrape of a thousand histograms formats each bound
/// once rather than a thousand times. Direct-mapped: a collision costs a
/// reformat, never a wrong answer.
#[derive(Debug)]
pub struct LeCache {
    slots: Box<[LeSlot]>,
    values: Box<[(u64, f64)]>,
}

#[derive(Debug, Clone, Copy)]
struct LeSlot {
    /// `(schema, index)` packed, with bit 63 set so that 0 means empty.
    key: u64,
    len: u8,
    text: [u8; 31],
}

const LE_SLOTS: usize = 2048;

impl Default for LeCache {
    fn default() -> Self {
        Self {
            slots: vec![
                LeSlot {
                    key: 0,
                    len: 0,
                    text: [0; 31],
                };
                LE_SLOTS
            ]
            .into_boxed_slice(),
            values: vec![(0, 0.0); LE_SLOTS].into_boxed_slice(),
        }
    }
}

/// Packs `(schema, index)` with bit 63 set, so that 0 means empty.
fn le_key(schema: i8, index: i32) -> u64 {
    1 << 63 | u64::from(schema as u8) << 32 | u64::from(index as u32)
}

fn le_slot(schema: i8, index: i32) -> usize {
    (index as u32 as usize ^ (schema as u8 as usize) << 7) % LE_SLOTS
}

impl LeCache {
    /// `bound` as a number (for protobuf), computed once per bound.
    pub fn value(&mut self, bound: Bound) -> f64 {
        let Bound::Upper { schema, index } = bound else {
            return bound.value();
        };
        let key = le_key(schema, index);
        let slot = &mut self.values[le_slot(schema, index)];
        if slot.0 != key {
            *slot = (key, upper_bound(schema, index));
        }
        slot.1
    }

    /// `bound` as the text of an `le` label value.
    pub fn text<'s>(&'s mut self, bound: Bound, scratch: &'s mut Vec<u8>) -> &'s [u8] {
        let Bound::Upper { schema, index } = bound else {
            return b"+Inf";
        };
        let key = 1 << 63 | u64::from(schema as u8) << 32 | u64::from(index as u32);
        let slot =
            &mut self.slots[(index as u32 as usize ^ (schema as u8 as usize) << 7) % LE_SLOTS];
        if slot.key != key {
            scratch.clear();
            let _ = crate::rules::write_f64(scratch, upper_bound(schema, index));
            // A shortest round-trip f64 is at most 24 bytes.
            slot.len = scratch.len() as u8;
            slot.text[..scratch.len()].copy_from_slice(scratch);
            slot.key = key;
        }
        &slot.text[..slot.len as usize]
    }
}

/// A run of consecutive native buckets: `offset` is the gap to the previous
/// span (for the first span, the index of its first bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Gap to the previous span, or the first bucket's index.
    pub offset: i32,
    /// Buckets in the run.
    pub length: u32,
}

/// Gaps of empty buckets this short are written as zero deltas inside one
/// span: a span costs more bytes than two zero deltas.
const MAX_GAP_IN_SPAN: usize = 2;

/// The positive buckets of `h` as native-histogram spans and deltas (each
/// count minus the previous one's, the first against zero). Both vectors
/// are cleared first.
pub fn native_positive(h: &HistogramValue, spans: &mut Vec<Span>, deltas: &mut Vec<i64>) {
    spans.clear();
    deltas.clear();
    let mut prev_count = 0i64;
    // Index (into h.buckets) just past the last bucket written.
    let mut end: Option<usize> = None;
    for (i, &n) in h.buckets.iter().enumerate() {
        if n == 0 {
            continue;
        }
        match end {
            Some(e) if i - e <= MAX_GAP_IN_SPAN => {
                let span = spans.last_mut().expect("a span is open");
                for _ in e..i {
                    // Wrapping, like every delta: a hostile file's count
                    // may be 2^63 or more, whose negation overflows.
                    deltas.push(prev_count.wrapping_neg());
                    prev_count = 0;
                }
                span.length += (i - e) as u32 + 1;
            }
            Some(e) => spans.push(Span {
                offset: (i - e) as i32,
                length: 1,
            }),
            None => spans.push(Span {
                offset: h.min_index + i as i32,
                length: 1,
            }),
        }
        let count = n as i64;
        deltas.push(count.wrapping_sub(prev_count));
        prev_count = count;
        end = Some(i + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(zero: u64, min_index: i32, buckets: Vec<u64>) -> HistogramValue {
        let count = zero + buckets.iter().sum::<u64>();
        HistogramValue {
            schema: 0,
            zero_threshold: upper_bound(0, min_index - 1),
            zero_count: zero,
            min_index,
            buckets,
            count,
            sum: 0.0,
            max: None,
        }
    }

    #[test]
    fn native_deltas_of_counts_past_i64_wrap_instead_of_panicking() {
        // Found by fuzzing (fuzz/README.md): a bucket of 2^63 observations
        // then a short gap, from a hostile file, overflowed a negation.
        let h = HistogramValue {
            buckets: vec![1 << 63, 0, 5, u64::MAX],
            ..hist(0, 0, Vec::new())
        };
        let (mut spans, mut deltas) = (Vec::new(), Vec::new());
        native_positive(&h, &mut spans, &mut deltas);
        assert_eq!(
            spans,
            [Span {
                offset: 0,
                length: 4
            }]
        );
        // Summed with wrapping, the deltas give back every count's bits.
        let mut count = 0i64;
        let counts: Vec<u64> = deltas
            .iter()
            .map(|d| {
                count = count.wrapping_add(*d);
                count as u64
            })
            .collect();
        assert_eq!(counts, h.buckets);
    }

    fn classic(h: &HistogramValue, unit: &str) -> Vec<(f64, u64)> {
        let mut out = Vec::new();
        for_each_classic_bucket::<()>(h, unit, |le, c| {
            out.push((le, c));
            Ok(())
        })
        .unwrap();
        out
    }

    /// The layout of `Buckets::exponential(schema, min, max)`, empty.
    fn layout(schema: i8, min: f64, max: f64) -> HistogramValue {
        let r = topdeck_format::exponential::BucketRange::covering(schema, min, max);
        HistogramValue::empty(
            schema,
            r.zero_threshold(),
            r.min_index,
            r.bucket_count as usize,
        )
    }

    fn les(h: &HistogramValue, unit: &str) -> Vec<f64> {
        classic(h, unit).into_iter().map(|(le, _)| le).collect()
    }

    #[test]
    fn a_narrow_histogram_keeps_every_bound_of_its_own() {
        // Schema 0: bucket i is (2^(i-1), 2^i]. Buckets -2..=4, zero bucket below.
        let h = hist(1, -2, vec![0, 0, 3, 0, 2, 0, 0]);
        assert_eq!(
            classic(&h, ""),
            vec![
                (0.125, 1), // the zero bucket's bound: its count
                (0.25, 1),
                (0.5, 1),
                (1.0, 4),
                (2.0, 4),
                (4.0, 6),
                (8.0, 6),
                (16.0, 6),
                (f64::INFINITY, 6)
            ]
        );
    }

    #[test]
    fn the_bounds_are_the_same_empty_or_full_whatever_the_counts() {
        for (schema, min, max, unit) in [
            (3, 1e-9, 1e6, "seconds"),
            (3, 2.384_185_791_015_625e-7, 64.0, "seconds"),
            (0, 1.0, 1e12, "bytes"),
            (8, 1e-3, 1e3, ""),
            (-2, 1e-6, 1e9, "seconds"),
        ] {
            let empty = layout(schema, min, max);
            let want = les(&empty, unit);
            let mut h = empty.clone();
            let mut seed = 7u64;
            for round in 0..20 {
                // Fill a few more buckets each round, anywhere in the range.
                for _ in 0..5 {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let i = (seed >> 33) as usize % h.buckets.len();
                    h.buckets[i] += 1 + round;
                    h.count += 1 + round;
                }
                h.zero_count += round % 2;
                h.count += round % 2;
                assert_eq!(
                    les(&h, unit),
                    want,
                    "{schema} {min} {max} {unit} round {round}"
                );
            }
            assert!(want.len() <= MAX_CLASSIC_BOUNDS as usize + 1, "{want:?}");
            assert_eq!(want.last(), Some(&f64::INFINITY));
        }
    }

    #[test]
    fn seconds_get_one_bound_per_power_of_two_from_a_microsecond_to_half_an_hour() {
        let powers = |from: i32, to: i32| -> Vec<f64> {
            (from..=to)
                .map(|e| f64::from(e).exp2())
                .chain([f64::INFINITY])
                .collect()
        };
        // The default histogram of seconds (schema 3, 1 ns to 10^6 s).
        assert_eq!(les(&layout(3, 1e-9, 1e6), "seconds"), powers(-20, 11));
        // The agent's run-queue latency: schema 3, 2^-22 s to 64 s.
        let runq = layout(3, 2.384_185_791_015_625e-7, 64.0);
        assert_eq!(les(&runq, "seconds"), powers(-20, 6));
        // A histogram of nanosecond-scale seconds, all below the window,
        // keeps its own range.
        let tiny = layout(3, 1e-9, 1e-7);
        assert_eq!(les(&tiny, "seconds"), les(&tiny, ""));
        assert!(les(&tiny, "seconds").len() > 2);
    }

    #[test]
    fn a_wide_range_is_thinned_to_at_most_the_maximum_by_doubling_the_step() {
        for (schema, min, max) in [
            (3, 1e-9, 1e6),
            (8, 1e-3, 1e3),
            (0, 1.0, 1e300),
            (-4, 1e-300, 1e300),
        ] {
            let h = layout(schema, min, max);
            let c = ClassicBounds::of(&h, "");
            assert!(
                c.len() <= MAX_CLASSIC_BOUNDS && !c.is_empty(),
                "{schema}: {c:?}"
            );
            // Every bound is one of the histogram's own, in its range.
            let (lo, hi) = (h.min_index - 1, h.min_index + h.buckets.len() as i32 - 1);
            for b in c.bounds() {
                let Bound::Upper { schema: s, index } = b else {
                    panic!("finite bounds only")
                };
                assert_eq!(s, schema);
                assert!(
                    (lo..=hi).contains(&index) && index % c.step as i32 == 0,
                    "{b:?}"
                );
            }
            // The step is the smallest that fits: half of it would not.
            if c.step > 1 {
                let half = c.step / 2;
                let n = (i64::from(hi).div_euclid(half) - ceil_div(i64::from(lo), half)) + 1;
                assert!(n > i64::from(MAX_CLASSIC_BOUNDS), "{schema}: {c:?}");
            }
        }
    }

    #[test]
    fn cumulative_counts_at_the_bounds_are_exact() {
        // Every count against a sum by value: buckets whose upper bound is
        // at most the `le`, and the zero bucket.
        for (schema, min, max, unit) in [
            (3, 1e-9, 1e6, "seconds"),
            (3, 2.384_185_791_015_625e-7, 64.0, "seconds"),
            (5, 1e-2, 1e4, ""),
            (-1, 1e-6, 1e9, "bytes"),
        ] {
            let mut h = layout(schema, min, max);
            for (i, b) in h.buckets.iter_mut().enumerate() {
                *b = (i as u64 * 2654435761) % 17;
            }
            h.zero_count = 5;
            h.count = h.zero_count + h.buckets.iter().sum::<u64>();
            for (le, cum) in classic(&h, unit) {
                let want = h.zero_count
                    + h.buckets
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| upper_bound(schema, h.min_index + i as i32) <= le)
                        .map(|(_, n)| n)
                        .sum::<u64>();
                assert_eq!(cum, want, "{schema} {unit} le={le}");
            }
        }
    }

    #[test]
    fn classic_buckets_of_an_empty_or_zero_only_histogram() {
        let h = hist(0, 0, vec![0; 2]);
        assert_eq!(
            classic(&h, ""),
            vec![(0.5, 0), (1.0, 0), (2.0, 0), (f64::INFINITY, 0)]
        );
        assert_eq!(
            classic(&hist(5, 0, vec![0; 2]), ""),
            vec![(0.5, 5), (1.0, 5), (2.0, 5), (f64::INFINITY, 5)]
        );
        // No bucket at all: the zero bucket's bound only.
        assert_eq!(
            classic(&hist(3, 0, vec![]), ""),
            vec![(0.5, 3), (f64::INFINITY, 3)]
        );
    }

    #[test]
    fn native_spans_skip_long_gaps_and_keep_short_ones() {
        let h = hist(0, -3, vec![0, 2, 0, 5, 0, 0, 0, 1, 1]);
        let (mut spans, mut deltas) = (Vec::new(), Vec::new());
        native_positive(&h, &mut spans, &mut deltas);
        assert_eq!(
            spans,
            vec![
                Span {
                    offset: -2,
                    length: 3
                }, // indices -2..=0, the empty -1 inside
                Span {
                    offset: 3,
                    length: 2
                }, // indices 4, 5 after a gap of 3
            ]
        );
        assert_eq!(deltas, vec![2, -2, 5, -4, 0]);
        // Decoding gives back the counts at their indices.
        let mut counts = Vec::new();
        let (mut idx, mut c, mut d) = (0i32, 0i64, deltas.iter());
        for (k, s) in spans.iter().enumerate() {
            idx = if k == 0 { s.offset } else { idx + s.offset };
            for _ in 0..s.length {
                c += d.next().unwrap();
                counts.push((idx, c));
                idx += 1;
            }
        }
        assert_eq!(counts, vec![(-2, 2), (-1, 0), (0, 5), (4, 1), (5, 1)]);
    }

    #[test]
    fn cached_bounds_are_the_formatted_bounds() {
        let mut cache = LeCache::default();
        let mut scratch = Vec::new();
        for round in 0..2 {
            for schema in [-2i8, 0, 3, 8] {
                for index in (-3000..3000).step_by(7) {
                    let b = Bound::Upper { schema, index };
                    let mut want = Vec::new();
                    crate::rules::write_f64(&mut want, b.value()).unwrap();
                    assert_eq!(
                        cache.text(b, &mut scratch),
                        want,
                        "round {round} {schema} {index}"
                    );
                }
            }
        }
        for index in -500..500 {
            let b = Bound::Upper { schema: 3, index };
            assert_eq!(cache.value(b), b.value());
            assert_eq!(cache.value(b), b.value());
        }
        assert_eq!(cache.value(Bound::Inf), f64::INFINITY);
        assert_eq!(cache.text(Bound::Inf, &mut scratch), b"+Inf");
    }

    #[test]
    fn native_spans_of_an_empty_histogram_are_empty() {
        let (mut spans, mut deltas) = (
            vec![Span {
                offset: 1,
                length: 1,
            }],
            vec![1],
        );
        native_positive(&hist(3, 0, vec![0; 8]), &mut spans, &mut deltas);
        assert!(spans.is_empty() && deltas.is_empty());
    }
}
