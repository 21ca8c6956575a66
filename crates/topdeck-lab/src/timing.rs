// SPDX-License-Identifier: Apache-2.0
//! The lab's one clock read. Every measurement goes through [`now_ns`], so
//! swapping the source (for `topdeck-clock` once it lands) is a one-line
//! change here.

use std::sync::OnceLock;
use std::time::Instant;

/// The origin the nanosecond counts are taken from, fixed on first use.
static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// Monotonic nanoseconds since the first call in this process.
///
/// ```
/// let a = topdeck_lab::timing::now_ns();
/// let b = topdeck_lab::timing::now_ns();
/// assert!(b >= a);
/// ```
#[inline]
pub fn now_ns() -> u64 {
    let origin = *ORIGIN.get_or_init(Instant::now);
    // Saturates after 584 years of uptime rather than wrapping.
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Seconds between two [`now_ns`] readings.
pub fn secs(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1e9
}
