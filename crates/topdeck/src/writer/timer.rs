// SPDX-License-Identifier: Apache-2.0
//! Timers: a histogram in seconds fed with elapsed time from the
//! `topdeck-clock` TSC clock: two raw tick reads and one record per
//! timing, the bucket picked from the tick count (`tick_index`), the sum
//! and maximum in seconds. With the agent's thread-waits array, also each
//! request's CPU wait (`cpu_wait`).

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use super::cpu_wait::{CpuWait, WaitStart};
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
///
/// # CPU wait per request
///
/// When the topdeck agent runs, its scheduler probe keeps every thread's
/// cumulative run-queue wait (time runnable but not running) in a
/// memory-mapped BPF array ([`ThreadWaits`](crate::ThreadWaits)), which the
/// registry maps when it is created. A timer of such a registry also
/// registers, with the same labels, `<base>_cpu_wait_seconds` (per request,
/// how long the timing thread waited for a CPU during the section) and
/// `<base>_cpu_wait_unknown_seconds` (the latency of requests whose wait
/// could not be known, because the agent stopped during them), `<base>`
/// being `name` without its `_seconds`. A guard reads the thread's slot at
/// start and at stop: two plain loads, no system call, about a nanosecond
/// (docs/PERFORMANCE.md). The wait histogram counts exactly the requests
/// whose wait is known; a thread with no slot (a thread id past the
/// array, a pid namespace that hides the host id) records in neither.
/// Without the array (no agent, `TOPDECK_THREAD_WAITS=off`,
/// [`RegistryBuilder::no_thread_waits`](crate::RegistryBuilder::no_thread_waits))
/// the timer is as before and registers no companions. The wait counts
/// only what the thread spent on run queues: a section that hands work to
/// other threads does not see theirs.
#[derive(Clone)]
#[must_use]
pub struct Timer {
    histogram: Histogram,
    /// Bucket tables by clock rate, shared by clones.
    tables: Option<Arc<TickIndexes>>,
    /// The CPU wait's histograms, when the registry has the array.
    cpu: Option<Arc<CpuWait>>,
}

impl Timer {
    pub(crate) fn new(histogram: Histogram, cpu: Option<CpuWait>) -> Self {
        let (range, zero) = histogram.range();
        let tables = TickIndexes::new(*range, zero).map(Arc::new);
        Self {
            histogram,
            tables,
            cpu: cpu.map(Arc::new),
        }
    }

    /// Starts timing; the guard records the elapsed time when dropped.
    #[inline]
    pub fn start(&self) -> TimerGuard<'_> {
        TimerGuard {
            timer: self,
            start: topdeck_clock::ticks(),
            wait: self.wait_start(),
        }
    }

    /// Starts a timing held as a value rather than a guard (a state
    /// machine, a foreign caller): pass it to [`end`](Self::end) of the
    /// same timer. Dropping it records nothing.
    #[inline]
    pub fn begin(&self) -> Timing<'_> {
        Timing {
            start: topdeck_clock::ticks(),
            wait: self.wait_start(),
            _timer: PhantomData,
        }
    }

    /// Ends a timing begun by [`begin`](Self::begin) of this timer:
    /// records like a guard's stop and returns the elapsed time.
    #[inline]
    pub fn end(&self, timing: Timing<'_>) -> Duration {
        let ticks = topdeck_clock::ticks().wrapping_sub(timing.start) as i64;
        self.record_ticks(ticks);
        self.wait_end(timing.wait, ticks);
        Duration::from_nanos(topdeck_clock::ticks_delta_to_ns(ticks.max(0) as u64))
    }

    /// Runs `f` and records how long it took (also if it panics).
    #[inline]
    pub fn time<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.start();
        f()
    }

    /// Records a duration measured elsewhere (no CPU wait: it was not
    /// watched).
    #[inline]
    pub fn record(&self, d: Duration) {
        self.histogram.record(d.as_secs_f64());
    }

    /// Records `ns` nanoseconds (no CPU wait, as [`record`](Self::record)).
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

    #[inline(always)]
    fn wait_start(&self) -> WaitStart {
        match &self.cpu {
            Some(cpu) => cpu.begin(),
            None => WaitStart::NONE,
        }
    }

    #[inline(always)]
    fn wait_end(&self, start: WaitStart, ticks: i64) {
        if let Some(cpu) = &self.cpu {
            cpu.end(start, ticks);
        }
    }

    /// The histogram behind the timer.
    pub fn histogram(&self) -> &Histogram {
        &self.histogram
    }

    /// The per-request CPU wait histogram (`<base>_cpu_wait_seconds`), when
    /// the registry has the agent's thread-waits array.
    pub fn cpu_wait_histogram(&self) -> Option<&Histogram> {
        self.cpu.as_deref().map(|c| &c.wait)
    }

    /// The latencies of requests whose CPU wait could not be known
    /// (`<base>_cpu_wait_unknown_seconds`), when the registry has the array.
    pub fn cpu_wait_unknown_histogram(&self) -> Option<&Histogram> {
        self.cpu.as_deref().map(|c| &c.unknown)
    }
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer")
            .field("cpu_wait", &self.cpu.is_some())
            .finish_non_exhaustive()
    }
}

