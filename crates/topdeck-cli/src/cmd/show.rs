// SPDX-License-Identifier: Apache-2.0
//! `topdeck show`: every metric of one registry, as a table or as JSON.
//! A registry whose writer died is still shown, with `state: dead`.
//!
//! The JSON `value` of each metric by `kind`: a number for counters and
//! gauges (`null` for NaN and infinities); for histograms `{count, sum,
//! p50, p90, p99, max, buckets}`, `buckets` being `[upper_bound, count]`
//! of each non-empty bucket (not cumulative). Another runtime's values
//! keep these shapes: a float counter is a number; a fixed-bucket
//! histogram has float counts, `max` null, quantiles interpolated as
//! Prometheus' `histogram_quantile` does, and its `+Inf` bucket's bound
//! null; a summary (`kind` `summary`) is `{count, sum, mean}`.
//!
//! With `--at`, the same of the sources as the flight recorder recorded
//! them at the last frame at or before that time, chosen among those
//! recorded then by the same rules; the JSON has one more field,
//! `recorded_at` (RFC 3339, UTC, to the nanosecond: given back to
//! `--at`, it names the same frame).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use topdeck::{BucketsValue, HistogramValue, Liveness, MetricInfo, Snapshot, Value};
use topdeck_history::History;
use topdeck_sources::{JvmSummary, Kind, Source};

use crate::recording::{self, When};
use crate::sources::PortholeArgs;
use crate::{render, select};

/// Quantiles shown for histograms, and their JSON keys.
const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

/// The `--json` shape.
#[derive(Serialize)]
struct Shown<'a> {
    /// With `--at`: when the frame shown was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    recorded_at: Option<&'a str>,
    path: &'a Path,
    /// `topdeck`, or the porthole's kind (`jvm`, `python`, `aeron`, `mmv`).
    source: &'static str,
    /// The writer's pid, null where none is proven (as in `ls`).
    pid: Option<u32>,
    process: &'a str,
    registry: &'a str,
    state: &'static str,
    metrics: Vec<Metric<'a>>,
    /// Text values beside the series (an MMV file's strings), in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    strings: Vec<Text<'a>>,
    /// A JVM's collection at a glance (its spaces and collectors).
    #[serde(skip_serializing_if = "Option::is_none")]
    jvm: Option<JvmSummary>,
}

/// A text value in `--json`.
#[derive(Serialize)]
struct Text<'a> {
    name: &'a str,
    value: &'a str,
}

#[derive(Serialize)]
struct Metric<'a> {
    name: &'a str,
    kind: &'static str,
    labels: BTreeMap<&'a str, &'a str>,
    help: &'a str,
    unit: &'a str,
    value: serde_json::Value,
}

/// A histogram's `value` in JSON; counts `u64` for a registry's, `f64`
/// for another runtime's.
#[derive(Serialize)]
struct HistogramJson<C> {
    count: C,
    sum: f64,
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
    max: Option<f64>,
    /// `[upper_bound, count]` of each non-empty bucket, lowest first.
    buckets: Vec<(f64, C)>,
}

impl<C> HistogramJson<C> {
    /// From `(count, sum, max)`, a quantile estimate and the buckets.
    fn new(
        (count, sum, max): (C, f64, Option<f64>),
        quantile: impl Fn(f64) -> Option<f64>,
        buckets: Vec<(f64, C)>,
    ) -> Self {
        Self {
            count,
            sum,
            p50: quantile(0.5),
            p90: quantile(0.9),
            p99: quantile(0.99),
            max,
            buckets,
        }
    }
}

/// A summary's `value` in JSON.
#[derive(Serialize)]
struct SummaryJson {
    count: f64,
    sum: f64,
    mean: Option<f64>,
}

fn json_value(v: &Value) -> Result<serde_json::Value> {
    Ok(match v {
        Value::Counter(c) => (*c).into(),
        Value::Gauge(g) => (*g).into(),
        // Not-a-number and infinities have no JSON form: they become null.
        Value::GaugeF64(g) => (*g).into(),
        Value::Histogram(h) => serde_json::to_value(HistogramJson::new(
            (h.count, h.sum, h.max),
            |q| h.quantile(q),
            h.nonzero_buckets().collect(),
        ))?,
        Value::CounterF64(c) => (*c).into(),
        Value::Buckets(h) => serde_json::to_value(HistogramJson::new(
            (h.count, h.sum, None),
            |q| h.quantile(q),
            nonzero_classic_buckets(h),
        ))?,
        &Value::Summary { count, sum } => serde_json::to_value(SummaryJson {
            count,
            sum,
            mean: (count > 0.0).then(|| sum / count),
        })?,
    })
}

