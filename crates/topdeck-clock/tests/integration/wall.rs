// SPDX-License-Identifier: Apache-2.0
//! `wall()` agrees with CLOCK_REALTIME, and `now()` with CLOCK_MONOTONIC,
//! within 100 µs, bracketed by OS reads.

#[test]
fn wall_is_within_100_us_of_clock_realtime() {
    for _ in 0..10_000 {
        let a = crate::os_ns(libc::CLOCK_REALTIME);
        let w = topdeck_clock::wall();
        let b = crate::os_ns(libc::CLOCK_REALTIME);
        assert!(
            w + 100_000 >= a && w <= b + 100_000,
            "realtime {a}..{b}, wall {w}"
        );
    }
}

#[test]
fn now_is_within_100_us_of_clock_monotonic() {
    for _ in 0..10_000 {
        let a = crate::os_ns(libc::CLOCK_MONOTONIC);
        let n = topdeck_clock::now();
        let b = crate::os_ns(libc::CLOCK_MONOTONIC);
        assert!(
            n + 100_000 >= a && n <= b + 100_000,
            "monotonic {a}..{b}, now {n}"
        );
    }
}

#[test]
fn stored_ticks_convert_through_the_encoded_parameters() {
    let t = topdeck_clock::ticks();
    let p = topdeck_clock::Params::from_bytes(&topdeck_clock::params().to_bytes())
        .unwrap()
        .unwrap();
    let a = crate::os_ns(libc::CLOCK_MONOTONIC);
    let ns = p.ticks_to_ns(t);
    assert!(
        ns <= a + 100_000 && ns + 100_000 >= a,
        "ticks {t} -> {ns}, monotonic {a}"
    );
}
