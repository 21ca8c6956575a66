// SPDX-License-Identifier: Apache-2.0
//! PCP MMV files through the exporters: real writers (python3-pcp's and
//! a libpcp_mmv program, `crates/topdeck-portholes/tests/mmv/`) publish in
//! the real discovery directory, `$PCP_TMP_DIR/mmv`; `serve` must expose
//! their numbers as `mmv_<file>_<metric>` series labelled
//! `source="mmv"`, and `push --once` must deliver them through a real
//! OpenTelemetry Collector (push.rs's rig), in base units, without the
//! strings and the "no value" sentinels. Needs scripts/reach/mmv.sh,
//! scripts/reach/otelcol.sh and root (the directory is PCP's): without
//! them the test says SKIPPED, and fails in CI.

use std::path::Path;
use std::process::Command;

use topdeck_export::otlp::proto::collector::ExportMetricsServiceRequest;
use topdeck_export::otlp::proto::common::any_value;
use topdeck_export::otlp::proto::metrics::{number_data_point, Metric, ResourceMetrics};

use super::push::{collector, find_metric, number_points, string_attr, wait_for, Rig};
use super::serve::serve;
use super::{text, topdeck};

#[path = "../../../topdeck-portholes/tests/mmv/support.rs"]
mod support;
use support::{compile_c_writer, mmv_dir, python_writer, tools_present, Writer};

/// A series name part made of a PCP name: `.` and `-` become `_`.
fn safe(name: &str) -> String {
    name.replace(['.', '-'], "_")
}

/// The value and labels of the sample of `name` in the text exposition
/// `body` whose labels include `instance` (any, when `None`).
fn sample<'a>(body: &'a str, name: &str, instance: Option<&str>) -> (&'a str, f64) {
    let instance = instance.map(|i| format!("instance=\"{i}\""));
    body.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ")?,
                None => ("", rest.strip_prefix(' ')?),
            };
            Some((labels, value))
        })
        .find(|(labels, _)| {
            instance
                .as_ref()
                .is_none_or(|i| labels.contains(i.as_str()))
        })
        .map(|(labels, value)| (labels, value.trim().parse().unwrap()))
        .unwrap_or_else(|| panic!("no {name} {instance:?} in the scrape:\n{body}"))
}

/// The resource holding the series of the MMV file at `path` in
/// `request` (its process's resource, or its own with no process).
fn resource_at<'a>(
    request: &'a ExportMetricsServiceRequest,
    path: &Path,
) -> Option<&'a ResourceMetrics> {
    let name = path.file_name()?.to_str()?;
    let prefix = format!("mmv_{}_", name.replace(['-', '.'], "_"));
    request.resource_metrics.iter().find(|r| {
        r.scope_metrics
            .iter()
            .flat_map(|s| &s.metrics)
            .any(|m| m.name.starts_with(&prefix))
    })
}

/// The value of `m`'s point whose `instance` attribute is `instance`
/// (the one point, when `None`), whole or not.
fn point(m: &Metric, instance: Option<&str>) -> f64 {
    let p = number_points(m)
        .iter()
        .find(|p| {
            let attr = p.attributes.iter().find(|kv| kv.key == "instance");
            let value = attr.and_then(|kv| kv.value.as_ref()?.value.as_ref());
            match instance {
                Some(i) => value == Some(&any_value::Value::StringValue(i.into())),
                None => value.is_none(),
            }
        })
        .unwrap_or_else(|| panic!("{} has no point {instance:?}: {m:?}", m.name));
    match p.value {
        Some(number_data_point::Value::AsInt(n)) => n as f64,
        Some(number_data_point::Value::AsDouble(d)) => d,
        None => panic!("{}: no value", m.name),
    }
}

