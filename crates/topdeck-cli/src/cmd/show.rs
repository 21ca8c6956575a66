// SPDX-License-Identifier: Apache-2.0
//! `topdeck show`: every metric of one registry, as a table or as JSON.
//! A registry whose writer died is still shown, with `state: dead`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use topdeck::{HistogramValue, Liveness, MetricInfo, Value};

use crate::{render, select};

/// Quantiles shown for histograms, and their JSON keys.
const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

/// The `--json` shape.
#[derive(Serialize)]
struct Shown<'a> {
    path: &'a Path,
    pid: u32,
    process: &'a str,
    registry: &'a str,
    state: &'static str,
    metrics: Vec<Metric<'a>>,
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

/// A histogram's `value` in JSON.
#[derive(Serialize)]
struct HistogramJson {
    count: u64,
    sum: f64,
    p50: Option<f64>,
    p90: Option<f64>,
    p99: Option<f64>,
    max: Option<f64>,
    /// `[upper_bound, count]` of each non-empty bucket, zero bucket first.
    buckets: Vec<(f64, u64)>,
}

fn json_value(v: &Value) -> Result<serde_json::Value> {
    Ok(match v {
        Value::Counter(c) => (*c).into(),
        Value::Gauge(g) => (*g).into(),
        // Not-a-number and infinities have no JSON form: they become null.
        Value::GaugeF64(g) => (*g).into(),
        Value::Histogram(h) => serde_json::to_value(HistogramJson {
            count: h.count,
            sum: h.sum,
            p50: h.quantile(0.5),
            p90: h.quantile(0.9),
            p99: h.quantile(0.99),
            max: h.max,
            buckets: h.nonzero_buckets().collect(),
        })?,
    })
}

/// A histogram as `count N  p50 …  p90 …  p99 …  max …`.
fn histogram_text(h: &HistogramValue, unit: &str) -> String {
    let max = h.max.map_or("-".into(), |m| render::value(m, unit));
    format!(
        "count {}  {}  max {max}",
        h.count,
        render::quantiles(h, &QUANTILES, unit)
    )
}

/// A value as a person reads it, in the metric's unit.
fn value_text(m: &MetricInfo, v: &Value) -> String {
    match v {
        Value::Counter(c) => render::integer(i128::from(*c), &m.unit),
        Value::Gauge(g) => render::integer(i128::from(*g), &m.unit),
        Value::GaugeF64(g) => render::value(*g, &m.unit),
        Value::Histogram(h) => histogram_text(h, &m.unit),
    }
}

/// Shows the registry `target` names.
pub fn run(out: &mut impl Write, target: &str, json: bool) -> Result<()> {
    let mut reader = select::open(target)?;
    let snap = reader.snapshot().context("cannot read the metrics")?;
    let liveness = reader.liveness();
    let h = reader.header();
    if json {
        let metrics = snap
            .iter()
            .map(|(m, v)| {
                Ok(Metric {
                    name: &m.name,
                    kind: render::kind(m.kind),
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
            path: reader.path(),
            pid: h.pid,
            process: &h.process_name,
            registry: &h.registry_name,
            state: render::state(liveness),
            metrics,
        };
        serde_json::to_writer_pretty(&mut *out, &shape)?;
        writeln!(out)?;
        return Ok(());
    }
    let state = match liveness {
        Liveness::Alive => "alive".to_owned(),
        Liveness::Dead => "dead (the writer is gone: these are its last values; \
                           `topdeck gc` removes the file)"
            .to_owned(),
    };
    writeln!(out, "process: {}", h.process_name)?;
    writeln!(out, "pid: {}", h.pid)?;
    writeln!(out, "registry: {}", h.registry_name)?;
    writeln!(out, "state: {state}")?;
    writeln!(out, "file: {}", reader.path().display())?;
    writeln!(out, "metrics: {}", snap.len())?;
    if snap.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    let mut rows = vec![vec!["NAME".into(), "KIND".into(), "VALUE".into()]];
    rows.extend(snap.iter().map(|(m, v)| {
        vec![
            render::series(m),
            render::kind(m.kind).to_owned(),
            value_text(m, v),
        ]
    }));
    for line in render::table(&rows) {
        writeln!(out, "{line}")?;
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
        let v = json_value(&Value::Histogram(hist(vec![0; 3], None))).unwrap();
        assert_eq!(v["count"], 0);
        assert!(v["p50"].is_null() && v["max"].is_null());
        assert_eq!(v["buckets"], serde_json::json!([]));
    }

    #[test]
    fn non_finite_gauges_become_null_in_json() {
        assert!(json_value(&Value::GaugeF64(f64::NAN)).unwrap().is_null());
    }
}
