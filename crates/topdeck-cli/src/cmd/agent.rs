// SPDX-License-Identifier: Apache-2.0
//! `topdeck agent`: loads the scheduler probe and publishes its figures and
//! verdicts as the `topdeck-agent` registry until interrupted. Without eBPF
//! it says exactly why and publishes coarse figures instead. When its
//! namespace directory is unusable (squatted, writable by others, a
//! symlink) nothing helps, so it stops and names the directory instead.
//!
//! SIGTERM, SIGINT and SIGHUP stop it through [`crate::stop`], as does its
//! stdout going away (a closed pipe or terminal): it detaches the
//! programs and removes its registry on the way out either way.

use std::io::{self, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use topdeck_sched::fallback::CoarseAgent;
use topdeck_sched::verdict::{Thresholds, VerdictKind};
use topdeck_sched::{Agent, AgentConfig, Clock, ErrorKind, Flavour};

use crate::stop::Stop;

/// Arguments of `topdeck agent`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Time between reads of the probe's maps, e.g. `1s`.
    #[arg(long, default_value = "1s", value_parser = crate::parse_interval)]
    interval: Duration,
    /// How often to measure the probe's own cost with BPF run-time stats
    /// (on for one interval each time); `0s` never.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    cost_every: Duration,
    /// Attach as tp_btf or raw_tp instead of choosing at run time.
    #[arg(long, value_enum)]
    attach: Option<Attach>,
    /// Stamp wakeups with the probe's own programs, on the run queue's
    /// clock, instead of reading the kernel's sched_info at each switch
    /// (the default, where the kernel keeps it).
    #[arg(long)]
    rq_clock: bool,
    /// Stamp wakeups with the probe's own programs and bpf_ktime_get_ns
    /// instead of reading the kernel's sched_info at each switch: exact to
    /// the end of a wait that ends in a wakeup preemption (sched_info's run
    /// queue clock can miss up to a tick of it), at a wakeup program's cost
    /// per wakeup.
    #[arg(long, conflicts_with = "rq_clock")]
    own_stamps: bool,
    /// How long a removed cgroup's series stay published, unchanged, before
    /// the cgroup is retired (and its series dropped at the next registry
    /// rotation); at least two scrape intervals.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Metrics the agent's registry holds before it rotates to a fresh file.
    #[arg(long, default_value_t = 16_384)]
    max_series: u32,
    /// Cgroups the probe keeps in its per-CPU slot array, reached with no
    /// lookup per switch (preallocated: 2,304 bytes per CPU each; default:
    /// 4 MiB over all CPUs, at least 64). Further cgroups cost one hash
    /// lookup per switch; `topdeck_sched_cgroups{where="hash"}` counts them.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    cgroup_slots: Option<u32>,
    /// Where to pin the thread-waits array, each thread's cumulative
    /// run-queue wait that any process maps read-only (docs/FORMAT.md,
    /// "Thread waits"), in a root-owned directory of a bpffs mount; `off`
    /// for none.
    #[arg(long, value_name = "PATH|off", default_value = topdeck_sched::thread_waits::DEFAULT_PIN, value_parser = parse_pin)]
    thread_waits: ThreadWaitsPin,
    /// Cap on the thread-waits array's memory, e.g. `32MiB` or `8388608`:
    /// 32 bytes per thread id up to the host's pid_max; thread ids past
    /// the cap have no slot.
    #[arg(long, value_name = "BYTES", default_value = "32MiB", value_parser = parse_bytes)]
    thread_waits_memory: usize,
    /// Stop after this many intervals (default: until interrupted).
    #[arg(long, value_parser = crate::parse_count)]
    count: Option<u64>,
    #[command(flatten)]
    rule: Rule,
}

