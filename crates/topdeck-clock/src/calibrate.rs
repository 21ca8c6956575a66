// SPDX-License-Identifier: Apache-2.0
//! Calibration of the TSC against `CLOCK_MONOTONIC`: bracketed samples,
//! long windows, integer multiply-shift, and slewing instead of stepping.
//!
//! A sample reads the OS clock, the TSC, and the OS clock again; the
//! narrowest of many brackets is kept and its midpoint taken as the OS time
//! of the count. The rate comes from the oldest and newest samples of a
//! window of at least [`MIN_WINDOW_NS`], so bracket noise of tens of ns
//! becomes a rate error of a few parts per billion. The phase error left
//! is removed by slewing: the next parameters run slightly fast or slow so
//! that the error is gone one period later, starting exactly where the old
//! parameters were, so the clock never steps.

use std::collections::VecDeque;

use crate::os;
use crate::state::{self, Snap, SHIFT};

/// Bracketed reads per sample; the narrowest bracket wins. 64 reads of
/// ~60 ns take ~4 µs and nearly always contain an uninterrupted one.
const TRIES: usize = 64;
/// Length of a first calibration, ns: a rate good to ~±30 ppm, which the
/// first recalibration (one second later) slews away; short enough not to
/// be noticed on a first call.
const INITIAL_SPIN_NS: u64 = 1_000_000;
/// Shortest window a rate is taken from, ns.
pub(crate) const MIN_WINDOW_NS: u64 = 1_000_000_000;
/// Longest window kept, ns: bracket noise over it is ~1 ppb, and it is
/// short enough to follow NTP's frequency corrections to CLOCK_MONOTONIC.
const MAX_WINDOW_NS: u64 = 64_000_000_000;
/// Time between recalibrations, ns, and the horizon over which a phase
/// error is slewed away.
pub(crate) const PERIOD_NS: u64 = 3_000_000_000;
/// An error against the OS clock beyond this, ns, means the TSC or the OS
/// clock jumped: calibrate from scratch.
const RESET_ERROR_NS: u64 = 1_000_000;
/// A change of `CLOCK_BOOTTIME - CLOCK_MONOTONIC` beyond this, ns, means
/// the machine was suspended: calibrate from scratch.
const SUSPEND_NS: u64 = 1_000_000;
/// Largest rate correction in steady state, 2^-32 units: 500 ppm, as NTP.
const MAX_SLEW: i128 = (1 << SHIFT) / 2_000;
/// Largest rate correction after a reset, 2^-32 units: 5 %.
const MAX_RESET_SLEW: i128 = (1 << SHIFT) / 20;
/// After a reset, a clock ahead of the OS by more than this, ns, steps
/// back (slewing it away would take minutes); see the crate's Caveats.
const MAX_HOLD_NS: u64 = 1_000_000_000;
/// Resets within [`RESET_MEMORY_NS`] after which the TSC is abandoned.
const MAX_RESETS: usize = 3;
/// How long a reset counts against the TSC, ns.
const RESET_MEMORY_NS: u64 = 60_000_000_000;

/// A TSC count and the OS time it was read at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    /// Tick count (per-CPU corrected in per-CPU mode).
    pub ticks: u64,
    /// `CLOCK_MONOTONIC` at the bracket's midpoint, ns.
    pub mono: u64,
    /// Bracket width, ns: the sample's uncertainty is half of it.
    pub width: u64,
}

/// The narrowest of [`TRIES`] bracketed samples.
pub(crate) fn sample() -> Sample {
    let mut best = Sample {
        ticks: 0,
        mono: 0,
        width: u64::MAX,
    };
    for _ in 0..TRIES {
        let a = os::monotonic();
        let t = state::ticks_ordered();
        let b = os::monotonic();
        let width = b.saturating_sub(a);
        if width < best.width {
            best = Sample {
                ticks: t,
                mono: a.saturating_add(width / 2),
                width,
            };
        }
    }
    best
}

