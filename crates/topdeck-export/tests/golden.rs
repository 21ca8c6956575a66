// SPDX-License-Identifier: Apache-2.0
//! Every format's exposition of one representative set of sources, byte
//! for byte against files checked in next to this test: a change to an
//! encoder that changes what a scraper receives shows up here as a diff,
//! not only as a failed property. The sources cover every kind, a counter
//! registered without `_total`, label values and help that need escaping,
//! an own `le` and an own `pid`, native histograms at three schemas (one
//! empty, one with negative bucket indices), NaN and both infinities, the
//! `uid` label of a listed registry, a type clash and an unlabelled source.
//!
//! After an intended change of output, write the files anew with
//! `TOPDECK_GOLDEN_BLESS=1 cargo test -p topdeck-export --test golden` and
//! read the diff before committing it.

use std::path::PathBuf;

use topdeck::{HistogramValue, MetricInfo, MetricKind, Value};
use topdeck_export::{Exposition, Format, Prepared, Source};

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

/// Metrics no writer would produce through the library's API: extreme
/// values, a wide negative index range, a clash with the registry's counter.
fn synthetic() -> Vec<(MetricInfo, Value)> {
    use MetricKind::*;
    vec![
        (
            info(
                Counter,
                "requests_total",
                &[("method", "GET"), ("path", "/")],
                "",
                "",
            ),
            Value::Counter(u64::MAX),
        ),
        (
            info(GaugeF64, "ratio", &[("which", "nan")], "A ratio.", ""),
            Value::GaugeF64(f64::NAN),
        ),
        (
            info(GaugeF64, "ratio", &[("which", "+inf")], "", ""),
            Value::GaugeF64(f64::INFINITY),
        ),
        (
            info(GaugeF64, "ratio", &[("which", "-inf")], "", ""),
            Value::GaugeF64(f64::NEG_INFINITY),
        ),
        (
            info(GaugeF64, "ratio", &[("which", "tiny")], "", ""),
            Value::GaugeF64(-1e-300),
        ),
        (
            info(
                GaugeI64,
                "depth_items",
                &[("region", "çødé ✓")],
                "Queue depth.",
                "items",
            ),
            Value::Gauge(i64::MIN),
        ),
        (
            info(
                Histogram,
                "wait_seconds",
                &[("le", "own")],
                "Waits.",
                "seconds",
            ),
            Value::Histogram(HistogramValue {
                schema: -4,
                zero_threshold: 0.0,
                zero_count: 0,
                min_index: -3,
                buckets: vec![5, 0, 0, 7, 1],
                count: 13,
                sum: f64::INFINITY,
                max: None,
            }),
        ),
        // The registry's counter name taken by a gauge: left out, counted.
        (info(GaugeI64, "bytes_total", &[], "", ""), Value::Gauge(1)),
    ]
}

fn unlabelled() -> Vec<(MetricInfo, Value)> {
    vec![(
        info(
            MetricKind::GaugeI64,
            "up",
            &[],
            "Whether the endpoint answers.",
            "",
        ),
        Value::Gauge(1),
    )]
}