/// `(upper bound, count)` of each non-empty bucket of a fixed-bucket
/// histogram: the differences of its cumulative counts.
fn nonzero_classic_buckets(h: &BucketsValue) -> Vec<(f64, f64)> {
    let mut below = 0.0;
    h.buckets
        .iter()
        .map(|&(le, cum)| {
            let n = cum - below;
            below = cum;
            (le, n)
        })
        .filter(|&(_, n)| n > 0.0)
        .collect()
}

/// A fixed-bucket histogram as `count N  sum …  mean …  p50 …  p90 …  p99 …`.
fn buckets_text(h: &BucketsValue, unit: &str) -> String {
    format!(
        "{}  {}",
        render::count_sum_mean(h.count, h.sum, unit),
        render::quantiles(|q| h.quantile(q), &QUANTILES, unit)
    )
}

/// A histogram as `count N  p50 …  p90 …  p99 …  max …`.
fn histogram_text(h: &HistogramValue, unit: &str) -> String {
    let max = h.max.map_or("-".into(), |m| render::value(m, unit));
    format!(
        "count {}  {}  max {max}",
        h.count,
        render::quantiles(|q| h.quantile(q), &QUANTILES, unit)
    )
}

/// A value as a person reads it, in the metric's unit.
fn value_text(m: &MetricInfo, v: &Value) -> String {
    match v {
        Value::Counter(c) => render::integer(i128::from(*c), &m.unit),
        Value::Gauge(g) => render::integer(i128::from(*g), &m.unit),
        Value::GaugeF64(g) => render::value(*g, &m.unit),
        Value::Histogram(h) => histogram_text(h, &m.unit),
        Value::CounterF64(c) => render::value(*c, &m.unit),
        Value::Buckets(h) => buckets_text(h, &m.unit),
        &Value::Summary { count, sum } => render::count_sum_mean(count, sum, &m.unit),
    }
}

/// Shows the source `target` names; for a pid, every source of that
/// process (as a JSON array when there are several).
pub fn run(out: &mut impl Write, target: &str, sources: &PortholeArgs, json: bool) -> Result<()> {
    let mut targets = select::open_process(target, sources)?;
    let snaps = targets
        .iter_mut()
        .map(select::Target::snapshot)
        .collect::<Result<Vec<_>>>()?;
    let read: Vec<_> = targets.iter().map(|t| &t.source).zip(&snaps).collect();
    write(out, &read, json, None)
}

/// Shows the sources `target` names as recorded in the store at `dir`
/// at `when`: the last frame at or before it.
pub fn run_at(
    out: &mut impl Write,
    target: &str,
    json: bool,
    when: &When,
    dir: &Path,
) -> Result<()> {
    let history = History::open(dir)?;
    let named = select::naming(target);
    let Some(moment) = history.at(when.unix_ns, &named)? else {
        let asked = format!("at or before {}", when.said());
        return Err(recording::nothing_recorded(&history, dir, &asked));
    };
    if let Some(damage) = &moment.damage {
        select::warn(damage);
    }
    let at = topdeck_history::format_time(moment.unix_ns);
    let chosen = select::choose(target, moment.sources, true, |(s, _)| s);
    if chosen.is_empty() {
        let then = format!("at {at}");
        return Err(recording::not_recorded(
            &history,
            target,
            &then,
            moment.unix_ns,
        ));
    }
    if !json {
        writeln!(
            out,
            "as recorded at {at}, the last frame at or before {}",
            when.said()
        )?;
        writeln!(out)?;
    }
    let recorded_at = recording::exact(moment.unix_ns);
    let read: Vec<_> = chosen.iter().map(|(s, snap)| (s, snap)).collect();
    write(out, &read, json, Some(&recorded_at))
}

