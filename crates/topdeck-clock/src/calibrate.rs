// SPDX-License-Identifier: Apache-2.0
//! Calibration of the TSC against `CLOCK_MONOTONIC`: bracketed samples,
//! growing windows, integer multiply-shift, and slewing instead of stepping.
//!
//! A sample reads the OS clock, the TSC, and the OS clock again, many
//! times; the brackets of the narrowest width are averaged (the TSC of
//! some CPUs, AMD's Zen among them, advances in steps of ~10 ns, so one
//! bracket's midpoint is off by up to half a step, and averaging brackets
//! that fall at different phases of the step halves that). The rate comes
//! from the oldest and newest samples of a window that grows from the
//! first millisecond (start-up) through early recalibrations at 4, 16, 64
//! and 256 ms and 1 s (each window ~4x the last, so the phase error the
//! previous rate leaves before the next recalibration stays a few times the
//! sample noise, ~10-20 ns) to a window of up to [`MAX_WINDOW_NS`]. The
//! phase error left is removed by slewing: the next parameters run
//! slightly fast or slow so that the error is gone one period later,
//! starting exactly where the old parameters were, so the clock never
//! steps.
//!
//! A sample whose narrowest bracket is much wider than the narrowest seen
//! so far (the thread was preempted, the vCPU descheduled, or an SMT
//! sibling slowed every read) does not move the clock: it still detects a
//! reset (errors beyond 1 ms), but neither the rate nor the slew is taken
//! from it, and the caller retries soon.

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
/// Recalibrations after start-up, ns after the start-up anchor: each
/// window ~4x the last (see the module docs).
pub(crate) const EARLY_NS: [u64; 5] = [
    4_000_000,
    16_000_000,
    64_000_000,
    256_000_000,
    1_000_000_000,
];
/// A sample whose narrowest bracket exceeds twice the narrowest seen plus
/// this, ns, is too disturbed to calibrate from.
const WIDE_SLACK_NS: u64 = 20;
/// Disturbed samples in a row after which the brackets are taken to have
/// widened for good (a slower host after a migration): the next one is
/// used and its width becomes the reference.
const MAX_DISTURBED: u32 = 30;
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
/// Largest unslewed TSC rate, ns per tick << SHIFT: a TSC of at least
/// 1.05 GHz, so that the rate slewed 5 % fast is still below one ns per
/// tick, which the read's arithmetic needs (`state::MAX_MULT`). Every
/// x86_64 server CPU's TSC is faster; a slower one uses the OS clock.
pub(crate) const MAX_TSC_MULT: u64 = ((1u128 << SHIFT) * 20 / 21) as u64;
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

