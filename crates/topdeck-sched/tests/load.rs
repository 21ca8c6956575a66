// SPDX-License-Identifier: Apache-2.0
//! The probe loads, attaches in both flavours, and counts waits on this
//! host's real scheduler (root only).

use std::time::Duration;

use topdeck_sched::{Clock, Flavour, Hierarchy, Probe};

fn skip_unless_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root because loading BPF programs needs CAP_BPF and CAP_PERFMON");
        return true;
    }
    false
}

fn busy_wakeups() {
    // Threads that sleep and wake make wakeups and switches on every CPU.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..200 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

fn loads_and_counts(flavour: Flavour, clock: Clock) {
    if skip_unless_root() {
        return;
    }
    let h = Hierarchy::detect().unwrap();
    let probe = Probe::load_with(&h, Some(flavour), clock).unwrap();
    assert_eq!(probe.flavour(), flavour);
    busy_wakeups();
    let totals = probe.read().unwrap();
    let waits: u64 = totals.cgroups.values().map(|c| c.count).sum();
    assert!(waits >= 800, "only {waits} waits counted: {totals:?}");
    for c in totals.cgroups.values() {
        let in_buckets: u64 = c.buckets.iter().sum::<u64>() + c.zero;
        assert_eq!(in_buckets, c.count, "buckets and count disagree");
    }
    let charged: u64 = totals.pairs.values().map(|p| p.count).sum();
    assert_eq!(charged, waits, "every wait is charged to a culprit");
    assert_eq!(totals.drops[..3], [0, 0, 0], "no map was full");
}

#[test]
fn tp_btf_loads_and_counts() {
    loads_and_counts(Flavour::TpBtf, Clock::Ktime);
}

#[test]
fn tp_btf_with_the_run_queue_clock_loads_and_counts() {
    loads_and_counts(Flavour::TpBtf, Clock::RunQueue);
}

#[test]
fn raw_tp_loads_and_counts() {
    loads_and_counts(Flavour::RawTp, Clock::Ktime);
}
