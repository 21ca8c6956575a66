// SPDX-License-Identifier: Apache-2.0
//! TSC skew between CPUs, measured once at start-up: a reference thread
//! and a thread pinned to each other CPU play ping-pong through one cache
//! line. The remote count `b` was read after the reference's `a1` and
//! before its `a2`, so the remote CPU's offset lies in `[b - a2, b - a1]`;
//! intersecting these intervals over many rounds bounds the offset. The
//! skew is real only when the interval excludes zero.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[cfg(target_arch = "x86_64")]
use crate::os;
#[cfg(target_arch = "x86_64")]
use crate::tsc::rdtsc_ordered;

/// Round trips per CPU; the bounds tighten with the fastest ones.
const ROUNDS: u64 = 2_000;
/// Time allowed per CPU, ns: a vCPU the hypervisor does not run gives up
/// here with the rounds it managed.
const DEADLINE_NS: u64 = 50_000_000;

/// The offset of one CPU's TSC from the reference CPU's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSkew {
    /// CPU number.
    pub cpu: usize,
    /// Best estimate of this CPU's TSC minus the reference's, ticks.
    pub offset_ticks: i64,
    /// Half the width of the interval the offset is known to lie in, ticks.
    pub error_ticks: u64,
    /// Round trips completed.
    pub rounds: u64,
}

impl CpuSkew {
    /// Whether the interval `offset ± error` excludes zero.
    pub fn significant(&self) -> bool {
        self.offset_ticks.unsigned_abs() > self.error_ticks
    }
}

/// Skew of every CPU this process may run on, against the first of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkewReport {
    /// The CPU the others are compared with.
    pub reference_cpu: usize,
    /// One entry per other CPU that could be measured.
    pub cpus: Vec<CpuSkew>,
    /// CPUs that could not be measured (pinning failed or no round trip).
    pub unmeasured: Vec<usize>,
}

impl SkewReport {
    /// Whether any CPU's skew exceeds its measurement error.
    pub fn significant(&self) -> bool {
        self.cpus.iter().any(CpuSkew::significant)
    }

    /// Largest `|offset|`, ticks.
    pub fn max_offset_ticks(&self) -> u64 {
        self.cpus
            .iter()
            .map(|c| c.offset_ticks.unsigned_abs())
            .max()
            .unwrap_or(0)
    }

    /// Largest measurement error, ticks.
    pub fn max_error_ticks(&self) -> u64 {
        self.cpus.iter().map(|c| c.error_ticks).max().unwrap_or(0)
    }
}

/// CPUs in this process's affinity mask.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 = us.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Pins the calling thread to `cpu`; false if the kernel refuses.
pub(crate) fn pin_to(cpu: usize) -> bool {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: `cpu` is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; 0 = this thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0 }
}

#[cfg(target_arch = "x86_64")]
/// Spins until `flag` holds `want`; false at `deadline` or on `stop`.
fn wait_for(flag: &AtomicU64, want: u64, deadline: u64, stop: &AtomicBool) -> bool {
    let mut spins = 0u32;
    while flag.load(Ordering::Acquire) != want {
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins % 1024 == 0 && (os::monotonic() > deadline || stop.load(Ordering::Relaxed)) {
            return false;
        }
    }
    true
}

#[cfg(target_arch = "x86_64")]
/// Measures one CPU against `reference`; `None` if either pin fails or
/// no round trip completes.
fn measure_pair(reference: usize, cpu: usize) -> Option<CpuSkew> {
    let flag = AtomicU64::new(0);
    let remote_ticks = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let deadline = os::monotonic().saturating_add(DEADLINE_NS);
    std::thread::scope(|s| {
        let remote = s.spawn(|| {
            if !pin_to(cpu) {
                stop.store(true, Ordering::Relaxed);
                return;
            }
            for r in 0..ROUNDS {
                if !wait_for(&flag, 2 * r + 1, deadline, &stop) {
                    return;
                }
                remote_ticks.store(rdtsc_ordered(), Ordering::Relaxed);
                flag.store(2 * r + 2, Ordering::Release);
            }
        });
        let reference_side = s.spawn(|| {
            let mut lo = i64::MIN;
            let mut hi = i64::MAX;
            let mut rounds = 0;
            if !pin_to(reference) {
                stop.store(true, Ordering::Relaxed);
                return None;
            }
            for r in 0..ROUNDS {
                let a1 = rdtsc_ordered();
                flag.store(2 * r + 1, Ordering::Release);
                if !wait_for(&flag, 2 * r + 2, deadline, &stop) {
                    break;
                }
                let a2 = rdtsc_ordered();
                let b = remote_ticks.load(Ordering::Relaxed);
                lo = lo.max(b.wrapping_sub(a2) as i64);
                hi = hi.min(b.wrapping_sub(a1) as i64);
                rounds += 1;
            }
            stop.store(true, Ordering::Relaxed);
            (rounds > 0).then(|| {
                // lo > hi would mean time ran backwards between the CPUs;
                // the midpoint is then still the best guess, error 0.
                let mid = (lo as i128 + hi as i128) / 2;
                let half = (hi as i128 - lo as i128).max(0) / 2;
                CpuSkew {
                    cpu,
                    offset_ticks: mid as i64,
                    error_ticks: half as u64,
                    rounds,
                }
            })
        });
        let result = reference_side.join().ok().flatten();
        let _ = remote.join();
        result
    })
}

#[cfg(target_arch = "x86_64")]
/// Measures every allowed CPU against the first one.
pub(crate) fn measure() -> SkewReport {
    let cpus = allowed_cpus();
    let reference = cpus.first().copied().unwrap_or(0);
    let mut report = SkewReport {
        reference_cpu: reference,
        cpus: Vec::new(),
        unmeasured: Vec::new(),
    };
    for &cpu in cpus.iter().skip(1) {
        match measure_pair(reference, cpu) {
            Some(c) => report.cpus.push(c),
            None => report.unmeasured.push(cpu),
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn significance_is_an_interval_excluding_zero() {
        let c = |offset_ticks, error_ticks| CpuSkew {
            cpu: 1,
            offset_ticks,
            error_ticks,
            rounds: 1,
        };
        assert!(!c(10, 40).significant());
        assert!(!c(-40, 40).significant());
        assert!(c(-41, 40).significant());
        assert!(c(500, 40).significant());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_allowed_cpu_is_measured_or_listed() {
        let report = measure();
        let n = allowed_cpus().len();
        assert_eq!(report.cpus.len() + report.unmeasured.len() + 1, n.max(1));
        for c in &report.cpus {
            assert!(c.rounds > 0);
        }
    }
}
