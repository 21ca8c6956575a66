// SPDX-License-Identifier: Apache-2.0
//! The two views of one exponential histogram that the formats need:
//! classic cumulative buckets (`le`) for the text formats, and the native
//! representation (schema, zero bucket, spans and deltas) for protobuf.
//! Both use the histogram's own bucket bounds, so nothing is re-bucketed.
//!
//! Classic buckets are written from the lower bound of the first non-empty
//! bucket to the upper bound of the last one, every bucket in between
//! included, then `+Inf`. Empty buckets outside that range add nothing a
//! quantile needs; the lower bound is there so `histogram_quantile`
//! interpolates inside the right bucket instead of from the previous
//! written bound.
//!
//! What the writer's range implies, and both views say: values at or below
//! the zero threshold (negatives included) are in the zero bucket, and
//! values above the last bucket were counted in the last bucket.

use topdeck::HistogramValue;
use topdeck_format::exponential::upper_bound;

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
    /// The zero bucket's threshold.
    Zero(f64),
    /// `+Inf`.
    Inf,
}

impl Bound {
    /// The bound as a number.
    pub fn value(self) -> f64 {
        match self {
            Self::Upper { schema, index } => upper_bound(schema, index),
            Self::Zero(t) => t,
            Self::Inf => f64::INFINITY,
        }
    }
}

/// Calls `f(bound, cumulative count)` for each classic bucket, `+Inf` last.
pub fn for_each_bound<E>(
    h: &HistogramValue,
    mut f: impl FnMut(Bound, u64) -> Result<(), E>,
) -> Result<(), E> {
    let first = h.buckets.iter().position(|&n| n > 0);
    let last = h.buckets.iter().rposition(|&n| n > 0);
    let schema = h.schema;
    match (first, last) {
        (Some(first), Some(last)) => {
            let mut cum = h.zero_count;
            let base = h.min_index + first as i32;
            let lower = if first == 0 {
                Bound::Zero(h.zero_threshold)
            } else {
                Bound::Upper {
                    schema,
                    index: base - 1,
                }
            };
            f(lower, cum)?;
            for (i, &n) in h.buckets[first..=last].iter().enumerate() {
                cum = cum.wrapping_add(n);
                f(
                    Bound::Upper {
                        schema,
                        index: base + i as i32,
                    },
                    cum,
                )?;
            }
        }
        _ if h.zero_count > 0 => f(Bound::Zero(h.zero_threshold), h.zero_count)?,
        _ => {}
    }
    f(Bound::Inf, h.count)
}

/// Calls `f(le, cumulative count)` for each classic bucket, `+Inf` last.
pub fn for_each_classic_bucket<E>(
    h: &HistogramValue,
    mut f: impl FnMut(f64, u64) -> Result<(), E>,
) -> Result<(), E> {
    for_each_bound(h, |b, c| f(b.value(), c))
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
        let (schema, index) = match bound {
            Bound::Upper { schema, index } => (schema, index),
            Bound::Inf => return b"+Inf",
            Bound::Zero(t) => {
                scratch.clear();
                let _ = crate::rules::write_f64(scratch, t);
                return scratch;
            }
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

    fn classic(h: &HistogramValue) -> Vec<(f64, u64)> {
        let mut out = Vec::new();
        for_each_classic_bucket::<()>(h, |le, c| {
            out.push((le, c));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn classic_buckets_span_the_used_range_with_its_lower_bound() {
        // Schema 0: bucket i is (2^(i-1), 2^i]. Buckets 1..=6 from index -2.
        let h = hist(1, -2, vec![0, 0, 3, 0, 2, 0, 0]);
        assert_eq!(
            classic(&h),
            vec![
                (0.5, 1), // lower bound of bucket 0 (index 0): the zero bucket's count
                (1.0, 4), // index 0
                (2.0, 4), // index 1, empty but inside the range
                (4.0, 6), // index 2
                (f64::INFINITY, 6)
            ]
        );
    }

    #[test]
    fn classic_buckets_of_an_empty_or_zero_only_histogram() {
        assert_eq!(classic(&hist(0, 0, vec![0; 4])), vec![(f64::INFINITY, 0)]);
        assert_eq!(
            classic(&hist(5, 0, vec![0; 4])),
            vec![(0.5, 5), (f64::INFINITY, 5)]
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
        assert_eq!(cache.text(Bound::Zero(0.5), &mut scratch), b"0.5");
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
