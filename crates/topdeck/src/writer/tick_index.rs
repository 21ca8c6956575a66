// SPDX-License-Identifier: Apache-2.0
//! A timer's bucket, picked from the elapsed tick count itself.
//!
//! The bucket word's address is the one part of a timed section that the
//! CPU cannot run ahead of: the store waits for it, and the next section's
//! counter read waits for the store. Converting the ticks to seconds first
//! (convert, multiply, move to an integer register) puts three slow steps
//! on that path; here it is a bit scan, a shift and one table load. The sum
//! and the maximum still get seconds, converted off that path.
//!
//! Bucket `i` at schema `s` covers `(2^((i-1)/2^s), 2^(i/2^s)]` seconds.
//! With `t = 2^e * m` ticks (`m` in `[1, 2)`) and `f` seconds per tick,
//! `2^s * log2(t * f) = 2^s * e + 2^s * log2(m) + c`, where `c = 2^s *
//! log2(f) = C + g` (`C` whole, `g` in `[0, 1)`). So the index is `2^s * e
//! + C` plus the number of thresholds `2^((j - g) / 2^s)`, `j = 0..=2^s`,
//! below `m`: one table per rate, as the float path has one per schema.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use topdeck_format::exponential::BucketRange;
use topdeck_format::layout::{HISTOGRAM_HEAD_WORDS, H_ZERO};

/// Bucket lookup for one bucket range at one clock rate.
#[derive(Debug)]
pub(crate) struct TickIndex {
    /// `f64` bits of the lowest seconds per tick it serves, and how many
    /// above that (one subtract and one compare tell if it still fits).
    fits_from: u64,
    fits_span: u64,
    /// Tick counts up to this one (0 or more) go to the zero bucket.
    zero_ticks: i64,
    /// `2^s * 63 + C - min_index` plus the words before the buckets: the
    /// word is this, minus `2^s` times the count's leading zeros, plus the
    /// rank of its mantissa.
    offset: isize,
    schema: u32,
    /// `63 - cell bits`: a normalised count shifted right by this is its cell.
    in_cell_bits: u32,
    bucket_count: usize,
    /// Per cell: thresholds below the cell's start (bits `in_cell_bits`
    /// and up) and the in-cell bits of the one threshold inside it, else
    /// all ones (no count in the cell exceeds that). Indexed by the
    /// normalised count's top bits, its leading one included, so the lower
    /// half is never read: one shift finds a cell.
    cells: Box<[u64]>,
}

/// A rate within 2^-16 (15 ppm) of the table's moves a bucket bound by less
/// than that: a sample that close to a bound may land in its neighbour, far
/// inside the bucket's own 9% width.
const TOLERANCE_ULPS: u64 = 1 << (52 - 16);

impl TickIndex {
    /// The lookup for `range` (schema 0 or more) at `secs_per_tick`; `None`
    /// for negative schemas or a rate that is not a positive number.
    pub(crate) fn new(
        range: &BucketRange,
        zero_threshold: f64,
        secs_per_tick: f64,
    ) -> Option<Self> {
        if range.schema < 0 || !(secs_per_tick > 0.0 && secs_per_tick.is_finite()) {
            return None;
        }
        let schema = range.schema as u32;
        let per_octave = 1u32 << schema;
        let c = f64::from(per_octave) * secs_per_tick.log2();
        let (whole, g) = (c.floor(), c - c.floor());
        // A cell a quarter of the closest pair of thresholds wide holds at
        // most one of them.
        let cell_bits = schema + 2;
        let in_cell_bits = 63 - cell_bits;
        let in_cell_mask = (1u64 << in_cell_bits) - 1;
        let mut always = 0u64;
        let mut inside: Vec<u64> = Vec::new();
        for j in 0..=per_octave {
            let theta = ((f64::from(j) - g) / f64::from(per_octave)).exp2();
            if theta < 1.0 {
                always += 1;
            } else if theta < 2.0 {
                // `m > theta` for a count normalised to `m * 2^63`.
                inside.push((theta * 2f64.powi(63)) as u64);
            }
        }
        let cells = (0..2u64 << cell_bits)
            .map(|cell| {
                let start = cell << in_cell_bits;
                if start < 1 << 63 {
                    return 0;
                }
                let below = always + inside.iter().filter(|&&t| t < start).count() as u64;
                let here = inside
                    .iter()
                    .find(|&&t| t >= start && t - start <= in_cell_mask)
                    .map_or(in_cell_mask, |&t| t - start);
                below << in_cell_bits | here
            })
            .collect();
        // Saturating: NaN and negatives give 0.
        let zero_ticks = (zero_threshold / secs_per_tick).floor() as i64;
        Some(Self {
            fits_from: secs_per_tick.to_bits() - TOLERANCE_ULPS,
            fits_span: 2 * TOLERANCE_ULPS,
            zero_ticks,
            offset: (63 << schema) + whole as isize - range.min_index as isize
                + HISTOGRAM_HEAD_WORDS as isize,
            schema,
            in_cell_bits,
            bucket_count: range.bucket_count as usize,
            cells,
        })
    }

