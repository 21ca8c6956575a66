// SPDX-License-Identifier: Apache-2.0
//! The clock timers use (`topdeck-clock`, re-exported here) and its own
//! health as topdeck metrics: recalibrations, resets, clamps and fallbacks,
//! refreshed after every recalibration (every ~3 s) by the clock's own
//! thread, so exporting them costs no thread and no wakeup of its own.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::{Counter, Gauge, Registry, Result};

pub use topdeck_clock::{
    bound, calibration, kernel_clocksource, now, now_ordered, params, race, recalibrate,
    secs_per_tick, skew, source, stats, ticks, ticks_delta_to_ns, ticks_delta_to_secs, ticks_to_ns,
    wall, Bound, Calibration, CpuSkew, Instant, Params, Race, SkewReport, Source, SourceKind,
    Stats,
};

/// The registered clock metrics; dropping this stops their updates.
#[must_use = "the metrics stop updating when this is dropped"]
pub struct ClockMetrics {
    observer: u64,
}

impl fmt::Debug for ClockMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClockMetrics").finish_non_exhaustive()
    }
}

impl Drop for ClockMetrics {
    fn drop(&mut self) {
        topdeck_clock::remove_observer(self.observer);
    }
}

/// The counters and their last exported values.
struct Exported {
    recalibrations: Counter,
    resets: Counter,
    clamps: Counter,
    fallbacks: Counter,
    error_ns: Gauge,
    seen: [AtomicU64; 4],
}

impl Exported {
    fn update(&self, s: &topdeck_clock::Stats) {
        let now = [s.recalibrations, s.resets, s.clamps, s.fallbacks];
        let counters = [
            &self.recalibrations,
            &self.resets,
            &self.clamps,
            &self.fallbacks,
        ];
        // fetch_max: the registering thread and the clock's thread may
        // update at once, with either one's figures newer.
        for ((c, seen), v) in counters.iter().zip(&self.seen).zip(now) {
            let before = seen.fetch_max(v, Ordering::Relaxed);
            c.add(v.saturating_sub(before));
        }
        if let Some(cal) = topdeck_clock::calibration() {
            self.error_ns.set(cal.last_error_ns);
        }
    }
}

/// Registers `topdeck_clock_recalibrations_total`, `_resets_total`,
/// `_clamps_total`, `_fallbacks_total` and `topdeck_clock_error_ns` (the
/// clock minus `CLOCK_MONOTONIC` at the last recalibration), labelled with
/// the source in force at registration.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// let _clock = topdeck::clock::register_metrics(&registry).unwrap();
/// ```
pub fn register_metrics(registry: &Registry) -> Result<ClockMetrics> {
    let source = topdeck_clock::source().kind.name();
    let labels = [("source", source)];
    let counter = |name: &str, help: &str| registry.counter(name, &labels, help, "");
    let exported = Arc::new(Exported {
        recalibrations: counter(
            "topdeck_clock_recalibrations_total",
            "Clock recalibrations against CLOCK_MONOTONIC (resets included).",
        )?,
        resets: counter(
            "topdeck_clock_resets_total",
            "Clock calibrations from scratch: error beyond 1 ms, suspend or a clock step.",
        )?,
        clamps: counter(
            "topdeck_clock_clamps_total",
            "Clock reads raised to the calling thread's previous value.",
        )?,
        fallbacks: counter(
            "topdeck_clock_fallbacks_total",
            "Times the clock chose or switched to the OS clock without being asked to.",
        )?,
        error_ns: registry.gauge(
            "topdeck_clock_error_ns",
            &labels,
            "Clock minus CLOCK_MONOTONIC at the last recalibration.",
            "nanoseconds",
        )?,
        seen: Default::default(),
    });
    // Observe first, then catch up: a recalibration in between (the clock
    // recalibrates several times in its first second) is then not missed.
    let e = Arc::clone(&exported);
    let observer = topdeck_clock::on_recalibrate(move |s| e.update(s));
    exported.update(&topdeck_clock::stats());
    Ok(ClockMetrics { observer })
}

#[cfg(test)]
mod tests {
    use crate::{Registry, RegistryReader, Value};

    #[test]
    fn clock_metrics_are_published_and_follow_recalibrations() {
        let dir = tempfile::tempdir().unwrap();
        let registry = Registry::builder().dir(dir.path()).build().unwrap();
        let at_registration = topdeck_clock::stats().recalibrations;
        let metrics = super::register_metrics(&registry).unwrap();
        let source = topdeck_clock::source().kind.name();
        let labels = [("source", source)];
        let mut reader = RegistryReader::open(registry.path()).unwrap();
        let get =
            |r: &mut RegistryReader, name: &str| match r.snapshot().unwrap().get(name, &labels) {
                Some(Value::Counter(v)) => *v,
                other => panic!("{name}: {other:?}"),
            };
        // The clock's own thread may recalibrate meanwhile (several times
        // in its first second): the metric lies between the counts before
        // registration and after reading it.
        let before = get(&mut reader, "topdeck_clock_recalibrations_total");
        let now = topdeck_clock::stats().recalibrations;
        assert!(
            at_registration <= before && before <= now,
            "{at_registration} <= {before} <= {now}"
        );
        if topdeck_clock::recalibrate() {
            let after = get(&mut reader, "topdeck_clock_recalibrations_total");
            assert!(after > before, "{after} after {before}");
        } else {
            println!(
                "skipped the recalibration check: the OS clock is in use ({})",
                topdeck_clock::source().reason
            );
        }
        for name in [
            "topdeck_clock_resets_total",
            "topdeck_clock_clamps_total",
            "topdeck_clock_fallbacks_total",
        ] {
            get(&mut reader, name);
        }
        drop(metrics);
    }
}
