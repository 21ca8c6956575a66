// SPDX-License-Identifier: Apache-2.0
//! The arguments of `topdeck-lab` and what each experiment runs. Each
//! experiment prints its tables, saves its result as JSON in `--out` and
//! rewrites the HTML report there. `topdeck-lab child` is the hidden helper
//! the experiments re-execute this binary as.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use topdeck_lab::child::Helper;
use topdeck_lab::cpu::Pin;
use topdeck_lab::experiments::{self, contend, idle, observer, selftest};
use topdeck_lab::populate::Ask;
use topdeck_lab::victims::Victim;

use crate::sibling;

/// The interference lab: measure what observing a system costs the
/// system, topdeck's own readers included.
///
/// Each experiment prints its tables, saves its result as
/// `<out>/<experiment>.json` and rewrites `<out>/report.html` from every
/// result saved there. An observer command named `topdeck` runs the
/// `topdeck` binary next to this one.
#[derive(Debug, Parser)]
#[command(name = "topdeck-lab", version)]
pub struct LabArgs {
    #[command(subcommand)]
    experiment: Experiment,
    /// Directory for results (`<experiment>.json`) and `report.html`.
    #[arg(long, global = true, default_value = "lab-out")]
    out: PathBuf,
    /// Short form: seconds instead of minutes (used by `make test`).
    #[arg(long, global = true)]
    quick: bool,
}

#[derive(Debug, Subcommand)]
enum Experiment {
    /// Time a victim operation alone, then while CMD runs over and over.
    Observer {
        /// Victim: uds (socket+close), getpid, memory or memory:<size>k|m.
        #[arg(long, default_value = "uds", value_parser = parse_victim)]
        victim: Victim,
        /// Victim iterations per phase (default 100000, 2000 with --quick).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
        iterations: Option<u64>,
        #[command(flatten)]
        populate: Populate,
        #[command(flatten)]
        pin: PinArgs,
        /// The observer command, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Run CMD 1, 2, 4 and 8 times at once: wall, user and sys time per instance.
    Contend {
        /// Rounds per concurrency level (default 3, 1 with --quick).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
        rounds: Option<u64>,
        #[command(flatten)]
        populate: Populate,
        /// The command, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// topdeck writers against 0/1/4/16 readers at 100 Hz, 1 kHz and flat
    /// out, pinned and not, and the prometheus crate for contrast.
    Selftest {
        /// Length of each run (default 250ms, 100ms with --quick).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
        /// Interleaved rounds (default 11, 1 with --quick).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100))]
        rounds: Option<u64>,
        /// Writer threads.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
        writers: u64,
        /// Each writer increments this many counters in turn, instead of
        /// one counter and one histogram: readers then copy the lines the
        /// writer writes (writer time lost per snapshot, the lost/snap column).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100_000))]
        counters: u64,
        /// Reader counts, comma-separated (0, the baseline, is always run).
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(0..=256))]
        readers: Vec<u64>,
        /// Reader rates in Hz, comma-separated; `flat` for flat out.
        #[arg(long, value_delimiter = ',', value_parser = parse_rate)]
        rates: Vec<Option<u32>>,
        /// Placements, comma-separated: other-cpu, same-cpu, free.
        #[arg(long, value_delimiter = ',', value_parser = parse_pin)]
        pins: Vec<Pin>,
        /// Libraries, comma-separated: topdeck, prometheus (prometheus runs
        /// with the first placement only).
        #[arg(long, value_delimiter = ',', value_parser = parse_exporter)]
        exporters: Vec<selftest::Exporter>,
    },
    /// Idle cost of a topdeck-instrumented process vs a 1 ms time-cache ticker.
    Idle {
        /// Measurement window (default 30s, 2s with --quick).
        #[arg(long, value_parser = parse_duration)]
        duration: Option<Duration>,
        /// Do not count system calls with strace.
        #[arg(long)]
        no_strace: bool,
        /// Another idle child to measure, as NAME=PROGRAM (it must print
        /// `ready` and wait for end of input), e.g. go=lab-out/go-ticker.
        #[arg(long, value_parser = parse_also)]
        also: Vec<(String, PathBuf)>,
    },
    /// Rewrite report.html from the results saved in --out.
    Report,
    /// Helper process body (used by the experiments themselves).
    #[command(hide = true)]
    Child {
        /// Task and its arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Debug, Args)]
struct Populate {
    /// Unix sockets to hold on the host during the experiment.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    populate_sockets: u64,
    /// Threads to hold on the host during the experiment.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    populate_threads: u64,
    /// Sleeping processes to hold on the host during the experiment.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=20_000))]
    populate_processes: u64,
}

impl Populate {
    fn ask(&self) -> Ask {
        Ask {
            sockets: self.populate_sockets as usize,
            threads: self.populate_threads as usize,
            processes: self.populate_processes as usize,
        }
    }
}

#[derive(Debug, Args)]
#[group(multiple = false)]
struct PinArgs {
    /// Pin the victim and the observer to the same CPU.
    #[arg(long)]
    same_cpu: bool,
    /// Pin the victim to one CPU and the observer to another.
    #[arg(long)]
    other_cpu: bool,
}

impl PinArgs {
    fn pin(&self) -> Pin {
        match (self.same_cpu, self.other_cpu) {
            (true, _) => Pin::SameCpu,
            (_, true) => Pin::OtherCpu,
            _ => Pin::Free,
        }
    }
}

fn parse_victim(s: &str) -> Result<Victim, String> {
    s.parse().map_err(|e: topdeck_lab::Error| e.to_string())
}

fn parse_rate(s: &str) -> Result<Option<u32>, String> {
    match s {
        "flat" => Ok(None),
        _ => match s.parse::<u32>() {
            Ok(hz) if hz > 0 => Ok(Some(hz)),
            _ => Err(format!(
                "{s:?} is not a rate: a whole number of Hz, or `flat`"
            )),
        },
    }
}

fn parse_pin(s: &str) -> Result<Pin, String> {
    match s {
        "other-cpu" => Ok(Pin::OtherCpu),
        "same-cpu" => Ok(Pin::SameCpu),
        "free" => Ok(Pin::Free),
        _ => Err(format!(
            "{s:?} is not a placement: other-cpu, same-cpu or free"
        )),
    }
}

fn parse_exporter(s: &str) -> Result<selftest::Exporter, String> {
    match s {
        "topdeck" => Ok(selftest::Exporter::Topdeck),
        "prometheus" => Ok(selftest::Exporter::Prometheus),
        _ => Err(format!("{s:?} is not a library: topdeck or prometheus")),
    }
}

fn parse_also(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, program)) if !name.is_empty() && !program.is_empty() => {
            Ok((name.to_owned(), PathBuf::from(program)))
        }
        _ => Err(format!(
            "{s:?} is not NAME=PROGRAM (e.g. go=lab-out/go-ticker)"
        )),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (try `2s` or `500ms`)"))?;
    if d < Duration::from_millis(10) || d > Duration::from_secs(3600) {
        return Err("the duration must be between 10ms and 1h".into());
    }
    Ok(d)
}