    /// Whether this table still serves `secs_per_tick`.
    #[inline(always)]
    pub(crate) fn fits(&self, secs_per_tick: f64) -> bool {
        secs_per_tick.to_bits().wrapping_sub(self.fits_from) <= self.fits_span
    }

    /// The word of the histogram block that counts a section `ticks` long
    /// (the zero bucket's for 0 and less).
    #[inline(always)]
    pub(crate) fn word(&self, ticks: i64) -> usize {
        match NonZeroU64::new(ticks as u64) {
            // Above a count of 0 or more: positive.
            Some(t) if ticks > self.zero_ticks => self.bucket_word(t),
            _ => H_ZERO,
        }
    }

    #[inline(always)]
    fn bucket_word(&self, t: NonZeroU64) -> usize {
        let zeros = t.leading_zeros();
        let m = t.get() << zeros;
        let cell = self.cells[(m >> self.in_cell_bits) as usize];
        let mask = (1u64 << self.in_cell_bits) - 1;
        let rank = (cell >> self.in_cell_bits) as isize + isize::from(m & mask > cell & mask);
        let w = self.offset - ((zeros as isize) << self.schema) + rank;
        // As the float path: one compare for both ends, and a predicted
        // branch rather than a clamp on the address path.
        let first = HISTOGRAM_HEAD_WORDS as isize;
        if ((w - first) as usize) < self.bucket_count {
            w as usize
        } else {
            w.clamp(first, first + self.bucket_count as isize - 1) as usize
        }
    }
}

/// The tables built so far for one bucket range, newest in force. A rate
/// that keeps moving by more than the tolerance gets at most `MAX_BUILDS`
/// tables; after that its timers convert to seconds first.
pub(crate) struct TickIndexes {
    current: AtomicPtr<TickIndex>,
    /// Owns every table ever in force: a timer may still be reading an
    /// older one while a newer is published. Boxed so that a table stays
    /// where it is when the vector grows.
    #[allow(clippy::vec_box)]
    built: Mutex<Vec<Box<TickIndex>>>,
}

const MAX_BUILDS: usize = 32;

impl TickIndexes {
    pub(crate) const fn new() -> Self {
        Self {
            current: AtomicPtr::new(std::ptr::null_mut()),
            built: Mutex::new(Vec::new()),
        }
    }

    /// The table for `secs_per_tick`, building one when the rate moved;
    /// `None` when none can serve (convert to seconds instead).
    #[inline(always)]
    pub(crate) fn get(
        &self,
        range: &BucketRange,
        zero: f64,
        secs_per_tick: f64,
    ) -> Option<&TickIndex> {
        // SAFETY: a non-null pointer is to a table in `built`, which keeps
        // it until `self` is dropped, and is published with Release after
        // the table was written.
        match unsafe { self.current.load(Ordering::Acquire).as_ref() } {
            Some(ix) if ix.fits(secs_per_tick) => Some(ix),
            _ => self.rebuild(range, zero, secs_per_tick),
        }
    }

    #[cold]
    #[inline(never)]
    fn rebuild(&self, range: &BucketRange, zero: f64, secs_per_tick: f64) -> Option<&TickIndex> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = built.last().filter(|ix| ix.fits(secs_per_tick)) {
            // Another thread built it while this one waited.
            let ptr: *const TickIndex = &**last;
            // SAFETY: owned by `built` for as long as `self` lives.
            return Some(unsafe { &*ptr });
        }
        if built.len() >= MAX_BUILDS {
            return None;
        }
        let ix = Box::new(TickIndex::new(range, zero, secs_per_tick)?);
        let ptr: *const TickIndex = &*ix;
        built.push(ix);
        self.current.store(ptr.cast_mut(), Ordering::Release);
        // SAFETY: as above; the box's heap address does not move when the
        // vector grows.
        Some(unsafe { &*ptr })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck_format::exponential::{upper_bound, Indexer, Slot};

