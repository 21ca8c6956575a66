// SPDX-License-Identifier: Apache-2.0
//! Every format's exposition of one representative set of sources, byte
//! for byte against files checked in next to this test: a change to an
//! encoder that changes what a scraper receives shows up here as a diff,
//! not only as a failed property. The sources cover every kind, a counter
//! registered without `_total`, label values and help that need escaping,
//! an own `le` and an own `pid`, native histograms at three schemas (one
//! empty, one with negative bucket indices), NaN and both infinities, the
//! `uid` label of a listed registry, a type clash and an unlabelled source;
//! and another runtime's values (float counters, fixed-bucket histograms
//! with whole and fractional counts, a summary) through a `ForeignReader`,
//! one of them joining a registry's family and one clashing with another.
//!
//! After an intended change of output, write the files anew with
//! `TOPDECK_GOLDEN_BLESS=1 cargo test -p topdeck-export --test golden` and
//! read the diff before committing it.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use topdeck::{
    Buckets, BucketsValue, ForeignReader, MetricInfo, MetricKind, Registry, RegistryEntry,
    Snapshot, Value,
};
use topdeck_export::{Exposition, Format, Prepared, Source};

/// A histogram at `schema` over `(min, max]`, its help and unit made from its name.
fn histogram(
    r: &Registry,
    name: &str,
    labels: &[(&str, &str)],
    (schema, min, max): (i8, f64, f64),
) -> topdeck::Histogram {
    let unit = name.rsplit('_').next().unwrap();
    let buckets = Buckets::exponential(schema, min, max).unwrap();
    r.histogram_with(name, labels, &format!("Help of {name}."), unit, buckets)
        .unwrap()
}

/// The first registry: listed and read as the scraper does, so that its
/// source carries `uid`.
fn main_registry(dir: &Path) -> Registry {
    let r = Registry::builder().dir(dir).build().unwrap();
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
    r.gauge_f64("temperature_celsius", &[], "Now.", "celsius")
        .unwrap()
        .set(21.5);
    let latency = histogram(
        &r,
        "request_duration_seconds",
        &[("le", "x"), ("route", "/")],
        (1, 1e-3, 10.0),
    );
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
    let fine = histogram(&r, "payload_bytes", &[], (8, 1.0, 1.1));
    fine.record_n(1.05, 3);
    let _idle = r
        .histogram("idle_seconds", &[], "Never observed.", "seconds")
        .unwrap();
    r
}

/// The second registry: extreme values, a coarse schema with negative
/// bucket indices, and a gauge that takes the first registry's counter name.
fn side_registry(dir: &Path) -> Registry {
    let r = Registry::builder().dir(dir).name("side").build().unwrap();
    r.counter(
        "requests_total",
        &[("method", "GET"), ("path", "/")],
        "",
        "",
    )
    .unwrap()
    .add(u64::MAX);
    for (which, v) in [
        ("nan", f64::NAN),
        ("+inf", f64::INFINITY),
        ("-inf", f64::NEG_INFINITY),
        ("tiny", -1e-300),
    ] {
        r.gauge_f64("ratio", &[("which", which)], "A ratio.", "")
            .unwrap()
            .set(v);
    }
    r.gauge(
        "depth_items",
        &[("region", "çødé ✓")],
        "Queue depth.",
        "items",
    )
    .unwrap()
    .set(i64::MIN);
    let wait = histogram(&r, "wait_seconds", &[("le", "own")], (-4, 1e-15, 1e5));
    wait.record_n(1e-14, 5);
    wait.record_n(0.5, 7);
    wait.record(3000.0);
    wait.record(f64::INFINITY);
    r.gauge("bytes_total", &[], "", "").unwrap().set(1);
    r
}

/// The third: the endpoint's own metrics, exposed without source labels.
fn own_registry(dir: &Path) -> Registry {
    let r = Registry::builder().dir(dir).build().unwrap();
    r.gauge("up", &[], "Whether the endpoint answers.", "")
        .unwrap()
        .set(1);
    r
}

