// SPDX-License-Identifier: Apache-2.0
//! `topdeck watch`: re-read a source each interval (every source of a
//! process, for a pid) and print what happened in it: counters as rates, gauges as values, histograms as a
//! rate and quantiles of the observations made during the interval (the
//! difference of bucket counts between two snapshots, not since start),
//! summaries as a rate and the mean of the interval's observations.
//!
//! Between lines it sleeps on the stop request and on stdout: SIGTERM,
//! SIGINT or SIGHUP, or the reader of its output going away (`| head -1`,
//! a closed terminal), end it at once instead of after the interval.

use std::io::{self, IsTerminal, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use topdeck::{Change, Liveness, MetricInfo, Snapshot};

use crate::sources::PortholeArgs;
use crate::stop;
use crate::{render, select};

/// Quantiles shown for each interval.
const QUANTILES: [(&str, f64); 2] = [("p50", 0.5), ("p99", 0.99)];

/// Watches `target` every `interval`, `count` times or until interrupted.
/// Stops early, saying so, when the writer dies; quietly when its output
/// is gone; and on a stop signal, which `main` then dies of.
pub fn run(
    out: &mut impl Write,
    target: &str,
    sources: &PortholeArgs,
    filters: &[String],
    interval: Duration,
    count: Option<u64>,
) -> Result<()> {
    let stop = stop::install().context("cannot handle the stop signals")?;
    // A pid is every source of that process (a JVM's hsperfdata and its
    // topdeck registry); any other target, the one it names.
    let mut readers = select::open_process(target, sources)?;
    let styled = io::stdout().is_terminal();
    let wanted = |m: &MetricInfo| {
        filters.is_empty() || filters.iter().any(|f| m.name.starts_with(f.as_str()))
    };
    let mut prev = readers
        .iter_mut()
        .map(select::Target::snapshot)
        .collect::<Result<Vec<Snapshot>>>()?;
    if !filters.is_empty() && !prev.iter().flat_map(|s| s.iter()).any(|(m, _)| wanted(m)) {
        select::warn(format!(
            "no metric of {} starts with {}; watching in case one is registered",
            readers[0].source.path.display(),
            filters.join(" or ")
        ));
    }
    let until = match count {
        Some(n) => format!("{n} time{}", if n == 1 { "" } else { "s" }),
        None => "until interrupted".into(),
    };
    let first = &readers[0].source;
    let names: Vec<String> = readers.iter().map(|r| source_name(&r.source)).collect();
    writeln!(
        out,
        "watching {} (pid {}), {}, every {}, {until}",
        first.process,
        first.pid.map_or_else(|| "-".into(), |p| p.to_string()),
        names.join(" + "),
        humantime::format_duration(interval)
    )?;
    if readers.iter().all(|r| r.source.liveness == Liveness::Dead) {
        writeln!(
            out,
            "state: dead (the writer is gone; its values no longer change; `topdeck show` prints them)"
        )?;
        return Ok(());
    }
    let started = Instant::now();
    let mut prev_at = started;
    let mut next = started;
    let mut n = 0u64;
    // Nobody left to read ends it too: the next line would only fail.
    while count.is_none_or(|c| n < c) {
        if !stop.tick(&mut next, interval, Some(io::stdout().as_fd())) {
            break;
        }
        let snaps = readers
            .iter_mut()
            .map(select::Target::snapshot)
            .collect::<Result<Vec<Snapshot>>>()?;
        let at = Instant::now();
        n += 1;
        let secs = at.duration_since(prev_at).as_secs_f64();
        // The wall-clock time, to line the interval up with logs and
        // dashboards, and the time since the watch began.
        let head = format!(
            "--- {} +{:.1}s",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
            at.duration_since(started).as_secs_f64()
        );
        writeln!(out, "{}", render::bold(&head, styled))?;
        for ((before, now), name) in prev.iter().zip(&snaps).zip(&names) {
            if readers.len() > 1 {
                writeln!(out, "  {name}")?;
            }
            let rows: Vec<Vec<String>> = interval_rows(before, now, secs, &wanted);
            for line in render::table(&rows) {
                writeln!(out, "  {line}")?;
            }
        }
        out.flush()?;
        if readers.iter().all(|r| r.source.liveness == Liveness::Dead) {
            writeln!(out, "state: dead (the writer is gone); stopping")?;
            break;
        }
        (prev, prev_at) = (snaps, at);
    }
    Ok(())
}

/// `registry <name>`, or the kind of another runtime's source.
fn source_name(s: &topdeck_sources::Source) -> String {
    match s.registry {
        Some(_) => format!("registry {}", s.registry_or_kind()),
        None => format!("source {}", s.registry_or_kind()),
    }
}

/// One `[series, what happened]` row per wanted metric of `now`.
fn interval_rows(
    before: &Snapshot,
    now: &Snapshot,
    secs: f64,
    wanted: &dyn Fn(&MetricInfo) -> bool,
) -> Vec<Vec<String>> {
    now.since(before)
        .iter()
        .filter(|s| wanted(s.info))
        .map(|s| {
            vec![
                render::series(s.info),
                interval_text(s.info, &s.change(), secs),
            ]
        })
        .collect()
}

/// What one metric did over an interval of `secs`.
fn interval_text(m: &MetricInfo, change: &Change, secs: f64) -> String {
    match change {
        Change::Counter(d) => format!("{}  +{d}", render::rate(*d as f64 / secs, &m.unit)),
        Change::CounterReset { before, now } => format!("reset: {before} -> {now}"),
        Change::Gauge(g) => render::integer(i128::from(*g), &m.unit),
        Change::GaugeF64(g) => render::value(*g, &m.unit),
        Change::Histogram(d) => format!(
            "{}  +{}  {}",
            render::rate(d.count as f64 / secs, ""),
            d.count,
            render::quantiles(|q| d.quantile(q), &QUANTILES, &m.unit)
        ),
        Change::CounterF64(d) => format!(
            "{}  +{}",
            render::rate(d / secs, &m.unit),
            render::value(*d, &m.unit)
        ),
        Change::CounterF64Reset { before, now } => format!(
            "reset: {} -> {}",
            render::number(*before),
            render::number(*now)
        ),
        Change::Buckets(d) => format!(
            "{}  +{}  {}  mean {}",
            render::rate(d.count / secs, ""),
            render::number(d.count),
            render::quantiles(|q| d.quantile(q), &QUANTILES, &m.unit),
            d.mean().map_or("-".into(), |v| render::value(v, &m.unit))
        ),
        Change::Summary { count, sum } => format!(
            "{}  +{}  mean {}",
            render::rate(count / secs, ""),
            render::number(*count),
            if *count > 0.0 {
                render::value(sum / count, &m.unit)
            } else {
                "-".into()
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck::{HistogramValue, MetricKind};

    fn hist(buckets: Vec<u64>) -> HistogramValue {
        HistogramValue {
            schema: 0,
            zero_threshold: 0.0,
            zero_count: 0,
            min_index: 0,
            count: buckets.iter().sum(),
            buckets,
            sum: 0.0,
            max: Some(1e9),
        }
    }

    fn info(kind: MetricKind, unit: &str) -> MetricInfo {
        MetricInfo {
            kind,
            name: "x".into(),
            labels: vec![],
            help: String::new(),
            unit: unit.into(),
        }
    }

    #[test]
    fn interval_histograms_hold_only_the_new_observations() {
        // Since start, most observations are in bucket 0 ((0.5, 1]); during
        // the interval, all 10 new ones fell in bucket 2 ((2, 4]).
        let m = info(MetricKind::Histogram, "seconds");
        let d = hist(vec![50, 1, 10]).since(&hist(vec![50, 1, 0]));
        let t = interval_text(&m, &Change::Histogram(d), 1.0);
        assert!(t.starts_with("10.0/s  +10  p50 2."), "{t}");
    }

    #[test]
    fn counters_show_rate_and_increase() {
        let m = info(MetricKind::Counter, "");
        let t = interval_text(&m, &Change::Counter(100), 0.5);
        assert_eq!(t, "200.0/s  +100");
        let b = info(MetricKind::Counter, "bytes");
        let t = interval_text(&b, &Change::Counter(2048), 1.0);
        assert_eq!(t, "2.0KiB/s  +2048");
        let reset = Change::CounterReset { before: 5, now: 1 };
        assert_eq!(interval_text(&m, &reset, 1.0), "reset: 5 -> 1");
    }

    #[test]
    fn foreign_values_show_rates_quantiles_and_means() {
        let m = info(MetricKind::Counter, "seconds");
        let t = interval_text(&m, &Change::CounterF64(0.25), 0.5);
        assert_eq!(t, "500ms/s  +250ms");
        let reset = Change::CounterF64Reset {
            before: 9.5,
            now: 0.25,
        };
        assert_eq!(interval_text(&m, &reset, 1.0), "reset: 9.5000 -> 0.2500");
        let h = info(MetricKind::Histogram, "seconds");
        let d = topdeck::BucketsValue {
            buckets: vec![(0.1, 0.0), (0.2, 10.0), (f64::INFINITY, 10.0)],
            count: 10.0,
            sum: 1.5,
        };
        let t = interval_text(&h, &Change::Buckets(d), 2.0);
        assert_eq!(t, "5.00/s  +10  p50 150ms  p99 199ms  mean 150ms");
        let s = Change::Summary {
            count: 4.0,
            sum: 1.0,
        };
        assert_eq!(interval_text(&h, &s, 1.0), "4.00/s  +4  mean 250ms");
        let quiet = Change::Summary {
            count: 0.0,
            sum: 0.0,
        };
        assert_eq!(interval_text(&h, &quiet, 1.0), "0/s  +0  mean -");
    }

    #[test]
    fn a_quiet_histogram_has_no_quantiles() {
        let m = info(MetricKind::Histogram, "seconds");
        let h = hist(vec![3, 0, 0]);
        assert_eq!(
            interval_text(&m, &Change::Histogram(h.since(&h)), 1.0),
            "0/s  +0  p50 -  p99 -"
        );
    }
}
