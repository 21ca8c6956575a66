// SPDX-License-Identifier: Apache-2.0
//! `topdeck sched`: run-queue latency per cgroup over one window, from the
//! running agent, else from the probe loaded here, else (saying why) from
//! coarse per-task schedstats. Registries that only pose as the agent (see
//! `topdeck_sched::trust`) are ignored and named in one note each.
//!
//! With `--at TIME`, the same tables over a window of the past: the
//! agent's registry as `topdeck record` kept it at the frame at TIME and
//! at the one a window before (`topdeck_sched::observe::recorded`).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use topdeck::Liveness;
use topdeck_history::Moment;
use topdeck_sched::fallback::CoarseView;
use topdeck_sched::schema::DropReason;
use topdeck_sched::trust;
use topdeck_sched::{ErrorKind, Observation, RecordedAgent, Report, SchedView, REGISTRY_NAME};
use topdeck_sources::{Kind, Source};

use crate::recording::{self, when};
use crate::render;

/// Arguments of `topdeck sched`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long to watch, e.g. `2s`.
    #[arg(long, default_value = "2s", value_parser = crate::parse_interval)]
    window: Duration,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// The scheduler as recorded: the window that ends at the last frame
    /// at or before TIME (`03:12`, `yesterday 03:12`, `-10m` or RFC
    /// 3339), from the agent's registry as `topdeck record` kept it.
    #[arg(long, value_name = "TIME", value_parser = recording::parse_when, allow_hyphen_values = true)]
    at: Option<recording::When>,
    /// The recording to read (default: where `topdeck record` keeps it:
    /// /var/lib/topdeck/history for root, else
    /// $XDG_STATE_HOME/topdeck/history).
    #[arg(long, value_name = "DIR", requires = "at")]
    history: Option<PathBuf>,
}

pub fn run(out: &mut impl Write, args: &Args) -> Result<()> {
    if let Some(at) = &args.at {
        return run_at(out, args, at.unix_ns);
    }
    let report = topdeck_sched::observe(args.window).context("observing the scheduler")?;
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
        return Ok(());
    }
    // Before the figures, so that nobody reads a table while wondering
    // where their "agent" went.
    for u in &report.untrusted_agents {
        writeln!(out, "note: ignored {u}")?;
    }
    let secs = render::value(args.window.as_secs_f64(), "seconds");
    match &report.observation {
        Observation::Agent { pid, view } => {
            writeln!(
                out,
                "run-queue latency per cgroup over {secs} (eBPF, from topdeck agent pid {pid})"
            )?;
            write_view(out, view)
        }
        Observation::Probe { view } => {
            writeln!(out, "run-queue latency per cgroup over {secs} (eBPF, probe loaded for this window; BPF stats on)")?;
            write_view(out, view)?;
            writeln!(
                out,
                "verdicts need a baseline: run `topdeck agent` to get them"
            )?;
            Ok(())
        }
        Observation::Coarse(c) => write_coarse(out, c, &secs),
    }
}

/// What `sched --at --json` prints: the window recorded, then the report.
#[derive(Serialize)]
struct Recorded<'a> {
    /// The frame the window starts at, local time.
    recorded_from: String,
    /// The frame it ends at.
    recorded_to: String,
    /// The same, ns since the Unix epoch.
    from_unix_ns: u64,
    /// See `from_unix_ns`.
    to_unix_ns: u64,
    #[serde(flatten)]
    report: &'a Report,
}

/// Whether `s` is a registry named as the agent's: the only sources read.
pub(crate) fn named_agent(s: &Source) -> bool {
    s.kind == Kind::Topdeck && s.registry.as_deref() == Some(REGISTRY_NAME)
}

/// The `topdeck-agent` registries of a recorded moment, with what
/// [`trust::judge_recorded`] decides on.
pub(crate) fn agents(m: &Moment) -> Vec<(trust::Recorded, Option<u64>, &topdeck::Snapshot)> {
    m.sources
        .iter()
        .filter(|(s, _)| named_agent(s))
        .map(|(s, snap)| {
            let facts = trust::Recorded {
                path: s.path.clone(),
                uid: s.uid,
                pid: s.pid,
                alive: s.liveness == Liveness::Alive,
            };
            (facts, s.created_unix_ns, snap)
        })
        .collect()
}

