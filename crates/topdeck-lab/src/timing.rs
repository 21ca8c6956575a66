// SPDX-License-Identifier: Apache-2.0
//! The lab's one clock read: topdeck's own calibrated TSC clock, so a
//! victim timed in the lab pays ~10 ns per reading instead of the vDSO's
//! ~20, and the instrument disturbs less what it measures.

/// Monotonic nanoseconds (`CLOCK_MONOTONIC` scale), never smaller than the
/// previous reading on this thread.
///
/// ```
/// let a = topdeck_lab::timing::now_ns();
/// let b = topdeck_lab::timing::now_ns();
/// assert!(b >= a);
/// ```
#[inline]
pub fn now_ns() -> u64 {
    topdeck::clock::now()
}

/// Seconds between two [`now_ns`] readings.
pub fn secs(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1e9
}