/// The narrowest of [`TRIES`] bracketed samples, averaged over every
/// bracket of that width (see the module docs).
pub(crate) fn sample() -> Sample {
    let mut reads = [(0u64, 0u64, u64::MAX); TRIES];
    for r in reads.iter_mut() {
        let a = os::monotonic();
        let t = state::ticks_ordered();
        let b = os::monotonic();
        *r = (t, a, b.saturating_sub(a));
    }
    let width = reads.iter().map(|r| r.2).min().unwrap_or(u64::MAX);
    let (t0, a0, _) = reads
        .iter()
        .copied()
        .find(|r| r.2 == width)
        .unwrap_or((0, 0, 0));
    // Offsets from the first narrowest bracket, in ticks and in ns
    // (doubled, so that the midpoint of a bracket is an integer).
    let (mut dt, mut dm2, mut n) = (0i128, 0i128, 0i128);
    for &(t, a, w) in reads.iter().filter(|r| r.2 == width) {
        dt += t.wrapping_sub(t0) as i64 as i128;
        dm2 += 2 * (a.wrapping_sub(a0) as i64 as i128) + w as i128;
        n += 1;
    }
    let n = n.max(1);
    Sample {
        ticks: t0.wrapping_add((dt / n) as i64 as u64),
        mono: a0.saturating_add_signed((dm2 / (2 * n)) as i64),
        width,
    }
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

/// Whether a TSC of rate `mult` (ns per tick << SHIFT) may serve reads:
/// not below 1.05 GHz ([`MAX_TSC_MULT`]); the error says its rate.
pub(crate) fn fast_enough(mult: u64) -> Result<(), String> {
    if mult <= MAX_TSC_MULT {
        return Ok(());
    }
    let mhz = (1_000u128 << SHIFT) / u128::from(mult.max(1));
    Err(format!(
        "the TSC counts at {mhz} MHz, below the 1050 MHz the read's arithmetic needs"
    ))
}

/// The widest bracket of an undisturbed sample when the narrowest seen
/// is `best` ns wide.
fn widest_undisturbed(best: u64) -> u64 {
    best.saturating_mul(2).saturating_add(WIDE_SLACK_NS)
}

/// Samples back to back for [`INITIAL_SPIN_NS`] and the least-squares
/// line through the undisturbed ones: its points at the first and last
/// counts, and its rate. A line through ~400 samples has a rate error of
/// well under a part per million, where two samples a millisecond apart
/// are off by up to ten with a TSC that advances in 10 ns steps.
fn short_calibration() -> Option<(Sample, Sample, u64)> {
    let mut all = Vec::with_capacity(1024);
    let end = os::monotonic().saturating_add(INITIAL_SPIN_NS);
    while all.len() < all.capacity() {
        let s = sample();
        all.push(s);
        if s.mono >= end {
            break;
        }
    }
    let best = all.iter().map(|s| s.width).min()?;
    let limit = widest_undisturbed(best);
    let kept: Vec<Sample> = all.into_iter().filter(|s| s.width <= limit).collect();
    let (first, last) = (kept.first()?, kept.last()?);
    if kept.len() < 2 {
        return None;
    }
    // Offsets from the first sample keep the sums exact enough in f64.
    let xy = |s: &Sample| {
        (
            s.ticks.wrapping_sub(first.ticks) as i64 as f64,
            s.mono.wrapping_sub(first.mono) as i64 as f64,
        )
    };
    let n = kept.len() as f64;
    let (mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0);
    for s in &kept {
        let (x, y) = xy(s);
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    let den = n * sxx - sx * sx;
    if den <= 0.0 {
        return None;
    }
    let k = (n * sxy - sx * sy) / den;
    let c = (sy - k * sx) / n;
    let at = |s: &Sample| Sample {
        ticks: s.ticks,
        mono: first
            .mono
            .saturating_add_signed((c + k * xy(s).0).round() as i64),
        width: best,
    };
    let mult = (k * (1u64 << SHIFT) as f64).round();
    if !(mult >= 1.0 && mult < u64::MAX as f64) {
        return None;
    }
    Some((at(first), at(last), mult as u64))
}

/// What a recalibration did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// New parameters, slewed.
    Slewed,
    /// Calibrated from scratch; `why` says what triggered it.
    Reset(&'static str),
    /// The sample's bracket was too wide to calibrate from; nothing
    /// published. The caller retries soon.
    Disturbed,
    /// The caller should switch to the OS clock, for the reason given:
    /// too many resets, or a TSC too slow after one.
    GiveUp(&'static str),
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
    /// Narrowest bracket of any sample, ns: what an undisturbed one is.
    best_width_ns: u64,
    /// Disturbed samples since the last one used.
    disturbed: u32,
    /// Window the current rate was taken from, ns.
    pub window_ns: u64,
}

impl Calibrator {
    /// A first calibration, published as TSC parameters; why not if the
    /// TSC does not advance or is too slow ([`MAX_TSC_MULT`]).
    pub fn start() -> Result<Self, String> {
        let boot_offset = boot_offset();
        let (s0, s1, mult) =
            short_calibration().ok_or("the TSC did not advance during calibration")?;
        fast_enough(mult)?;
        let wall = wall_offset();
        let cal = Self {
            history: VecDeque::from([s0, s1]),
            freq_mult: mult,
            boot_offset,
            resets: VecDeque::new(),
            last_error_ns: 0,
            last_width_ns: s1.width,
            best_width_ns: s0.width.min(s1.width),
            disturbed: 0,
            window_ns: s1.mono.saturating_sub(s0.mono),
        };
        state::publish(|_, _| Snap {
            kind: state::KIND_TSC,
            mult,
            base_ticks: s1.ticks,
            base_ns: s1.mono,
            base_frac: 0,
            wall_offset: wall,
        });
        Ok(cal)
    }

    /// The rate without slew, ns per tick << SHIFT.
    pub fn freq_mult(&self) -> u64 {
        self.freq_mult
    }

    /// `CLOCK_MONOTONIC` at the newest sample, ns (at start-up: the anchor
    /// of the first parameters).
    pub fn last_sample_ns(&self) -> u64 {
        self.history.back().map_or(0, |s| s.mono)
    }

    /// Whether to calibrate from `s`: not if its bracket is too wide,
    /// unless brackets have been that wide [`MAX_DISTURBED`] times in a
    /// row, when its width becomes the reference.
    fn admit(&mut self, s: &Sample) -> bool {
        if s.width <= widest_undisturbed(self.best_width_ns) {
            self.best_width_ns = self.best_width_ns.min(s.width);
        } else if self.disturbed < MAX_DISTURBED {
            self.disturbed += 1;
            return false;
        } else {
            self.best_width_ns = s.width;
        }
        self.disturbed = 0;
        true
    }

    /// Measures the error against the OS clock and publishes slewed
    /// parameters, or starts over when the error or a clock step says so.
    /// `force_step` pretends the kernel's clock stepped (test hook). A
    /// phase error is slewed away over `horizon_ns` (at most
    /// [`PERIOD_NS`]): the time to the next recalibration.
    pub fn recalibrate(&mut self, force_step: bool, horizon_ns: u64) -> Outcome {
        let s = sample();
        self.recalibrate_from(s, state::snapshot(), force_step, horizon_ns)
    }

    /// [`Self::recalibrate`] from a sample and the parameters in force,
    /// taken by the caller.
    fn recalibrate_from(
        &mut self,
        mut s: Sample,
        current: Snap,
        force_step: bool,
        horizon_ns: u64,
    ) -> Outcome {
        let boot = boot_offset();
        let suspended = boot.abs_diff(self.boot_offset) > SUSPEND_NS;
        self.boot_offset = boot;
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
                return Outcome::GiveUp("the TSC needed 3 calibrations from scratch within 60 s");
            }
            let Some((s0, s1, mult)) = short_calibration() else {
                return Outcome::GiveUp("the TSC stopped advancing");
            };
            if fast_enough(mult).is_err() {
                return Outcome::GiveUp("the TSC counts below 1050 MHz after a reset");
            }
            self.history = VecDeque::from([s0, s1]);
            self.freq_mult = mult;
            self.window_ns = s1.mono.saturating_sub(s0.mono);
            self.best_width_ns = s0.width.min(s1.width);
            s = s1;
            err_fp = current.fp_at(s.ticks) as i128 - ((s.mono as i128) << SHIFT);
        } else if !self.admit(&s) {
            self.last_width_ns = s.width;
            return Outcome::Disturbed;
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
                // Not from a window shorter than the start-up one.
                if window > INITIAL_SPIN_NS {
                    if let Some(m) = mult_between(first, &s) {
                        self.freq_mult = m;
                        self.window_ns = window;
                    }
                }
            }
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
            (err_fp / horizon_ns.clamp(1, PERIOD_NS) as i128).clamp(-max, max)
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

    /// A calibrator whose one sample is `now`, brackets 30 ns wide.
    fn calibrator_at(now: Sample) -> Calibrator {
        Calibrator {
            history: VecDeque::from([now]),
            freq_mult: 1 << (SHIFT - 1),
            boot_offset: boot_offset(),
            resets: VecDeque::new(),
            last_error_ns: 0,
            last_width_ns: 30,
            best_width_ns: 30,
            disturbed: 0,
            window_ns: INITIAL_SPIN_NS,
        }
    }

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
    fn a_tsc_below_1050_mhz_is_refused_and_its_rate_said() {
        let mult_at = |mhz: u128| ((1_000u128 << SHIFT) / mhz) as u64;
        assert_eq!(fast_enough(mult_at(1_996)), Ok(()));
        assert_eq!(fast_enough(mult_at(1_051)), Ok(()));
        let err = fast_enough(mult_at(900)).unwrap_err();
        assert!(err.contains("900 MHz"), "{err}");
        assert!(fast_enough(mult_at(1_049)).is_err());
        // Slewed 5 % fast, the largest rate allowed still fits the line.
        let slewed = MAX_TSC_MULT as i128 + ((MAX_TSC_MULT as i128 * MAX_RESET_SLEW) >> SHIFT);
        assert!(slewed <= state::MAX_MULT as i128, "{slewed}");
    }

    #[test]
    fn the_start_up_rate_agrees_with_a_longer_window() {
        let (s0, s1, mult) = short_calibration().expect("the TSC advances");
        assert!(s0.ticks < s1.ticks && s0.mono < s1.mono, "{s0:?} {s1:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let later = sample();
        let long = mult_between(&s0, &later).expect("a rate over 50 ms");
        // Parts per million, loose: a wrong fit is off by orders more.
        let ppm = (mult as f64 / long as f64 - 1.0) * 1e6;
        assert!(
            ppm.abs() < 50.0,
            "start-up rate {ppm:+.2} ppm from a 50 ms one"
        );
    }

    #[test]
    fn a_disturbed_sample_moves_nothing() {
        let now = sample();
        let mut cal = calibrator_at(now);
        let wide = Sample {
            width: 2 * 30 + WIDE_SLACK_NS + 1,
            ..now
        };
        // Parameters that put the sample exactly on time: no reset.
        let on_time = Snap {
            kind: state::KIND_TSC,
            mult: cal.freq_mult,
            base_ticks: now.ticks,
            base_ns: now.mono,
            base_frac: 0,
            wall_offset: 0,
        };
        assert_eq!(
            cal.recalibrate_from(wide, on_time, false, PERIOD_NS),
            Outcome::Disturbed
        );
        assert_eq!(cal.history.len(), 1);
        assert_eq!(cal.freq_mult, 1 << (SHIFT - 1));
        assert_eq!(cal.window_ns, INITIAL_SPIN_NS);
    }

    #[test]
    fn brackets_that_stay_wide_become_the_reference() {
        let now = sample();
        let mut cal = calibrator_at(now);
        let wide = Sample { width: 500, ..now };
        for _ in 0..MAX_DISTURBED {
            assert!(!cal.admit(&wide));
        }
        assert!(cal.admit(&wide), "used after {MAX_DISTURBED} in a row");
        assert_eq!(cal.best_width_ns, 500);
        let narrow = Sample { width: 40, ..now };
        assert!(cal.admit(&narrow));
        assert_eq!(cal.best_width_ns, 40);
        assert!(!cal.admit(&wide), "wide again against the new reference");
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
