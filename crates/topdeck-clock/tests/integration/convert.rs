// SPDX-License-Identifier: Apache-2.0
//! The two conversions of a tick difference, integer ns and f64 seconds,
//! agree to the ns at every magnitude a timing can have, and an interval of
//! ticks bracketed by CLOCK_MONOTONIC reads converts to its length.

#[test]
fn ns_and_seconds_of_a_tick_difference_agree() {
    for delta in [
        0u64,
        1,
        37,
        1_000,
        123_456_789,
        3_000_000_000,
        1 << 40,
        1 << 52,
    ] {
        let ns = topdeck_clock::ticks_delta_to_ns(delta) as f64;
        let secs = topdeck_clock::ticks_delta_to_secs(delta);
        assert!(
            (secs * 1e9 - ns).abs() <= 1.0 + ns * 1e-12,
            "{delta} ticks: {ns} ns vs {secs} s"
        );
    }
}

#[test]
fn a_measured_interval_converts_to_its_length() {
    let mono = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid timespec pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    let (m0, t0) = (mono(), topdeck_clock::ticks());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (t1, m1) = (topdeck_clock::ticks(), mono());
    let secs = topdeck_clock::ticks_delta_to_secs(t1 - t0);
    // The ticks are read inside the clock_gettime bracket.
    assert!(
        secs > 0.199 && secs <= (m1 - m0) * 1.001,
        "{secs} s of ticks in a {} s bracket",
        m1 - m0
    );
}
