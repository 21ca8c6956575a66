// SPDX-License-Identifier: Apache-2.0
//! May we use the TSC? Answered once, from CPUID, the kernel's choice of
//! clocksource, the environment, and a race between the two read paths.

use std::time::Duration;

/// Where the kernel names its clocksource.
const CLOCKSOURCE_PATH: &str = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
/// Reads per timing batch in the speed race.
const RACE_READS: u32 = 2_000;
/// Timing batches per contender; the fastest batch counts (the others
/// were interrupted or shared the CPU).
const RACE_BATCHES: u32 = 7;

/// Faults forced through `TOPDECK_CLOCK_FORCE` (comma-separated) so each
/// safety path can be exercised on a machine where the TSC is good.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Forced {
    /// Pretend CPUID reports no invariant TSC.
    pub no_invariant: bool,
    /// Pretend the kernel's clocksource is not `tsc`.
    pub clocksource: bool,
    /// Pretend clock_gettime won the speed race.
    pub os_faster: bool,
    /// Pretend the CPUs' TSCs are skewed beyond the measurement error.
    pub skew: bool,
    /// Pretend the kernel clock stepped at the first recalibration.
    pub step: bool,
}

impl Forced {
    /// Parses `TOPDECK_CLOCK_FORCE`; unknown words are returned.
    pub fn parse(s: &str) -> (Self, Vec<String>) {
        let mut f = Self::default();
        let mut unknown = Vec::new();
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "no-invariant" => f.no_invariant = true,
                "clocksource" => f.clocksource = true,
                "os-faster" => f.os_faster = true,
                "skew" => f.skew = true,
                "step" => f.step = true,
                other => unknown.push(other.to_owned()),
            }
        }
        (f, unknown)
    }

    /// From the environment.
    pub fn from_env() -> (Self, Vec<String>) {
        Self::parse(&std::env::var("TOPDECK_CLOCK_FORCE").unwrap_or_default())
    }
}

/// What `TOPDECK_CLOCK` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// Use the TSC when it is safe and faster.
    Auto,
    /// Always the OS clock.
    Os,
    /// The TSC whenever it is invariant, skipping the clocksource and
    /// speed checks.
    Tsc,
}

impl Request {
    /// From `TOPDECK_CLOCK`; an unknown value is `Auto` plus a note.
    pub fn from_env() -> (Self, Option<String>) {
        match std::env::var("TOPDECK_CLOCK").as_deref() {
            Err(_) | Ok("") | Ok("auto") => (Self::Auto, None),
            Ok("os") => (Self::Os, None),
            Ok("tsc") => (Self::Tsc, None),
            Ok(other) => (
                Self::Auto,
                Some(format!(
                    "TOPDECK_CLOCK={other:?} ignored: use os, tsc or auto"
                )),
            ),
        }
    }
}

/// The kernel's current clocksource, trimmed; `None` if unreadable.
pub(crate) fn current_clocksource() -> Option<String> {
    std::fs::read_to_string(CLOCKSOURCE_PATH)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// `Ok(why)` if the TSC may be used, `Err(why not)` otherwise.
pub(crate) fn may_use_tsc(req: Request, forced: &Forced) -> Result<String, String> {
    if req == Request::Os {
        return Err("TOPDECK_CLOCK=os".into());
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = forced;
        Err(format!("no TSC source on {}", std::env::consts::ARCH))
    }
    #[cfg(target_arch = "x86_64")]
    {
        if forced.no_invariant {
            return Err("no invariant TSC (forced by TOPDECK_CLOCK_FORCE=no-invariant)".into());
        }
        if !crate::tsc::cpuid_invariant() {
            return Err("no invariant TSC: CPUID 0x80000007 EDX bit 8 is clear".into());
        }
        if req == Request::Tsc {
            return Ok("invariant TSC, TOPDECK_CLOCK=tsc".into());
        }
        if forced.clocksource {
            return Err(
                "kernel clocksource is not tsc (forced by TOPDECK_CLOCK_FORCE=clocksource)".into(),
            );
        }
        match current_clocksource() {
            Some(cs) if cs == "tsc" => {
                Ok("invariant TSC and the kernel's clocksource is tsc".into())
            }
            Some(cs) => Err(format!(
                "kernel clocksource is {cs:?}, not tsc ({CLOCKSOURCE_PATH})"
            )),
            None => Err(format!(
                "cannot read the kernel clocksource from {CLOCKSOURCE_PATH}"
            )),
        }
    }
}

/// Cost per read of two clocks, in ns, from the fastest of several batches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Race {
    /// This crate's TSC path (`now()` as it will run), ns per read.
    pub tsc_ns: f64,
    /// `clock_gettime(CLOCK_MONOTONIC)`, ns per read.
    pub os_ns: f64,
}

/// Times `ours` against `clock_gettime(CLOCK_MONOTONIC)` with the OS clock
/// itself as the stopwatch, fastest batch of each.
pub(crate) fn race(ours: fn() -> u64) -> Race {
    let per_read = |f: fn() -> u64| {
        let mut best = u64::MAX;
        for _ in 0..RACE_BATCHES {
            let a = crate::os::monotonic();
            let mut acc = 0u64;
            for _ in 0..RACE_READS {
                acc = acc.wrapping_add(std::hint::black_box(f()));
            }
            std::hint::black_box(acc);
            let b = crate::os::monotonic();
            best = best.min(b.saturating_sub(a));
        }
        Duration::from_nanos(best).as_secs_f64() * 1e9 / f64::from(RACE_READS)
    };
    // Interleave so that a noisy neighbour hurts both alike.
    let os1 = per_read(crate::os::monotonic);
    let tsc1 = per_read(ours);
    let os2 = per_read(crate::os::monotonic);
    let tsc2 = per_read(ours);
    Race {
        tsc_ns: tsc1.min(tsc2),
        os_ns: os1.min(os2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn force_words_parse_and_unknown_ones_are_reported() {
        let (f, unknown) = Forced::parse("skew, step,bogus,,os-faster");
        assert!(f.skew && f.step && f.os_faster && !f.no_invariant && !f.clocksource);
        assert_eq!(unknown, vec!["bogus".to_owned()]);
    }

    #[test]
    fn os_request_refuses_the_tsc() {
        assert!(may_use_tsc(Request::Os, &Forced::default()).is_err());
    }

    #[test]
    fn forced_faults_refuse_the_tsc_with_their_reason() {
        let f = Forced {
            no_invariant: true,
            ..Forced::default()
        };
        assert!(may_use_tsc(Request::Auto, &f)
            .unwrap_err()
            .contains("invariant"));
        let f = Forced {
            clocksource: true,
            ..Forced::default()
        };
        assert!(may_use_tsc(Request::Auto, &f)
            .unwrap_err()
            .contains("clocksource"));
    }
}
