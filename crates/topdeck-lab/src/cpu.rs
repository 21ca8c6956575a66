// SPDX-License-Identifier: Apache-2.0
//! CPU accounting and placement: rusage of this process, its threads and
//! its reaped children; user/system time of any process from
//! `/proc/<pid>/stat`; voluntary context switches (wake-ups after sleeping)
//! summed over `/proc/<pid>/task/*/status`; and `sched_setaffinity` pinning.
//! Sources of truth: proc(5), getrusage(2), sched_setaffinity(2).

use std::fs;

use serde::{Deserialize, Serialize};

use crate::{Error, ErrorKind, Result};

/// User and system CPU time, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuTime {
    /// User time, s.
    pub user: f64,
    /// System time, s.
    pub sys: f64,
}

impl CpuTime {
    /// User plus system.
    pub fn total(&self) -> f64 {
        self.user + self.sys
    }

    /// `self - earlier`, never negative.
    pub fn since(&self, earlier: &CpuTime) -> CpuTime {
        CpuTime {
            user: (self.user - earlier.user).max(0.0),
            sys: (self.sys - earlier.sys).max(0.0),
        }
    }

    /// From a `struct rusage`.
    pub fn from_rusage(r: &libc::rusage) -> Self {
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Self {
            user: tv(r.ru_utime),
            sys: tv(r.ru_stime),
        }
    }
}

/// getrusage(2) for `who` (`RUSAGE_SELF`, `RUSAGE_THREAD`, `RUSAGE_CHILDREN`).
pub fn rusage(who: libc::c_int) -> Result<libc::rusage> {
    // SAFETY: rusage is plain data; all-zero is a valid value to be overwritten.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid, writable rusage for the call's duration.
    if unsafe { libc::getrusage(who, &mut r) } != 0 {
        return Err(Error::last_os("getrusage"));
    }
    Ok(r)
}

/// CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID): the
/// clock the observers' per-directory budgets spend, so the lab measures
/// in the same terms.
pub use topdeck_procfs::budget::thread_cpu;

/// Clock ticks per second for `/proc/<pid>/stat` times.
fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// User and system time of process `pid`, all threads, from `/proc/<pid>/stat`
/// (fields 14 and 15, in clock ticks: 10 ms resolution).
pub fn proc_cpu(pid: u32) -> Result<CpuTime> {
    let path = format!("/proc/{pid}/stat");
    let s = fs::read_to_string(&path).map_err(|e| Error::io(format!("read {path}"), e))?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = s
        .rfind(')')
        .map(|i| &s[i + 1..])
        .ok_or_else(|| Error::new(ErrorKind::Io, format!("{path}: no ')' in {s:?}")))?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')' field 3 (state) is index 0, so field n is index n - 3.
    let num = |n: usize| -> Result<f64> {
        f.get(n - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| Error::new(ErrorKind::Io, format!("{path}: field {n} missing")))
    };
    let hz = clock_ticks();
    Ok(CpuTime {
        user: num(14)? / hz,
        sys: num(15)? / hz,
    })
}

/// Non-idle CPU time of the whole host since boot, all CPUs, in seconds
/// (`/proc/stat` line `cpu`: user, nice, system, irq, softirq, steal).
/// Steal counts as busy: on a VM it is time another guest had our CPU.
pub fn host_busy() -> Result<f64> {
    let s = fs::read_to_string("/proc/stat").map_err(|e| Error::io("read /proc/stat", e))?;
    let line = s
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| Error::new(ErrorKind::Io, "/proc/stat has no `cpu` line"))?;
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    let get = |i: usize| f.get(i).copied().unwrap_or(0.0);
    // Fields: user nice system idle iowait irq softirq steal guest guest_nice.
    Ok((get(0) + get(1) + get(2) + get(5) + get(6) + get(7)) / clock_ticks())
}

/// Context switches of process `pid` summed over its threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switches {
    /// Voluntary: the thread blocked or slept and was woken again.
    pub voluntary: u64,
    /// Involuntary: the thread was preempted.
    pub involuntary: u64,
}

/// Voluntary and involuntary context switches of every thread of `pid`
/// (`/proc/<pid>/status` alone covers the main thread only).
pub fn switches(pid: u32) -> Result<Switches> {
    let dir = format!("/proc/{pid}/task");
    let mut total = Switches::default();
    let tasks = fs::read_dir(&dir).map_err(|e| Error::io(format!("list {dir}"), e))?;
    for t in tasks.flatten() {
        // A thread that exits between listing and reading is simply skipped.
        let Ok(status) = fs::read_to_string(t.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            let (key, value) = line.split_once(':').unwrap_or((line, ""));
            let v = value.trim().parse::<u64>().unwrap_or(0);
            match key {
                "voluntary_ctxt_switches" => total.voluntary += v,
                "nonvoluntary_ctxt_switches" => total.involuntary += v,
                _ => {}
            }
        }
    }
    Ok(total)
}

