// SPDX-License-Identifier: Apache-2.0
//! A value block replicated in every shard, and the two ways to add to a
//! word: as its only writer (plain load + store, no lock prefix) or as one
//! of many (atomic read-modify-write, for the overflow shard).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::mapping::Mapping;
use super::shard;

/// How a word is updated.
pub(crate) trait Adder {
    fn add(w: &AtomicU64, n: u64);
    /// Adds `n` to a counter's word, stopping at `u64::MAX` (FORMAT.md
    /// section 5): a counter never wraps to a small value, backwards.
    fn add_saturating(w: &AtomicU64, n: u64);
    fn add_f64(w: &AtomicU64, v: f64);
    fn max(w: &AtomicU64, v: u64);
}

/// The calling thread owns the shard: nobody else writes these words.
pub(crate) struct Owned;
/// Several threads share the overflow shard.
pub(crate) struct Contended;

impl Adder for Owned {
    #[inline(always)]
    fn add(w: &AtomicU64, n: u64) {
        w.store(w.load(Relaxed).wrapping_add(n), Relaxed);
    }
    #[inline(always)]
    fn add_saturating(w: &AtomicU64, n: u64) {
        w.store(w.load(Relaxed).saturating_add(n), Relaxed);
    }
    #[inline(always)]
    fn add_f64(w: &AtomicU64, v: f64) {
        w.store((f64::from_bits(w.load(Relaxed)) + v).to_bits(), Relaxed);
    }
    #[inline(always)]
    fn max(w: &AtomicU64, v: u64) {
        if v > w.load(Relaxed) {
            w.store(v, Relaxed);
        }
    }
}

impl Adder for Contended {
    fn add(w: &AtomicU64, n: u64) {
        w.fetch_add(n, Relaxed);
    }
    fn add_saturating(w: &AtomicU64, n: u64) {
        // A compare-and-swap loop: a `fetch_add` that wrapped would show
        // readers the small value until it was put right.
        let _ = w.fetch_update(Relaxed, Relaxed, |b| Some(b.saturating_add(n)));
    }
    fn add_f64(w: &AtomicU64, v: f64) {
        let _ = w.fetch_update(Relaxed, Relaxed, |b| {
            Some((f64::from_bits(b) + v).to_bits())
        });
    }
    fn max(w: &AtomicU64, v: u64) {
        w.fetch_max(v, Relaxed);
    }
}

/// One metric's value block in every shard. Cloning is an `Arc` increment.
#[derive(Clone)]
pub(crate) struct ShardedBlock {
    /// The block in shard 0.
    first: *const AtomicU64,
    /// Distance between shards, in words.
    stride: usize,
    /// Per-thread shards; index `shards` is the overflow shard.
    pub(crate) shards: u32,
    map: Arc<Mapping>,
}

// SAFETY: `first` points into the mapping that `map` keeps alive; every
// access through it is atomic, so the block may move between and be shared
// by threads.
unsafe impl Send for ShardedBlock {}
// SAFETY: as above: shared access is only through atomics.
unsafe impl Sync for ShardedBlock {}

impl ShardedBlock {
    /// The block at `value_offset` in each shard; `words` is its length.
    pub(crate) fn new(map: Arc<Mapping>, value_offset: u64, words: usize) -> Self {
        let h = &map.header;
        // Bounds of the whole block in the last (overflow) shard imply all others.
        let last = h.shard_offset(h.shard_count) + value_offset + (words as u64 - 1) * 8;
        let _ = map.word(last);
        Self {
            first: map.word(h.shards_offset + value_offset),
            stride: (h.shard_len / 8) as usize,
            shards: h.shard_count,
            map,
        }
    }

    /// Word `i` of the block in shard `shard` (`shard <= self.shards`).
    #[inline(always)]
    pub(crate) fn word(&self, shard: u32, i: usize) -> &AtomicU64 {
        debug_assert!(shard <= self.shards);
        // SAFETY: `new` checked that the whole block lies inside the file in
        // every shard up to the overflow one, and `shard <= shards`.
        unsafe { &*self.first.add(shard as usize * self.stride + i) }
    }

    /// The calling thread's own shard, taking one if it has none; `None`
    /// when every shard is taken and the overflow shard must be used.
    #[inline(always)]
    pub(crate) fn own_shard(&self) -> Option<u32> {
        let s = shard::current();
        if s < self.shards {
            Some(s)
        } else {
            self.claim_shard()
        }
    }

    #[cold]
    #[inline(never)]
    fn claim_shard(&self) -> Option<u32> {
        Some(shard::claim()).filter(|&s| s < self.shards)
    }

    /// Index of the overflow shard.
    pub(crate) fn overflow(&self) -> u32 {
        self.shards
    }

    /// Sum of word `i` over the shards a reader would read.
    pub(crate) fn sum(&self, i: usize) -> u64 {
        self.map
            .shards_to_read()
            .map(|s| self.word(s, i).load(Relaxed))
            .fold(0, u64::saturating_add)
    }
}

impl fmt::Debug for ShardedBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedBlock")
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}
