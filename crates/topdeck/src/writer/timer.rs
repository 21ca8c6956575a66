// SPDX-License-Identifier: Apache-2.0
//! Timers: a histogram in seconds fed with elapsed time from the
//! `topdeck-clock` TSC clock: two raw tick reads, one multiply by the
//! calibrated rate, one record per timing.

use std::fmt;
use std::time::Duration;

use super::histogram::Histogram;

/// Records elapsed times, in seconds, into a histogram (unit `seconds`, so
/// it exports unchanged as a Prometheus native histogram).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// let timer = registry.timer("request_duration_seconds", &[("route", "/")], "Time to serve.").unwrap();
/// {
///     let _guard = timer.start(); // records when dropped
/// }
/// let sum = timer.time(|| (1..=10).sum::<u32>());
/// assert_eq!(sum, 55);
/// assert_eq!(timer.histogram().count(), 2);
/// ```
#[derive(Clone)]
#[must_use]
pub struct Timer {
    histogram: Histogram,
}

impl Timer {
    pub(crate) fn new(histogram: Histogram) -> Self {
        Self { histogram }
    }

    /// Starts timing; the guard records the elapsed time when dropped.
    #[inline]
    pub fn start(&self) -> TimerGuard<'_> {
        TimerGuard {
            timer: self,
            start: topdeck_clock::ticks(),
        }
    }

    /// Runs `f` and records how long it took (also if it panics).
    #[inline]
    pub fn time<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.start();
        f()
    }

    /// Records a duration measured elsewhere.
    #[inline]
    pub fn record(&self, d: Duration) {
        self.histogram.record(d.as_secs_f64());
    }

    /// Records `ns` nanoseconds.
    #[inline]
    pub fn record_ns(&self, ns: u64) {
        self.histogram.record(ns as f64 * 1e-9);
    }

    /// The histogram behind the timer.
    pub fn histogram(&self) -> &Histogram {
        &self.histogram
    }
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer").finish_non_exhaustive()
    }
}

/// A running timing; records into its [`Timer`] when dropped.
#[must_use = "the timing is recorded when the guard is dropped; binding it to `_` drops it at once"]
pub struct TimerGuard<'a> {
    timer: &'a Timer,
    start: u64,
}

impl TimerGuard<'_> {
    /// Stops now, records, and returns the elapsed time.
    pub fn stop(self) -> Duration {
        let ns = topdeck_clock::ticks_delta_to_ns(self.elapsed_ticks());
        self.timer.record_ns(ns);
        std::mem::forget(self);
        Duration::from_nanos(ns)
    }

    /// Stops without recording.
    pub fn cancel(self) {
        std::mem::forget(self);
    }
}

impl TimerGuard<'_> {
    /// Ticks since the start; a count that went backwards (another CPU's
    /// TSC a little behind) gives 0. Clamped as a signed difference, so
    /// the conversion to seconds knows it is below 2^63 and needs no second
    /// clamp.
    #[inline(always)]
    fn elapsed_ticks(&self) -> u64 {
        (topdeck_clock::ticks().wrapping_sub(self.start) as i64).max(0) as u64
    }
}

impl Drop for TimerGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let secs = topdeck_clock::ticks_delta_to_secs(self.elapsed_ticks());
        self.timer.histogram.record(secs);
    }
}

impl fmt::Debug for TimerGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerGuard")
            .field("start_ns", &self.start)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Registry, RegistryReader, Value};

    #[test]
    fn a_timer_records_elapsed_seconds_that_a_reader_sees() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::builder().dir(dir.path()).build().unwrap();
        let timer = registry
            .timer("work_duration_seconds", &[("job", "a")], "Work.")
            .unwrap();
        let outer = std::time::Instant::now();
        let guard = timer.start();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let measured = guard.stop();
        let bound = outer.elapsed();
        assert!(
            measured >= std::time::Duration::from_millis(20) && measured <= bound,
            "{measured:?} vs {bound:?}"
        );
        timer.time(|| ());
        timer.start().cancel();
        let snap = RegistryReader::open(registry.path())
            .unwrap()
            .snapshot()
            .unwrap();
        let Some(Value::Histogram(h)) = snap.get("work_duration_seconds", &[("job", "a")]) else {
            panic!("no histogram in {snap:?}");
        };
        assert_eq!(h.count, 2, "stop and time record, cancel does not");
        assert!(
            h.sum >= 0.020 && h.sum <= bound.as_secs_f64(),
            "sum {}",
            h.sum
        );
        let (info, _) = snap
            .iter()
            .find(|(i, _)| i.name == "work_duration_seconds")
            .unwrap();
        assert_eq!(info.unit, "seconds");
    }

    #[test]
    fn a_panicking_closure_is_still_timed() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::builder().dir(dir.path()).build().unwrap();
        let timer = registry.timer("panics_seconds", &[], "Panics.").unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            timer.time(|| panic!("boom"))
        }));
        assert!(r.is_err());
        assert_eq!(timer.histogram().count(), 1);
    }

    #[test]
    fn the_header_carries_the_writers_clock_parameters_once_a_timer_exists() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::builder().dir(dir.path()).build().unwrap();
        let reader = RegistryReader::open(registry.path()).unwrap();
        assert_eq!(reader.clock_params().unwrap(), None, "no timer, no clock");
        let _timer = registry.timer("t_seconds", &[], "").unwrap();
        let params = reader.clock_params().unwrap().expect("clock area written");
        assert_eq!(params.source, topdeck_clock::params().source);
        // A tick count stored by the writer converts to the writer's time.
        let t = topdeck_clock::ticks();
        let mine = topdeck_clock::ticks_to_ns(t);
        let theirs = params.ticks_to_ns(t);
        assert!(mine.abs_diff(theirs) < 1_000_000, "{mine} vs {theirs}");
    }
}
