// SPDX-License-Identifier: Apache-2.0
//! The operating system's clocks through `clock_gettime` (the vDSO on
//! Linux): the fallback source and the reference the TSC is calibrated to.

/// Reads `clock` in nanoseconds, saturating: a negative or failed read is 0.
#[inline(always)]
fn gettime(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock ids used here
    // exist on every Linux this crate supports.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 || ts.tv_sec < 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in ns: does not count suspend, never steps.
#[inline(always)]
pub fn monotonic() -> u64 {
    gettime(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in ns since the Unix epoch: steps when the time is set.
#[inline(always)]
pub fn realtime() -> u64 {
    gettime(libc::CLOCK_REALTIME)
}

/// `CLOCK_BOOTTIME` in ns: `CLOCK_MONOTONIC` plus time spent suspended.
#[inline(always)]
pub fn boottime() -> u64 {
    gettime(libc::CLOCK_BOOTTIME)
}
