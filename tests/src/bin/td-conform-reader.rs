// SPDX-License-Identifier: Apache-2.0
//! The Rust reader driver of the conformance suite (conformance/PROTOCOL.md):
//! `td-conform-reader <dir>` prints every registry in `<dir>` as one
//! canonical JSON document, and the files that are not readable
//! registries under `rejected`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value as Json};
use topdeck::{HistogramValue, Liveness, MetricKind, Namespace, Value};

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: td-conform-reader <dir>");
        return ExitCode::from(2);
    };
    match read(&dir) {
        Ok(doc) => {
            println!("{doc}");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("td-conform-reader: {why}");
            ExitCode::FAILURE
        }
    }
}

fn read(dir: &Path) -> Result<Json, String> {
    let listing = Namespace::at(dir).list();
    if !listing.unusable.is_empty() {
        let why: Vec<String> = listing.errors.iter().map(ToString::to_string).collect();
        return Err(format!(
            "cannot read {}: {}; check that it exists, is yours and is not writable by others",
            dir.display(),
            why.join("; ")
        ));
    }
    let mut rejected = Vec::new();
    for e in &listing.errors {
        match e.path().and_then(file_name) {
            Some(name) if e.path() != Some(dir) => rejected.push(name),
            _ => return Err(format!("listing {} failed: {e}", dir.display())),
        }
    }
    let mut registries = Vec::new();
    for entry in &listing.entries {
        let name = file_name(&entry.path).unwrap_or_default();
        match entry.open().and_then(|mut r| r.snapshot()) {
            Ok(snap) => {
                let metrics: Vec<Json> = snap.iter().map(|(i, v)| metric(i, v)).collect();
                registries.push(json!({
                    "file": name,
                    "registry": entry.registry_name,
                    "state": if entry.liveness == Liveness::Alive { "alive" } else { "dead" },
                    "metrics": metrics,
                }));
            }
            Err(_) => rejected.push(name),
        }
    }
    registries.sort_by(|a, b| a["file"].as_str().cmp(&b["file"].as_str()));
    rejected.sort();
    rejected.dedup();
    Ok(json!({ "registries": registries, "rejected": rejected }))
}

fn file_name(p: &Path) -> Option<String> {
    Some(p.file_name()?.to_string_lossy().into_owned())
}

fn metric(info: &topdeck::MetricInfo, v: &Value) -> Json {
    let (kind, value) = match v {
        Value::Counter(c) => ("counter", json!(c)),
        Value::Gauge(g) => ("gauge", json!(g)),
        Value::GaugeF64(f) => ("gauge_f64", json!(f)),
        Value::Histogram(h) => ("histogram", histogram(h)),
        // A registry file holds only the four kinds above.
        other => (kind_name(info.kind), json!(format!("{other:?}"))),
    };
    json!({
        "kind": kind,
        "name": info.name,
        "labels": info.labels,
        "help": info.help,
        "unit": info.unit,
        "value": value,
    })
}

fn kind_name(k: MetricKind) -> &'static str {
    match k {
        MetricKind::Counter => "counter",
        MetricKind::GaugeI64 => "gauge",
        MetricKind::GaugeF64 => "gauge_f64",
        MetricKind::Histogram => "histogram",
    }
}

/// The histogram with its buckets trimmed of leading and trailing zeros,
/// so that equal observations print equally whatever range was allocated.
fn histogram(h: &HistogramValue) -> Json {
    let first = h.buckets.iter().position(|&n| n != 0);
    let (min_index, buckets) = match first {
        Some(f) => {
            let last = h.buckets.iter().rposition(|&n| n != 0).unwrap_or(f);
            (h.min_index + f as i32, &h.buckets[f..=last])
        }
        None => (0, &h.buckets[..0]),
    };
    json!({
        "schema": h.schema,
        "zero_threshold": h.zero_threshold,
        "zero_count": h.zero_count,
        "min_index": min_index,
        "buckets": buckets,
        "count": h.count,
        "sum": h.sum,
        "max": h.max,
    })
}
