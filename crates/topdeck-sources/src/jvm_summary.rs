// SPDX-License-Identifier: Apache-2.0
//! What `jstat -gcutil` says of a JVM, from the series its hsperfdata
//! gives (`crate::jvm`): each space's use of what it has committed, each
//! collector's runs and time, and the share of the JVM's life spent
//! collecting, so a person reads one line before 150 raw counters.
//!
//! The spaces are jstat's: eden, survivors 0 and 1 are spaces 0, 1 and 2
//! of generation 0; old is space 0 of generation 1; then metaspace and
//! the compressed class space. The collectors are jstat's too: 0 young,
//! 1 full, 2 concurrent (G1, ZGC, Shenandoah), whichever the JVM has.

use serde::Serialize;
use topdeck::{MetricInfo, Value};

/// One space: bytes used of bytes committed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Space {
    /// jstat's column: `S0`, `S1`, `E`, `O`, `M`, `CCS`.
    pub name: &'static str,
    /// Bytes in use.
    pub used: f64,
    /// Bytes committed.
    pub capacity: f64,
}

impl Space {
    /// Percent of the committed bytes in use (0 for an empty space).
    pub fn percent(&self) -> f64 {
        match self.capacity > 0.0 {
            true => 100.0 * self.used / self.capacity,
            false => 0.0,
        }
    }
}

/// One collector: its runs and their time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Collector {
    /// jstat's column: `YGC`, `FGC`, `CGC`.
    pub name: &'static str,
    /// Collections since the JVM started.
    pub count: f64,
    /// Seconds they took.
    pub seconds: f64,
}

/// A JVM's garbage collection at a glance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JvmSummary {
    /// Spaces in jstat's order, those the JVM has.
    pub spaces: Vec<Space>,
    /// Collectors in jstat's order, those the JVM has.
    pub collectors: Vec<Collector>,
    /// Seconds of all collections.
    pub gc_seconds: f64,
    /// Seconds since the JVM started, when it says.
    pub uptime_seconds: Option<f64>,
}

const SPACES: [(&str, &str); 6] = [
    ("S0", "sun_gc_generation_0_space_1"),
    ("S1", "sun_gc_generation_0_space_2"),
    ("E", "sun_gc_generation_0_space_0"),
    ("O", "sun_gc_generation_1_space_0"),
    ("M", "sun_gc_metaspace"),
    ("CCS", "sun_gc_compressedclassspace"),
];

const COLLECTORS: [(&str, &str); 3] = [
    ("YGC", "sun_gc_collector_0"),
    ("FGC", "sun_gc_collector_1"),
    ("CGC", "sun_gc_collector_2"),
];

impl JvmSummary {
    /// The summary of a JVM's series; `None` for series that are not a
    /// JVM's (no space and no collector among them).
    ///
    /// ```
    /// use topdeck::{MetricInfo, MetricKind, Value};
    /// let m = |name: &str, v: f64| (MetricInfo {
    ///     kind: MetricKind::GaugeF64, name: name.into(), labels: vec![], help: String::new(), unit: String::new(),
    /// }, Value::GaugeF64(v));
    /// let series = [
    ///     m("jvm_sun_gc_generation_0_space_0_used_bytes", 25.0),
    ///     m("jvm_sun_gc_generation_0_space_0_capacity_bytes", 100.0),
    ///     m("jvm_sun_gc_collector_0_invocations", 3.0),
    ///     m("jvm_sun_gc_collector_0_time_seconds", 0.5),
    /// ];
    /// let s = topdeck_sources::JvmSummary::of(series.iter().map(|(i, v)| (i, v))).unwrap();
    /// assert_eq!((s.spaces[0].name, s.spaces[0].percent()), ("E", 25.0));
    /// assert_eq!((s.collectors[0].name, s.gc_seconds), ("YGC", 0.5));
    /// ```
    pub fn of<'a>(series: impl IntoIterator<Item = (&'a MetricInfo, &'a Value)>) -> Option<Self> {
        let values: std::collections::HashMap<&str, f64> = series
            .into_iter()
            .filter(|(m, _)| m.labels.is_empty())
            .filter_map(|(m, v)| Some((m.name.strip_prefix(crate::jvm::PREFIX)?, number(v)?)))
            .collect();
        let get = |base: &str, what: &str| values.get(format!("{base}_{what}").as_str()).copied();
        let spaces: Vec<Space> = SPACES
            .iter()
            .filter_map(|&(name, base)| {
                Some(Space {
                    name,
                    used: get(base, "used_bytes")?,
                    capacity: get(base, "capacity_bytes")?,
                })
            })
            .collect();
        let collectors: Vec<Collector> = COLLECTORS
            .iter()
            .filter_map(|&(name, base)| {
                Some(Collector {
                    name,
                    count: get(base, "invocations")?,
                    seconds: get(base, "time_seconds").unwrap_or(0.0),
                })
            })
            .collect();
        if spaces.is_empty() && collectors.is_empty() {
            return None;
        }
        Some(JvmSummary {
            gc_seconds: collectors.iter().map(|c| c.seconds).sum(),
            spaces,
            collectors,
            uptime_seconds: values.get("sun_os_hrt_ticks_seconds").copied(),
        })
    }

    /// Share of the JVM's life spent collecting, 0..=1, when its uptime is known.
    pub fn gc_share(&self) -> Option<f64> {
        self.uptime_seconds
            .filter(|u| *u > 0.0)
            .map(|u| (self.gc_seconds / u).min(1.0))
    }
}

