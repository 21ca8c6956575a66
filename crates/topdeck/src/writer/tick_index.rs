// SPDX-License-Identifier: Apache-2.0
//! A timer's bucket, picked from the elapsed tick count itself.
//!
//! The bucket word's address is the one part of a timed section that the
//! CPU does not run ahead of: on the machines measured, the next section's
//! counter read waits until that store's address is known (docs/
//! PERFORMANCE.md, "the timer's hot path"). Converting the ticks to seconds
//! first (convert, multiply, move to an integer register) puts three slow
//! steps on that path; here it is a bit scan, two shifts and one table load. The sum
//! and the maximum still get seconds, converted off that path.
//!
//! Bucket `i` at schema `s` covers `(2^((i-1)/2^s), 2^(i/2^s)]` seconds.
//! With `t = 2^e * m` ticks (`m` in `[1, 2)`) and `f` seconds per tick,
//! `2^s * log2(t * f) = 2^s * e + 2^s * log2(m) + c`, where `c = 2^s *
//! log2(f) = C + g` (`C` whole, `g` in `[0, 1)`). So the index is `2^s * e
//! + C` plus the number of thresholds `2^((j - g) / 2^s)`, `j = 0..=2^s`,
//! below `m`: one table per rate, as the float path has one per schema.

use std::num::NonZeroU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize};
use std::sync::Mutex;

use topdeck_format::exponential::BucketRange;
use topdeck_format::layout::{HISTOGRAM_HEAD_WORDS, H_ZERO};

/// A rate within 2^-16 (15 ppm) of a table's moves a bucket bound by less
/// than that: a sample that close to a bound may land in its neighbour, far
/// inside the bucket's own 9% width. The clock's slewed rate moves by a few
/// ppm a recalibration in steady state, so tables are rebuilt rarely.
const TOLERANCE_ULPS: u64 = 1 << (52 - 16);

/// `fits_from` of a table never written: its window holds only negative
/// NaNs, which no rate is (0, negatives, infinities and NaN miss it).
const UNWRITTEN: u64 = 0xFFF8_0000_0000_0000;

/// Tables kept per timer. A rebuild writes the oldest, so a timer reading a
/// table sees it change only if it was paused for `SLOTS - 1` rebuilds
/// (recalibrations, milliseconds to seconds apart) in the middle of one
/// lookup; it then counts that one sample in a wrong bucket of the range.
const SLOTS: usize = 4;

/// The bucket of a tick count for one bucket range (schema 0 or more), at
/// the clock's current rate: a few tables, each for one rate, the newest
/// in force. Values are atomics, so rebuilding one while a paused timer
/// reads it is safe; memory stays fixed however often the rate moves.
pub(crate) struct TickIndexes {
    /// `63 - cell bits`: a normalised count shifted right by this is its cell.
    in_cell_bits: u32,
    schema: u32,
    bucket_count: usize,
    /// The range's first bucket index.
    min_index: i32,
    zero_threshold: f64,
    current: AtomicUsize,
    slots: [Table; SLOTS],
    /// The next slot to write; held while writing it.
    next: Mutex<usize>,
}

/// One rate's table.
struct Table {
    /// `f64` bits of the lowest seconds per tick it serves (one subtract and
    /// one compare with `2 * TOLERANCE_ULPS` tell if it still fits); a
    /// table never written fits no rate.
    fits_from: AtomicU64,
    /// Tick counts up to this one (0 or more) go to the zero bucket.
    zero_ticks: AtomicI64,
    /// `2^s * 63 + C - min_index` plus the words before the buckets: the
    /// word is this, minus `2^s` times the count's leading zeros, plus the
    /// rank of its mantissa.
    offset: AtomicI64,
    /// Per cell: thresholds below the cell's start (bits `in_cell_bits`
    /// and up) and the in-cell bits of the one threshold inside it, else
    /// all ones (no count in the cell exceeds that). Indexed by the
    /// normalised count's top bits, its leading one included, so the lower
    /// half is never read: one shift finds a cell.
    cells: Box<[AtomicU64]>,
}

