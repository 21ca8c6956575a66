// SPDX-License-Identifier: Apache-2.0
//! Test data shared by the encoders' unit tests: two sources with a
//! counter, a gauge of each width and a histogram, chosen to exercise
//! escaping, the `registry` label and a renamed `le` label; and a
//! registry's snapshot with a counter of nanoseconds.

use topdeck::{BucketsValue, HistogramValue, MetricInfo, MetricKind, Value};

use crate::Source;

pub(crate) struct Fixture {
    pub a: Vec<(MetricInfo, Value)>,
    pub b: Vec<(MetricInfo, Value)>,
    /// A gauge that takes the name of the counter family.
    pub clash: (MetricInfo, Value),
}

fn info(
    kind: MetricKind,
    name: &str,
    labels: &[(&str, &str)],
    help: &str,
    unit: &str,
) -> MetricInfo {
    MetricInfo {
        kind,
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        help: help.into(),
        unit: unit.into(),
    }
}

/// Schema 0 (bounds are powers of two) from index 0: the zero bucket is
/// `[.., 0.5]`, then `(0.5, 1]`, `(1, 2]`, `(2, 4]`.
pub(crate) fn latency() -> HistogramValue {
    HistogramValue {
        schema: 0,
        zero_threshold: 0.5,
        zero_count: 1,
        min_index: 0,
        buckets: vec![2, 0, 1],
        count: 4,
        sum: 5.25,
        max: Some(3.0),
    }
}

pub(crate) const TEMPERATURE_HELP: &str = "Now, with \"quotes\" and a \\ backslash\nand a line.";

pub(crate) fn fixture() -> Fixture {
    use MetricKind::*;
    let jobs = |v| {
        (
            info(
                Counter,
                "jobs_total",
                &[("queue", "fast")],
                "Jobs done.",
                "",
            ),
            Value::Counter(v),
        )
    };
    Fixture {
        a: vec![
            jobs(3),
            (
                info(
                    GaugeI64,
                    "temperature_celsius",
                    &[],
                    TEMPERATURE_HELP,
                    "celsius",
                ),
                Value::Gauge(-3),
            ),
            (
                info(
                    Histogram,
                    "latency_seconds",
                    &[("le", "x")],
                    "Time to serve.",
                    "seconds",
                ),
                Value::Histogram(Box::new(latency())),
            ),
        ],
        b: vec![
            jobs(4),
            (
                info(
                    GaugeF64,
                    "temperature_celsius",
                    &[],
                    "ignored: the first help wins",
                    "",
                ),
                Value::GaugeF64(21.5),
            ),
        ],
        clash: (info(GaugeI64, "jobs_total", &[], "", ""), Value::Gauge(1)),
    }
}

/// Other runtimes' values, as their adapters would hand them over: a float
/// counter, fixed-bucket histograms with whole and fractional counts (the
/// first with an own `le`) and a summary; kinds the nearest ones.
pub(crate) fn foreign() -> Vec<(MetricInfo, Value)> {
    use MetricKind::*;
    let inf = f64::INFINITY;
    vec![
        (
            info(
                Counter,
                "py_requests_total",
                &[("method", "GET")],
                "Requests.",
                "",
            ),
            Value::CounterF64(12.5),
        ),
        (
            info(
                Histogram,
                "py_latency_seconds",
                &[("le", "own")],
                "",
                "seconds",
            ),
            Value::Buckets(Box::new(BucketsValue {
                buckets: vec![(0.005, 1.0), (0.1, 3.0), (1.0, 3.0), (inf, 4.0)],
                count: 4.0,
                sum: 1.25,
            })),
        ),
        (
            info(Histogram, "py_size_bytes", &[], "", "bytes"),
            Value::Buckets(Box::new(BucketsValue {
                buckets: vec![(1.0, 0.5), (inf, 2.5)],
                count: 2.5,
                sum: 3.0,
            })),
        ),
        (
            info(Histogram, "py_wait_seconds", &[], "Waits.", "seconds"),
            Value::Summary {
                count: 3.0,
                sum: 0.75,
            },
        ),
    ]
}

impl Fixture {
    pub(crate) fn sources(&self) -> Vec<Source<'_>> {
        vec![
            Source::new("worker", 10, "main", self.a.iter().map(|(i, v)| (i, v))),
            Source::new(
                "worker \"b\"",
                11,
                "side",
                self.b.iter().map(|(i, v)| (i, v)),
            ),
        ]
    }
}

/// A snapshot of a fresh registry holding `busy_seconds_total` ("Busy."),
/// a counter of nanoseconds at 1.25 s, and whatever `more` adds to it.
pub(crate) fn busy_nanoseconds(more: impl FnOnce(&topdeck::Registry)) -> topdeck::Snapshot {
    let dir = tempfile::tempdir().unwrap();
    let r = topdeck::Registry::builder()
        .dir(dir.path())
        .build()
        .unwrap();
    r.counter("busy_seconds_total", &[], "Busy.", "nanoseconds")
        .unwrap()
        .add(1_250_000_000);
    more(&r);
    topdeck::RegistryReader::open(r.path())
        .unwrap()
        .snapshot()
        .unwrap()
}
