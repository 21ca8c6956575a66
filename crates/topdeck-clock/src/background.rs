// SPDX-License-Identifier: Apache-2.0
//! Start-up and upkeep: the first read chooses the source, and, when that
//! is the TSC, starts one thread that recalibrates at [`EARLY_NS`] after
//! start-up (the first two before it measures cross-CPU skew, once), then
//! every [`PERIOD_NS`], sleeping in between; a recalibration too disturbed
//! to use is retried after [`RETRY_NS`]. The thread does
//! not exist until the clock is first used, and not at all on the OS clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock, PoisonError};
use std::time::Duration;

use crate::calibrate::{Calibrator, Outcome, EARLY_NS, PERIOD_NS};
use crate::detection::{self, Forced, Race, Request};
#[cfg(target_arch = "x86_64")]
use crate::skew;
use crate::skew::SkewReport;
use crate::state::{self, Snap};
use crate::{os, Source, SourceKind};

/// Everything the slow paths share.
pub(crate) struct Control {
    pub calibrator: Mutex<Option<Calibrator>>,
    pub source: Mutex<Source>,
    pub skew: Mutex<Option<SkewReport>>,
    pub race: Mutex<Option<Race>>,
    forced: Forced,
    request: Request,
    step_pending: AtomicBool,
}

/// Wait before retrying a disturbed recalibration, ns.
const RETRY_NS: u64 = 100_000_000;
/// Early recalibrations done before the skew measurement, which spins on
/// every CPU for up to 50 ms each and would delay them.
const EARLY_BEFORE_SKEW: usize = 2;

static INIT: Once = Once::new();
static CONTROL: OnceLock<Control> = OnceLock::new();
/// The unslewed rate, ns per tick << SHIFT, for `Params::ticks_per_sec`.
pub(crate) static FREQ_MULT: AtomicU64 = AtomicU64::new(0);

/// A callback run after each recalibration.
type Observer = Box<dyn Fn(&crate::Stats) + Send + Sync>;
/// Callbacks by id.
static OBSERVERS: Mutex<Vec<(u64, Observer)>> = Mutex::new(Vec::new());
static NEXT_OBSERVER: AtomicU64 = AtomicU64::new(1);

/// Adds an observer; returns its id for [`remove_observer`].
pub(crate) fn add_observer(f: Observer) -> u64 {
    let id = NEXT_OBSERVER.fetch_add(1, Ordering::Relaxed);
    lock(&OBSERVERS).push((id, f));
    id
}

/// Removes an observer; false if unknown.
pub(crate) fn remove_observer(id: u64) -> bool {
    let mut v = lock(&OBSERVERS);
    let before = v.len();
    v.retain(|(i, _)| *i != id);
    v.len() != before
}

fn notify() {
    let stats = crate::stats();
    for (_, f) in lock(&OBSERVERS).iter() {
        f(&stats);
    }
}

/// Locks, ignoring poison: every critical section leaves consistent data.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shared control block; initialises the clock if needed.
pub(crate) fn control() -> &'static Control {
    init();
    CONTROL.get_or_init(|| Control::new(String::new()))
}

impl Control {
    fn new(reason: String) -> Self {
        let (forced, _) = Forced::from_env();
        let (request, _) = Request::from_env();
        Self {
            calibrator: Mutex::new(None),
            source: Mutex::new(Source {
                kind: SourceKind::Os,
                reason,
            }),
            skew: Mutex::new(None),
            race: Mutex::new(None),
            forced,
            request,
            step_pending: AtomicBool::new(forced.step),
        }
    }

    fn set_source(&self, kind: SourceKind, reason: String) {
        *lock(&self.source) = Source { kind, reason };
    }

    /// Switches every reader to the OS clock; counts a fallback unless the
    /// user asked for it.
    fn go_os(&self, reason: String) {
        state::publish(|old, _| Snap {
            kind: state::KIND_OS,
            ..old
        });
        if self.request != Request::Os {
            state::FALLBACKS.fetch_add(1, Ordering::Relaxed);
        }
        self.set_source(SourceKind::Os, reason);
    }

    /// Races the current path against clock_gettime; steps aside if the
    /// OS is as fast. Returns false when it stepped aside.
    fn race_or_step_aside(&self, why: &str, kind: SourceKind) -> bool {
        let race = detection::race(crate::now);
        *lock(&self.race) = Some(race);
        let numbers = format!(
            "now() {:.1} ns vs clock_gettime {:.1} ns",
            race.tsc_ns, race.os_ns
        );
        if self.forced.os_faster {
            self.go_os(format!("{why}; {numbers}, but the OS clock counts as faster (forced by TOPDECK_CLOCK_FORCE=os-faster)"));
            false
        } else if self.request != Request::Tsc && race.os_ns <= race.tsc_ns {
            self.go_os(format!("{why}; the OS clock is as fast: {numbers}"));
            false
        } else {
            self.set_source(kind, format!("{why}; {numbers}"));
            true
        }
    }