impl Table {
    /// Whether this table serves `secs_per_tick`.
    #[inline(always)]
    fn fits(&self, secs_per_tick: f64) -> bool {
        secs_per_tick
            .to_bits()
            .wrapping_sub(self.fits_from.load(Relaxed))
            <= 2 * TOLERANCE_ULPS
    }
}

impl TickIndexes {
    /// Tables for `range`; `None` for negative schemas (a bucket there
    /// spans several powers of two, which this lookup does not model).
    pub(crate) fn new(range: BucketRange, zero_threshold: f64) -> Option<Self> {
        if range.schema < 0 {
            return None;
        }
        let schema = range.schema as u32;
        // A cell a quarter of the closest pair of thresholds wide holds at
        // most one of them.
        let cell_bits = schema + 2;
        let table = || Table {
            fits_from: AtomicU64::new(UNWRITTEN),
            zero_ticks: AtomicI64::new(0),
            offset: AtomicI64::new(0),
            cells: (0..2u64 << cell_bits).map(|_| AtomicU64::new(0)).collect(),
        };
        Some(Self {
            in_cell_bits: 63 - cell_bits,
            schema,
            bucket_count: range.bucket_count as usize,
            min_index: range.min_index,
            zero_threshold,
            current: AtomicUsize::new(0),
            slots: std::array::from_fn(|_| table()),
            next: Mutex::new(0),
        })
    }

    /// The word of the histogram block that counts a section `ticks` long
    /// (the zero bucket's for 0 and less) at `secs_per_tick`; `None` when
    /// that is not a positive number (convert to seconds instead).
    #[inline(always)]
    pub(crate) fn word(&self, ticks: i64, secs_per_tick: f64) -> Option<usize> {
        let t = &self.slots[self.current.load(Acquire) % SLOTS];
        let t = if t.fits(secs_per_tick) {
            t
        } else {
            self.rebuild(secs_per_tick)?
        };
        Some(match NonZeroU64::new(ticks as u64) {
            // Above a count of 0 or more: positive.
            Some(n) if ticks > t.zero_ticks.load(Relaxed) => self.bucket_word(t, n),
            _ => H_ZERO,
        })
    }

    #[inline(always)]
    fn bucket_word(&self, t: &Table, ticks: NonZeroU64) -> usize {
        let zeros = ticks.leading_zeros();
        let m = ticks.get() << zeros;
        // In bounds: `m >> in_cell_bits` is below `2 << cell_bits`.
        let cell = t.cells[(m >> self.in_cell_bits) as usize].load(Relaxed);
        let mask = (1u64 << self.in_cell_bits) - 1;
        let rank = (cell >> self.in_cell_bits) as i64 + i64::from(m & mask > cell & mask);
        let w = t.offset.load(Relaxed) - (i64::from(zeros) << self.schema) + rank;
        // As the float path: one compare for both ends, and a predicted
        // branch rather than a clamp on the address path.
        let first = HISTOGRAM_HEAD_WORDS as i64;
        if ((w - first) as u64) < self.bucket_count as u64 {
            w as usize
        } else {
            w.clamp(first, first + self.bucket_count as i64 - 1) as usize
        }
    }

    #[cold]
    #[inline(never)]
    fn rebuild(&self, secs_per_tick: f64) -> Option<&Table> {
        if !(secs_per_tick > 0.0 && secs_per_tick.is_finite()) {
            return None;
        }
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let newest = &self.slots[self.current.load(Relaxed) % SLOTS];
        if newest.fits(secs_per_tick) {
            return Some(newest); // another thread built it while this one waited
        }
        let slot = *next % SLOTS;
        *next = next.wrapping_add(1);
        self.fill(&self.slots[slot], secs_per_tick);
        self.current.store(slot, Release);
        Some(&self.slots[slot])
    }

