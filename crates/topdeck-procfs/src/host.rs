// SPDX-License-Identifier: Apache-2.0
//! The host at a glance, from four small files every user may read: CPU
//! time (`/proc/stat`'s first line), the load average, memory
//! (`/proc/meminfo`) and CPU pressure (`/proc/pressure/cpu`, where the
//! kernel has PSI). A view samples it each refresh; CPU use is the
//! difference of two samples.

use std::fs;

/// One reading of the host.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Host {
    /// CPU time spent busy (not idle, not waiting for I/O), and in all, in
    /// clock ticks, summed over CPUs.
    pub cpu_busy: u64,
    /// See `cpu_busy`.
    pub cpu_total: u64,
    /// CPUs online.
    pub cpus: usize,
    /// Load average over the last minute.
    pub load1: Option<f64>,
    /// Memory, bytes: in all, and available without swapping.
    pub mem_total: Option<u64>,
    /// See `mem_total`.
    pub mem_available: Option<u64>,
    /// Share of the last 10 s some runnable task waited for a CPU, percent.
    pub cpu_pressure: Option<f64>,
}

impl Host {
    /// Reads the host now; what cannot be read is left out.
    pub fn read() -> Self {
        let text = |p: &str| fs::read_to_string(p).unwrap_or_default();
        let mut h = Host::default();
        if let Some((busy, total)) = parse_stat(&text("/proc/stat")) {
            (h.cpu_busy, h.cpu_total) = (busy, total);
        }
        h.cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        h.load1 = text("/proc/loadavg")
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok());
        (h.mem_total, h.mem_available) = parse_meminfo(&text("/proc/meminfo"));
        h.cpu_pressure = parse_pressure(&text("/proc/pressure/cpu"));
        h
    }

    /// Share of the CPUs' time busy since `before`, 0..=1.
    ///
    /// ```
    /// use topdeck_procfs::host::Host;
    /// let a = Host { cpu_busy: 100, cpu_total: 400, ..Host::default() };
    /// let b = Host { cpu_busy: 250, cpu_total: 700, ..Host::default() };
    /// assert_eq!(b.cpu_busy_since(&a), Some(0.5));
    /// ```
    pub fn cpu_busy_since(&self, before: &Host) -> Option<f64> {
        let total = self.cpu_total.checked_sub(before.cpu_total)?;
        let busy = self.cpu_busy.checked_sub(before.cpu_busy)?;
        (total > 0).then(|| (busy as f64 / total as f64).min(1.0))
    }
}

/// `(busy, total)` ticks from `/proc/stat`'s `cpu` line: busy is all but
/// idle and iowait.
///
/// ```
/// let stat = "cpu  10 2 3 80 5 0 0 0 0 0\ncpu0 1 1 1 1 1 0 0 0 0 0\n";
/// assert_eq!(topdeck_procfs::host::parse_stat(stat), Some((15, 100)));
/// ```
pub fn parse_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let total: u64 = f.iter().take(8).sum();
    let idle = f.get(3)? + f.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

/// `(MemTotal, MemAvailable)` in bytes.
///
/// ```
/// let m = "MemTotal:       1000 kB\nMemFree: 1 kB\nMemAvailable:    250 kB\n";
/// assert_eq!(topdeck_procfs::host::parse_meminfo(m), (Some(1_024_000), Some(256_000)));
/// ```
pub fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

/// `some avg10` of a PSI file, percent.
///
/// ```
/// let p = "some avg10=1.30 avg60=4.91 avg300=8.39 total=4025803835\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
/// assert_eq!(topdeck_procfs::host::parse_pressure(p), Some(1.3));
/// ```
pub fn parse_pressure(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix("avg10="))?
        .parse()
        .ok()
}