/// Writes the sources read, as text or JSON (an array when there are
/// several); `recorded_at` when they were recorded, not read now.
fn write(
    out: &mut impl Write,
    read: &[(&Source, &Snapshot)],
    json: bool,
    recorded_at: Option<&str>,
) -> Result<()> {
    if json {
        let mut shown = read
            .iter()
            .map(|(source, snap)| json_of(source, snap, recorded_at))
            .collect::<Result<Vec<_>>>()?;
        match shown.len() {
            1 => serde_json::to_writer_pretty(&mut *out, &shown.swap_remove(0))?,
            _ => serde_json::to_writer_pretty(&mut *out, &shown)?,
        }
        writeln!(out)?;
        return Ok(());
    }
    for (i, (source, snap)) in read.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        write_text(out, source, snap, recorded_at.is_some())?;
    }
    Ok(())
}

/// A JVM's collection at a glance, above its raw counters: jstat
/// `-gcutil`'s columns (percent of each space's committed bytes in use,
/// collections and their seconds), the share of its life spent
/// collecting, and each space's bytes.
fn write_jvm(out: &mut impl Write, jvm: &JvmSummary) -> Result<()> {
    writeln!(out)?;
    writeln!(out, "garbage collection (as jstat -gcutil):")?;
    let mut head: Vec<String> = jvm.spaces.iter().map(|s| s.name.to_string()).collect();
    let mut row: Vec<String> = jvm
        .spaces
        .iter()
        .map(|s| format!("{:.2}", s.percent()))
        .collect();
    for c in &jvm.collectors {
        head.extend([c.name.to_string(), format!("{}T", c.name)]);
        row.extend([format!("{:.0}", c.count), format!("{:.3}", c.seconds)]);
    }
    head.extend(["GCT".into(), "GC SHARE".into()]);
    row.extend([
        format!("{:.3}", jvm.gc_seconds),
        jvm.gc_share()
            .map_or("-".into(), |s| format!("{:.2}%", s * 100.0)),
    ]);
    for line in render::table(&[head, row]) {
        writeln!(out, "  {line}")?;
    }
    let bytes = |v: f64| render::value(v, "bytes");
    let spaces: Vec<String> = jvm
        .spaces
        .iter()
        .map(|s| format!("{} {} of {}", s.name, bytes(s.used), bytes(s.capacity)))
        .collect();
    writeln!(out, "  used of committed: {}", spaces.join(", "))?;
    Ok(())
}

/// One source in the `--json` shape.
pub(crate) fn json_of(
    source: &Source,
    snap: &Snapshot,
    recorded_at: Option<&str>,
) -> Result<serde_json::Value> {
    let metrics = snap
        .iter()
        .map(|(m, v)| {
            Ok(Metric {
                name: &m.name,
                kind: render::kind(m.kind, v),
                labels: m
                    .labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect(),
                help: &m.help,
                unit: &m.unit,
                value: json_value(v)?,
            })
        })
        .collect::<Result<_>>()?;
    let shape = Shown {
        recorded_at,
        path: &source.path,
        source: source.kind.name(),
        pid: source.pid,
        process: &source.process,
        registry: source.registry_or_kind(),
        state: render::state(source.liveness),
        metrics,
        strings: source
            .texts
            .iter()
            .map(|(name, value)| Text { name, value })
            .collect(),
        jvm: source.jvm_summary(snap),
    };
    Ok(serde_json::to_value(shape)?)
}