#[test]
fn serve_and_push_carry_mmv_files_in_base_units_without_strings_or_sentinels() {
    let test = "serve_and_push_carry_mmv_files_in_base_units_without_strings_or_sentinels";
    if !tools_present(test) {
        return;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let why = format!("{test}: PCP's mmv directory needs root");
        assert!(std::env::var_os("CI").is_none(), "{why}");
        eprintln!("SKIPPED {why}");
        return;
    }
    let Some(otelcol) = collector() else { return };
    let rig = Rig::start(&otelcol);
    let dir = mmv_dir();
    let tag = format!("topdeck-test-{}", std::process::id());
    let py_file = dir.join(format!("{tag}-py"));
    let c_file = dir.join(format!("{tag}-c"));
    let _python = Writer::start(python_writer(&py_file)).removing(&py_file);
    let bin = tempfile::tempdir().unwrap();
    let mut command = Command::new(compile_c_writer(bin.path()));
    command.arg(&c_file);
    let c = Writer::start(command).removing(&c_file);
    let py = format!("mmv_{}", safe(&format!("{tag}-py")));
    let cc = format!("mmv_{}", safe(&format!("{tag}-c")));
    let accepted =
        format!("{cc}_connections_accepted_by_listener_socket_including_the_ones_closed_at_once");

    // serve: the series, each labelled as the porthole's.
    let (_serve, url) = serve(rig.ns.path(), &["--portholes"]);
    let body = ureq::get(&url)
        .call()
        .expect("scrape serve")
        .into_string()
        .unwrap();
    let scraped = [
        (format!("{accepted}_total"), Some("high"), 42.0),
        (format!("{accepted}_total"), Some("low"), 7.0),
        (format!("{cc}_memory_rss_bytes"), None, 123_456.0 * 1024.0),
        (format!("{cc}_gc_pause_seconds_total"), None, 1.2345),
        (format!("{cc}_threads"), None, -12.0),
        (format!("{cc}_generation"), None, 4e9),
        (format!("{cc}_load"), None, 0.25),
        (format!("{cc}_request_time_seconds_total"), None, 2.5),
        (format!("{cc}_events_kilo_total"), None, 12_000.0),
        (
            format!("{py}_requests_total"),
            Some("bulk work"),
            123_456_789_012.0,
        ),
        // python3-pcp stores neither units nor semantics (mmvdump shows
        // none): milliseconds as given, a gauge.
        (format!("{py}_latency_mean"), None, 12.375),
        (format!("{py}_workers"), None, -3.0),
    ];
    for (name, instance, want) in &scraped {
        let (labels, got) = sample(&body, name, *instance);
        assert_eq!(got, *want, "{name} {instance:?}");
        assert!(labels.contains("source=\"mmv\""), "{name}{{{labels}}}");
    }
    let (labels, _) = sample(&body, &format!("{cc}_threads"), None);
    assert!(
        labels.contains(&format!("pid=\"{}\"", c.pid())),
        "the writer's pid: {labels}"
    );
    for left_out in [
        "build_version",
        "unknown_count",
        "unknown_ratio",
        "unknown_name",
    ] {
        for file in [&cc, &py] {
            assert!(
                !body.contains(&format!("{file}_{left_out}")),
                "{file}_{left_out} is a string or a sentinel, yet exported:\n{body}"
            );
        }
    }

    // push: the same numbers, through the collector.
    let out = topdeck(rig.ns.path())
        .args([
            "push",
            "--once",
            "--portholes",
            "--endpoint",
            &rig.endpoint(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_for(&rig.arrived, "both MMV files forwarded", |a| {
        a.iter()
            .any(|r| resource_at(r, &c_file).is_some() && resource_at(r, &py_file).is_some())
    });
    let requests = rig.arrived.lock().unwrap();
    let request = requests
        .iter()
        .find(|r| resource_at(r, &c_file).is_some())
        .unwrap();
    let (c_res, py_res) = (
        resource_at(request, &c_file).unwrap(),
        resource_at(request, &py_file).unwrap(),
    );
    for r in [c_res, py_res] {
        assert_eq!(string_attr(r, "topdeck.source"), Some("mmv"), "{r:?}");
    }
    let pid = c_res
        .resource
        .as_ref()
        .unwrap()
        .attributes
        .iter()
        .find(|kv| kv.key == "process.pid")
        .and_then(|kv| kv.value.clone()?.value);
    assert_eq!(pid, Some(any_value::Value::IntValue(i64::from(c.pid()))));
    for (name, instance, want) in &scraped {
        let (resource, file) = match name.starts_with(&cc) {
            true => (c_res, &c_file),
            false => (py_res, &py_file),
        };
        // OTLP names a counter without Prometheus's `_total`.
        let m = find_metric(resource, name)
            .or_else(|| find_metric(resource, name.trim_end_matches("_total")))
            .unwrap_or_else(|| panic!("{name} not pushed for {}", file.display()));
        assert_eq!(point(m, *instance), *want, "{name} {instance:?}");
    }
    for r in [c_res, py_res] {
        let names: Vec<&str> = r
            .scope_metrics
            .iter()
            .flat_map(|s| &s.metrics)
            .map(|m| m.name.as_str())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.contains("build_version") || n.contains("unknown_")),
            "a string or a sentinel pushed: {names:?}"
        );
    }
}
