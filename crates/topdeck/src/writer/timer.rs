// SPDX-License-Identifier: Apache-2.0
//! Timers: a histogram in seconds fed with elapsed time from the
//! `topdeck-clock` TSC clock: two raw tick reads and one record per
//! timing, the bucket picked from the tick count (`tick_index`), the sum
//! and maximum in seconds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::histogram::Histogram;
use super::tick_index::TickIndexes;

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
    /// Bucket tables by clock rate, shared by clones.
    tables: Option<Arc<TickIndexes>>,
}

impl Timer {
    pub(crate) fn new(histogram: Histogram) -> Self {
        let (range, zero) = histogram.range();
        let tables = TickIndexes::new(*range, zero).map(Arc::new);
        Self { histogram, tables }
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

    /// Records a section `ticks` long; a negative count (another CPU's
    /// counter a little behind) records 0.
    #[inline(always)]
    fn record_ticks(&self, ticks: i64) {
        let per_tick = topdeck_clock::secs_per_tick();
        let secs = ticks.max(0) as f64 * per_tick;
        match self.tables.as_ref().and_then(|t| t.word(ticks, per_tick)) {
            Some(word) => self.histogram.record_in_word(word, secs, 1),
            None => self.histogram.record(secs),
        }
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
        let ticks = self.elapsed_ticks();
        self.timer.record_ticks(ticks);
        std::mem::forget(self);
        Duration::from_nanos(topdeck_clock::ticks_delta_to_ns(ticks.max(0) as u64))
    }

    /// Stops without recording.
    pub fn cancel(self) {
        std::mem::forget(self);
    }
}

impl TimerGuard<'_> {
    /// Ticks since the start, signed: the bucket is found by a branch on
    /// the sign rather than a clamp the bucket's address would wait for.
    #[inline(always)]
    fn elapsed_ticks(&self) -> i64 {
        topdeck_clock::ticks().wrapping_sub(self.start) as i64
    }
}

impl Drop for TimerGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.timer.record_ticks(self.elapsed_ticks());
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

    #[test]
    fn a_timed_section_lands_in_the_bucket_its_seconds_pick() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::builder().dir(dir.path()).build().unwrap();
        let timer = registry.timer("by_ticks_seconds", &[], "").unwrap();
        let seconds = registry
            .histogram("by_seconds_seconds", &[], "", "seconds")
            .unwrap();
        let per_tick = topdeck_clock::secs_per_tick();
        // Zero and negative counts, the first buckets, and sections from
        // nanoseconds to hours, at no particular bound.
        let counts = [-5i64, 0, 1, 2, 3, 7, 40, 333, 12_345, 987_654_321, 1 << 40];
        for &t in &counts {
            timer.record_ticks(t);
            seconds.record(t.max(0) as f64 * per_tick);
        }
        let snap = RegistryReader::open(registry.path())
            .unwrap()
            .snapshot()
            .unwrap();
        let (Some(Value::Histogram(a)), Some(Value::Histogram(b))) = (
            snap.get("by_ticks_seconds", &[]),
            snap.get("by_seconds_seconds", &[]),
        ) else {
            panic!("histograms missing from {snap:?}");
        };
        assert_eq!(a.count, counts.len() as u64);
        assert_eq!((&a.buckets, a.zero_count), (&b.buckets, b.zero_count));
        // Equal unless the clock recalibrated in between (parts per million).
        assert!((a.sum / b.sum - 1.0).abs() < 1e-4, "{} vs {}", a.sum, b.sum);
        let (amax, bmax) = (a.max.unwrap(), b.max.unwrap());
        assert!((amax / bmax - 1.0).abs() < 1e-4, "{amax} vs {bmax}");
    }
}