/// One source as text: who wrote it, then a table of its metrics.
/// A `recorded` source is the past: its file is not for `gc` to mind.
fn write_text(
    out: &mut impl Write,
    source: &Source,
    snap: &Snapshot,
    recorded: bool,
) -> Result<()> {
    let state = match source.liveness {
        Liveness::Alive => "alive".to_owned(),
        Liveness::Dead => format!(
            "dead (the writer is gone: these are its last values{})",
            // Other runtimes' files are theirs to remove, at their start-up or cleanup.
            match source.kind {
                Kind::Topdeck if !recorded => "; `topdeck gc` removes the file",
                _ => "",
            }
        ),
    };
    writeln!(out, "process: {}", source.process)?;
    let pid = source.pid.map_or_else(|| "-".into(), |p| p.to_string());
    writeln!(out, "pid: {pid}")?;
    writeln!(out, "source: {}", source.kind)?;
    if let Some(registry) = &source.registry {
        writeln!(out, "registry: {registry}")?;
    }
    if let Some(container) = &source.container {
        writeln!(out, "container: {container}")?;
    }
    writeln!(out, "state: {state}")?;
    writeln!(out, "file: {}", source.path.display())?;
    writeln!(out, "metrics: {}", snap.len())?;
    if let Some(jvm) = source.jvm_summary(snap) {
        write_jvm(out, &jvm)?;
    }
    if !snap.is_empty() {
        writeln!(out)?;
        let mut rows = vec![vec!["NAME".into(), "KIND".into(), "VALUE".into()]];
        rows.extend(snap.iter().map(|(m, v)| {
            vec![
                render::series(m),
                render::kind(m.kind, v).to_owned(),
                value_text(m, v),
            ]
        }));
        for line in render::table(&rows) {
            writeln!(out, "{line}")?;
        }
    }
    if !source.texts.is_empty() {
        writeln!(out)?;
        let mut rows = vec![vec!["STRING".into(), "VALUE".into()]];
        rows.extend(
            source
                .texts
                .iter()
                .map(|(n, v)| vec![n.clone(), format!("{v:?}")]),
        );
        for line in render::table(&rows) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(buckets: Vec<u64>, max: Option<f64>) -> HistogramValue {
        HistogramValue {
            schema: 0,
            zero_threshold: 0.0,
            zero_count: 0,
            min_index: 0,
            count: buckets.iter().sum(),
            buckets,
            sum: 6.0,
            max,
        }
    }

    #[test]
    fn histograms_show_count_quantiles_and_max_in_their_unit() {
        let h = hist(vec![0, 2, 0], Some(0.002));
        assert_eq!(
            histogram_text(&h, "seconds"),
            "count 2  p50 2.0ms  p90 2.0ms  p99 2.0ms  max 2.0ms"
        );
        assert_eq!(
            histogram_text(&hist(vec![0; 3], None), "seconds"),
            "count 0  p50 -  p90 -  p99 -  max -"
        );
    }

    #[test]
    fn empty_histograms_have_null_quantiles_in_json() {
        let v = json_value(&Value::Histogram(Box::new(hist(vec![0; 3], None)))).unwrap();
        assert_eq!(v["count"], 0);
        assert!(v["p50"].is_null() && v["max"].is_null());
        assert_eq!(v["buckets"], serde_json::json!([]));
    }

    fn classic() -> BucketsValue {
        BucketsValue {
            buckets: vec![(0.001, 1.0), (0.01, 1.0), (0.1, 3.5), (f64::INFINITY, 4.0)],
            count: 4.0,
            sum: 0.1,
        }
    }

    #[test]
    fn fixed_bucket_histograms_show_count_sum_mean_and_interpolated_quantiles() {
        // p50: rank 2 is 1 of the 2.5 in (10ms, 100ms]: 10ms + 90ms * 0.4.
        assert_eq!(
            buckets_text(&classic(), "seconds"),
            "count 4  sum 100ms  mean 25.0ms  p50 46.0ms  p90 100ms  p99 100ms"
        );
        let m = MetricInfo {
            kind: topdeck::MetricKind::Histogram,
            name: "wait_seconds".into(),
            labels: vec![],
            help: String::new(),
            unit: "seconds".into(),
        };
        let summary = Value::Summary {
            count: 2.0,
            sum: 0.5,
        };
        assert_eq!(value_text(&m, &summary), "count 2  sum 500ms  mean 250ms");
        assert_eq!(value_text(&m, &Value::CounterF64(1.5)), "1.50s");
    }

    #[test]
    fn foreign_values_keep_the_json_shapes() {
        let v = json_value(&Value::Buckets(Box::new(classic()))).unwrap();
        assert_eq!(v["count"], 4.0);
        assert!(v["max"].is_null());
        assert_eq!(v["p99"], 0.1);
        // Per-bucket counts as for a registry's histogram; +Inf has no JSON form.
        assert_eq!(
            v["buckets"],
            serde_json::json!([[0.001, 1.0], [0.1, 2.5], [null, 0.5]])
        );
        let v = json_value(&Value::Summary {
            count: 4.0,
            sum: 1.0,
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"count": 4.0, "sum": 1.0, "mean": 0.25})
        );
        let empty = json_value(&Value::Summary {
            count: 0.0,
            sum: 0.0,
        })
        .unwrap();
        assert!(empty["mean"].is_null());
        assert_eq!(json_value(&Value::CounterF64(2.5)).unwrap(), 2.5);
    }

    #[test]
    fn non_finite_gauges_become_null_in_json() {
        assert!(json_value(&Value::GaugeF64(f64::NAN)).unwrap().is_null());
    }
}