/// `other - CLOCK_MONOTONIC` in ns from the narrowest bracket.
fn offset_to(other: fn() -> u64) -> i64 {
    let mut best = (u64::MAX, 0i64);
    for _ in 0..TRIES {
        let a = os::monotonic();
        let o = other();
        let b = os::monotonic();
        let width = b.saturating_sub(a);
        if width < best.0 {
            let mid = a.saturating_add(width / 2);
            best = (width, (o as i128 - mid as i128) as i64);
        }
    }
    best.1
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC`, ns.
pub(crate) fn wall_offset() -> i64 {
    offset_to(os::realtime)
}

/// `CLOCK_BOOTTIME - CLOCK_MONOTONIC`, ns: grows by the time suspended.
fn boot_offset() -> i64 {
    offset_to(os::boottime)
}

/// ns per tick between two samples, `SHIFT` fractional bits; `None` if the
/// counts did not advance or the rate is absurd.
pub(crate) fn mult_between(a: &Sample, b: &Sample) -> Option<u64> {
    let dt = b.ticks.checked_sub(a.ticks).filter(|&d| d > 0)?;
    let dns = b.mono.checked_sub(a.mono)?;
    let m = ((dns as u128) << SHIFT) / dt as u128;
    u64::try_from(m).ok().filter(|&m| m > 0)
}

/// Two samples [`INITIAL_SPIN_NS`] apart, spinning in between.
fn short_calibration() -> Option<(Sample, u64)> {
    let s0 = sample();
    let end = s0.mono.saturating_add(INITIAL_SPIN_NS);
    while os::monotonic() < end {
        std::hint::spin_loop();
    }
    let s1 = sample();
    Some((s1, mult_between(&s0, &s1)?))
}

/// What a recalibration did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// New parameters, slewed.
    Slewed,
    /// Calibrated from scratch; `why` says what triggered it.
    Reset(&'static str),
    /// Too many resets: the caller should switch to the OS clock.
    GiveUp,
}

/// Calibration state, owned by whoever recalibrates (behind a mutex).
#[derive(Debug)]
pub(crate) struct Calibrator {
    history: VecDeque<Sample>,
    /// The rate without any slew, ns per tick << SHIFT.
    freq_mult: u64,
    boot_offset: i64,
    resets: VecDeque<u64>,
    /// Our clock minus the OS clock at the last recalibration, ns.
    pub last_error_ns: i64,
    /// Width of the bracket of the last sample, ns.
    pub last_width_ns: u64,
    /// Window the current rate was taken from, ns.
    pub window_ns: u64,
}

impl Calibrator {
    /// A first calibration, published as TSC parameters. `None` if the TSC
    /// does not advance.
    pub fn start() -> Option<Self> {
        let boot_offset = boot_offset();
        let (s1, mult) = short_calibration()?;
        let wall = wall_offset();
        let cal = Self {
            history: VecDeque::from([s1]),
            freq_mult: mult,
            boot_offset,
            resets: VecDeque::new(),
            last_error_ns: 0,
            last_width_ns: s1.width,
            window_ns: INITIAL_SPIN_NS,
        };
        state::publish(|_, _| Snap {
            kind: state::KIND_TSC,
            mult,
            base_ticks: s1.ticks,
            base_ns: s1.mono,
            base_frac: 0,
            wall_offset: wall,
        });
        Some(cal)
    }

    /// The rate without slew, ns per tick << SHIFT.
    pub fn freq_mult(&self) -> u64 {
        self.freq_mult
    }

    /// Measures the error against the OS clock and publishes slewed
    /// parameters, or starts over when the error or a clock step says so.
    /// `force_step` pretends the kernel's clock stepped (test hook).
    pub fn recalibrate(&mut self, force_step: bool) -> Outcome {
        let mut s = sample();
        let boot = boot_offset();
        let suspended = boot.abs_diff(self.boot_offset) > SUSPEND_NS;
        self.boot_offset = boot;
        let current = state::snapshot();
        let mut err_fp = current.fp_at(s.ticks) as i128 - ((s.mono as i128) << SHIFT);
        let reset_why = if force_step {
            Some("a clock step (forced by TOPDECK_CLOCK_FORCE=step)")
        } else if suspended {
            Some("CLOCK_BOOTTIME - CLOCK_MONOTONIC changed: the machine was suspended")
        } else if (err_fp >> SHIFT).unsigned_abs() > RESET_ERROR_NS as u128 {
            Some("error against CLOCK_MONOTONIC beyond 1 ms")
        } else {
            None
        };
        if reset_why.is_some() {
            self.resets.push_back(s.mono);
            while self
                .resets
                .front()
                .is_some_and(|&t| s.mono.saturating_sub(t) > RESET_MEMORY_NS)
            {
                self.resets.pop_front();
            }
            if self.resets.len() >= MAX_RESETS {
                return Outcome::GiveUp;
            }
            let Some((s1, mult)) = short_calibration() else {
                return Outcome::GiveUp;
            };
            self.history.clear();
            self.freq_mult = mult;
            self.window_ns = INITIAL_SPIN_NS;
            s = s1;
            err_fp = current.fp_at(s.ticks) as i128 - ((s.mono as i128) << SHIFT);
        } else {
            self.history.push_back(s);
            while self.history.len() > 2
                && self
                    .history
                    .front()
                    .is_some_and(|f| s.mono.saturating_sub(f.mono) > MAX_WINDOW_NS)
            {
                self.history.pop_front();
            }
            if let Some(first) = self.history.front() {
                let window = s.mono.saturating_sub(first.mono);
                if window >= MIN_WINDOW_NS {
                    if let Some(m) = mult_between(first, &s) {
                        self.freq_mult = m;
                        self.window_ns = window;
                    }
                }
            }
        }
        if reset_why.is_some() {
            self.history.push_back(s);
        }
        self.last_error_ns = (err_fp >> SHIFT).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        self.last_width_ns = s.width;
        let ahead = err_fp > 0;
        let abs_err = (err_fp >> SHIFT).unsigned_abs();
        // Behind after a reset: step forward (monotone). Far ahead: step back.
        let step = reset_why.is_some() && (!ahead || abs_err > MAX_HOLD_NS as u128);
        let max = if reset_why.is_some() {
            MAX_RESET_SLEW
        } else {
            MAX_SLEW
        };
        let rate = if step {
            0
        } else {
            (err_fp / PERIOD_NS as i128).clamp(-max, max)
        };
        let f = self.freq_mult as i128;
        let mult = (f - ((f * rate) >> SHIFT)).clamp(1, u64::MAX as i128) as u64;
        let wall = wall_offset();
        let freq = self.freq_mult;
        state::publish(|old, w| {
            let os_fp = ((s.mono as u128) << SHIFT)
                .saturating_add(w.saturating_sub(s.ticks) as u128 * freq as u128);
            let fp = if step && ahead {
                os_fp
            } else if step {
                os_fp.max(old.fp_at(w))
            } else {
                old.fp_at(w)
            };
            Snap {
                wall_offset: wall,
                ..old.anchored(w, fp, mult)
            }
        });
        state::RECALIBRATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match reset_why {
            Some(why) => {
                state::RESETS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Outcome::Reset(why)
            }
            None => Outcome::Slewed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mult_between_is_ns_per_tick_in_fixed_point() {
        let a = Sample {
            ticks: 1_000,
            mono: 500,
            width: 0,
        };
        let b = Sample {
            ticks: 3_000,
            mono: 1_500,
            width: 0,
        };
        assert_eq!(mult_between(&a, &b), Some(1 << (SHIFT - 1)));
        assert_eq!(mult_between(&b, &a), None);
        assert_eq!(mult_between(&a, &a), None);
    }

    #[test]
    fn a_sample_brackets_the_os_clock() {
        let before = os::monotonic();
        let s = sample();
        let after = os::monotonic();
        assert!(
            before <= s.mono && s.mono <= after,
            "{before} {s:?} {after}"
        );
        assert!(s.width < u64::MAX);
    }
}
