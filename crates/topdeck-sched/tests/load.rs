// SPDX-License-Identifier: Apache-2.0
//! The probe loads, attaches in both flavours, and counts waits on this
//! host's real scheduler (root only).

use std::time::Duration;

use topdeck_procfs::testing::root_or_skip;
use topdeck_sched::{kernel_keeps_sched_info, Clock, Flavour, Hierarchy, Probe};

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
    if !root_or_skip("loading BPF programs needs CAP_BPF and CAP_PERFMON") {
        return;
    }
    let h = Hierarchy::detect().unwrap();
    let probe = Probe::load_with(&h, Some(flavour), clock).unwrap();
    assert_eq!(probe.flavour(), flavour);
    let sched_info =
        flavour == Flavour::TpBtf && clock == Clock::SchedInfo && kernel_keeps_sched_info();
    assert_eq!(probe.sched_info(), sched_info);
    // With sched_info the kernel stamps wakeups: only the switch program.
    let progs = probe.program_stats().unwrap().len();
    assert_eq!(progs, if sched_info { 1 } else { 3 });
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
fn tp_btf_with_sched_info_loads_and_counts() {
    // Linux 6.18 here keeps sched_info; the fallback is tested below.
    loads_and_counts(Flavour::TpBtf, Clock::SchedInfo);
}

#[test]
fn raw_tp_asked_for_sched_info_falls_back_and_counts() {
    loads_and_counts(Flavour::RawTp, Clock::SchedInfo);
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

/// Two threads spinning on one CPU: at any moment one of them is queued
/// behind the other, a wait in progress that the task iterator lists.
fn lists_waits_in_progress(clock: Clock) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    if !root_or_skip("loading BPF programs needs CAP_BPF and CAP_PERFMON") {
        return;
    }
    let h = Hierarchy::detect().unwrap();
    let probe = Probe::load_with(&h, Some(Flavour::TpBtf), clock).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let tids = Arc::new(Mutex::new(Vec::new()));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let (stop, tids) = (stop.clone(), tids.clone());
            std::thread::spawn(move || {
                // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it;
                // gettid has no preconditions.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(0, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                    tids.lock().unwrap().push(libc::gettid() as u32);
                }
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let mut seen = None;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(20));
        let ours = tids.lock().unwrap().clone();
        let waiting = probe.waiting().unwrap();
        if let Some(w) = waiting.iter().find(|w| ours.contains(&w.pid)) {
            seen = Some(*w);
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in spinners {
        t.join().unwrap();
    }
    let w = seen.expect("a spinner queued behind the other is listed as waiting");
    eprintln!("waiting: {w:?}, {} ns so far", w.elapsed_ns());
    assert!(w.now_ns >= w.since_ns, "{w:?}");
    assert_ne!(w.cgroup, 0, "the victim's cgroup is known: {w:?}");
}

#[test]
fn tp_btf_with_sched_info_lists_waits_in_progress() {
    lists_waits_in_progress(Clock::SchedInfo);
}

#[test]
fn tp_btf_lists_waits_in_progress() {
    lists_waits_in_progress(Clock::Ktime);
}

#[test]
fn tp_btf_with_the_run_queue_clock_lists_waits_in_progress() {
    lists_waits_in_progress(Clock::RunQueue);
}
