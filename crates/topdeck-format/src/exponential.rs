// SPDX-License-Identifier: Apache-2.0
//! Exponential bucket maths shared with Prometheus native histograms and
//! OpenTelemetry exponential histograms, so topdeck histograms merge and
//! export without re-bucketing.
//!
//! With schema `s`, the base is `2^(2^-s)`; bucket `i` covers
//! `(base^(i-1), base^i]` (upper bound inclusive). Schema 3 gives eight
//! buckets per power of two, about 9% wide, so a quantile estimated at the
//! bucket's geometric middle is within ~4.4% of the truth.

use std::sync::OnceLock;

/// Smallest schema Prometheus accepts.
pub const MIN_SCHEMA: i8 = -4;
/// Largest schema Prometheus accepts.
pub const MAX_SCHEMA: i8 = 8;
/// The schema topdeck uses unless told otherwise.
pub const DEFAULT_SCHEMA: i8 = 3;

/// Mantissa bits looked up in the fast path: 2^12 cells, each narrower than
/// the closest pair of bucket bounds at schema 8, so a cell holds at most one bound.
const CELL_BITS: u32 = 12;
const MANTISSA_BITS: u32 = 52;
const MANTISSA_MASK: u64 = (1 << MANTISSA_BITS) - 1;
/// Mantissa bits below a cell's: what a bound is compared on within its cell.
const IN_CELL_BITS: u32 = MANTISSA_BITS - CELL_BITS;
const IN_CELL_MASK: u64 = (1 << IN_CELL_BITS) - 1;

/// Precomputed lookup for one schema > 0: where the bucket bounds fall in
/// the mantissa of an `f64`. The table is inline (no pointer to chase on
/// the recording path); each lives in a static once built.
#[derive(Debug)]
struct Bounds {
    /// Per cell, in one word so that a rank is one load: the number of
    /// bounds `2^(k/2^schema)`, `0 < k < 2^schema`, strictly below the
    /// cell's start (bits 40 and up), and the low 40 mantissa bits of the
    /// bound inside the cell, if any (a cell holds at most one), else all
    /// ones, which no mantissa in the cell exceeds.
    cells: [u64; 1 << CELL_BITS],
}

impl Bounds {
    fn new(schema: i8) -> Self {
        let per_octave = 1u32 << schema;
        let bounds: Vec<u64> = (1..per_octave)
            .map(|k| octave_bound(k, per_octave).to_bits() & MANTISSA_MASK)
            .collect();
        let mut cells = [0u64; 1 << CELL_BITS];
        for (cell, c) in cells.iter_mut().enumerate() {
            let cell = cell as u64;
            let below = bounds.iter().filter(|&&m| m >> IN_CELL_BITS < cell).count() as u64;
            let inside = bounds
                .iter()
                .find(|&&m| m >> IN_CELL_BITS == cell)
                .map_or(IN_CELL_MASK, |&m| m & IN_CELL_MASK);
            *c = below << IN_CELL_BITS | inside;
        }
        Self { cells }
    }

    /// Number of bounds `2^(k/n)`, `k >= 0`, strictly below `1.mantissa`.
    #[inline]
    fn rank(&self, mantissa: u64) -> u32 {
        let c = self.cells[(mantissa >> IN_CELL_BITS) as usize];
        let in_cell = mantissa & IN_CELL_MASK > c & IN_CELL_MASK;
        u32::from(mantissa != 0) + (c >> IN_CELL_BITS) as u32 + u32::from(in_cell)
    }
}

/// `2^(k/n)` in `[1, 2)`.
fn octave_bound(k: u32, n: u32) -> f64 {
    (f64::from(k) / f64::from(n)).exp2()
}

#[inline]
fn bounds(schema: i8) -> &'static Bounds {
    static TABLES: [OnceLock<Bounds>; MAX_SCHEMA as usize] = [const { OnceLock::new() }; 8];
    TABLES[schema as usize - 1].get_or_init(|| Bounds::new(schema))
}

