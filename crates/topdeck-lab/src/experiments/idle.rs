// SPDX-License-Identifier: Apache-2.0
//! `topdeck-lab idle`: what instrumentation costs a process that does nothing.
//! Two helper children sit idle side by side: one instrumented with topdeck
//! (a registry, a counter and a histogram updated once, the clock read
//! once), one running seed 001's 1 ms time-cache ticker. Over the window we
//! count their wake-ups (voluntary context switches, all threads), CPU time
//! and system calls, then work out the read rate at which such a ticker
//! would start to pay: its CPU cost per second over what one clock read
//! costs more than one load from the cache.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::child::{Helper, Running};
use crate::cpu::{self, CpuTime, Switches};
use crate::table::{self, Doc, Table};
use crate::timing::now_ns;
use crate::{Error, ErrorKind, Result};

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The measurement window.
    pub duration: Duration,
    /// Count system calls with `strace -c -f` in a second window (if installed).
    pub strace: bool,
    /// The binary the idle children run.
    pub helper: Helper,
    /// More idle children to measure, as (name, program): each must print a
    /// line starting with `ready` and then wait for end of input (e.g. the
    /// Go ticker in `crates/topdeck-lab/go/ticker.go`).
    pub also: Vec<(String, std::path::PathBuf)>,
}

impl Config {
    /// 30 s windows, with strace.
    pub fn new(helper: Helper) -> Self {
        Self {
            duration: Duration::from_secs(30),
            strace: true,
            helper,
            also: Vec::new(),
        }
    }

    /// 2 s windows.
    pub fn quick(mut self) -> Self {
        self.duration = Duration::from_secs(2);
        self
    }
}

/// One idle child over the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    /// `topdeck` or `ticker`.
    pub name: String,
    /// Wake-ups and preemptions over the window, all threads.
    pub switches: Switches,
    /// CPU time over the window (10 ms resolution).
    pub cpu: CpuTime,
    /// read/write-like system calls over the window (`/proc/<pid>/io`).
    pub io_syscalls: u64,
    /// All system calls per second under strace, when counted.
    pub strace_syscalls_per_s: Option<f64>,
    /// The busiest calls under strace: (name, calls per second).
    pub strace_top: Vec<(String, f64)>,
    /// For a ticker: clock reads per second above which it saves more CPU
    /// than it costs beyond the topdeck child (`None` for topdeck itself).
    pub breakeven_reads_per_s: Option<f64>,
}

/// The result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleResult {
    /// Window, s.
    pub duration_s: f64,
    /// `topdeck`, then `ticker`, then any `also` children.
    pub variants: Vec<Variant>,
    /// How system calls were counted.
    pub syscall_method: String,
    /// Cost of one clock read (`Instant::now`, vDSO clock_gettime), ns.
    pub clock_read_ns: f64,
    /// Cost of one load of a cached timestamp, ns.
    pub cached_read_ns: f64,
    /// The ticker's CPU cost per second beyond the topdeck child's, ns/s.
    pub ticker_cost_ns_per_s: f64,
    /// Clock reads per second above which the ticker saves more than it costs.
    pub breakeven_reads_per_s: f64,
    /// Machine description.
    pub machine: String,
    /// When, seconds since the epoch.
    pub unix_time: u64,
}

