// SPDX-License-Identifier: Apache-2.0
//! Histograms: exponential buckets (Prometheus native / OpenTelemetry
//! scheme) per thread shard.

use std::fmt;

use topdeck_format::exponential::{ordered_bits, BucketRange, Indexer, Slot, DEFAULT_SCHEMA};
use topdeck_format::layout::{HISTOGRAM_HEAD_WORDS, H_COUNT, H_MAX, H_SUM, H_ZERO};

use super::cell::{Adder, Contended, Owned, ShardedBlock};
use crate::error::{Error, ErrorKind, Result};

/// The bucket range of a histogram: schema and the span of values it
/// resolves. Values at or below the lowest bucket go to the zero bucket;
/// values above the highest are counted in the highest (and in `max`).
///
/// ```
/// let b = topdeck::Buckets::exponential(3, 1e-6, 10.0).unwrap();
/// assert!(topdeck::Buckets::exponential(9, 1e-6, 10.0).is_err());
/// # let _ = b;
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Buckets {
    pub(crate) range: BucketRange,
}

impl Buckets {
    /// Buckets at `schema` (−4..=8; 3 gives ≈9% wide buckets) covering `(min, max]`.
    pub fn exponential(schema: i8, min: f64, max: f64) -> Result<Self> {
        let bad = |why: String| Err(Error::new(ErrorKind::InvalidName, why));
        if !topdeck_format::exponential::is_valid_schema(schema) {
            return bad(format!("histogram schema {schema} is outside -4..=8"));
        }
        if !(min > 0.0 && max > min && max.is_finite()) {
            return bad(format!(
                "histogram range ({min}, {max}] must satisfy 0 < min < max < inf"
            ));
        }
        let range = BucketRange::covering(schema, min, max);
        if range.bucket_count > topdeck_format::descriptor::MAX_BUCKETS {
            return bad(format!(
                "histogram range ({min}, {max}] at schema {schema} needs {} buckets, more than {}; \
                 narrow the range or lower the schema",
                range.bucket_count,
                topdeck_format::descriptor::MAX_BUCKETS
            ));
        }
        Ok(Self { range })
    }

    /// Schema 3 from 1 ns to 10^6 s (about 11.6 days) when recording
    /// seconds: 404 buckets.
    pub fn default_seconds() -> Self {
        Self::exponential(DEFAULT_SCHEMA, 1e-9, 1e6).expect("valid default")
    }

    /// Words of one shard's block.
    pub(crate) fn block_words(&self) -> usize {
        HISTOGRAM_HEAD_WORDS + self.range.bucket_count as usize
    }
}

impl Default for Buckets {
    fn default() -> Self {
        Self::default_seconds()
    }
}

/// A histogram of observations. Recording costs a bucket index computed
/// from the float's bits and four adds on words this thread owns.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// let latency = registry
///     .histogram("request_duration_seconds", &[], "Time to serve a request.", "seconds")
///     .unwrap();
/// latency.record(0.003);
/// latency.record(0.012);
/// assert_eq!(latency.count(), 2);
/// ```
#[derive(Clone)]
#[must_use]
pub struct Histogram {
    block: ShardedBlock,
    range: BucketRange,
    indexer: Indexer,
    zero_threshold: f64,
}

impl Histogram {
    pub(crate) fn new(block: ShardedBlock, buckets: Buckets) -> Self {
        Self {
            block,
            range: buckets.range,
            indexer: Indexer::new(buckets.range.schema),
            zero_threshold: buckets.range.zero_threshold(),
        }
    }

    /// Records one observation. NaN is ignored; values at or below the
    /// zero threshold (negatives included) go to the zero bucket.
    #[inline(always)]
    pub fn record(&self, v: f64) {
        self.record_n(v, 1);
    }

    /// Records `n` observations of `v` for the cost of one: what `n` calls
    /// of [`record`](Self::record) would store (the sum grows by `v * n`).
    /// For replaying counts kept elsewhere, such as a kernel's buckets.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
    /// let waits = registry.histogram("wait_seconds", &[], "Waits.", "seconds").unwrap();
    /// waits.record_n(0.002, 500);
    /// assert_eq!(waits.count(), 500);
    /// ```
    // Inlined whole (a timer's stop would otherwise pay a call that saves
    // five registers); the shared-shard path stays out of line.
    #[inline(always)]
    pub fn record_n(&self, v: f64, n: u64) {
        self.record_in_slot(
            self.range.slot_with(&self.indexer, v, self.zero_threshold),
            v,
            n,
        );
    }

    #[inline(always)]
    fn record_in_slot(&self, slot: Slot, v: f64, n: u64) {
        let word = match slot {
            Slot::Bucket(i) => HISTOGRAM_HEAD_WORDS + i as usize,
            Slot::Zero => H_ZERO,
            Slot::Ignore => return,
        };
        if n != 0 {
            self.record_in_word(word, v, n);
        }
    }

