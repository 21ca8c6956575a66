// SPDX-License-Identifier: Apache-2.0
//! `topdeck-lab observer -- CMD...`: the article's first case study. A victim
//! operation is timed into latency histograms alone, then again while an
//! observer command runs over and over beside it; the table shows each
//! decade bucket, and the shift of each percentile and of the max.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::child::Helper;
use crate::cpu::{self, Pin};
use crate::hist::{self, Summary};
use crate::populate::{Ask, Census, Population};
use crate::table::{self, Doc, Table};
use crate::timing::{now_ns, secs};
use crate::victims::Victim;
use crate::{Error, ErrorKind, Result};

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The observer command and its arguments.
    pub command: Vec<String>,
    /// The victim operation.
    pub victim: Victim,
    /// Victim iterations per phase.
    pub iterations: usize,
    /// What to hold on the host meanwhile (sockets, threads, processes).
    pub populate: Ask,
    /// Placement of victim and observer.
    pub pin: Pin,
    /// The binary that holds the population.
    pub helper: Helper,
}

impl Config {
    /// The article's setup: UDS socket()/close() 100,000 times, unpinned.
    pub fn new(command: Vec<String>, helper: Helper) -> Self {
        Self {
            command,
            victim: Victim::Uds,
            iterations: 100_000,
            populate: Ask::default(),
            pin: Pin::Free,
            helper,
        }
    }

    /// Seconds, for `make test`: 2,000 iterations.
    pub fn quick(mut self) -> Self {
        self.iterations = 2_000;
        self
    }
}

/// One phase: the victim's series, alone or observed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// `alone` or `observed`.
    pub label: String,
    /// One summary per victim series.
    pub series: Vec<Summary>,
    /// Wall time of the phase, s.
    pub wall_s: f64,
}

/// The result of one observer experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObserverResult {
    /// The observer command line.
    pub command: String,
    /// The victim.
    pub victim: Victim,
    /// Iterations per phase.
    pub iterations: usize,
    /// Placement.
    pub pin: Pin,
    /// What the host held.
    pub census: Census,
    /// Wall time of one observer run with nothing else running, s.
    pub observer_solo_s: f64,
    /// Observer runs that overlapped the observed phase.
    pub observer_runs: u64,
    /// Mean wall time of those runs, s.
    pub observer_mean_s: f64,
    /// `alone`, then `observed`.
    pub phases: Vec<Phase>,
    /// Machine description.
    pub machine: String,
    /// When, seconds since the epoch.
    pub unix_time: u64,
}

/// Runs the experiment.
pub fn run(cfg: &Config) -> Result<ObserverResult> {
    if cfg.command.is_empty() {
        return Err(Error::new(
            ErrorKind::BadInput,
            "no observer command: give one after `--`, e.g. `topdeck-lab observer -- ss -xa`",
        ));
    }
    if cfg.iterations == 0 {
        return Err(Error::new(
            ErrorKind::BadInput,
            "--iterations must be at least 1",
        ));
    }
    let placement = cfg.pin.cpus()?;
    let population = Population::start(&cfg.helper, cfg.populate)?;
    let original = cpu::allowed_cpus()?;
    let result = measure(cfg, placement.as_ref(), population.census);
    cpu::pin_thread(&original)?;
    population.stop()?;
    result
}