    /// Seconds per tick of a few counters: 2.6, 3.0 and 2.4 GHz, 1 ns
    /// (the OS clock), a power of two, and a slow one.
    const RATES: [f64; 6] = [1.0 / 2.596e9, 1.0 / 3.0e9, 1.0 / 2.4e9, 1e-9, 0.5e-9, 1e-6];

    /// The word the float path picks for `secs`.
    fn float_word(range: &BucketRange, zero: f64, secs: f64) -> usize {
        match range.slot_with(&Indexer::new(range.schema), secs, zero) {
            Slot::Bucket(i) => HISTOGRAM_HEAD_WORDS + i as usize,
            Slot::Zero => H_ZERO,
            Slot::Ignore => unreachable!("{secs} is not NaN"),
        }
    }

    /// Whether `v` is so close to a bucket bound that the float path's own
    /// rounding decides the side.
    fn on_a_bound(schema: i8, v: f64) -> bool {
        let i = Indexer::new(schema).index(v);
        [i - 1, i]
            .iter()
            .any(|&b| (v / upper_bound(schema, b) - 1.0).abs() < 1e-12)
    }

    fn counts_to_check() -> Vec<i64> {
        let mut t: Vec<i64> = (-100..20_000).collect();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t.push(((x >> 1) >> (x % 64)) as i64);
        }
        t
    }

    #[test]
    fn every_count_lands_where_its_seconds_would() {
        let counts = counts_to_check();
        for schema in 0..=8 {
            let range = BucketRange::covering(schema, 1e-9, 1e6);
            let zero = range.zero_threshold();
            for f in RATES {
                let ix = TickIndex::new(&range, zero, f).unwrap();
                for &t in &counts {
                    let secs = t as f64 * f;
                    let want = float_word(&range, zero, secs);
                    let got = ix.word(t);
                    assert!(
                        got == want || on_a_bound(schema, secs),
                        "schema {schema}, {f:e} s/tick, {t} ticks ({secs:e} s): {got:?}, float path {want:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn counts_beyond_the_range_go_to_its_ends() {
        let range = BucketRange::covering(3, 1e-6, 1e-3);
        let zero = range.zero_threshold();
        let ix = TickIndex::new(&range, zero, 1e-9).unwrap();
        assert_eq!(ix.word(0), H_ZERO);
        let last_zero = (zero * 1e9).floor() as i64; // below 1e-6 s
        assert!(last_zero < 1000, "{zero}");
        assert_eq!(ix.word(last_zero), H_ZERO);
        assert_eq!(ix.word(last_zero + 1), HISTOGRAM_HEAD_WORDS);
        assert_eq!(
            ix.word(i64::MAX),
            HISTOGRAM_HEAD_WORDS + range.bucket_count as usize - 1
        );
        assert_eq!(
            ix.word(1 << 62),
            HISTOGRAM_HEAD_WORDS + range.bucket_count as usize - 1
        );
    }

    #[test]
    fn negative_schemas_and_bad_rates_have_no_table() {
        let range = BucketRange::covering(-1, 1e-9, 1e6);
        assert!(TickIndex::new(&range, range.zero_threshold(), 1e-9).is_none());
        let range = BucketRange::covering(3, 1e-9, 1e6);
        for f in [0.0, -1e-9, f64::NAN, f64::INFINITY] {
            assert!(TickIndex::new(&range, range.zero_threshold(), f).is_none());
        }
    }

    #[test]
    fn a_rate_that_moves_gets_a_new_table_and_one_that_keeps_moving_gets_none() {
        let range = BucketRange::covering(3, 1e-9, 1e6);
        let zero = range.zero_threshold();
        let tables = TickIndexes::new();
        let first: *const TickIndex = tables.get(&range, zero, 1e-9).unwrap();
        let nearby: *const TickIndex = tables.get(&range, zero, 1e-9 * (1.0 + 1e-6)).unwrap();
        assert_eq!(first, nearby, "a 1 ppm move reuses the table");
        let moved = 1e-9 * 1.01;
        let second = tables.get(&range, zero, moved).unwrap();
        assert_eq!(
            second.word(1_000_000),
            float_word(&range, zero, 1e6 * moved)
        );
        for k in 2..MAX_BUILDS {
            assert!(tables
                .get(&range, zero, 1e-9 * (1.0 + k as f64 / 100.0))
                .is_some());
        }
        assert!(tables.get(&range, zero, 2e-9).is_none(), "the 33rd rate");
        assert!(
            tables.get(&range, zero, 1e-9 * 1.31).is_some(),
            "the last one built"
        );
    }
}