/// The agents of [`agents`], as `observe::recorded` reads them.
pub(crate) fn borrowed<'a>(
    v: &'a [(trust::Recorded, Option<u64>, &'a topdeck::Snapshot)],
) -> Vec<RecordedAgent<'a>> {
    v.iter()
        .map(|(facts, created, snap)| RecordedAgent {
            facts,
            created_unix_ns: *created,
            snapshot: snap,
        })
        .collect()
}

/// `sched --at`: the window before the frame at `at`, as recorded.
fn run_at(out: &mut impl Write, args: &Args, at: u64) -> Result<()> {
    let (dir, history) = recording::open(&args.history)?;
    let end = recording::moment_at(&history, &dir, at, &named_agent)?;
    let window = args.window.as_nanos() as u64;
    let start = history.at(end.unix_ns.saturating_sub(window), &named_agent)?;
    for m in start.iter().chain([&end]) {
        if let Some(d) = &m.damage {
            crate::select::warn(d);
        }
    }
    let e = agents(&end);
    let s = start.as_ref().map(agents).unwrap_or_default();
    let found = topdeck_sched::observe::recorded(&borrowed(&s), &borrowed(&e));
    // No agent at the end says more than a window reaching too far back.
    let agent_at_end = || topdeck_sched::observe::recorded(&borrowed(&e), &borrowed(&e)).is_ok();
    let (report, start) = match (found, start) {
        (Ok(r), Some(start)) => (r, start),
        (Err(e), _) if e.kind() != ErrorKind::NotRecorded => return Err(e.into()),
        (_, None) if agent_at_end() => bail!(
            "the {} window before {} starts before the recording in {}, which holds {}: \
             try a shorter --window or a later time",
            humantime::format_duration(args.window),
            when(end.unix_ns),
            dir.display(),
            recording::span(&history)?
        ),
        (found, start) => bail!(
            "the scheduler agent as recorded in {} from {} to {}: {} \
             (`topdeck agent` must run, as root, while `topdeck record` does, \
             for the whole --window)",
            dir.display(),
            start.map_or("the recording's start".into(), |s| when(s.unix_ns)),
            when(end.unix_ns),
            found.err().map_or_else(String::new, |e| e.to_string())
        ),
    };
    if args.json {
        let r = Recorded {
            recorded_from: when(start.unix_ns),
            recorded_to: when(end.unix_ns),
            from_unix_ns: start.unix_ns,
            to_unix_ns: end.unix_ns,
            report: &report,
        };
        serde_json::to_writer_pretty(&mut *out, &r)?;
        writeln!(out)?;
        return Ok(());
    }
    for u in &report.untrusted_agents {
        writeln!(out, "note: ignored {u}")?;
    }
    let Observation::Agent { pid, view } = &report.observation else {
        bail!("a recording holds only the agent's figures");
    };
    let secs = render::value((end.unix_ns - start.unix_ns) as f64 / 1e9, "seconds");
    writeln!(
        out,
        "run-queue latency per cgroup over {secs} as recorded from {} to {} \
         (eBPF, from topdeck agent pid {pid}, in {})",
        when(start.unix_ns),
        when(end.unix_ns),
        dir.display()
    )?;
    write_view(out, view)
}

fn seconds(s: Option<f64>) -> String {
    s.map_or("-".into(), |s| render::value(s, "seconds"))
}

