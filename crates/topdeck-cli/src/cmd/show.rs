// SPDX-License-Identifier: Apache-2.0
//! `topdeck show`: every metric of one registry.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde::Serialize;
use topdeck::{HistogramValue, MetricInfo, MetricKind, Value};

use crate::{render, select};

#[derive(Serialize)]
struct Shown<'a> {
    path: &'a std::path::Path,
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

/// Quantiles shown for histograms.
pub const QUANTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

pub fn kind_name(k: MetricKind) -> &'static str {
    match k {
        MetricKind::Counter => "counter",
        MetricKind::GaugeI64 | MetricKind::GaugeF64 => "gauge",
        MetricKind::Histogram => "histogram",
    }
}

fn json_value(v: &Value) -> serde_json::Value {
    match v {
        Value::Counter(c) => (*c).into(),
        Value::Gauge(g) => (*g).into(),
        Value::GaugeF64(g) => (*g).into(),
        Value::Histogram(h) => {
            let mut o = serde_json::Map::new();
            o.insert("count".into(), h.count.into());
            o.insert("sum".into(), h.sum.into());
            for (name, q) in QUANTILES {
                o.insert(name.into(), h.quantile(q).into());
            }
            o.insert("max".into(), h.max.into());
            let buckets: Vec<(f64, u64)> = h.nonzero_buckets().collect();
            o.insert(
                "buckets".into(),
                serde_json::to_value(buckets).unwrap_or_default(),
            );
            o.into()
        }
    }
}

/// A histogram as `count N  p50 …  p90 …  p99 …  max …`.
pub fn histogram_line(h: &HistogramValue, unit: &str) -> String {
    let q = |v: Option<f64>| v.map_or("-".into(), |v| render::value(v, unit));
    let mut s = format!("count {}", h.count);
    for (name, p) in QUANTILES {
        s += &format!("  {name} {}", q(h.quantile(p)));
    }
    s + &format!("  max {}", q(h.max))
}

/// A value as a person reads it.
pub fn value_text(m: &MetricInfo, v: &Value) -> String {
    match v {
        Value::Counter(c) => c.to_string(),
        Value::Gauge(g) => g.to_string(),
        Value::GaugeF64(g) => render::value(*g, &m.unit),
        Value::Histogram(h) => histogram_line(h, &m.unit),
    }
}

pub fn run(target: &str, json: bool) -> Result<()> {
    let mut reader = select::open(target)?;
    let snap = reader
        .snapshot()
        .with_context(|| format!("cannot read the metrics of {}", reader.path().display()))?;
    let h = reader.header();
    let state = render::state(reader.liveness());
    if json {
        let out = Shown {
            path: reader.path(),
            pid: h.pid,
            process: &h.process_name,
            registry: &h.registry_name,
            state,
            metrics: snap
                .iter()
                .map(|(m, v)| Metric {
                    name: &m.name,
                    kind: kind_name(m.kind),
                    labels: m
                        .labels
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect(),
                    help: &m.help,
                    unit: &m.unit,
                    value: json_value(v),
                })
                .collect(),
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{} (pid {}), registry {}, {state}, {} metrics\n{}",
        h.process_name,
        h.pid,
        h.registry_name,
        snap.len(),
        reader.path().display()
    );
    let width = snap
        .iter()
        .map(|(m, _)| render::series(m).len())
        .max()
        .unwrap_or(0)
        .min(60);
    for (m, v) in snap.iter() {
        println!(
            "  {:<width$}  {:<9}  {}",
            render::series(m),
            kind_name(m.kind),
            value_text(m, v)
        );
    }
    Ok(())
}