/// Another runtime's metrics, as an adapter hands them over.
fn foreign_snapshot() -> Snapshot {
    let inf = f64::INFINITY;
    let metric = |kind, name: &str, labels: &[(&str, &str)], unit: &str, value| {
        let labels = labels.iter().map(|&(k, v)| (k.into(), v.into()));
        let (name, help) = (name.to_owned(), format!("Help of {name}."));
        let unit = unit.to_owned();
        let info = MetricInfo {
            labels: labels.collect(),
            kind,
            name,
            help,
            unit,
        };
        (info, value)
    };
    use MetricKind::{Counter, GaugeF64, Histogram};
    let (metrics, values): (Vec<_>, Vec<_>) = [
        // Joins the registries' counter family.
        metric(
            Counter,
            "requests_total",
            &[("method", "POST"), ("path", "/")],
            "",
            Value::CounterF64(2.5),
        ),
        metric(
            Counter,
            "gc_seconds",
            &[],
            "seconds",
            Value::CounterF64(0.125),
        ),
        metric(GaugeF64, "py_threads", &[], "", Value::GaugeF64(4.0)),
        metric(
            Histogram,
            "py_latency_seconds",
            &[("le", "own")],
            "seconds",
            Value::Buckets(Box::new(BucketsValue {
                buckets: vec![(0.005, 1.0), (0.1, 3.0), (1.0, 3.0), (inf, 4.0)],
                count: 4.0,
                sum: 1.25,
            })),
        ),
        metric(
            Histogram,
            "py_size_bytes",
            &[],
            "bytes",
            Value::Buckets(Box::new(BucketsValue {
                buckets: vec![(1.0, 0.5), (1e6, 2.0), (inf, 2.5)],
                count: 2.5,
                sum: 3.0e5,
            })),
        ),
        metric(
            Histogram,
            "py_wait_seconds",
            &[],
            "seconds",
            Value::Summary {
                count: 3.0,
                sum: 0.75,
            },
        ),
        // Clashes with the registries' gauge: left out.
        metric(
            Histogram,
            "temperature_celsius",
            &[],
            "",
            Value::Summary {
                count: 1.0,
                sum: 20.0,
            },
        ),
    ]
    .into_iter()
    .unzip();
    ForeignReader::new().snapshot(Arc::new(metrics), values)
}

/// The entries of `dir`, with pid, uid and process name fixed so the
/// output does not depend on who runs the test.
fn listed(dir: &Path) -> Vec<RegistryEntry> {
    let listing = topdeck::Namespace::at(dir).list();
    assert!(listing.errors.is_empty(), "{:?}", listing.errors);
    let mut entries = listing.entries;
    entries.sort_by(|a, b| a.registry_name.cmp(&b.registry_name));
    for e in &mut entries {
        (e.pid, e.uid) = (4242, 1000);
        e.process_name = "api \"edge\" \\ 1".into();
    }
    entries
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

/// The checked-in text exposition passes `promtool check metrics` (the
/// Debian `prometheus` package, see scripts/deps.sh): Prometheus' own
/// parser and linter, for every kind, other runtimes' included.
#[test]
fn the_text_golden_passes_promtool() {
    use std::process::Command;
    const PROMTOOL: &str = "/usr/bin/promtool";
    assert!(
        Path::new(PROMTOOL).exists(),
        "{PROMTOOL} is missing: run scripts/deps.sh (apt-get install prometheus)"
    );
    let golden = std::fs::File::open(golden_path(file_name(Format::Text))).unwrap();
    let checked = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(golden)
        .output()
        .expect("run promtool");
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool check metrics: {}\n{}\n{}",
        checked.status,
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[test]
fn every_format_encodes_the_representative_sources_as_checked_in() {
    let (dir, own) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let _registries = [
        main_registry(dir.path()),
        side_registry(dir.path()),
        own_registry(own.path()),
    ];
    let entries = listed(dir.path());
    let [main, side] = &entries[..] else {
        panic!("two registries listed: {entries:?}")
    };
    let main_snapshot = main.open().unwrap().snapshot().unwrap();
    let side_snapshot = side.open().unwrap().snapshot().unwrap();
    let own_snapshot = listed(own.path())[0].open().unwrap().snapshot().unwrap();
    let foreign = foreign_snapshot();
    let main_source = topdeck_sources::Source::of_registry(main.clone());
    let sources = || {
        [
            Source::of(&main_source, &main_snapshot),
            Source::new("worker", 10, "side", side_snapshot.iter()),
            Source::new("python3", 77, "main", foreign.iter()),
            Source::unlabelled(own_snapshot.iter()),
        ]
    };
    let plain = sources();
    let exp = Exposition::group(&plain);
    assert_eq!(
        exp.conflicts(),
        2,
        "the gauge named like a counter, the summary named like a gauge"
    );

    // The same sources with labels rendered ahead, as the scraper keeps them.
    let mut prepared: [Prepared; 4] = Default::default();
    for (p, s) in prepared.iter_mut().zip(&plain) {
        p.update(s);
    }
    let [a, b, c, d] = sources();
    let with_prepared = [
        a.with_prepared(&prepared[0]),
        b.with_prepared(&prepared[1]),
        c.with_prepared(&prepared[2]),
        d.with_prepared(&prepared[3]),
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