fn write_view(out: &mut impl Write, v: &SchedView) -> Result<()> {
    let mut rows = vec![[
        "CGROUP",
        "CONTAINER",
        "WAITS",
        "P50",
        "P99",
        "PREEMPTED same/other/system",
        "WAITED BEHIND",
    ]
    .map(String::from)
    .to_vec()];
    for c in &v.cgroups {
        let n = |k: &str| c.switch_out.get(k).copied().unwrap_or(0);
        let total: f64 = c.culprits.iter().map(|x| x.1).sum();
        let culprits: Vec<String> = c
            .culprits
            .iter()
            .take(3)
            .map(|(who, s)| format!("{who} {:.0}%", 100.0 * s / total.max(f64::MIN_POSITIVE)))
            .collect();
        rows.push(vec![
            c.cgroup.clone(),
            c.container.clone(),
            c.samples.to_string(),
            seconds(c.p50_seconds),
            seconds(c.p99_seconds),
            format!("{}/{}/{}", n("same_cgroup"), n("other_cgroup"), n("system")),
            culprits.join(", "),
        ]);
    }
    for line in render::table(&rows) {
        writeln!(out, "{line}")?;
    }
    if v.verdicts.is_empty() {
        writeln!(out, "verdicts: none")?;
    } else {
        writeln!(out, "verdicts:")?;
    }
    for x in &v.verdicts {
        writeln!(out, "  {x}")?;
    }
    // The table covers this command's window; verdicts are the agent's,
    // judged on its own windows: say which rule, over which windows.
    if let Some(rule) = &v.rule {
        writeln!(out, "  rule (the agent's, on its own windows): {rule}")?;
    }
    let dropped: Vec<String> = v
        .dropped
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    writeln!(
        out,
        "not measured: {}",
        if dropped.is_empty() {
            "none".into()
        } else {
            dropped.join(", ")
        }
    )?;
    // What each count means, where it is printed.
    for (reason, _) in v.dropped.iter().filter(|(_, n)| **n > 0) {
        if let Some(r) = DropReason::ALL.iter().find(|r| r.as_str() == reason) {
            writeln!(out, "  {reason}: {}", r.meaning())?;
        }
    }
    if !v.bpf_seconds_per_event.is_empty() {
        let cost: Vec<String> = v
            .bpf_seconds_per_event
            .iter()
            .map(|(p, s)| format!("{p} {}", render::value(*s, "seconds")))
            .collect();
        writeln!(out, "probe cost per event: {}", cost.join(", "))?;
    }
    Ok(())
}

fn write_coarse(out: &mut impl Write, c: &CoarseView, secs: &str) -> Result<()> {
    writeln!(out, "eBPF unavailable: {}", c.why)?;
    writeln!(
        out,
        "coarse figures over {secs} from /proc/<tid>/schedstat, cpu.stat and cpu.pressure (means, no distribution, no culprits)"
    )?;
    let mut rows = vec![[
        "CGROUP",
        "CONTAINER",
        "THREADS",
        "WAIT/s",
        "MEAN WAIT",
        "THROTTLED",
        "PSI some10",
    ]
    .map(String::from)
    .to_vec()];
    for r in &c.cgroups {
        rows.push(vec![
            r.cgroup.clone(),
            r.container.clone(),
            r.threads.to_string(),
            format!("{:.3}", r.wait_per_second),
            seconds(r.mean_wait_seconds),
            r.throttled.map_or("-".into(), |t| {
                render::value(t.throttled_ns as f64 / 1e9, "seconds")
            }),
            r.pressure_some_avg10
                .map_or("-".into(), |p| format!("{p:.1}%")),
        ]);
    }
    for line in render::table(&rows) {
        writeln!(out, "{line}")?;
    }
    if let Some(p) = c.host_pressure_some_avg10 {
        writeln!(out, "host cpu pressure (some avg10): {p:.1}%")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_count_not_measured_says_what_it_means() {
        let mut v = SchedView::default();
        v.dropped.insert("no_timestamp".into(), 1219);
        v.dropped.insert("pair_full".into(), 0);
        let mut out = Vec::new();
        write_view(&mut out, &v).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("not measured: no_timestamp 1219\n"), "{text}");
        let explained = format!("  no_timestamp: {}\n", DropReason::NoTimestamp.meaning());
        assert!(text.contains(&explained), "{text}");
        assert!(
            !text.contains("pair_full:"),
            "a zero count needs no word: {text}"
        );
    }
}
