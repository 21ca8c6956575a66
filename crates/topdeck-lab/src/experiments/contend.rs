// SPDX-License-Identifier: Apache-2.0
//! `topdeck-lab contend -- CMD...`: the article's second case study. CMD is started
//! 1, 2, 4 and 8 times at once; each instance's wall time and its own user
//! and system time (wait4's rusage) are averaged per level. Per-instance
//! system time tells lock contention (it grows) from CPU sharing (wall
//! grows, system time per instance stays flat).

use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::child::Helper;
use crate::cpu::CpuTime;
use crate::populate::{Ask, Census, Population};
use crate::table::{Doc, Table};
use crate::timing::{now_ns, secs};
use crate::{Error, ErrorKind, Result};

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Concurrency levels.
    pub levels: Vec<usize>,
    /// Rounds per level (averaged).
    pub rounds: usize,
    /// What to hold on the host meanwhile (sockets, threads, processes).
    pub populate: Ask,
    /// The binary that holds the population.
    pub helper: Helper,
}

impl Config {
    /// Levels 1, 2, 4, 8; three rounds each.
    pub fn new(command: Vec<String>, helper: Helper) -> Self {
        Self {
            command,
            levels: vec![1, 2, 4, 8],
            rounds: 3,
            populate: Ask::default(),
            helper,
        }
    }

    /// One round per level.
    pub fn quick(mut self) -> Self {
        self.rounds = 1;
        self
    }
}

/// One concurrency level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Instances at once.
    pub concurrency: usize,
    /// Instances measured (concurrency × rounds).
    pub instances: usize,
    /// Mean wall time per instance, s.
    pub wall_s: f64,
    /// Mean user time per instance, s.
    pub user_s: f64,
    /// Mean system time per instance, s.
    pub sys_s: f64,
    /// Slowest instance, s.
    pub wall_max_s: f64,
}

/// The result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContendResult {
    /// The command line.
    pub command: String,
    /// What the host held.
    pub census: Census,
    /// One row per level.
    pub rows: Vec<Row>,
    /// Machine description.
    pub machine: String,
    /// When, seconds since the epoch.
    pub unix_time: u64,
}

/// Runs the experiment.
pub fn run(cfg: &Config) -> Result<ContendResult> {
    if cfg.command.is_empty() {
        return Err(Error::new(
            ErrorKind::BadInput,
            "no command: give one after `--`, e.g. `topdeck-lab contend -- ps auxww`",
        ));
    }
    if cfg.rounds == 0 || cfg.levels.contains(&0) {
        return Err(Error::new(
            ErrorKind::BadInput,
            "rounds and concurrency levels must be at least 1",
        ));
    }
    let population = Population::start(&cfg.helper, cfg.populate)?;
    // Warm the page cache so the first level does not pay for loading the binary.
    level(&cfg.command, 1)?;
    let mut rows = Vec::new();
    for &c in &cfg.levels {
        let mut runs = Vec::new();
        for _ in 0..cfg.rounds {
            runs.extend(level(&cfg.command, c)?);
        }
        let n = runs.len() as f64;
        rows.push(Row {
            concurrency: c,
            instances: runs.len(),
            wall_s: runs.iter().map(|r| r.0).sum::<f64>() / n,
            user_s: runs.iter().map(|r| r.1.user).sum::<f64>() / n,
            sys_s: runs.iter().map(|r| r.1.sys).sum::<f64>() / n,
            wall_max_s: runs.iter().map(|r| r.0).fold(0.0, f64::max),
        });
    }
    let census = population.census;
    population.stop()?;
    Ok(ContendResult {
        command: cfg.command.join(" "),
        census,
        rows,
        machine: super::machine(),
        unix_time: super::unix_now(),
    })
}

/// Starts `c` instances at once; returns each one's wall time and CPU time.
fn level(command: &[String], c: usize) -> Result<Vec<(f64, CpuTime)>> {
    let t0 = now_ns();
    let mut pids = Vec::with_capacity(c);
    for _ in 0..c {
        let child = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| Error::io(format!("start {:?}", command.join(" ")), e))?;
        // wait4 below reaps it; std's Child never waits on drop.
        pids.push(child.id() as libc::pid_t);
    }
    // One waiting thread per instance, so each wall time ends when that
    // instance ends, not when the ones before it were reaped.
    let waiters: Vec<_> = pids
        .into_iter()
        .map(|pid| {
            std::thread::spawn(move || reap(pid).map(|(st, ru)| (st, secs(t0, now_ns()), ru)))
        })
        .collect();
    let mut out = Vec::with_capacity(c);
    for w in waiters {
        let (status, wall, cpu) = w
            .join()
            .map_err(|_| Error::new(ErrorKind::Child, "a waiting thread panicked"))??;
        if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
            return Err(Error::new(
                ErrorKind::Child,
                format!("{:?} failed (wait status {status:#x})", command.join(" ")),
            ));
        }
        out.push((wall, cpu));
    }
    Ok(out)
}

fn reap(pid: libc::pid_t) -> Result<(libc::c_int, CpuTime)> {
    let mut status = 0;
    // SAFETY: rusage is plain data; all-zero is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `ru` are valid and writable; `pid` is our child.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if rc == pid {
            return Ok((status, CpuTime::from_rusage(&ru)));
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::io(format!("wait4({pid})"), err));
        }
    }
}

/// The article's `ps auxww` table.
pub fn table(r: &ContendResult) -> String {
    doc(r).render()
}

/// The table of [`table`], with its text, for the terminal or the report.
pub fn doc(r: &ContendResult) -> Doc {
    let mut t = Table::new([
        "Concurrency",
        "Wall time (avg)",
        "User time",
        "Sys time",
        "Wall (max)",
    ]);
    for row in &r.rows {
        t.row([
            row.concurrency.to_string(),
            format!("{:.3}", row.wall_s),
            format!("{:.3}", row.user_s),
            format!("{:.3}", row.sys_s),
            format!("{:.3}", row.wall_max_s),
        ]);
    }
    let mut d = Doc::default();
    d.text(format!(
        "`{}` at increasing concurrency (seconds per instance); host: {} unix sockets, {} processes, {} threads\n\n",
        r.command,
        r.census.host_unix_sockets,
        r.census.host_processes,
        r.census.host_threads,
    ))
    .table(t);
    d
}
