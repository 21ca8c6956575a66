// SPDX-License-Identifier: Apache-2.0
//! `topdeck explain`: is it my code, or did my threads wait for a CPU, and
//! behind whom? Each window, every latency histogram of one service beside
//! the CPU its threads waited for over the same window and who held the
//! CPU (`topdeck_explain`), with one verdict line per histogram.
//!
//! It says which level it has: each request's own wait (the service's
//! timers measured it from the agent's thread-waits array), or the
//! threads' wait over the window spread over its requests (from the array,
//! or from `/proc/<tid>/schedstat` without one); culprits come from the
//! agent.

use std::io::{self, IsTerminal, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use topdeck::Liveness;
use topdeck_explain::{Explainer, Reading, Service, Window};

use crate::sources::PortholeArgs;
use crate::stop;
use crate::{render, select};

/// Arguments of `topdeck explain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What `show` takes: a pid; a process, registry or container name or
    /// a kind, whatever the case; a file name; or a source's path.
    target: String,
    /// The length of each window, e.g. `10s`.
    #[arg(long, default_value = "10s", value_parser = crate::parse_interval)]
    window: Duration,
    /// Stop after this many windows (default: until interrupted).
    #[arg(long, value_parser = crate::parse_count)]
    count: Option<u64>,
    /// Print one JSON object per window (JSON lines) instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    sources: PortholeArgs,
}

/// The service a run follows, as the JSON names it.
#[derive(Serialize)]
struct Followed {
    process: String,
    /// Its registry's name, or its kind.
    source: String,
    registry: bool,
    #[serde(flatten)]
    service: Service,
}

#[derive(Serialize)]
struct JsonWindow<'a> {
    time: String,
    service: &'a Followed,
    #[serde(flatten)]
    window: &'a Window,
}

pub fn run(out: &mut impl Write, args: &Args) -> Result<()> {
    let stop = stop::install().context("cannot handle the stop signals")?;
    let mut target = select::open(&args.target, &args.sources)?;
    // A prometheus_client directory is written by a pre-forked server's
    // workers, which share their cgroup: their threads are the service's.
    let mut service = Followed {
        process: target.source.process.clone(),
        source: target.source.registry_or_kind().to_string(),
        registry: target.source.registry.is_some(),
        service: Service::of(target.source.pid, target.source.serves_from_its_cgroup()),
    };
    let started = Instant::now();
    let read = |target: &mut select::Target, service: &mut Followed| -> Result<Reading> {
        let snap = target.snapshot()?;
        Ok(service.service.read(&snap, started.elapsed().as_secs_f64()))
    };
    let mut before = read(&mut target, &mut service)?;
    if let Some(why) = &service.service.waits_problem {
        select::warn(format!(
            "the agent's thread-waits array cannot be used: {why}"
        ));
    }
    if !args.json {
        writeln!(out, "{}", heading(&service, &before, args))?;
        if before.latencies.is_empty() {
            select::warn(format!(
                "{} has no latency histogram (a histogram in seconds) yet; explaining in case one is registered",
                target.source.path.display()
            ));
        }
    }
    let styled = io::stdout().is_terminal() && !args.json;
    let mut explainer = Explainer::default();
    let mut next = Instant::now();
    let mut n = 0u64;
    while args.count.is_none_or(|c| n < c) {
        if !stop.tick(&mut next, args.window, Some(io::stdout().as_fd())) {
            break;
        }
        let after = read(&mut target, &mut service)?;
        let window = explainer.window(&before, &after);
        let time = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
        n += 1;
        if args.json {
            serde_json::to_writer(
                &mut *out,
                &JsonWindow {
                    time,
                    service: &service,
                    window: &window,
                },
            )?;
            writeln!(out)?;
        } else {
            write_window(out, &time, &window, styled)?;
        }
        out.flush()?;
        if target.source.liveness == Liveness::Dead {
            if !args.json {
                writeln!(out, "state: dead (the service is gone); stopping")?;
            }
            break;
        }
        before = after;
    }
    Ok(())
}

fn heading(s: &Followed, first: &Reading, args: &Args) -> String {
    let per_request = first.latencies.iter().any(|l| l.wait.is_some());
    let level = match per_request {
        true => "CPU wait per request from its timers".to_string(),
        false => format!("CPU wait per window, {}", first.level.meaning()),
    };
    let who = match first.culprits {
        Some(_) => "who held the CPU from the topdeck agent".to_string(),
        None => format!("nobody named ({})", s.service.why_nobody_named()),
    };
    format!(
        "explaining {} (pid {}, {} {}, cgroup {}) every {}: {level}; {who}",
        s.process,
        s.service.pid.map_or("-".into(), |p| p.to_string()),
        if s.registry { "registry" } else { "source" },
        s.source,
        s.service.cgroup.as_deref().unwrap_or("-"),
        humantime::format_duration(args.window),
    )
}

fn percent(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{:.0}%", x * 100.0))
}

fn secs(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| render::value(x, "seconds"))
}

fn write_window(out: &mut impl Write, time: &str, w: &Window, styled: bool) -> Result<()> {
    let behind: Vec<String> = w
        .culprits
        .iter()
        .filter(|c| c.share >= 0.005)
        .take(3)
        .map(|c| format!("{} {:.0}%", c.who, c.share * 100.0))
        .collect();
    let head = format!(
        "--- {time} window {:.1}s: {} threads waited {} for a CPU{}",
        w.seconds,
        w.threads,
        render::value(w.wait, "seconds"),
        match behind.is_empty() {
            true => String::new(),
            false => format!("; behind {}", behind.join(", ")),
        }
    );
    writeln!(out, "{}", render::bold(&head, styled))?;
    let mut rows = vec![[
        "SERIES",
        "REQUESTS",
        "P50",
        "P99",
        "WAIT/REQ",
        "WAIT P99",
        "CPU SHARE",
    ]
    .map(String::from)
    .to_vec()];
    for r in &w.rows {
        rows.push(vec![
            r.series.clone(),
            r.requests.to_string(),
            secs(r.p50),
            secs(r.p99),
            secs(r.wait_per_request),
            secs(r.wait_p99),
            percent(r.share),
        ]);
    }
    for line in render::table(&rows) {
        writeln!(out, "  {line}")?;
    }
    for r in &w.rows {
        writeln!(out, "  {}: {}", r.series, r.verdict)?;
    }
    Ok(())
}