/// The verdict rule (`topdeck_sched::verdict::Thresholds`): every view
/// prints the one the agent applies.
#[derive(Debug, clap::Args)]
struct Rule {
    /// A noisy neighbour: the run-queue p99 at least this many times its
    /// baseline (the median of its recent quiet windows)...
    #[arg(long, default_value_t = 4.0, value_parser = parse_factor)]
    rise: f64,
    /// ...with at least this share of its wait behind other cgroups.
    #[arg(long, default_value_t = 0.5, value_parser = parse_share)]
    other_share: f64,
    /// A suspect (worth a look, not a page): a rise of at least this factor...
    #[arg(long, default_value_t = 2.0, value_parser = parse_factor)]
    suspect_rise: f64,
    /// ...with at least this share of its wait behind other cgroups.
    #[arg(long, default_value_t = 0.2, value_parser = parse_share)]
    suspect_share: f64,
    /// A p99 below this never makes a verdict, however it rose, e.g. `500us`.
    #[arg(long, default_value = "500us", value_parser = humantime::parse_duration)]
    floor: Duration,
    /// Windows in a row a verdict must hold before it is given, and
    /// windows without it before it clears.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    hold: u32,
}

fn parse_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x >= 1.0 && x.is_finite() => Ok(x),
        _ => Err(format!(
            "{s:?} is not a factor of at least 1 (try `4` or `1.5`)"
        )),
    }
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("{s:?} is not a share between 0 and 1 (try `0.5`)")),
    }
}

/// `--thread-waits`: a pin path, or off.
#[derive(Debug, Clone)]
struct ThreadWaitsPin(Option<std::path::PathBuf>);

fn parse_pin(s: &str) -> Result<ThreadWaitsPin, String> {
    match s {
        "off" => Ok(ThreadWaitsPin(None)),
        "" => Err("give a path under /sys/fs/bpf, or `off`".into()),
        p if !p.starts_with('/') => Err(format!("{p}: give an absolute path (or `off`)")),
        p => Ok(ThreadWaitsPin(Some(p.into()))),
    }
}

/// A byte count: a whole number, optionally with a binary (`KiB`, `MiB`,
/// `GiB`, also `K`, `M`, `G`) suffix.
fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(digits);
    let n: usize = n
        .parse()
        .map_err(|_| format!("{s:?} is not a byte count (try `32MiB` or `33554432`)"))?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        u => return Err(format!("unknown unit {u:?} (use KiB, MiB or GiB)")),
    };
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s} is too large"))
}

/// `--attach` values.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Attach {
    TpBtf,
    RawTp,
}

