// SPDX-License-Identifier: Apache-2.0
//! What a process uses, as `top` shows it: its command, CPU time and
//! threads (`/proc/<pid>/stat`), and the CPUs it may run on (its affinity,
//! which a cpuset or `taskset` narrows). A view samples it each refresh;
//! CPU use is the difference of two samples of the same process (pid and
//! start time).

use std::time::Duration;

/// One reading of a process's `stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// Command name (`comm`, at most 15 bytes, as the kernel keeps it).
    pub comm: String,
    /// User and system CPU time of all its threads, clock ticks.
    pub cpu_ticks: u64,
    /// Threads it has.
    pub threads: u32,
    /// When it started, clock ticks since boot: with the pid, which process it is.
    pub start_ticks: u64,
}

impl Usage {
    /// CPUs it kept busy between `before` (the same process) and this
    /// reading, `elapsed` apart: 1.0 is one CPU all the time. `None` for
    /// another process (the pid was reused) or no time elapsed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use topdeck_procfs::usage::parse_stat;
    /// let a = parse_stat("7 (spin) R 1 7 7 0 -1 0 0 0 0 0 100 0 0 0 20 0 1 0 500 0 0").unwrap();
    /// let b = parse_stat("7 (spin) R 1 7 7 0 -1 0 0 0 0 0 150 50 0 0 20 0 1 0 500 0 0").unwrap();
    /// let hz = rustix::param::clock_ticks_per_second() as f64;
    /// let busy = b.cpus_since(&a, Duration::from_secs_f64(100.0 / hz)).unwrap();
    /// assert!((busy - 1.0).abs() < 1e-9);
    /// ```
    pub fn cpus_since(&self, before: &Usage, elapsed: Duration) -> Option<f64> {
        if before.start_ticks != self.start_ticks || elapsed.is_zero() {
            return None;
        }
        let ticks = self.cpu_ticks.saturating_sub(before.cpu_ticks) as f64;
        Some(ticks / rustix::param::clock_ticks_per_second() as f64 / elapsed.as_secs_f64())
    }
}

/// The [`Usage`] of `pid`; `None` when it is gone or unreadable.
///
/// ```
/// let me = topdeck_procfs::usage::usage(std::process::id()).unwrap();
/// assert!(me.threads >= 1);
/// ```
pub fn usage(pid: u32) -> Option<Usage> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses a `/proc/<pid>/stat` text (proc(5)): the name between the first
/// `(` and the last `)` (it may hold either), then fields counted from
/// field 3: utime 14, stime 15, num_threads 20, starttime 22.
///
/// ```
/// let stat = "42 (java (main) x) S 1 42 42 0 -1 0 1 2 3 4 5 6 7 8 20 0 9 0 123456 7 8";
/// let u = topdeck_procfs::usage::parse_stat(stat).unwrap();
/// assert_eq!((u.comm.as_str(), u.cpu_ticks, u.threads, u.start_ticks), ("java (main) x", 11, 9, 123_456));
/// ```
pub fn parse_stat(text: &str) -> Option<Usage> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let num = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some(Usage {
        comm,
        cpu_ticks: num(14)?.saturating_add(num(15)?),
        threads: u32::try_from(num(20)?).ok()?,
        start_ticks: num(22)?,
    })
}

/// The CPUs `pid` may run on, in order; `None` when it is gone.
///
/// ```
/// let mine = topdeck_procfs::usage::cpus_allowed(std::process::id()).unwrap();
/// assert!(!mine.is_empty());
/// ```
pub fn cpus_allowed(pid: u32) -> Option<Vec<usize>> {
    use rustix::thread::{sched_getaffinity, CpuSet, Pid};
    let pid = Pid::from_raw(i32::try_from(pid).ok()?)?;
    let set = sched_getaffinity(Some(pid)).ok()?;
    Some((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// A CPU list as the kernel writes one (`0-3,8,10-11`), from sorted CPUs.
///
/// ```
/// use topdeck_procfs::usage::cpu_list;
/// assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
/// assert_eq!(cpu_list(&[5]), "5");
/// assert_eq!(cpu_list(&[]), "");
/// ```
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            end += 1;
            i += 1;
        }
        out.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_garbled_stat_lines_are_none_not_a_panic() {
        for bad in [
            "",
            "1 (x",
            "1 x) R",
            "1 (x) R 1 2",
            "1 (x) R a b c d e f g h i j k l m n o p q r s t",
        ] {
            assert_eq!(parse_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_reused_pid_has_no_rate() {
        let a = parse_stat("7 (a) R 1 7 7 0 -1 0 0 0 0 0 100 0 0 0 20 0 1 0 500 0 0").unwrap();
        let b = parse_stat("7 (b) R 1 7 7 0 -1 0 0 0 0 0 1 0 0 0 20 0 1 0 900 0 0").unwrap();
        assert_eq!(b.cpus_since(&a, Duration::from_secs(1)), None);
        assert_eq!(a.cpus_since(&a, Duration::ZERO), None);
    }
}