/// A running timing; records into its [`Timer`] when dropped.
#[must_use = "the timing is recorded when the guard is dropped; binding it to `_` drops it at once"]
pub struct TimerGuard<'a> {
    timer: &'a Timer,
    start: u64,
    wait: WaitStart,
}

impl TimerGuard<'_> {
    /// Stops now, records, and returns the elapsed time.
    pub fn stop(self) -> Duration {
        let ticks = self.elapsed_ticks();
        self.timer.record_ticks(ticks);
        self.timer.wait_end(self.wait, ticks);
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
        let ticks = self.elapsed_ticks();
        self.timer.record_ticks(ticks);
        self.timer.wait_end(self.wait, ticks);
    }
}

impl fmt::Debug for TimerGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerGuard")
            .field("start_ticks", &self.start)
            .finish_non_exhaustive()
    }
}

/// A timing begun by [`Timer::begin`]: the start tick count and, with CPU
/// wait, the thread's slot and its total then. `Copy`; end it with the
/// timer that began it.
#[derive(Clone, Copy)]
pub struct Timing<'a> {
    start: u64,
    wait: WaitStart,
    _timer: PhantomData<&'a Timer>,
}

impl Timing<'_> {
    /// The start, in raw clock ticks.
    pub fn start_ticks(&self) -> u64 {
        self.start
    }

    /// The parts, for a foreign caller that keeps the timing in a struct
    /// of its own (the C binding's `td_timing`): start ticks, the slot's
    /// total then, the slot's total word and the array's state word (both
    /// null without a slot).
    pub fn into_raw(self) -> (u64, u64, *const AtomicU64, *const AtomicU64) {
        (self.start, self.wait.wait, self.wait.total, self.wait.state)
    }

    /// A timing from [`into_raw`](Self::into_raw)'s parts.
    ///
    /// # Safety
    /// The parts come from `into_raw` of a timing begun by the timer it
    /// will be ended with, and that timer has lived since. Null pointers
    /// (with any start) are always safe: they record no wait.
    pub unsafe fn from_raw(
        start: u64,
        wait: u64,
        total: *const AtomicU64,
        state: *const AtomicU64,
    ) -> Self {
        let wait = if total.is_null() || state.is_null() {
            WaitStart::NONE
        } else {
            WaitStart { total, state, wait }
        };
        Timing {
            start,
            wait,
            _timer: PhantomData,
        }
    }
}

impl fmt::Debug for Timing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timing")
            .field("start_ticks", &self.start)
            .field("wait_ns", &self.wait.wait)
            .field("has_slot", &!self.wait.total.is_null())
            .finish()
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
    fn timers_guards_and_timings_go_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<crate::Timer>();
        send_sync::<crate::TimerGuard<'static>>();
        send_sync::<crate::Timing<'static>>();
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