impl std::fmt::Display for JvmSummary {
    /// One line, jstat's columns in percent and counts:
    /// `S0 0% S1 52% E 2% O 3% M 98% CCS 90% · YGC 4 FGC 0 CGC 0 · GC 0.06% of its life`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let spaces: Vec<String> = self
            .spaces
            .iter()
            .map(|s| format!("{} {:.0}%", s.name, s.percent()))
            .collect();
        let collectors: Vec<String> = self
            .collectors
            .iter()
            .map(|c| format!("{} {:.0}", c.name, c.count))
            .collect();
        write!(f, "{} · {}", spaces.join(" "), collectors.join(" "))?;
        match self.gc_share() {
            Some(share) => write!(f, " · GC {:.2}% of its life", share * 100.0),
            None => write!(f, " · GC {:.3}s", self.gc_seconds),
        }
    }
}

fn number(v: &Value) -> Option<f64> {
    match *v {
        Value::Counter(n) => Some(n as f64),
        Value::Gauge(n) => Some(n as f64),
        Value::GaugeF64(x) | Value::CounterF64(x) => Some(x),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use topdeck::MetricKind;

    use super::*;

    fn series(pairs: &[(&str, f64)]) -> Vec<(MetricInfo, Value)> {
        pairs
            .iter()
            .map(|&(name, v)| {
                let info = MetricInfo {
                    kind: MetricKind::GaugeF64,
                    name: format!("jvm_{name}"),
                    labels: vec![],
                    help: String::new(),
                    unit: String::new(),
                };
                (info, Value::GaugeF64(v))
            })
            .collect()
    }

    #[test]
    fn spaces_and_collectors_read_as_jstat_orders_them() {
        let s = series(&[
            ("sun_gc_generation_0_space_0_used_bytes", 10.0),
            ("sun_gc_generation_0_space_0_capacity_bytes", 40.0),
            ("sun_gc_generation_0_space_1_used_bytes", 0.0),
            ("sun_gc_generation_0_space_1_capacity_bytes", 0.0),
            ("sun_gc_generation_1_space_0_used_bytes", 30.0),
            ("sun_gc_generation_1_space_0_capacity_bytes", 60.0),
            ("sun_gc_collector_0_invocations", 7.0),
            ("sun_gc_collector_0_time_seconds", 0.25),
            ("sun_gc_collector_2_invocations", 2.0),
            ("sun_gc_collector_2_time_seconds", 0.75),
            ("sun_os_hrt_ticks_seconds", 100.0),
        ]);
        let j = JvmSummary::of(s.iter().map(|(m, v)| (m, v))).unwrap();
        let spaces: Vec<(&str, f64)> = j.spaces.iter().map(|s| (s.name, s.percent())).collect();
        assert_eq!(spaces, [("S0", 0.0), ("E", 25.0), ("O", 50.0)]);
        let collectors: Vec<&str> = j.collectors.iter().map(|c| c.name).collect();
        assert_eq!(collectors, ["YGC", "CGC"]);
        assert_eq!(j.gc_seconds, 1.0);
        assert_eq!(j.gc_share(), Some(0.01));
        assert_eq!(
            j.to_string(),
            "S0 0% E 25% O 50% · YGC 7 CGC 2 · GC 1.00% of its life"
        );
    }

    #[test]
    fn series_of_another_runtime_have_no_summary() {
        let s = series(&[("requests_total", 3.0)]);
        assert_eq!(JvmSummary::of(s.iter().map(|(m, v)| (m, v))), None);
    }
}
