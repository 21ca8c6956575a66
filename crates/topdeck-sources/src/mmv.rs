// SPDX-License-Identifier: Apache-2.0
//! A PCP MMV file's metrics as series, named as PCP names them
//! (`mmv.<file>.<metric>`, or `mmv.<metric>` with NOPREFIX) and made
//! Prometheus-safe (`mmv_<file>_<metric>`), in base units (seconds,
//! bytes; counts scaled by their `scaleCount`), one series per instance
//! (an `instance` label). Counter semantics are counters; instant,
//! discrete and semantics left unset (which pmdammv serves as counters,
//! though nothing says they only grow) are gauges; an ELAPSED timing is a counter of seconds that
//! includes a timing in progress. Strings are not series: `show` prints
//! them beside the series ([`texts`]), the exposition leaves them out. A
//! value the writer marked as "no value" (the SENTINEL flag) is left out.

use topdeck::{MetricInfo, Value};
use topdeck_portholes::mmv::{Metric, Mmv, Semantics, Units, Value as Raw};

use crate::jvm::kind_of;
use crate::names::metric_name;

/// The series of one copy of an MMV file, read at `now_us` (µs since the
/// epoch, for a timing in progress).
pub(crate) fn series(mmv: &Mmv, now_us: i64) -> Vec<(MetricInfo, Value)> {
    let mut out = Vec::with_capacity(mmv.metrics.len());
    for m in &mmv.metrics {
        let unit = m.units.base_unit();
        let name = metric_name("", &m.pcp_name, unit);
        let help = match m.short_help.as_str() {
            "" => format!("{} (PCP MMV)", m.pcp_name),
            h => format!("{h} ({}, PCP MMV)", m.pcp_name),
        };
        for sample in &m.values {
            let Some(value) = sample.value.as_ref().and_then(|v| value(m, v, now_us)) else {
                continue;
            };
            let labels = sample
                .instance
                .iter()
                .map(|i| ("instance".to_owned(), i.name.clone()))
                .collect();
            let info = MetricInfo {
                kind: kind_of(&value),
                name: name.clone(),
                labels,
                help: help.clone(),
                unit: unit.to_owned(),
            };
            out.push((info, value));
        }
    }
    out
}

/// The file's strings, by PCP name (and `[instance]`), in file order:
/// what `show` prints beside the series; a "no value" string is left out.
pub(crate) fn texts(mmv: &Mmv) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in &mmv.metrics {
        for sample in &m.values {
            let Some(Raw::String(text)) = &sample.value else {
                continue;
            };
            let name = match &sample.instance {
                Some(i) => format!("{}[{}]", m.pcp_name, i.name),
                None => m.pcp_name.clone(),
            };
            out.push((name, text.clone()));
        }
    }
    out
}

/// One value in base units: a whole number stays one where the unit needs
/// no scaling; `None` for a string or a scale PCP does not define.
fn value(m: &Metric, raw: &Raw, now_us: i64) -> Option<Value> {
    let counter = m.semantics == Semantics::Counter;
    let unscaled = m.units.factor()? == 1.0;
    let whole = match raw {
        _ if !unscaled => None,
        Raw::I32(v) => Some(i64::from(*v)),
        Raw::U32(v) => Some(i64::from(*v)),
        Raw::I64(v) => Some(*v),
        Raw::U64(v) if counter => return Some(Value::Counter(*v)),
        Raw::U64(v) => i64::try_from(*v).ok(),
        _ => None,
    };
    if let Some(v) = whole {
        return Some(if counter {
            // A counter the writer let go negative reads as 0.
            Value::Counter(u64::try_from(v).unwrap_or(0))
        } else {
            Value::Gauge(v)
        });
    }
    let units: Units = m.units;
    let v = units.to_base(raw.as_f64(now_us)?)?;
    Some(if counter {
        Value::CounterF64(v.max(0.0))
    } else {
        Value::GaugeF64(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::flat;
    use topdeck_portholes::mmv::{parse, SyntheticBuffer, SyntheticMetric, Type};

    #[test]
    fn pcp_names_base_units_instances_and_semantics_become_series() {
        let ms = Units {
            dim_time: 1,
            scale_time: 2,
            ..Units::default()
        };
        let kib = Units {
            dim_space: 1,
            scale_space: 1,
            ..Units::default()
        };
        let bytes = SyntheticBuffer::new(2)
            .indom(7, &[(0, "high"), (1, "low")], "", "")
            .metric(
                SyntheticMetric::new("requests.total", 1, Type::U64)
                    .semantics(1)
                    .indom(7),
            )
            .metric(
                SyntheticMetric::new("latency", 2, Type::Double)
                    .semantics(3)
                    .units(ms),
            )
            .metric(
                SyntheticMetric::new("heap", 3, Type::I64)
                    .semantics(4)
                    .units(kib),
            )
            .metric(SyntheticMetric::new("version", 4, Type::String).semantics(3))
            .value(1, Some(0), 41u64.to_ne_bytes(), 0)
            .value(1, Some(1), 7u64.to_ne_bytes(), 0)
            .value(2, None, 12.5f64.to_ne_bytes(), 0)
            .value(3, None, 3i64.to_ne_bytes(), 0)
            .string_value(4, None, "1.2.3")
            .build();
        let mmv = parse(&bytes, "app").unwrap();
        assert_eq!(
            texts(&mmv),
            [("mmv.app.version".to_owned(), "1.2.3".to_owned())]
        );
        let got = flat(series(&mmv, 0));
        let label = |v: &str| vec![("instance".to_owned(), v.to_owned())];
        assert_eq!(
            got,
            [
                (
                    "mmv_app_requests_total".into(),
                    label("high"),
                    Value::Counter(41)
                ),
                (
                    "mmv_app_requests_total".into(),
                    label("low"),
                    Value::Counter(7)
                ),
                (
                    "mmv_app_latency_seconds".into(),
                    vec![],
                    Value::GaugeF64(0.0125)
                ),
                ("mmv_app_heap_bytes".into(), vec![], Value::GaugeF64(3072.0)),
            ]
        );
    }

    #[test]
    fn a_timing_in_progress_counts_until_now() {
        let bytes = SyntheticBuffer::new(1)
            .metric(SyntheticMetric::new("busy", 1, Type::Elapsed))
            .value(1, None, 500i64.to_ne_bytes(), -1_000_000)
            .build();
        let mmv = parse(&bytes, "app").unwrap();
        let got = flat(series(&mmv, 1_000_250));
        assert_eq!(
            got,
            [(
                "mmv_app_busy_seconds".into(),
                vec![],
                Value::CounterF64(0.00075)
            )]
        );
    }
}
