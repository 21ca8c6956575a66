// SPDX-License-Identifier: Apache-2.0
//! Which series of a source are latencies (for `topdeck explain`, `top`
//! and the exporters' CPU-wait series), and their timers' companions:
//! a histogram in seconds (its unit says so, or its name ends in
//! `_seconds`, as prometheus_client's carry no unit) that is not itself a
//! companion. A timer's requests' CPU waits are in `<base>_cpu_wait_seconds`
//! and the latency of those whose wait was unknown in
//! `<base>_cpu_wait_unknown_seconds`, with the same labels
//! (`topdeck_format::waits::companions`).

use std::collections::HashMap;

use topdeck::{MetricInfo, Value};
use topdeck_format::waits;

use crate::dist::Dist;

/// One latency series with what its timer recorded beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct Latency {
    /// Its name.
    pub name: String,
    /// Its labels, in registration order.
    pub labels: Vec<(String, String)>,
    /// Every request's latency.
    pub latency: Dist,
    /// The CPU wait of each request whose wait was known: present when the
    /// timer measured it (the per-request level).
    pub wait: Option<Dist>,
    /// The latency of the requests whose wait was unknown.
    pub unknown: Option<Dist>,
}

impl Latency {
    /// `name{k="v",...}`, as views print it.
    pub fn display_name(&self) -> String {
        if self.labels.is_empty() {
            return self.name.clone();
        }
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect();
        format!("{}{{{}}}", self.name, labels.join(","))
    }

    /// Whether `other` is the same series (name and labels).
    pub fn same_series(&self, other: &Latency) -> bool {
        self.name == other.name && self.labels == other.labels
    }
}

fn is_seconds(m: &MetricInfo) -> bool {
    m.unit == "seconds" || m.name.ends_with("_seconds")
}

/// Whether a histogram named `name` in `unit` is a latency: in seconds
/// and not a timer's companion.
///
/// ```
/// use topdeck_sources::latency::is_latency;
/// assert!(is_latency("http_request_duration_seconds", ""));
/// assert!(is_latency("hash_duration", "seconds"));
/// assert!(!is_latency("hash_duration_cpu_wait_seconds", "seconds"));
/// assert!(!is_latency("body_bytes", "bytes"));
/// ```
pub fn is_latency(name: &str, unit: &str) -> bool {
    (unit == "seconds" || name.ends_with("_seconds")) && !waits::is_companion(name)
}

/// The latency series among `metrics`, each with its companions, in the
/// order they were met.
pub fn latencies<'a>(
    metrics: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>,
) -> Vec<Latency> {
    type Key = (String, Vec<(String, String)>);
    let mut found = Vec::new();
    let mut companions: HashMap<Key, Dist> = HashMap::new();
    for (m, v) in metrics {
        let Some(dist) = Dist::of(v) else { continue };
        if !is_seconds(m) {
            continue;
        }
        if waits::is_companion(&m.name) {
            companions.insert((m.name.clone(), m.labels.clone()), dist);
        } else {
            found.push((m, dist));
        }
    }
    found
        .into_iter()
        .map(|(m, latency)| {
            let (wait, unknown) = waits::companions(&m.name);
            let mut take = |name: String| companions.remove(&(name, m.labels.clone()));
            Latency {
                name: m.name.clone(),
                labels: m.labels.clone(),
                latency,
                wait: take(wait),
                unknown: take(unknown),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timers_companions_join_it_and_other_histograms_stand_alone() {
        let dir = tempfile::tempdir().unwrap();
        let registry = topdeck::Registry::builder()
            .dir(dir.path())
            .build()
            .unwrap();
        let route = [("route", "/")];
        let lat = registry
            .histogram("req_seconds", &route, "", "seconds")
            .unwrap();
        let wait = registry
            .histogram("req_cpu_wait_seconds", &route, "", "seconds")
            .unwrap();
        let other = registry
            .histogram("req_seconds", &[("route", "/x")], "", "seconds")
            .unwrap();
        let _bytes = registry.histogram("body_bytes", &[], "", "bytes").unwrap();
        let _unitless = registry.histogram("db_seconds", &[], "", "").unwrap();
        lat.record(0.004);
        wait.record(0.003);
        other.record(1.0);
        let snap = topdeck::RegistryReader::open(registry.path())
            .unwrap()
            .snapshot()
            .unwrap();
        let found = latencies(snap.iter());
        let names: Vec<String> = found.iter().map(Latency::display_name).collect();
        assert_eq!(
            names,
            [
                "req_seconds{route=\"/\"}",
                "req_seconds{route=\"/x\"}",
                "db_seconds"
            ]
        );
        let first = &found[0];
        assert_eq!(first.wait.as_ref().map(Dist::count), Some(1));
        assert!(first.unknown.is_none());
        assert!(
            found[1].wait.is_none(),
            "companions are matched by labels too"
        );
    }
}