    /// Recalibrates once (the caller holds no lock), slewing a phase
    /// error away over `horizon_ns`.
    pub fn recalibrate(&self, horizon_ns: u64) -> Option<Outcome> {
        let mut guard = lock(&self.calibrator);
        let cal = guard.as_mut()?;
        if state::kind() == state::KIND_OS {
            return None;
        }
        let outcome = cal.recalibrate(self.step_pending.swap(false, Ordering::Relaxed), horizon_ns);
        FREQ_MULT.store(cal.freq_mult(), Ordering::Relaxed);
        drop(guard);
        if let Outcome::GiveUp(why) = outcome {
            self.go_os(why.into());
        }
        notify();
        Some(outcome)
    }
}

/// Chooses the source on first use. Concurrent first callers wait here.
#[cold]
pub(crate) fn init() {
    INIT.call_once(|| {
        let (forced, unknown) = Forced::from_env();
        let (request, note) = Request::from_env();
        let mut notes: Vec<String> = note.into_iter().collect();
        if !unknown.is_empty() {
            notes.push(format!(
                "TOPDECK_CLOCK_FORCE words ignored: {}",
                unknown.join(",")
            ));
        }
        let suffix = if notes.is_empty() {
            String::new()
        } else {
            format!(" [{}]", notes.join("; "))
        };
        let control = CONTROL.get_or_init(|| Control::new(String::new()));
        let why = match detection::may_use_tsc(request, &forced) {
            Err(why) => return control.go_os(format!("{why}{suffix}")),
            Ok(why) => why,
        };
        let cal = match Calibrator::start() {
            Ok(cal) => cal,
            Err(why) => return control.go_os(format!("{why}{suffix}")),
        };
        FREQ_MULT.store(cal.freq_mult(), Ordering::Relaxed);
        let started = cal.last_sample_ns();
        *lock(&control.calibrator) = Some(cal);
        if control.race_or_step_aside(&format!("{why}{suffix}"), SourceKind::Tsc) {
            let spawned = std::thread::Builder::new()
                .name("topdeck-clock".into())
                .spawn(move || run(started));
            if let Err(e) = spawned {
                let mut s = lock(&control.source);
                s.reason
                    .push_str(&format!("; no recalibration thread: {e}"));
            }
        }
    });
}

/// The recalibration thread; `anchor` is when the start-up calibration
/// published its parameters.
fn run(anchor: u64) {
    let control = control();
    for (i, &at) in EARLY_NS.iter().enumerate() {
        if i == EARLY_BEFORE_SKEW {
            check_skew(control);
        }
        let due = anchor.saturating_add(at);
        sleep_until(due);
        let next = EARLY_NS.get(i + 1).map_or(PERIOD_NS, |&n| n - at);
        // A disturbed early recalibration is retried at the next one.
        if matches!(control.recalibrate(next), None | Some(Outcome::GiveUp(_))) {
            return;
        }
    }
    loop {
        let wait = match control.recalibrate(PERIOD_NS) {
            None | Some(Outcome::GiveUp(_)) => return,
            Some(Outcome::Disturbed) => RETRY_NS,
            Some(_) => PERIOD_NS,
        };
        std::thread::sleep(Duration::from_nanos(wait));
    }
}

fn sleep_until(due: u64) {
    let left = due.saturating_sub(os::monotonic());
    if left > 0 {
        std::thread::sleep(Duration::from_nanos(left));
    }
}

/// Measures skew; switches to per-CPU offsets when it is real.
fn check_skew(control: &Control) {
    #[cfg(target_arch = "x86_64")]
    {
        let report = skew::measure();
        let hz = crate::params().ticks_per_sec.max(1) as f64;
        let ns = |t: u64| t as f64 * 1e9 / hz;
        let summary = format!(
            "cross-CPU skew at most {:.0} ns, measurement error at most {:.0} ns, {} CPU(s) against CPU {}",
            ns(report.max_offset_ticks()),
            ns(report.max_error_ticks()),
            report.cpus.len() + 1,
            report.reference_cpu
        );
        let significant = report.significant();
        *lock(&control.skew) = Some(report.clone());
        if !(significant || control.forced.skew) {
            let mut s = lock(&control.source);
            s.reason
                .push_str(&format!("; global calibration: {summary}"));
            return;
        }
        let forced = if significant {
            ""
        } else {
            " (forced by TOPDECK_CLOCK_FORCE=skew)"
        };
        if !crate::tsc::has_rdtscp() {
            return control.go_os(format!("TSCs are skewed beyond the measurement error{forced} and there is no RDTSCP to tell CPUs apart: {summary}"));
        }
        let _cal = lock(&control.calibrator);
        let mut offsets: Vec<(usize, i64)> = vec![(report.reference_cpu, 0)];
        offsets.extend(report.cpus.iter().map(|c| (c.cpu, c.offset_ticks)));
        state::set_offsets(&offsets);
        state::publish(|old, w| {
            let fp = old.fp_at(w);
            Snap {
                kind: state::KIND_TSC_PER_CPU,
                ..old.anchored(w, fp, old.mult)
            }
        });
        drop(_cal);
        let why = format!(
            "per-CPU offsets: TSCs are skewed beyond the measurement error{forced}: {summary}"
        );
        control.race_or_step_aside(&why, SourceKind::TscPerCpu);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = control;
}