/// Runs the experiment.
pub fn run(cfg: &Config) -> Result<IdleResult> {
    if cfg.duration < Duration::from_millis(100) {
        return Err(Error::new(
            ErrorKind::BadInput,
            "--duration must be at least 100ms",
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| Error::io("create a temporary directory", e))?;
    let topdeck = Running::start(
        &cfg.helper,
        &["idle-topdeck".into(), dir.path().display().to_string()],
    )?;
    let ticker = Running::start(&cfg.helper, &["idle-ticker".into()])?;
    let mut children = vec![("topdeck".to_string(), topdeck), ("ticker".into(), ticker)];
    for (name, program) in &cfg.also {
        children.push((
            name.clone(),
            Running::start(&Helper::new(program, &[]), &[])?,
        ));
    }
    // Let start-up (dynamic loading, first page faults) finish before counting.
    std::thread::sleep(Duration::from_millis(200));
    let pids: Vec<u32> = children.iter().map(|c| c.1.pid).collect();
    let before: Vec<_> = pids.iter().map(|&p| sample(p)).collect();
    std::thread::sleep(cfg.duration);
    let after: Vec<_> = pids.iter().map(|&p| sample(p)).collect();

    let strace = if cfg.strace && strace_installed() {
        Some(strace_window(
            &pids,
            cfg.duration.min(Duration::from_secs(10)),
        )?)
    } else {
        None
    };
    let names: Vec<String> = children.iter().map(|c| c.0.clone()).collect();
    for (_, c) in children {
        c.stop()?;
    }

    let secs = cfg.duration.as_secs_f64();
    let clock_read_ns = clock_read_cost();
    let cached_read_ns = cached_read_cost();
    let saving = (clock_read_ns - cached_read_ns).max(f64::MIN_POSITIVE);
    let mut variants: Vec<Variant> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (b, a) = (before[i].as_ref(), after[i].as_ref());
        let (b, a) = match (b, a) {
            (Ok(b), Ok(a)) => (b, a),
            _ => {
                return Err(Error::new(
                    ErrorKind::Child,
                    format!("the {name} child could not be sampled: did it exit early?"),
                ))
            }
        };
        let st = strace.as_ref().map(|s| &s[i]);
        let cpu = a.1.since(&b.1);
        let breakeven_reads_per_s = variants.first().map(|base: &Variant| {
            let cost_ns_per_s = ((cpu.total() - base.cpu.total()) / secs * 1e9).max(0.0);
            cost_ns_per_s / saving
        });
        variants.push(Variant {
            name: name.clone(),
            switches: Switches {
                voluntary: a.0.voluntary.saturating_sub(b.0.voluntary),
                involuntary: a.0.involuntary.saturating_sub(b.0.involuntary),
            },
            cpu,
            io_syscalls: a.2.saturating_sub(b.2),
            strace_syscalls_per_s: st.map(|s| s.0),
            strace_top: st.map(|s| s.1.clone()).unwrap_or_default(),
            breakeven_reads_per_s,
        });
    }
    let ticker_cost_ns_per_s =
        ((variants[1].cpu.total() - variants[0].cpu.total()) / secs * 1e9).max(0.0);
    Ok(IdleResult {
        duration_s: secs,
        variants,
        syscall_method: match &strace {
            Some(_) => "strace -c -f -p over a second window (all calls, all threads), plus syscr+syscw from /proc/<pid>/io".into(),
            None => "syscr+syscw from /proc/<pid>/io only (read/write-like calls; strace not installed or disabled)".into(),
        },
        clock_read_ns,
        cached_read_ns,
        ticker_cost_ns_per_s,
        breakeven_reads_per_s: ticker_cost_ns_per_s / saving,
        machine: super::machine(),
        unix_time: super::unix_now(),
    })
}

type Sample = (Switches, CpuTime, u64);

fn sample(pid: u32) -> Result<Sample> {
    let (r, w) = cpu::io_syscalls(pid)?;
    Ok((cpu::switches(pid)?, cpu::proc_cpu(pid)?, r + w))
}

fn strace_installed() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// System calls per second, and the busiest calls with theirs.
type StraceCount = (f64, Vec<(String, f64)>);

/// Attaches `strace -c -f` to each pid for `window`, then interrupts it and
/// parses its summary: (calls per second, busiest calls per second).
fn strace_window(pids: &[u32], window: Duration) -> Result<Vec<StraceCount>> {
    let dir = tempfile::tempdir().map_err(|e| Error::io("create a temporary directory", e))?;
    let mut tracers = Vec::new();
    for &pid in pids {
        let out = dir.path().join(format!("{pid}.strace"));
        let child = Command::new("strace")
            .args(["-c", "-f", "-q", "-o"])
            .arg(&out)
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::io("start strace", e))?;
        tracers.push((child, out));
    }
    std::thread::sleep(window);
    let mut results = Vec::new();
    for (mut child, out) in tracers {
        // SAFETY: kill(2) with a pid we started; SIGINT makes strace detach and summarise.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        child.wait().map_err(|e| Error::io("wait for strace", e))?;
        results.push(parse_strace(&out, window.as_secs_f64())?);
    }
    Ok(results)
}