    /// Records `n > 0` observations of `v` in block word `word` (the zero
    /// bucket or a bucket), found elsewhere: a timer finds it from the
    /// tick count.
    #[inline(always)]
    pub(crate) fn record_in_word(&self, word: usize, v: f64, n: u64) {
        match self.block.own_shard() {
            Some(s) => self.record_in::<Owned>(s, word, v, n),
            None => self.record_contended(word, v, n),
        }
    }

    /// Records one observation of 0: what `record(0.0)` stores, without
    /// the bucket index or the add to the sum (`+0.0` leaves it as it is).
    /// A timer's CPU wait is 0 for most requests.
    #[inline(always)]
    pub(crate) fn record_zero(&self) {
        match self.block.own_shard() {
            Some(s) => {
                let b = &self.block;
                Owned::add(b.word(s, H_ZERO), 1);
                Owned::max(b.word(s, H_MAX), ordered_bits(0.0));
                Owned::add(b.word(s, H_COUNT), 1);
            }
            None => self.record_contended(H_ZERO, 0.0, 1),
        }
    }

    /// The bucket range and the zero bucket's upper bound.
    pub(crate) fn range(&self) -> (&BucketRange, f64) {
        (&self.range, self.zero_threshold)
    }

    #[cold]
    #[inline(never)]
    fn record_contended(&self, word: usize, v: f64, n: u64) {
        self.record_in::<Contended>(self.block.overflow(), word, v, n);
    }

    // With `n` a constant 1 (from `record`), `v * 1.0` folds to `v`.
    #[inline(always)]
    fn record_in<A: Adder>(&self, shard: u32, word: usize, v: f64, n: u64) {
        let b = &self.block;
        A::add(b.word(shard, word), n);
        A::add_f64(b.word(shard, H_SUM), v * n as f64);
        A::max(b.word(shard, H_MAX), ordered_bits(v));
        A::add(b.word(shard, H_COUNT), n);
    }

    /// Observations recorded so far, over all threads.
    pub fn count(&self) -> u64 {
        self.block.sum(H_COUNT)
    }
}

impl fmt::Debug for Histogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count())
            .field("schema", &self.range.schema)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Registry, RegistryReader, Value};

    #[test]
    fn record_n_stores_what_n_records_would() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(dir.path()).build().unwrap();
        let (one, many) = (
            r.histogram("one_seconds", &[], "", "seconds").unwrap(),
            r.histogram("many_seconds", &[], "", "seconds").unwrap(),
        );
        for (v, n) in [(0.25, 3), (0.0, 2), (7.5, 1), (f64::NAN, 4), (1e-3, 0)] {
            for _ in 0..n {
                one.record(v);
            }
            many.record_n(v, n);
        }
        let snap = RegistryReader::open(r.path()).unwrap().snapshot().unwrap();
        let (Some(Value::Histogram(a)), Some(Value::Histogram(b))) =
            (snap.get("one_seconds", &[]), snap.get("many_seconds", &[]))
        else {
            panic!("histograms missing");
        };
        assert_eq!((a.count, a.zero_count, a.max), (6, 2, Some(7.5)));
        assert_eq!(
            (&a.buckets, a.count, a.zero_count, a.sum, a.max),
            (&b.buckets, b.count, b.zero_count, b.sum, b.max)
        );
    }

    #[test]
    fn record_zero_stores_what_record_of_zero_would() {
        let dir = tempfile::tempdir().unwrap();
        let r = Registry::builder().dir(dir.path()).build().unwrap();
        let (a, b) = (
            r.histogram("a_seconds", &[], "", "seconds").unwrap(),
            r.histogram("b_seconds", &[], "", "seconds").unwrap(),
        );
        for h in [&a, &b] {
            h.record(0.5);
        }
        a.record(0.0);
        a.record(0.0);
        b.record_zero();
        b.record_zero();
        let only = r.histogram("c_seconds", &[], "", "seconds").unwrap();
        only.record_zero();
        let snap = RegistryReader::open(r.path()).unwrap().snapshot().unwrap();
        let get = |n| match snap.get(n, &[]) {
            Some(Value::Histogram(h)) => h.clone(),
            other => panic!("{n}: {other:?}"),
        };
        let (a, b, c) = (get("a_seconds"), get("b_seconds"), get("c_seconds"));
        assert_eq!(
            (&a.buckets, a.count, a.zero_count, a.sum, a.max),
            (&b.buckets, b.count, b.zero_count, b.sum, b.max)
        );
        assert_eq!(
            (c.count, c.zero_count, c.sum, c.max),
            (1, 1, 0.0, Some(0.0))
        );
    }
}