    /// Writes the table for `secs_per_tick` into `t`.
    fn fill(&self, t: &Table, secs_per_tick: f64) {
        let per_octave = 1u32 << self.schema;
        let c = f64::from(per_octave) * secs_per_tick.log2();
        let (whole, g) = (c.floor(), c - c.floor());
        let in_cell_mask = (1u64 << self.in_cell_bits) - 1;
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
        for (cell, word) in (0u64..).zip(t.cells.iter()) {
            let start = cell << self.in_cell_bits;
            if start < 1 << 63 {
                continue;
            }
            let below = always + inside.iter().filter(|&&th| th < start).count() as u64;
            let here = inside
                .iter()
                .find(|&&th| th >= start && th - start <= in_cell_mask)
                .map_or(in_cell_mask, |&th| th - start);
            word.store(below << self.in_cell_bits | here, Relaxed);
        }
        // Saturating: NaN and negatives give 0.
        let zero_ticks = (self.zero_threshold / secs_per_tick).floor() as i64;
        t.zero_ticks.store(zero_ticks, Relaxed);
        t.offset.store(
            (63 << self.schema) + whole as i64 - i64::from(self.min_index)
                + HISTOGRAM_HEAD_WORDS as i64,
            Relaxed,
        );
        // Last: a table fits nothing until the rest is written (timers on
        // other threads see it all through `current`, stored with Release).
        t.fits_from
            .store(secs_per_tick.to_bits() - TOLERANCE_ULPS, Relaxed);
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
            // One set of tables per schema: the six rates also cycle it.
            let ix = TickIndexes::new(range, zero).unwrap();
            for f in RATES {
                for &t in &counts {
                    let secs = t as f64 * f;
                    let want = float_word(&range, zero, secs);
                    let got = ix.word(t, f).unwrap();
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
        let ix = TickIndexes::new(range, zero).unwrap();
        let word = |t| ix.word(t, 1e-9).unwrap();
        assert_eq!(word(0), H_ZERO);
        let last_zero = (zero * 1e9).floor() as i64; // below 1e-6 s
        assert!(last_zero < 1000, "{zero}");
        assert_eq!(word(last_zero), H_ZERO);
        assert_eq!(word(last_zero + 1), HISTOGRAM_HEAD_WORDS);
        let last = HISTOGRAM_HEAD_WORDS + range.bucket_count as usize - 1;
        assert_eq!(word(i64::MAX), last);
        assert_eq!(word(1 << 62), last);
    }

    #[test]
    fn negative_schemas_and_bad_rates_have_no_table() {
        let range = BucketRange::covering(-1, 1e-9, 1e6);
        assert!(TickIndexes::new(range, range.zero_threshold()).is_none());
        let range = BucketRange::covering(3, 1e-9, 1e6);
        let ix = TickIndexes::new(range, range.zero_threshold()).unwrap();
        for f in [0.0, -1e-9, f64::NAN, f64::INFINITY] {
            assert_eq!(ix.word(1000, f), None, "{f}");
        }
    }

    #[test]
    fn a_rate_that_moves_gets_a_table_of_its_own_however_often_it_moves() {
        let range = BucketRange::covering(3, 1e-9, 1e6);
        let zero = range.zero_threshold();
        let ix = TickIndexes::new(range, zero).unwrap();
        ix.word(1, 1e-9).unwrap();
        let first = ix.current.load(Relaxed);
        ix.word(1, 1e-9 * (1.0 + 1e-6)).unwrap();
        assert_eq!(
            ix.current.load(Relaxed),
            first,
            "a 1 ppm move keeps the table"
        );
        // Far more moves than slots, back and forth: each count still lands
        // where its seconds at that rate would.
        for k in 0..200 {
            let f = 1e-9 * (1.0 + (k % 7) as f64 / 100.0);
            for t in [3, 1_000, 1_000_000, 123_456_789] {
                assert_eq!(
                    ix.word(t, f).unwrap(),
                    float_word(&range, zero, t as f64 * f),
                    "move {k}, {f:e} s/tick, {t} ticks"
                );
            }
        }
    }
}