fn parse_strace(path: &Path, secs: f64) -> Result<StraceCount> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("read strace summary {}", path.display()), e))?;
    let mut total = 0.0;
    let mut calls = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 || f[0].parse::<f64>().is_err() {
            continue;
        }
        let n: f64 = f[3].parse().unwrap_or(0.0);
        match f.last() {
            Some(&"total") => total = n,
            Some(name) => calls.push((name.to_string(), n / secs)),
            None => {}
        }
    }
    calls.sort_by(|a, b| b.1.total_cmp(&a.1));
    calls.truncate(4);
    Ok((total / secs, calls))
}

/// Nanoseconds per `Instant::now()` (clock_gettime(CLOCK_MONOTONIC) through
/// the vDSO): the cheapest clock read std offers, which is what a time cache
/// saves. Best of five runs of a million reads, so a preemption in one run
/// does not count.
pub fn clock_read_cost() -> f64 {
    best_of(5, 1_000_000, || {
        std::hint::black_box(std::time::Instant::now());
    })
}

/// Nanoseconds per load of a cached timestamp (what the ticker's readers
/// pay instead), best of five runs of ten million loads.
pub fn cached_read_cost() -> f64 {
    let cache = AtomicU64::new(now_ns());
    best_of(5, 10_000_000, || {
        std::hint::black_box(std::hint::black_box(&cache).load(Ordering::Relaxed));
    })
}

fn best_of(runs: usize, n: u64, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let t0 = now_ns();
            for _ in 0..n {
                f();
            }
            (now_ns() - t0) as f64 / n as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// Per-second costs of the two idle children, and the break-even read rate.
pub fn table(r: &IdleResult) -> String {
    doc(r).render()
}

/// The table of [`table()`], with its text, for the terminal or the report.
pub fn doc(r: &IdleResult) -> Doc {
    let s = r.duration_s;
    let mut t = Table::new([
        "idle child",
        "wake-ups/s",
        "preempted/s",
        "CPU ms/s",
        "sys ms/s",
        "syscalls/s (strace)",
        "read+write calls/s",
        "pays above reads/s",
        "busiest calls",
    ]);
    for v in &r.variants {
        t.row([
            v.name.clone(),
            format!("{:.1}", v.switches.voluntary as f64 / s),
            format!("{:.1}", v.switches.involuntary as f64 / s),
            format!("{:.2}", v.cpu.total() * 1e3 / s),
            format!("{:.2}", v.cpu.sys * 1e3 / s),
            v.strace_syscalls_per_s
                .map_or("-".into(), |c| format!("{c:.1}")),
            format!("{:.1}", v.io_syscalls as f64 / s),
            v.breakeven_reads_per_s
                .map_or("-".into(), |b| format!("{b:.0}")),
            v.strace_top
                .iter()
                .map(|(n, c)| format!("{n} {c:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
        ]);
    }
    let mut d = Doc::default();
    d.text(format!(
        "idle over {:.0} s; syscalls: {}\n\n",
        s, r.syscall_method
    ))
    .table(t)
    .text(format!(
        "\nclock read {} vs cached load {}; the ticker costs {} of CPU per second,\nso it pays only above {:.0} clock reads per second.\n",
        table::ns(r.clock_read_ns),
        table::ns(r.cached_read_ns),
        table::ns(r.ticker_cost_ns_per_s),
        r.breakeven_reads_per_s,
    ));
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strace_summary_parses() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        std::fs::write(
            &p,
            "% time     seconds  usecs/call     calls    errors syscall\n\
             ------ ----------- ----------- --------- --------- ----------------\n\
             100.00    0.000123           1       900           clock_nanosleep\n\
             0.00      0.000000           0        10         2 futex\n\
             ------ ----------- ----------- --------- --------- ----------------\n\
             100.00    0.000123           1       910         2 total\n",
        )
        .unwrap();
        let (total, top) = parse_strace(&p, 2.0).unwrap();
        assert_eq!(total, 455.0);
        assert_eq!(top[0], ("clock_nanosleep".to_string(), 450.0));
        assert_eq!(top[1], ("futex".to_string(), 5.0));
    }
}