/// Whether `schema` is one Prometheus and OpenTelemetry both accept.
#[inline]
pub fn is_valid_schema(schema: i8) -> bool {
    (MIN_SCHEMA..=MAX_SCHEMA).contains(&schema)
}

/// Computes bucket indices at one schema, with its lookup table resolved
/// once: what a histogram keeps so that recording does no table look-up.
#[derive(Debug, Clone, Copy)]
pub struct Indexer {
    schema: i8,
    bounds: Option<&'static Bounds>,
}

impl Indexer {
    /// An indexer for `schema`.
    ///
    /// # Panics
    /// Panics if `schema` is outside `MIN_SCHEMA..=MAX_SCHEMA`.
    pub fn new(schema: i8) -> Self {
        assert!(is_valid_schema(schema), "schema {schema} out of range");
        Self {
            schema,
            bounds: (schema > 0).then(|| bounds(schema)),
        }
    }

    /// The bucket index of a finite `v > 0`, exactly as Prometheus computes
    /// it (`math.Frexp` and a search in its bounds table).
    #[inline]
    pub fn index(&self, v: f64) -> i32 {
        let bits = v.to_bits();
        let biased = ((bits >> MANTISSA_BITS) & 0x7ff) as i32;
        if biased == 0 {
            return self.subnormal_index(v);
        }
        let exp = biased - 1023; // v = 1.mantissa * 2^exp
        let mantissa = bits & MANTISSA_MASK;
        match self.bounds {
            // `exp * per_octave` as a shift by the schema held here: no
            // multiply waiting on a second load from the table.
            Some(b) => b.rank(mantissa) as i32 + (exp << self.schema),
            None => {
                let key = exp + 1 - i32::from(mantissa == 0);
                let shift = -i32::from(self.schema);
                (key + (1 << shift) - 1) >> shift
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn subnormal_index(&self, v: f64) -> i32 {
        // Scale into the normal range; exact because it is a power of two,
        // and 2^64 spans a whole number of buckets at every schema.
        let octaves = 64 << self.schema.max(0) >> (-self.schema).max(0);
        self.index(v * 2f64.powi(64)) - octaves
    }
}

/// The bucket index of a finite `v > 0` at `schema`; see [`Indexer::index`].
///
/// ```
/// use topdeck_format::exponential::bucket_index;
/// assert_eq!(bucket_index(3, 1.0), 0); // (2^-1/8, 1]
/// assert_eq!(bucket_index(3, 1.01), 1);
/// assert_eq!(bucket_index(0, 3.0), 2); // (2, 4]
/// ```
///
/// # Panics
/// Panics if `schema` is outside `MIN_SCHEMA..=MAX_SCHEMA`.
pub fn bucket_index(schema: i8, v: f64) -> i32 {
    Indexer::new(schema).index(v)
}

/// Upper bound `base^index` of bucket `index` at `schema` (saturating to
/// `f64::MAX` and 0 at the ends of the `f64` range, as Prometheus does).
///
/// ```
/// use topdeck_format::exponential::upper_bound;
/// assert_eq!(upper_bound(3, 0), 1.0);
/// assert_eq!(upper_bound(3, 8), 2.0);
/// assert_eq!(upper_bound(0, -1), 0.5);
/// ```
pub fn upper_bound(schema: i8, index: i32) -> f64 {
    assert!(is_valid_schema(schema), "schema {schema} out of range");
    let (frac, exp) = if schema > 0 {
        let n = 1i32 << schema;
        let k = index.rem_euclid(n);
        (octave_bound(k as u32, n as u32), index.div_euclid(n))
    } else {
        (1.0, index.saturating_mul(1 << -schema))
    };
    if exp >= 1024 {
        return f64::MAX;
    }
    frac * pow2(exp)
}

/// `2^exp` for any `exp`, saturating to infinity and zero.
fn pow2(exp: i32) -> f64 {
    // Two steps keep each factor representable down to the subnormals.
    let half = exp / 2;
    2f64.powi(half) * 2f64.powi(exp - half)
}

/// Where one observation goes in a histogram with a fixed bucket range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The zero bucket: `v <= zero_threshold`, negatives included.
    Zero,
    /// Bucket `min_index + i`; values above the range are clamped to the last bucket.
    Bucket(u32),
    /// NaN: not recorded.
    Ignore,
}

/// The bucket range of one histogram: `bucket_count` buckets from
/// `min_index`, and a zero bucket below them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketRange {
    /// Bucket schema.
    pub schema: i8,
    /// Index of the first bucket.
    pub min_index: i32,
    /// Number of buckets.
    pub bucket_count: u32,
}

impl BucketRange {
    /// The range at `schema` that covers `(min, max]` with whole buckets.
    ///
    /// ```
    /// use topdeck_format::exponential::BucketRange;
    /// let r = BucketRange::covering(3, 1e-9, 1e3);
    /// assert!(r.zero_threshold() <= 1e-9 && r.max_bound() >= 1e3);
    /// assert_eq!(r.bucket_count, 320); // 40 powers of two, 8 buckets each
    /// ```
    pub fn covering(schema: i8, min: f64, max: f64) -> Self {
        let min_index = bucket_index(schema, min);
        let max_index = bucket_index(schema, max).max(min_index);
        Self {
            schema,
            min_index,
            bucket_count: (max_index - min_index + 1) as u32,
        }
    }

