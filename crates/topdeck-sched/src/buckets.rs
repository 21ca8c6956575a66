// SPDX-License-Identifier: Apache-2.0
//! The bucket tables the BPF programs use to put a wait of some nanoseconds
//! into the same bucket a topdeck histogram of seconds would.
//!
//! topdeck histograms are native exponential histograms of seconds (schema
//! [`SCHEMA`]: bucket `i` is `(2^((i-1)/8), 2^(i/8)]` seconds). Those bounds
//! are not powers of two in nanoseconds, so the kernel cannot find a bucket
//! with a shift alone. Instead the loader computes, with topdeck's own
//! bucket maths, the longest whole-nanosecond wait of every bucket
//! (`bound_ns`), and for every slice of 1/16 of a power of two the bucket its
//! shortest wait falls in (`slice_bucket`). A slice (at most 1/16 octave
//! wide, log2(17/16) ≈ 0.087) is narrower than a bucket (1/8 octave), so it
//! holds at most one bound: the kernel looks up the slice's bucket and moves
//! one up if the wait is past that bucket's bound. [`BucketTable::bucket_of`]
//! is that algorithm in Rust, tested against topdeck for every bound.

use topdeck::Buckets;
use topdeck_format::exponential::{upper_bound, BucketRange, Slot};

/// Histogram schema of the run-queue latency histograms (≈9% wide buckets).
pub const SCHEMA: i8 = 3;
/// Waits at or below this many seconds (2^-22 s ≈ 238 ns) are counted in the
/// zero bucket: below the resolution of a context switch.
pub const MIN_SECONDS: f64 = 2.384_185_791_015_625e-7;
/// Longest wait resolved (64 s); longer waits count in the last bucket.
pub const MAX_SECONDS: f64 = 64.0;
/// Mantissa bits that select a slice within a power of two (`TD_SLICE_BITS`).
pub const SLICE_BITS: u32 = 4;
/// Entries of the slice table (`TD_SLICES`).
pub const SLICES: usize = 64 << SLICE_BITS;
/// Buckets the BPF map value has room for (`TD_MAX_BUCKETS`).
pub const MAX_BUCKETS: usize = 256;

/// The kernel's bucket tables and the topdeck bucket range they reproduce.
#[derive(Debug, Clone)]
pub struct BucketTable {
    range: BucketRange,
    zero_threshold: f64,
    /// Longest wait in the zero bucket, ns.
    pub zero_ns: u64,
    /// `bound_ns[k]`: longest wait in bucket `k`, ns (`u64::MAX` for the last).
    pub bound_ns: Vec<u64>,
    /// `slice_bucket[s]`: bucket of the shortest wait in slice `s`.
    pub slice_bucket: Vec<u16>,
}

impl Default for BucketTable {
    fn default() -> Self {
        Self::new()
    }
}

impl BucketTable {
    /// The tables for `SCHEMA` over `(MIN_SECONDS, MAX_SECONDS]`.
    ///
    /// ```
    /// let t = topdeck_sched::BucketTable::new();
    /// assert_eq!(t.bucket_of(1), None); // 1 ns: zero bucket
    /// let k = t.bucket_of(1_000_000).unwrap(); // 1 ms
    /// assert!(t.seconds_of(k) >= 0.001 && t.seconds_of(k) < 0.0011);
    /// ```
    pub fn new() -> Self {
        let buckets = Self::topdeck_buckets();
        let range = BucketRange::covering(SCHEMA, MIN_SECONDS, MAX_SECONDS);
        debug_assert_eq!(
            buckets,
            Buckets::exponential(SCHEMA, MIN_SECONDS, MAX_SECONDS).unwrap()
        );
        let zero_threshold = range.zero_threshold();
        let n = range.bucket_count as usize;
        assert!(n <= MAX_BUCKETS, "{n} buckets do not fit the BPF map value");
        let slot = |ns: u64| range.slot(ns as f64 / 1e9, zero_threshold);
        let rank = |ns: u64| match slot(ns) {
            Slot::Zero => -1i64,
            Slot::Bucket(k) => i64::from(k),
            Slot::Ignore => unreachable!("a whole number of ns is not NaN"),
        };
        // The largest ns whose rank is at most `k`, starting from a guess.
        let last_at_most = |k: i64, guess: f64| {
            let mut n = guess.max(0.0) as u64;
            while n > 0 && rank(n) > k {
                n -= 1;
            }
            while rank(n + 1) <= k {
                n += 1;
            }
            n
        };
        let zero_ns = last_at_most(-1, zero_threshold * 1e9);
        // The last bucket also takes every longer wait: it has no bound.
        let bound_ns: Vec<u64> = (0..n)
            .map(|k| match k + 1 < n {
                true => {
                    let ub = upper_bound(SCHEMA, range.min_index + k as i32);
                    last_at_most(k as i64, ub * 1e9)
                }
                false => u64::MAX,
            })
            .collect();
        assert!(
            zero_ns >= 1 << SLICE_BITS,
            "the zero bucket must cover the slice-less waits"
        );
        let slice_bucket = (0..SLICES)
            .map(|s| {
                let m = (s >> SLICE_BITS) as u32;
                let t = (s & ((1 << SLICE_BITS) - 1)) as u64;
                let lo = if m >= SLICE_BITS {
                    ((1 << SLICE_BITS) + t) << (m - SLICE_BITS)
                } else {
                    1 << m
                };
                let lo = lo.max(zero_ns + 1);
                bound_ns.iter().position(|&b| b >= lo).unwrap_or(n - 1) as u16
            })
            .collect();
        Self {
            range,
            zero_threshold,
            zero_ns,
            bound_ns,
            slice_bucket,
        }
    }