/// Runs one lab experiment.
pub fn run(out: &mut impl Write, args: LabArgs) -> Result<()> {
    let helper = || Helper::current_exe(&["child"]).context("find the topdeck-lab binary");
    let quick = args.quick;
    let (name, text) = match args.experiment {
        Experiment::Child { args } => {
            return topdeck_lab::tasks::run(&args).context("lab helper");
        }
        Experiment::Report => return write_report(out, &args.out),
        Experiment::Observer {
            victim,
            iterations,
            populate,
            pin,
            command,
        } => {
            let mut cfg = observer::Config::new(sibling::resolve(command)?, helper()?);
            cfg.victim = victim;
            cfg.populate = populate.ask();
            cfg.pin = pin.pin();
            if quick {
                cfg = cfg.quick();
            }
            if let Some(n) = iterations {
                cfg.iterations = n as usize;
            }
            let r = observer::run(&cfg).context("lab observer")?;
            save(&args.out, "observer", &r)?;
            ("observer", observer::table(&r))
        }
        Experiment::Contend {
            rounds,
            populate,
            command,
        } => {
            let mut cfg = contend::Config::new(sibling::resolve(command)?, helper()?);
            cfg.populate = populate.ask();
            if quick {
                cfg = cfg.quick();
            }
            if let Some(n) = rounds {
                cfg.rounds = n as usize;
            }
            let r = contend::run(&cfg).context("lab contend")?;
            save(&args.out, "contend", &r)?;
            ("contend", contend::table(&r))
        }
        Experiment::Selftest {
            duration,
            rounds,
            writers,
            counters,
            readers,
            rates,
            pins,
            exporters,
        } => {
            let mut cfg = selftest::Config::default();
            if quick {
                cfg = cfg.quick();
            }
            if !readers.is_empty() {
                cfg.readers = readers.iter().map(|&n| n as usize).collect();
            }
            if !rates.is_empty() {
                cfg.rates = rates;
            }
            if !pins.is_empty() || !exporters.is_empty() {
                let pins = if pins.is_empty() {
                    vec![cfg.setups[0].1]
                } else {
                    pins
                };
                let exporters = if exporters.is_empty() {
                    vec![selftest::Exporter::Topdeck]
                } else {
                    exporters
                };
                cfg.setups = exporters
                    .iter()
                    .flat_map(|&e| match e {
                        selftest::Exporter::Topdeck => pins.iter().map(|&p| (e, p)).collect(),
                        selftest::Exporter::Prometheus => vec![(e, pins[0])],
                    })
                    .collect();
            }
            if let Some(d) = duration {
                cfg.duration = d;
            }
            if let Some(n) = rounds {
                cfg.rounds = n as usize;
            }
            cfg.writers = writers as usize;
            cfg.counters = counters as usize;
            let r = selftest::run(&cfg).context("lab selftest")?;
            save(&args.out, "selftest", &r)?;
            ("selftest", selftest::table(&r))
        }
        Experiment::Idle {
            duration,
            no_strace,
            also,
        } => {
            let mut cfg = idle::Config::new(helper()?);
            if quick {
                cfg = cfg.quick();
            }
            if let Some(d) = duration {
                cfg.duration = d;
            }
            cfg.strace = !no_strace;
            cfg.also = also;
            let r = idle::run(&cfg).context("lab idle")?;
            save(&args.out, "idle", &r)?;
            ("idle", idle::table(&r))
        }
    };
    writeln!(out, "== lab {name} ==\n{text}")?;
    write_report(out, &args.out)
}

/// Writes the HTML report; a saved result it cannot read is a warning on
/// stderr (the run that just finished is saved and in the report).
fn write_report(out: &mut impl Write, dir: &std::path::Path) -> Result<()> {
    let written = topdeck_lab::report::write(dir)
        .with_context(|| format!("write the report in {}", dir.display()))?;
    for e in &written.unreadable {
        eprintln!("topdeck-lab: warning: left out of the report: {e}");
    }
    writeln!(out, "report: {}", written.path.display())?;
    Ok(())
}

fn save(dir: &std::path::Path, name: &str, r: &impl serde::Serialize) -> Result<()> {
    experiments::save(dir, name, r)
        .with_context(|| format!("save the {name} result in {}", dir.display()))?;
    Ok(())
}