    /// Upper bound of the zero bucket: the lower bound of the first bucket.
    pub fn zero_threshold(&self) -> f64 {
        upper_bound(self.schema, self.min_index - 1)
    }

    /// Upper bound of the last bucket.
    pub fn max_bound(&self) -> f64 {
        upper_bound(self.schema, self.max_index())
    }

    /// Index of the last bucket.
    pub fn max_index(&self) -> i32 {
        self.min_index + self.bucket_count as i32 - 1
    }

    /// Where `v` is counted.
    pub fn slot(&self, v: f64, zero_threshold: f64) -> Slot {
        self.slot_with(&Indexer::new(self.schema), v, zero_threshold)
    }

    /// Where `v` is counted, with an indexer made for this range's schema.
    #[inline]
    pub fn slot_with(&self, ix: &Indexer, v: f64, zero_threshold: f64) -> Slot {
        debug_assert_eq!(ix.schema, self.schema);
        if v > zero_threshold {
            let i = ix.index(v) - self.min_index;
            // One compare covers both ends (a negative `i` is a huge u32),
            // and a branch the CPU predicts adds nothing to the chain from
            // the value to its bucket, where two conditional moves would.
            if (i as u32) < self.bucket_count {
                Slot::Bucket(i as u32)
            } else {
                Slot::Bucket((i.max(0) as u32).min(self.bucket_count - 1))
            }
        } else if v.is_nan() {
            Slot::Ignore
        } else {
            Slot::Zero
        }
    }
}

/// Maps an `f64` to a `u64` with the same order, never 0 for a non-NaN
/// value, so "no value yet" is 0 and a maximum is an integer `max`.
///
/// ```
/// use topdeck_format::exponential::{from_ordered_bits, ordered_bits};
/// assert!(ordered_bits(-1.0) < ordered_bits(0.0) && ordered_bits(0.0) < ordered_bits(2.5));
/// assert_eq!(from_ordered_bits(ordered_bits(2.5)), Some(2.5));
/// assert_eq!(from_ordered_bits(0), None);
/// ```
#[inline]
pub fn ordered_bits(v: f64) -> u64 {
    let bits = v.to_bits();
    if bits >> 63 == 0 {
        bits | 1 << 63
    } else {
        !bits
    }
}

/// Inverse of [`ordered_bits`]; `None` for 0 ("no value").
pub fn from_ordered_bits(o: u64) -> Option<f64> {
    match o {
        0 => None,
        o if o >> 63 == 1 => Some(f64::from_bits(o & !(1 << 63))),
        o => Some(f64::from_bits(!o)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prometheus's reference algorithm, written out: frexp and a linear search.
    fn reference_index(schema: i8, v: f64) -> i32 {
        let (frac, exp) = frexp(v);
        if schema > 0 {
            let n = 1 << schema;
            let j = (0..n)
                .position(|k| octave_bound(k, n) / 2.0 >= frac)
                .unwrap_or(n as usize) as i32;
            j + (exp - 1) * n as i32
        } else {
            let mut key = exp;
            if frac == 0.5 {
                key -= 1;
            }
            let shift = -schema as i32;
            (key + (1 << shift) - 1) >> shift
        }
    }

    fn frexp(v: f64) -> (f64, i32) {
        let mut e = 0;
        let mut f = v;
        while f >= 1.0 {
            f /= 2.0;
            e += 1;
        }
        while f < 0.5 {
            f *= 2.0;
            e -= 1;
        }
        (f, e)
    }

    #[test]
    fn powers_of_two_are_upper_bounds_of_their_bucket() {
        for schema in MIN_SCHEMA..=MAX_SCHEMA {
            // With schema < 0 only every 2^-schema-th power of two is a bound.
            let step = 1 << (-schema).max(0);
            for e in (-32..32).filter(|e| e % step == 0) {
                let v = 2f64.powi(e);
                let i = bucket_index(schema, v);
                assert_eq!(upper_bound(schema, i), v, "schema {schema} 2^{e}");
            }
        }
    }

    #[test]
    fn every_bound_lands_in_its_own_bucket_and_the_next_float_in_the_next() {
        for schema in 1..=MAX_SCHEMA {
            let n = 1 << schema;
            for i in -3 * n..3 * n {
                let ub = upper_bound(schema, i);
                assert_eq!(bucket_index(schema, ub), i, "schema {schema} bound {i}");
                let next = f64::from_bits(ub.to_bits() + 1);
                assert_eq!(
                    bucket_index(schema, next),
                    i + 1,
                    "schema {schema} after {i}"
                );
            }
        }
    }

    #[test]
    fn fast_index_matches_reference_on_a_sweep() {
        for schema in MIN_SCHEMA..=MAX_SCHEMA {
            let mut v = 1e-12;
            while v < 1e12 {
                assert_eq!(
                    bucket_index(schema, v),
                    reference_index(schema, v),
                    "{schema} {v}"
                );
                v *= 1.000_731;
            }
        }
    }

    #[test]
    fn subnormals_and_extremes_index_like_the_reference() {
        for schema in MIN_SCHEMA..=MAX_SCHEMA {
            for v in [f64::MIN_POSITIVE, 5e-324, 1e-310, f64::MAX] {
                assert_eq!(
                    bucket_index(schema, v),
                    reference_index(schema, v),
                    "{schema} {v}"
                );
            }
        }
    }

    #[test]
    fn range_clamps_and_zero_bucket() {
        let r = BucketRange::covering(3, 1e-6, 1.0);
        let z = r.zero_threshold();
        assert_eq!(r.slot(0.0, z), Slot::Zero);
        assert_eq!(r.slot(-5.0, z), Slot::Zero);
        assert_eq!(r.slot(f64::NAN, z), Slot::Ignore);
        assert_eq!(r.slot(1e-6, z), Slot::Bucket(0));
        assert_eq!(r.slot(1e9, z), Slot::Bucket(r.bucket_count - 1));
        assert_eq!(r.slot(f64::INFINITY, z), Slot::Bucket(r.bucket_count - 1));
    }

    #[test]
    fn ordered_bits_preserve_order() {
        let vals = [
            f64::NEG_INFINITY,
            -3.0,
            -0.5,
            -0.0,
            0.0,
            1e-300,
            0.5,
            3.0,
            f64::INFINITY,
        ];
        for w in vals.windows(2) {
            assert!(ordered_bits(w[0]) <= ordered_bits(w[1]), "{w:?}");
            assert_ne!(ordered_bits(w[0]), 0);
        }
    }
}
