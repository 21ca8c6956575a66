// SPDX-License-Identifier: Apache-2.0
//! A JVM's hsperfdata counters as series: `jvm_` and the counter's name
//! in snake case, in its natural unit (ticks become seconds through
//! `sun.os.hrt.frequency`; bytes stay bytes), a counter when the JVM says
//! it only grows, a gauge otherwise. The original name is the help text,
//! so `jcmd <pid> PerfCounter.print` and topdeck can be read side by side.
//! Strings are not series; the few that say which JVM this is label one
//! `jvm_info` gauge.

use topdeck::{MetricInfo, MetricKind, Value};
use topdeck_portholes::hsperf::{PerfData, Units, Value as Perf, Variability};

use crate::names::metric_name;

/// Prefix of every series from hsperfdata.
pub const PREFIX: &str = "jvm_";

/// String counters carried as labels of `jvm_info`: (label, counter).
const INFO: [(&str, &str); 4] = [
    ("command", "sun.rt.javaCommand"),
    ("vm_name", "java.property.java.vm.name"),
    ("vm_version", "java.property.java.vm.version"),
    ("vendor", "java.property.java.vm.vendor"),
];

/// The series of one copy of a JVM's counters.
pub(crate) fn series(perf: &PerfData) -> Vec<(MetricInfo, Value)> {
    let hz = perf.hrt_frequency();
    let mut out = Vec::with_capacity(perf.entries.len() + 1);
    for entry in &perf.entries {
        let Perf::Long(raw) = entry.value else {
            continue;
        };
        let grows = entry.variability == Variability::Monotonic;
        let (unit, value) = match (entry.units, hz) {
            (Units::Ticks, Some(hz)) => {
                let seconds = raw as f64 / hz as f64;
                let v = if grows {
                    Value::CounterF64(seconds)
                } else {
                    Value::GaugeF64(seconds)
                };
                ("seconds", v)
            }
            // Without a frequency, ticks stay ticks.
            (Units::Ticks, None) => ("ticks", integer(grows, raw)),
            (Units::Bytes, _) => ("bytes", integer(grows, raw)),
            (Units::Hertz, _) => ("hertz", integer(grows, raw)),
            _ => ("", integer(grows, raw)),
        };
        out.push((
            MetricInfo {
                kind: kind_of(&value),
                name: metric_name(PREFIX, &entry.name, unit),
                labels: Vec::new(),
                help: format!("{} (hsperfdata)", entry.name),
                unit: unit.to_owned(),
            },
            value,
        ));
    }
    let labels: Vec<(String, String)> = INFO
        .iter()
        .filter_map(|(label, name)| match &perf.get(name)?.value {
            Perf::String(s) => Some(((*label).to_owned(), s.clone())),
            _ => None,
        })
        .collect();
    if !labels.is_empty() {
        out.push((
            MetricInfo {
                kind: MetricKind::GaugeI64,
                name: format!("{PREFIX}info"),
                labels,
                help: "Which JVM this is, from its hsperfdata strings.".into(),
                unit: String::new(),
            },
            Value::Gauge(1),
        ));
    }
    out
}

/// The JVM's main class or jar, from `sun.rt.javaCommand`: what a person
/// calls this JVM (every JVM's `comm` is `java`).
pub(crate) fn main_class(perf: &PerfData) -> Option<String> {
    let Perf::String(command) = &perf.get("sun.rt.javaCommand")?.value else {
        return None;
    };
    let first = command.split_whitespace().next()?;
    let base = first.rsplit('/').next().unwrap_or(first);
    (!base.is_empty()).then(|| base.to_owned())
}

/// A counter the JVM says only grows (a negative one, which it should
/// never hold, reads as 0), or a gauge.
fn integer(grows: bool, raw: i64) -> Value {
    if grows {
        Value::Counter(u64::try_from(raw).unwrap_or(0))
    } else {
        Value::Gauge(raw)
    }
}

pub(crate) fn kind_of(value: &Value) -> MetricKind {
    match value {
        Value::Counter(_) | Value::CounterF64(_) => MetricKind::Counter,
        Value::Gauge(_) => MetricKind::GaugeI64,
        Value::GaugeF64(_) => MetricKind::GaugeF64,
        Value::Histogram(_) | Value::Buckets(_) | Value::Summary { .. } => MetricKind::Histogram,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck_portholes::hsperf::{parse, SyntheticBuffer};

    #[test]
    fn ticks_become_seconds_and_monotonic_counters_become_counters() {
        let bytes = SyntheticBuffer::new()
            .long(
                "sun.os.hrt.frequency",
                Units::Hertz,
                Variability::Constant,
                1_000_000_000,
            )
            .long(
                "sun.gc.collector.0.time",
                Units::Ticks,
                Variability::Monotonic,
                2_500_000_000,
            )
            .long(
                "sun.gc.collector.0.invocations",
                Units::Events,
                Variability::Monotonic,
                7,
            )
            .long(
                "sun.gc.generation.0.space.0.used",
                Units::Bytes,
                Variability::Variable,
                4096,
            )
            .string(
                "sun.rt.javaCommand",
                Variability::Constant,
                "com.example.Main --port 80",
            )
            .build();
        let perf = parse(&bytes).unwrap();
        let got: Vec<(String, Value)> = series(&perf)
            .into_iter()
            .map(|(m, v)| (m.name, v))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "jvm_sun_os_hrt_frequency_hertz".into(),
                    Value::Gauge(1_000_000_000)
                ),
                (
                    "jvm_sun_gc_collector_0_time_seconds".into(),
                    Value::CounterF64(2.5)
                ),
                (
                    "jvm_sun_gc_collector_0_invocations".into(),
                    Value::Counter(7)
                ),
                (
                    "jvm_sun_gc_generation_0_space_0_used_bytes".into(),
                    Value::Gauge(4096)
                ),
                ("jvm_info".into(), Value::Gauge(1)),
            ]
        );
        assert_eq!(main_class(&perf).as_deref(), Some("com.example.Main"));
    }
}