fn measure(
    cfg: &Config,
    placement: Option<&(Vec<usize>, Vec<usize>)>,
    census: Census,
) -> Result<ObserverResult> {
    if let Some((victim_cpus, _)) = placement {
        cpu::pin_thread(victim_cpus)?;
    }
    let observer_cpus = placement.map(|(_, o)| o.clone());
    // One run first, alone: proves the command works and times it unloaded.
    let t0 = now_ns();
    run_once(&cfg.command)?;
    let observer_solo_s = secs(t0, now_ns());

    // Warm up caches and the allocator so the first phase is not penalised.
    cfg.victim.run(cfg.iterations.min(1_000))?;
    let alone = phase("alone", cfg)?;

    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let loop_handle = {
        let (stop, started, command) = (stop.clone(), started.clone(), cfg.command.clone());
        std::thread::spawn(move || -> Result<(u64, f64)> {
            if let Some(c) = &observer_cpus {
                cpu::pin_thread(c)?;
            }
            let (mut runs, mut total) = (0u64, 0.0);
            while !stop.load(Ordering::Relaxed) {
                let t = now_ns();
                let mut child = spawn(&command)?;
                started.store(true, Ordering::Relaxed);
                child
                    .wait()
                    .map_err(|e| Error::io(format!("wait for {command:?}"), e))?;
                total += secs(t, now_ns());
                runs += 1;
            }
            Ok((runs, total))
        })
    };
    while !started.load(Ordering::Relaxed) && !loop_handle.is_finished() {
        std::thread::yield_now();
    }
    let observed = phase("observed", cfg);
    stop.store(true, Ordering::Relaxed);
    let (runs, total) = loop_handle
        .join()
        .map_err(|_| Error::new(ErrorKind::Child, "the observer loop panicked"))??;
    Ok(ObserverResult {
        command: cfg.command.join(" "),
        victim: cfg.victim,
        iterations: cfg.iterations,
        pin: cfg.pin,
        census,
        observer_solo_s,
        observer_runs: runs,
        observer_mean_s: if runs > 0 { total / runs as f64 } else { 0.0 },
        phases: vec![alone, observed?],
        machine: super::machine(),
        unix_time: super::unix_now(),
    })
}

fn phase(label: &str, cfg: &Config) -> Result<Phase> {
    let t0 = now_ns();
    let samples = cfg.victim.run(cfg.iterations)?;
    let wall_s = secs(t0, now_ns());
    let series = cfg
        .victim
        .series()
        .iter()
        .zip(samples)
        .map(|(name, mut s)| Summary::of(name, &mut s))
        .collect();
    Ok(Phase {
        label: label.into(),
        series,
        wall_s,
    })
}

fn spawn(command: &[String]) -> Result<std::process::Child> {
    Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::io(format!("start observer {:?}", command.join(" ")), e))
}

fn run_once(command: &[String]) -> Result<()> {
    let status = spawn(command)?
        .wait()
        .map_err(|e| Error::io(format!("wait for {command:?}"), e))?;
    if !status.success() {
        return Err(Error::new(
            ErrorKind::Child,
            format!(
                "observer {:?} failed ({status}) when run alone; fix the command first",
                command.join(" ")
            ),
        ));
    }
    Ok(())
}

/// The article's table (decade buckets and max per series, alone then
/// observed), followed by percentile shifts.
pub fn table(r: &ObserverResult) -> String {
    doc(r).render()
}

/// The tables of [`table()`], with their text, for the terminal or the report.
pub fn doc(r: &ObserverResult) -> Doc {
    let mut out = Doc::default();
    out.text(format!(
        "victim {} x{}, observer `{}` ({} runs, {} each, {} alone), pin {}, host: {} unix sockets, {} processes, {} threads\n\n",
        r.victim.describe(),
        r.iterations,
        r.command,
        r.observer_runs,
        table::ns(r.observer_mean_s * 1e9),
        table::ns(r.observer_solo_s * 1e9),
        r.pin.name(),
        r.census.host_unix_sockets,
        r.census.host_processes,
        r.census.host_threads,
    ));
    let rows = r.phases.iter().flat_map(|p| {
        p.series
            .iter()
            .map(move |s| (format!("{} {}", s.name, p.label), s))
    });
    out.table(hist::decade_table(rows));
    if let [alone, observed] = r.phases.as_slice() {
        for (a, o) in alone.series.iter().zip(&observed.series) {
            out.heading(a.name.clone());
            out.table(hist::shift_table(a, o, "observed"));
        }
    }
    let mut t = Table::new(["phase", "wall"]);
    for p in &r.phases {
        t.row([p.label.clone(), table::ns(p.wall_s * 1e9)]);
    }
    out.text("\n").table(t);
    out
}
