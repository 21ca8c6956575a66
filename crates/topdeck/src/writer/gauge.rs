// SPDX-License-Identifier: Apache-2.0
//! Gauges: one atomic word each in the shared area.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::mapping::Mapping;

/// The shared word behind a gauge.
#[derive(Clone)]
struct Word {
    word: *const AtomicU64,
    _map: Arc<Mapping>,
}

// SAFETY: `word` points into the mapping `_map` keeps alive and is only
// accessed atomically.
unsafe impl Send for Word {}
// SAFETY: as above.
unsafe impl Sync for Word {}

impl Word {
    fn new(map: Arc<Mapping>, offset: u64) -> Self {
        Self {
            word: map.word(map.header.shared_offset + offset),
            _map: map,
        }
    }

    #[inline(always)]
    fn get(&self) -> &AtomicU64 {
        // SAFETY: see the `Send` impl: valid for as long as `self`.
        unsafe { &*self.word }
    }
}

/// An integer gauge: a value that goes up and down, stored in one shared
/// atomic word (so `add` from many threads contends; prefer `set` or a
/// counter pair for hot paths).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// let queue = registry.gauge("queue_depth", &[], "Jobs waiting.", "").unwrap();
/// queue.set(5);
/// queue.dec();
/// assert_eq!(queue.get(), 4);
/// ```
#[derive(Clone)]
#[must_use]
pub struct Gauge(Word);

impl Gauge {
    pub(crate) fn new(map: Arc<Mapping>, offset: u64) -> Self {
        Self(Word::new(map, offset))
    }

    /// Sets the value.
    #[inline]
    pub fn set(&self, v: i64) {
        self.0.get().store(v as u64, Relaxed)
    }

    /// Adds `n` (may be negative; wraps).
    #[inline]
    pub fn add(&self, n: i64) {
        self.0.get().fetch_add(n as u64, Relaxed);
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1)
    }

    /// Subtracts one.
    #[inline]
    pub fn dec(&self) {
        self.add(-1)
    }

    /// The current value.
    pub fn get(&self) -> i64 {
        self.0.get().load(Relaxed) as i64
    }
}

/// A floating-point gauge, stored as IEEE-754 bits in one shared word.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// let temp = registry.gauge_f64("cpu_temperature_celsius", &[], "Die temperature.", "celsius").unwrap();
/// temp.set(41.5);
/// temp.add(0.5);
/// assert_eq!(temp.get(), 42.0);
/// ```
#[derive(Clone)]
#[must_use]
pub struct GaugeF64(Word);

impl GaugeF64 {
    pub(crate) fn new(map: Arc<Mapping>, offset: u64) -> Self {
        Self(Word::new(map, offset))
    }

    /// Sets the value.
    #[inline]
    pub fn set(&self, v: f64) {
        self.0.get().store(v.to_bits(), Relaxed)
    }

    /// Adds `v` with a compare-and-swap loop.
    pub fn add(&self, v: f64) {
        let _ = self.0.get().fetch_update(Relaxed, Relaxed, |b| {
            Some((f64::from_bits(b) + v).to_bits())
        });
    }

    /// The current value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.get().load(Relaxed))
    }
}

impl fmt::Debug for Gauge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gauge")
            .field("value", &self.get())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for GaugeF64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GaugeF64")
            .field("value", &self.get())
            .finish_non_exhaustive()
    }
}