/// Read and write system calls of `pid` (`syscr`, `syscw` in `/proc/<pid>/io`):
/// only the read- and write-like calls, not sleeps or futexes.
pub fn io_syscalls(pid: u32) -> Result<(u64, u64)> {
    let path = format!("/proc/{pid}/io");
    let s = fs::read_to_string(&path).map_err(|e| Error::io(format!("read {path}"), e))?;
    let get = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok((get("syscr:"), get("syscw:")))
}

/// CPUs this process may run on (its affinity mask), in order.
pub fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid and writable and its size is passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(Error::last_os("sched_getaffinity"));
    }
    // SAFETY: CPU_ISSET reads the set we own; i is below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect())
}

/// Restricts the calling thread to `cpus` (threads and processes it starts
/// afterwards inherit the mask).
pub fn pin_thread(cpus: &[usize]) -> Result<()> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(Error::new(
                ErrorKind::BadInput,
                format!("CPU {c} is beyond what sched_setaffinity can name"),
            ));
        }
        // SAFETY: `c` is below CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is valid for reads and its size is passed; 0 is this thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(Error::last_os(format!(
            "sched_setaffinity to CPUs {cpus:?}"
        )));
    }
    Ok(())
}

/// Where an experiment places the measured thread and its observers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pin {
    /// Leave placement to the scheduler.
    Free,
    /// Victim (or writer) and observers on the same CPU.
    SameCpu,
    /// Victim (or writer) on one CPU, observers on another.
    OtherCpu,
}

impl Pin {
    /// The CPUs for the measured thread and for the observers, or `None` to
    /// leave them free. Needs two allowed CPUs for `OtherCpu`.
    pub fn cpus(self) -> Result<Option<(Vec<usize>, Vec<usize>)>> {
        let cpus = allowed_cpus()?;
        match self {
            Pin::Free => Ok(None),
            Pin::SameCpu => {
                let c = *cpus.first().ok_or_else(|| {
                    Error::new(ErrorKind::BadInput, "this process may run on no CPU")
                })?;
                Ok(Some((vec![c], vec![c])))
            }
            Pin::OtherCpu => match cpus.as_slice() {
                [a, b, ..] => Ok(Some((vec![*a], vec![*b]))),
                _ => Err(Error::new(
                    ErrorKind::BadInput,
                    "--other-cpu needs at least two CPUs in this process's affinity mask",
                )),
            },
        }
    }

    /// Short name as used on the command line and in tables.
    pub fn name(self) -> &'static str {
        match self {
            Pin::Free => "free",
            Pin::SameCpu => "same-cpu",
            Pin::OtherCpu => "other-cpu",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_stat_parses_and_grows_with_work() {
        let pid = std::process::id();
        let before = proc_cpu(pid).unwrap();
        let t = crate::timing::now_ns();
        let mut x = 0u64;
        while crate::timing::now_ns() - t < 50_000_000 {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        let after = proc_cpu(pid).unwrap();
        assert!(after.total() > before.total(), "{before:?} {after:?} {x}");
    }

    #[test]
    fn the_host_is_busy_at_least_while_we_spin() {
        let before = host_busy().unwrap();
        let t = crate::timing::now_ns();
        while crate::timing::now_ns() - t < 50_000_000 {
            std::hint::spin_loop();
        }
        assert!(host_busy().unwrap() > before);
    }

    #[test]
    fn sleeping_counts_as_voluntary_switches() {
        // A child of its own: in this multi-threaded test process, other
        // tests' threads come and go, and a thread that exits takes its
        // switches out of the process's sum.
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "for i in 1 2 3 4 5 6 7 8; do sleep 0.01; done; sleep 5",
            ])
            .spawn()
            .unwrap();
        let mut after = Switches::default();
        for _ in 0..100 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            after = switches(child.id()).unwrap();
            if after.voluntary >= 8 {
                break;
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(after.voluntary >= 8, "{after:?}");
    }

    #[test]
    fn pinning_shows_in_the_mask_of_a_new_thread() {
        let first = allowed_cpus().unwrap()[0];
        let got = std::thread::spawn(move || {
            pin_thread(&[first]).unwrap();
            std::thread::spawn(allowed_cpus).join().unwrap().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(got, vec![first]);
    }

    #[test]
    fn a_missing_process_is_an_io_error() {
        let e = proc_cpu(u32::MAX).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Io);
        assert!(e.to_string().contains("/proc/4294967295/stat"), "{e}");
    }
}