/// A real registry, listed and read as the scraper does, so that its
/// source carries `uid`; pid, uid and process name are then fixed so the
/// output does not depend on who runs the test.
fn registry(dir: &std::path::Path) -> topdeck::Registry {
    let r = topdeck::Registry::builder().dir(dir).build().unwrap();
    let help = "Requests, with \"quotes\", a \\ backslash\nand a second line.";
    r.counter(
        "requests_total",
        &[("method", "GET"), ("path", "/a\"b\\c\nd")],
        help,
        "",
    )
    .unwrap()
    .add(7);
    r.counter("bytes", &[], "Bytes sent.", "bytes")
        .unwrap()
        .add(1 << 40);
    r.gauge("queue_depth", &[("pid", "own")], "Queued.", "")
        .unwrap()
        .set(-12);
    let temp = r
        .gauge_f64("temperature_celsius", &[], "Now.", "celsius")
        .unwrap();
    temp.set(21.5);
    let latency = r
        .histogram_with(
            "request_duration_seconds",
            &[("le", "x"), ("route", "/")],
            "Latency.",
            "seconds",
            topdeck::Buckets::exponential(1, 1e-3, 10.0).unwrap(),
        )
        .unwrap();
    for v in [
        0.0,
        1e-10,
        0.000_5,
        0.004,
        0.004,
        0.25,
        3.0,
        2e6,
        f64::INFINITY,
    ] {
        latency.record(v);
    }
    let fine = r
        .histogram_with(
            "payload_bytes",
            &[],
            "Payload sizes.",
            "bytes",
            topdeck::Buckets::exponential(8, 1.0, 1.1).unwrap(),
        )
        .unwrap();
    fine.record_n(1.05, 3);
    let _idle = r
        .histogram("idle_seconds", &[], "Never observed.", "seconds")
        .unwrap();
    r
}

fn pairs(metrics: &[(MetricInfo, Value)]) -> impl Iterator<Item = (&MetricInfo, &Value)> {
    metrics.iter().map(|(i, v)| (i, v))
}

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn file_name(format: Format) -> &'static str {
    match format {
        Format::Text => "exposition.txt",
        Format::OpenMetrics => "exposition.openmetrics.txt",
        Format::Protobuf => "exposition.pb",
    }
}

#[test]
fn every_format_encodes_the_representative_sources_as_checked_in() {
    let dir = tempfile::tempdir().unwrap();
    let _registry = registry(dir.path());
    let listing = topdeck::Namespace::at(dir.path()).list();
    assert!(listing.errors.is_empty(), "{:?}", listing.errors);
    let mut entry = listing.entries.into_iter().next().expect("the registry");
    (entry.pid, entry.uid) = (4242, 1000);
    entry.process_name = "api \"edge\" \\ 1".into();
    let snapshot = entry.open().unwrap().snapshot().unwrap();
    let (synthetic, unlabelled) = (synthetic(), unlabelled());
    let sources = || {
        [
            Source::from_snapshot(&entry, &snapshot),
            Source::new("worker", 10, "side", pairs(&synthetic)),
            Source::unlabelled(pairs(&unlabelled)),
        ]
    };
    let plain = sources();
    let exp = Exposition::group(&plain);
    assert_eq!(exp.conflicts(), 1, "the gauge named like a counter");

    // The same sources with labels rendered ahead, as the scraper keeps them.
    let mut prepared = [
        Prepared::default(),
        Prepared::default(),
        Prepared::default(),
    ];
    for (p, s) in prepared.iter_mut().zip(&plain) {
        p.update(s);
    }
    let [a, b, c] = sources();
    let with_prepared = [
        a.with_prepared(&prepared[0]),
        b.with_prepared(&prepared[1]),
        c.with_prepared(&prepared[2]),
    ];
    let exp_prepared = Exposition::group(&with_prepared);

    let bless = std::env::var_os("TOPDECK_GOLDEN_BLESS").is_some();
    for format in [Format::Text, Format::OpenMetrics, Format::Protobuf] {
        let mut out = Vec::new();
        format.encode(&mut out, &exp).unwrap();
        let mut again = Vec::new();
        format.encode(&mut again, &exp_prepared).unwrap();
        assert_eq!(out, again, "{format:?}: prepared labels changed the output");
        let path = golden_path(file_name(format));
        if bless {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &out).unwrap();
            continue;
        }
        let want = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}; write it with TOPDECK_GOLDEN_BLESS=1",
                path.display()
            )
        });
        if format == Format::Protobuf {
            assert!(
                out == want,
                "{format:?}: the output differs from {}",
                path.display()
            );
        } else {
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&want),
                "{format:?}: the output differs from {}",
                path.display()
            );
        }
    }
}
