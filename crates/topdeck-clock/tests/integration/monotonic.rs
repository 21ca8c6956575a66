// SPDX-License-Identifier: Apache-2.0
//! Monotonic for one thread that is forced across every CPU: millions of
//! reads, a migration every few thousand. `now()` clamps per thread, so
//! the real check is that the clamp was never needed on the global TSC
//! source (monotone by construction), plus the raw ticks converted.

use topdeck_clock::SourceKind;

#[test]
fn monotonic_across_forced_migrations() {
    let cpus = crate::allowed_cpus();
    let clamps_before = topdeck_clock::stats().clamps;
    let mut prev = topdeck_clock::now();
    let mut prev_raw = topdeck_clock::ticks_to_ns(topdeck_clock::ticks());
    let (mut backwards, mut raw_backwards, mut reads) = (0u64, 0u64, 0u64);
    for round in 0..400 {
        crate::pin(cpus[round % cpus.len()]);
        for _ in 0..5_000 {
            let v = topdeck_clock::now();
            backwards += u64::from(v < prev);
            prev = v;
            let r = topdeck_clock::ticks_to_ns(topdeck_clock::ticks());
            raw_backwards += u64::from(r < prev_raw);
            prev_raw = r;
            reads += 2;
        }
    }
    let clamps = topdeck_clock::stats().clamps - clamps_before;
    println!("{reads} reads across {} CPUs, {clamps} clamps", cpus.len());
    assert_eq!(backwards, 0);
    if topdeck_clock::source().kind == SourceKind::Tsc {
        assert_eq!(
            clamps, 0,
            "the per-thread clamp was needed: the clock is not monotone by construction"
        );
        assert_eq!(raw_backwards, 0, "converted raw ticks went backwards");
    }
}
