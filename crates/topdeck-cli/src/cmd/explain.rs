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
//!
//! With `--at TIME`, the same windows of the past, from the service's
//! registry and the agent's as `topdeck record` kept them, one window
//! after another from TIME without waiting. A recording keeps no thread's
//! wait: each request's wait is known where its timer measured it (the
//! recorded companions), the threads' wait over a window is unknown and
//! said so, and who held the CPU is the recorded agent's charges for the
//! service's cgroup.

use std::io::{self, IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use topdeck::Liveness;
use topdeck_explain::{Explainer, Reading, Service, Window};
use topdeck_sources::Source;

use crate::cmd::sched;
use crate::recording::{self, when};
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
    /// Stop after this many windows (default: until interrupted; with
    /// --at, until the recording ends).
    #[arg(long, value_parser = crate::parse_count)]
    count: Option<u64>,
    /// Print one JSON object per window (JSON lines) instead of text.
    #[arg(long)]
    json: bool,
    /// Explain the past: windows from TIME (`03:12`, `yesterday 03:12`,
    /// `-10m` or RFC 3339) on, each from the frames recorded at or just
    /// before its ends, printed at once. From what `topdeck record` kept:
    /// the service's registry (its latencies, and each request's CPU wait
    /// where its timers measured it) and the agent's (who held the CPU);
    /// its threads' wait over a window was not recorded and shows as
    /// unknown.
    #[arg(long, value_name = "TIME", value_parser = recording::parse_when, allow_hyphen_values = true)]
    at: Option<recording::When>,
    /// The recording to read (default: where `topdeck record` keeps it:
    /// /var/lib/topdeck/history for root, else
    /// $XDG_STATE_HOME/topdeck/history).
    #[arg(long, value_name = "DIR", requires = "at")]
    history: Option<PathBuf>,
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
    /// Of a recorded window, the frames it is between, ns since the Unix
    /// epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    from_unix_ns: Option<u64>,
    /// See `from_unix_ns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    to_unix_ns: Option<u64>,
    service: &'a Followed,
    #[serde(flatten)]
    window: &'a Window,
}

