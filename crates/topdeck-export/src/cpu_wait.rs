// SPDX-License-Identifier: Apache-2.0
//! The CPU wait of a source's timed requests, under two names every
//! service shares, so that one Prometheus rule divides them whatever the
//! service calls its timers: for each latency histogram whose timer
//! measured each request's CPU wait (`<base>_cpu_wait_seconds` beside it,
//! `topdeck_sources::latency`),
//!
//! - `topdeck_latency_seconds_total{histogram="<name>",...}`: the latency
//!   of its requests whose wait was known (all but those in
//!   `<base>_cpu_wait_unknown_seconds`);
//! - `topdeck_latency_cpu_wait_seconds_total{histogram="<name>",...}`: the
//!   CPU wait of the same requests.
//!
//! `rate(wait) / rate(latency)` is the share of their latency spent
//! waiting for a CPU (`topdeck:latency_cpu_wait:share5m` in
//! deploy/prometheus). Both are sums of the histograms a scrape reads, so
//! nothing is kept between scrapes.

use topdeck::{MetricInfo, MetricKind, Snapshot, Value};
use topdeck_sources::{latencies, Dist};

/// Latency of the requests whose wait was known.
pub const LATENCY: &str = "topdeck_latency_seconds_total";
/// Their CPU wait.
pub const CPU_WAIT: &str = "topdeck_latency_cpu_wait_seconds_total";
/// The label naming the latency histogram.
pub const HISTOGRAM_LABEL: &str = "histogram";

/// The two series of each timer in `snapshot` that measured its requests'
/// CPU wait; none for a source without such a timer.
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let registry = topdeck::Registry::builder().dir(dir.path()).build().unwrap();
/// registry.histogram("req_seconds", &[], "", "seconds").unwrap().record(0.004);
/// registry.histogram("req_cpu_wait_seconds", &[], "", "seconds").unwrap().record(0.001);
/// let snap = topdeck::RegistryReader::open(registry.path()).unwrap().snapshot().unwrap();
/// let series = topdeck_export::cpu_wait::series(&snap);
/// assert_eq!(series[1].0.name, "topdeck_latency_cpu_wait_seconds_total");
/// assert_eq!(series[1].1, topdeck::Value::CounterF64(0.001));
/// ```
pub fn series(snapshot: &Snapshot) -> Vec<(MetricInfo, Value)> {
    let mut out = Vec::new();
    // Most sources have no timer that measured waits: a name check each.
    if !snapshot
        .iter()
        .any(|(m, _)| topdeck_format::waits::is_companion(&m.name))
    {
        return out;
    }
    for l in latencies(snapshot.iter()) {
        let Some(wait) = &l.wait else { continue };
        let known = l.latency.sum() - l.unknown.as_ref().map_or(0.0, Dist::sum);
        let mut labels = vec![(HISTOGRAM_LABEL.to_string(), l.name.clone())];
        labels.extend(l.labels.iter().cloned());
        let info = |name: &str, help: &str| MetricInfo {
            kind: MetricKind::Counter,
            name: name.to_string(),
            labels: labels.clone(),
            help: help.to_string(),
            unit: "seconds".to_string(),
        };
        out.push((
            info(
                LATENCY,
                "Latency of the timed requests whose CPU wait was known.",
            ),
            Value::CounterF64(known.max(0.0)),
        ));
        out.push((
            info(CPU_WAIT, "CPU wait (run-queue time) of the same requests."),
            Value::CounterF64(wait.sum()),
        ));
    }
    out
}