    /// The topdeck bucket range the agent registers its histograms with.
    pub fn topdeck_buckets() -> Buckets {
        Buckets::exponential(SCHEMA, MIN_SECONDS, MAX_SECONDS).expect("a valid bucket range")
    }

    /// Buckets in use.
    pub fn len(&self) -> usize {
        self.bound_ns.len()
    }

    /// Never: there is always at least one bucket.
    pub fn is_empty(&self) -> bool {
        self.bound_ns.is_empty()
    }

    /// topdeck's index of bucket 0.
    pub fn min_index(&self) -> i32 {
        self.range.min_index
    }

    /// Upper bound of the zero bucket, seconds.
    pub fn zero_threshold(&self) -> f64 {
        self.zero_threshold
    }

    /// The bucket of a wait of `ns`, as `bucket_of()` in sched.bpf.c
    /// computes it; `None` for the zero bucket.
    pub fn bucket_of(&self, ns: u64) -> Option<usize> {
        if ns <= self.zero_ns {
            return None;
        }
        let m = 63 - ns.leading_zeros();
        let mut slice = (m as usize) << SLICE_BITS;
        if m >= SLICE_BITS {
            slice |= ((ns >> (m - SLICE_BITS)) & ((1 << SLICE_BITS) - 1)) as usize;
        }
        let mut k = usize::from(self.slice_bucket[slice]);
        if ns > self.bound_ns[k] && k + 1 < self.len() {
            k += 1;
        }
        Some(k)
    }

    /// A wait, in seconds, that topdeck counts in bucket `k`: its longest
    /// one. Replaying the kernel's counts with these values rebuilds the
    /// same buckets in a topdeck histogram.
    pub fn seconds_of(&self, k: usize) -> f64 {
        match self.bound_ns.get(k) {
            Some(&b) if b != u64::MAX => b as f64 / 1e9,
            _ => upper_bound(SCHEMA, self.range.max_index()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topdeck_bucket(t: &BucketTable, ns: u64) -> Option<usize> {
        match t.range.slot(ns as f64 / 1e9, t.zero_threshold) {
            Slot::Zero => None,
            Slot::Bucket(k) => Some(k as usize),
            Slot::Ignore => unreachable!(),
        }
    }

    #[test]
    fn the_kernel_algorithm_agrees_with_topdeck_at_every_bound() {
        let t = BucketTable::new();
        let mut probes = vec![0, 1, 15, 16, t.zero_ns, t.zero_ns + 1, u64::MAX];
        for &b in &t.bound_ns[..t.len() - 1] {
            probes.extend([b - 1, b, b + 1]);
        }
        for ns in probes {
            assert_eq!(t.bucket_of(ns), topdeck_bucket(&t, ns), "wait of {ns} ns");
        }
    }

    #[test]
    fn the_kernel_algorithm_agrees_with_topdeck_everywhere_sampled() {
        let t = BucketTable::new();
        // A fixed xorshift sequence over every magnitude of ns.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ns = x >> (x % 64);
            assert_eq!(t.bucket_of(ns), topdeck_bucket(&t, ns), "wait of {ns} ns");
        }
    }

    #[test]
    fn replayed_values_land_in_their_bucket() {
        let t = BucketTable::new();
        for k in 0..t.len() {
            let v = t.seconds_of(k);
            assert_eq!(
                t.range.slot(v, t.zero_threshold),
                Slot::Bucket(k as u32),
                "bucket {k}"
            );
        }
    }

    #[test]
    fn the_range_fits_the_map_value() {
        let t = BucketTable::new();
        assert!(t.len() <= MAX_BUCKETS);
        assert_eq!(t.len(), 225); // the bucket ending at 2^-22 s, then 28 powers of two of 8
                                  // A context switch is a few µs: well above the zero bucket.
        assert!(t.zero_ns < 1_000);
    }
}