pub fn run(out: &mut impl Write, args: &Args) -> Result<()> {
    if let Some(at) = &args.at {
        return run_at(out, args, at);
    }
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
        writeln!(out, "{}", heading(&service, &before, args, None))?;
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
        let json = JsonWindow {
            time,
            from_unix_ns: None,
            to_unix_ns: None,
            service: &service,
            window: &window,
        };
        emit(out, &json, args.json, styled)?;
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

/// What names a recorded source from one frame to the next: another
/// writer at the same path is another source.
fn same_source(a: &Source, b: &Source) -> bool {
    (a.kind, &a.path, a.pid, a.start_ticks, a.created_unix_ns)
        == (b.kind, &b.path, b.pid, b.start_ticks, b.created_unix_ns)
}

/// One recorded frame of the service, read.
struct Frame {
    unix_ns: u64,
    reading: Reading,
    liveness: Liveness,
}

/// The frame at or before `at_ns` with `followed` in it, read; `None`
/// when the service was not recorded then. Registries that only posed as
/// the agent are said once each in `untrusted`.
fn read_frame(
    history: &topdeck_history::History,
    at_ns: u64,
    followed: &Source,
    service: &mut Service,
    origin_ns: u64,
    untrusted: &mut Vec<String>,
) -> Result<Option<Frame>> {
    let keep = |s: &Source| same_source(s, followed) || sched::named_agent(s);
    let Some(m) = history.at(at_ns, &keep)? else {
        return Ok(None);
    };
    if let Some(d) = &m.damage {
        select::warn(d);
    }
    let Some((source, snap)) = m.sources.iter().find(|(s, _)| same_source(s, followed)) else {
        return Ok(None);
    };
    let agents = sched::agents(&m);
    let (agent, posers) = topdeck_sched::observe::pick_recorded(
        &sched::borrowed(&agents),
        topdeck_sched::trust::reader_uid(),
    );
    for u in posers {
        let u = u.to_string();
        if !untrusted.contains(&u) {
            untrusted.push(u);
        }
    }
    let at_secs = m.unix_ns.saturating_sub(origin_ns) as f64 * 1e-9;
    Ok(Some(Frame {
        unix_ns: m.unix_ns,
        reading: service.read_recorded(snap, agent.map(|a| a.snapshot), at_secs),
        liveness: source.liveness,
    }))
}

/// `explain --at`: windows of a recording from TIME on.
fn run_at(out: &mut impl Write, args: &Args, asked: &recording::When) -> Result<()> {
    let at = asked.unix_ns;
    let (dir, history) = recording::open(&args.history)?;
    let named = select::naming(&args.target);
    let Some(first) = history.at(at, &named)? else {
        let asked = format!("at or before {}", asked.said());
        return Err(recording::nothing_recorded(&history, &dir, &asked));
    };
    let chosen = select::choose(
        &args.target,
        first.sources.iter().collect(),
        false,
        |(s, _)| s,
    );
    let Some((source, _)) = chosen.first() else {
        let then = format!("at {}", when(first.unix_ns));
        return Err(recording::not_recorded(
            &history,
            &args.target,
            &then,
            first.unix_ns,
        ));
    };
    let source = source.clone();
    let end_ns = history.summary(false)?.to_unix_ns.unwrap_or(first.unix_ns);
    let mut service = Followed {
        process: source.process.clone(),
        source: source.registry_or_kind().to_string(),
        registry: source.registry.is_some(),
        service: Service::recorded(source.pid, source.container.as_deref()),
    };
    let mut untrusted = Vec::new();
    let origin = first.unix_ns;
    drop(first);
    let read = |at_ns: u64, service: &mut Followed, untrusted: &mut Vec<String>| {
        read_frame(
            &history,
            at_ns,
            &source,
            &mut service.service,
            origin,
            untrusted,
        )
    };
    let Some(mut before) = read(origin, &mut service, &mut untrusted)? else {
        bail!(
            "{} could not be read back at {}",
            source.path.display(),
            when(origin)
        );
    };
    if args.json && before.reading.culprits.is_none() {
        select::warn(format!(
            "nobody is named: {}",
            service.service.why_nobody_named()
        ));
    }
    if !args.json {
        for u in &untrusted {
            writeln!(out, "note: ignored {u}")?;
        }
        let recorded = format!("as recorded in {} from {}", dir.display(), when(origin));
        writeln!(
            out,
            "{}",
            heading(&service, &before.reading, args, Some(&recorded))
        )?;
        if before.reading.latencies.is_empty() {
            select::warn(format!(
                "{} had no latency histogram (a histogram in seconds) when recorded at {}",
                source.path.display(),
                when(origin)
            ));
        }
    }
    let styled = io::stdout().is_terminal() && !args.json;
    let mut explainer = Explainer::default();
    let window = args.window.as_nanos() as u64;
    let mut n = 0u64;
    let mut k = 0u64;
    while args.count.is_none_or(|c| n < c) {
        k += 1;
        let boundary = at.saturating_add(window.saturating_mul(k));
        if boundary > end_ns {
            if args.count.is_some() && !args.json {
                writeln!(out, "the recording ends at {}; stopping", when(end_ns))?;
            }
            break;
        }
        let Some(after) = read(boundary, &mut service, &mut untrusted)? else {
            if !args.json {
                writeln!(
                    out,
                    "the service was not recorded at {}; stopping",
                    when(boundary)
                )?;
            }
            break;
        };
        if after.unix_ns == before.unix_ns {
            select::warn(format!(
                "nothing recorded between {} and {}: that window is skipped",
                when(before.unix_ns),
                when(boundary)
            ));
            continue;
        }
        let w = explainer.window(&before.reading, &after.reading);
        let time =
            humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_nanos(after.unix_ns))
                .to_string();
        n += 1;
        let json = JsonWindow {
            time,
            from_unix_ns: Some(before.unix_ns),
            to_unix_ns: Some(after.unix_ns),
            service: &service,
            window: &w,
        };
        emit(out, &json, args.json, styled)?;
        if after.liveness == Liveness::Dead {
            if !args.json {
                writeln!(out, "state: dead (the service was gone); stopping")?;
            }
            break;
        }
        before = after;
    }
    out.flush()?;
    Ok(())
}

/// The first line: who is explained, `recorded` (where and from when)
/// for the past, and what each window can say.
/// One window, as a JSON line or as text.
fn emit(out: &mut impl Write, w: &JsonWindow, json: bool, styled: bool) -> Result<()> {
    if json {
        serde_json::to_writer(&mut *out, w)?;
        writeln!(out)?;
        return Ok(());
    }
    write_window(out, &w.time, w.window, styled)
}

fn heading(s: &Followed, first: &Reading, args: &Args, recorded: Option<&str>) -> String {
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
        "explaining {} (pid {}, {} {}, cgroup {}){} every {}: {level}; {who}",
        s.process,
        s.service.pid.map_or("-".into(), |p| p.to_string()),
        if s.registry { "registry" } else { "source" },
        s.source,
        s.service.cgroup.as_deref().unwrap_or("-"),
        recorded.map(|r| format!(" {r},")).unwrap_or_default(),
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
    let waited = match (w.threads, w.wait) {
        (Some(threads), Some(wait)) => format!(
            "{threads} threads waited {} for a CPU",
            render::value(wait, "seconds")
        ),
        _ => "its threads' CPU wait unknown (not recorded)".to_string(),
    };
    let head = format!(
        "--- {time} window {:.1}s: {waited}{}",
        w.seconds,
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
