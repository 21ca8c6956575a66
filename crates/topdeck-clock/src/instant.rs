// SPDX-License-Identifier: Apache-2.0
//! A `std::time::Instant` look-alike over [`crate::now`]: the same
//! monotonic nanoseconds, with saturating arithmetic.

use std::time::Duration;

/// A point on the monotonic clock, in ns since an unspecified start (the
/// `CLOCK_MONOTONIC` scale).
///
/// ```
/// let t = topdeck_clock::Instant::now();
/// let later = topdeck_clock::Instant::now();
/// assert!(later >= t);
/// assert_eq!(t.duration_since(later), std::time::Duration::ZERO); // saturates
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The current time, as [`crate::now`].
    #[inline]
    pub fn now() -> Self {
        Self(crate::now())
    }

    /// An instant from ns on the monotonic scale.
    pub const fn from_nanos(ns: u64) -> Self {
        Self(ns)
    }

    /// ns on the monotonic scale.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time since `earlier`; zero if `earlier` is later (saturates).
    pub fn duration_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Time since this instant; zero if it lies in the future.
    #[inline]
    pub fn elapsed(self) -> Duration {
        Self::now().duration_since(self)
    }
}
