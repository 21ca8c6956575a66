// SPDX-License-Identifier: Apache-2.0
//! `topdeck`: look at the metrics every process on this host publishes,
//! without disturbing them. Every command is a reader: it maps files
//! read-only and never writes to a writer's memory.

mod cmd;
mod render;
mod select;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Continuous, non-interfering visibility for Linux hosts.
///
/// Reads the registries in `TOPDECK_DIR` if set, else in every
/// `/dev/shm/topdeck-<uid>` directory.
#[derive(Debug, Parser)]
#[command(name = "topdeck", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the registries on this host: pid, process, metrics, alive or dead.
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show every metric of one registry; histograms as count, p50, p90, p99, max.
    Show {
        /// A pid, a process name, or the path of a registry file.
        target: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Re-read a registry every interval and print rates.
    Watch {
        /// A pid, a process name, or the path of a registry file.
        target: String,
        /// Metric names (or name prefixes) to watch; all when none are given.
        metrics: Vec<String>,
        /// Time between reads, e.g. `1s` or `250ms`.
        #[arg(long, default_value = "1s", value_parser = parse_interval)]
        interval: Duration,
        /// Stop after this many intervals (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Remove the files of dead writers, and only those.
    Gc {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(10) {
        return Err("the interval must be at least 10ms".into());
    }
    Ok(d)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Ls { json } => cmd::ls::run(json),
        Command::Show { target, json } => cmd::show::run(&target, json),
        Command::Watch {
            target,
            metrics,
            interval,
            count,
        } => cmd::watch::run(&target, &metrics, interval, count),
        Command::Gc { json } => cmd::gc::run(json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
