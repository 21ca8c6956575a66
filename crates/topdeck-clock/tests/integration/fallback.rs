// SPDX-License-Identifier: Apache-2.0
//! Each safety path engages when forced, and says why.

use std::collections::HashMap;

use crate::child;

/// Whether this machine's clock picks the TSC unforced; if not, the tests
/// that expect the TSC say so and stop.
fn tsc_by_default() -> Option<HashMap<String, String>> {
    let r = child::run("report", &[]);
    if r["kind"] == "os" {
        println!(
            "skipped: this machine does not use the TSC by default ({})",
            r["reason"]
        );
        return None;
    }
    Some(r)
}

fn assert_os_fallback(r: &HashMap<String, String>, because: &str) {
    assert_eq!(r["kind"], "os", "{r:?}");
    assert_eq!(r["params_source"], "os", "{r:?}");
    assert!(
        r["reason"].contains(because),
        "reason should mention {because:?}: {r:?}"
    );
    assert_eq!(r["fallbacks"], "1", "{r:?}");
    assert_eq!(r["backwards"], "0", "{r:?}");
}

#[test]
fn the_tsc_is_used_by_default_here_with_its_reason() {
    let Some(r) = tsc_by_default() else { return };
    assert!(r["kind"].starts_with("tsc"), "{r:?}");
    assert!(r["reason"].contains("clocksource is tsc"), "{r:?}");
    assert_eq!(r["fallbacks"], "0", "{r:?}");
}

#[test]
fn no_invariant_tsc_falls_back_to_the_os_clock() {
    let r = child::run("report", &[("TOPDECK_CLOCK_FORCE", "no-invariant")]);
    assert_os_fallback(&r, "no invariant TSC");
}

#[test]
fn a_clocksource_other_than_tsc_falls_back_to_the_os_clock() {
    let r = child::run("report", &[("TOPDECK_CLOCK_FORCE", "clocksource")]);
    assert_os_fallback(&r, "clocksource is not tsc");
}

#[test]
fn an_os_clock_as_fast_as_the_tsc_wins() {
    if tsc_by_default().is_none() {
        return;
    }
    let r = child::run("report", &[("TOPDECK_CLOCK_FORCE", "os-faster")]);
    assert_os_fallback(&r, "counts as faster");
}

#[test]
fn real_skew_switches_to_per_cpu_offsets() {
    if tsc_by_default().is_none() {
        return;
    }
    // TOPDECK_CLOCK=tsc: RDTSCP may lose the speed race here, which would
    // (rightly) end in the OS clock and hide the per-CPU path under test.
    let r = child::run(
        "report",
        &[("TOPDECK_CLOCK_FORCE", "skew"), ("TOPDECK_CLOCK", "tsc")],
    );
    assert_eq!(r["kind"], "tsc-per-cpu", "{r:?}");
    assert_eq!(r["params_source"], "tsc-per-cpu", "{r:?}");
    assert!(r["reason"].contains("per-CPU offsets"), "{r:?}");
    assert_eq!(r["backwards"], "0", "{r:?}");
}

#[test]
fn a_clock_step_recalibrates_from_scratch() {
    if tsc_by_default().is_none() {
        return;
    }
    // TOPDECK_CLOCK=tsc: on a loaded machine the start-up speed race may
    // (rightly) pick the OS clock, which has nothing to recalibrate.
    let r = child::run(
        "recalibrate",
        &[("TOPDECK_CLOCK_FORCE", "step"), ("TOPDECK_CLOCK", "tsc")],
    );
    assert!(r["kind"].starts_with("tsc"), "{r:?}");
    assert_eq!(r["resets"], "1", "{r:?}");
    assert_eq!(r["backwards"], "0", "{r:?}");
    let r = child::run("recalibrate", &[("TOPDECK_CLOCK", "tsc")]);
    assert_eq!(r["resets"], "0", "without the hook, no reset: {r:?}");
}

#[test]
fn topdeck_clock_os_is_obeyed_and_is_no_fallback() {
    let r = child::run("report", &[("TOPDECK_CLOCK", "os")]);
    assert_eq!(r["kind"], "os", "{r:?}");
    assert!(r["reason"].contains("TOPDECK_CLOCK=os"), "{r:?}");
    assert_eq!(r["fallbacks"], "0", "{r:?}");
}

#[test]
fn topdeck_clock_tsc_overrides_the_clocksource_check() {
    if tsc_by_default().is_none() {
        return;
    }
    let r = child::run(
        "report",
        &[
            ("TOPDECK_CLOCK", "tsc"),
            ("TOPDECK_CLOCK_FORCE", "clocksource"),
        ],
    );
    assert!(r["kind"].starts_with("tsc"), "{r:?}");
    assert!(r["reason"].contains("TOPDECK_CLOCK=tsc"), "{r:?}");
}

#[test]
fn wall_is_near_realtime_on_every_source() {
    for env in [
        &[][..],
        &[("TOPDECK_CLOCK", "os")][..],
        &[("TOPDECK_CLOCK_FORCE", "skew")][..],
    ] {
        let r = child::run("report", env);
        let d: i64 = r["wall_minus_realtime"].parse().unwrap();
        assert!(
            d.abs() < 100_000,
            "wall() - CLOCK_REALTIME = {d} ns with {env:?}: {r:?}"
        );
    }
}