pub fn run(out: &mut impl Write, args: &Args) -> Result<()> {
    let stop = crate::stop::install().context("cannot handle the stop signals")?;
    // Verdicts are rare: without this, a closed pipe would be noticed only
    // at the next one, maybe never.
    stop.stop_when_gone(io::stdout().as_fd())
        .context("cannot watch stdout")?;
    let config = AgentConfig {
        interval: args.interval,
        cost_every: (!args.cost_every.is_zero()).then_some(args.cost_every),
        flavour: args.attach.map(|a| match a {
            Attach::TpBtf => Flavour::TpBtf,
            Attach::RawTp => Flavour::RawTp,
        }),
        clock: match (args.rq_clock, args.own_stamps) {
            (true, _) => Clock::RunQueue,
            (_, true) => Clock::Ktime,
            _ => Clock::SchedInfo,
        },
        grace: args.grace,
        max_series: args.max_series,
        cgroup_slots: args.cgroup_slots,
        thread_waits: args.thread_waits.0.clone(),
        thread_waits_memory: args.thread_waits_memory,
        thresholds: Thresholds {
            rise_factor: args.rule.rise,
            min_other_share: args.rule.other_share,
            suspect_rise_factor: args.rule.suspect_rise,
            suspect_other_share: args.rule.suspect_share,
            min_p99_seconds: args.rule.floor.as_secs_f64(),
            hold: args.rule.hold,
            ..Thresholds::default()
        },
        ..AgentConfig::default()
    };
    let mut agent = match Agent::start(config) {
        Ok(a) => a,
        // Its message is complete: the directory, its owner, what to run.
        Err(e) if e.kind() == ErrorKind::Namespace => bail!("{e}"),
        // Coarse figures would not help: the message says what to do.
        Err(e) if e.kind() == ErrorKind::ThreadWaits => bail!("{e:#}"),
        Err(e) => return run_coarse(out, args, &stop, format!("{e:#}")),
    };
    writeln!(
        out,
        "topdeck agent: probe attached ({}), publishing to {}",
        agent.probe().flavour(),
        agent.registry_path().display()
    )?;
    match agent.probe().thread_waits() {
        Some(w) => writeln!(
            out,
            "topdeck agent: thread waits pinned at {} ({} thread slots, {} bytes)",
            w.path().display(),
            w.slots(),
            w.bytes()
        )?,
        None => writeln!(out, "topdeck agent: thread waits off")?,
    }
    if let Some(why) = agent.probe().tp_btf_error() {
        writeln!(out, "note: tp_btf did not load ({why}); using raw_tp")?;
    }
    out.flush()?;
    // One line when a cgroup gets a verdict, one when its kind changes
    // (new evidence alone is not news), one when it clears.
    let mut shown: Vec<(String, VerdictKind)> = Vec::new();
    let mut ticks = 0u64;
    let mut failure = None;
    agent
        .run(stop.flag(), |tick| {
            let now: Vec<(String, VerdictKind)> = tick
                .verdicts
                .iter()
                .map(|v| (v.victim.clone(), v.kind))
                .collect();
            let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
            for v in &tick.verdicts {
                let was = shown.iter().find(|(victim, _)| *victim == v.victim);
                let line = match was {
                    None => format!("{at} verdict: {v}"),
                    Some((_, kind)) if *kind != v.kind => {
                        format!("{at} verdict: {v} (was {})", kind.as_str())
                    }
                    Some(_) => continue,
                };
                if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
                    failure = Some(e);
                    stop.request();
                }
            }
            for (victim, _) in &shown {
                if !now.iter().any(|(v, _)| v == victim) {
                    let _ = writeln!(out, "{at} cleared: {victim}").and_then(|()| out.flush());
                }
            }
            shown = now;
            ticks += 1;
            if args.count.is_some_and(|n| ticks >= n) {
                stop.request();
            }
        })
        .context("reading the probe's maps")?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    Ok(())
}

fn run_coarse(out: &mut impl Write, args: &Args, stop: &Stop, why: String) -> Result<()> {
    // Started before anything is said about eBPF: if the directory is what
    // fails, that is the one thing to say.
    let mut agent = match CoarseAgent::start(None, why.clone()) {
        Ok(a) => a,
        Err(e) if e.kind() == ErrorKind::Namespace => bail!("{e}"),
        Err(e) => return Err(e).context("starting the coarse agent"),
    };
    writeln!(out, "topdeck agent: eBPF unavailable: {why}")?;
    writeln!(
        out,
        "falling back to coarse figures (mean waits from /proc/<tid>/schedstat, cpu.stat throttling, cpu.pressure): no latency distributions, no culprits, no verdicts"
    )?;
    out.flush()?;
    let mut ticks = 0u64;
    while !stop.is_requested() {
        // The window's wait is the stop's: a stop ends it at once, and the
        // cut-short window is not published.
        let view = agent
            .tick_waiting(args.interval, |d| !stop.wait_timeout(d))
            .context("publishing coarse figures")?;
        if view.is_none() {
            break;
        }
        ticks += 1;
        if args.count.is_some_and(|n| ticks >= n) {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_parse() {
        assert_eq!(parse_bytes("32MiB"), Ok(32 << 20));
        assert_eq!(parse_bytes("33554432"), Ok(32 << 20));
        assert_eq!(parse_bytes("4K"), Ok(4096));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3 parsecs").is_err());
        assert!(parse_bytes("99999999999999999999G").is_err());
    }

    #[test]
    fn pins_parse() {
        assert!(parse_pin("off").unwrap().0.is_none());
        assert_eq!(
            parse_pin("/sys/fs/bpf/x").unwrap().0.unwrap(),
            std::path::PathBuf::from("/sys/fs/bpf/x")
        );
        assert!(parse_pin("relative").is_err());
    }
}
