// SPDX-License-Identifier: Apache-2.0
//! docs/FORMAT.md is enough to interoperate: the Python package's reader
//! (`bindings/python/topdeck/reader.py`), written from the specification
//! alone (pread, no shared code), must read exactly what the Rust reader
//! reads from the same live, dead and damaged files.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use topdeck_tests::{
    namespace_dir, plant, template, topdeck_json, Done, Finished, Proc, Sparse, T_HISTOGRAM,
};

use super::writer;

/// The directory to put on `PYTHONPATH` for `python3 -m topdeck.reader`.
fn python_package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bindings/python")
}

/// Runs the Python reader on namespace `dir` and returns its JSON report.
fn read_with_spec_reader(dir: &Path) -> Json {
    let mut cmd = Command::new("python3");
    cmd.env("PYTHONPATH", python_package())
        .args(["-m", "topdeck.reader", "--json", "--dir"])
        .arg(dir);
    let mut p = Proc::start("topdeck.reader", cmd);
    p.close_stdin();
    let Finished {
        status,
        stdout,
        stderr,
    } = p.finish();
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("python3 -m topdeck.reader ({status}) printed no JSON ({e}):\n{stdout}\nstderr:\n{stderr}")
    })
}

/// The Python reader's registry for `path`.
fn registry<'a>(report: &'a Json, path: &Path) -> &'a Json {
    report["registries"]
        .as_array()
        .expect("a registries array")
        .iter()
        .find(|r| r["path"].as_str() == path.to_str())
        .unwrap_or_else(|| panic!("the spec reader did not read {}: {report}", path.display()))
}

fn metric<'a>(registry: &'a Json, name: &str) -> &'a Json {
    registry["metrics"]
        .as_array()
        .expect("a metrics array")
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {registry}"))
}

/// Both readers agree on every metric of `path`: identity, help, unit, kind
/// and value (histograms: count, sum, max and every bucket's bound and count).
fn assert_agree(dir: &Path, path: &Path) {
    let spec = read_with_spec_reader(dir);
    let spec = registry(&spec, path);
    let path_arg = path.to_str().expect("a UTF-8 path");
    let rust = topdeck_json(dir, &["show", "--json", path_arg]);
    for key in ["pid", "process", "registry", "state"] {
        assert_eq!(spec[key], rust[key], "{key} differs for {path_arg}");
    }
    let (s, r) = (
        spec["metrics"].as_array().expect("metrics"),
        rust["metrics"].as_array().expect("metrics"),
    );
    assert_eq!(s.len(), r.len(), "metric counts differ");
    for (s, r) in s.iter().zip(r) {
        for key in ["name", "labels", "help", "unit", "kind"] {
            assert_eq!(s[key], r[key], "{key} differs: spec {s} vs rust {r}");
        }
        if s["kind"] == "histogram" {
            for key in ["count", "sum", "max", "buckets"] {
                assert_eq!(
                    s["value"][key], r["value"][key],
                    "{key} differs: {s} vs {r}"
                );
            }
        } else {
            assert_eq!(s["value"], r["value"], "value differs: {s} vs {r}");
        }
    }
}

#[test]
fn the_spec_reader_agrees_with_the_rust_reader_on_many_metrics() {
    let ns = namespace_dir();
    let mut w = writer(
        ns.path(),
        &["register", "--count", "300", "--checkpoint", "1000"],
    );
    w.proc.send("go");
    w.proc.expect("done ");
    assert_agree(ns.path(), &w.path);
}

#[test]
fn the_spec_reader_agrees_on_every_kind_and_bucket_schema() {
    let ns = namespace_dir();
    let path = plant(ns.path(), template().bytes.clone());
    assert_agree(ns.path(), &path);
    let spec = read_with_spec_reader(ns.path());
    let h = metric(registry(&spec, &path), "latency_seconds");
    assert_eq!(
        h["value"]["count"], 3,
        "template histogram #{T_HISTOGRAM}: {h}"
    );
    assert_eq!(h["value"]["sum"], 103.75);
    assert_eq!(metric(registry(&spec, &path), "load_ratio")["value"], 0.25);
    assert_eq!(metric(registry(&spec, &path), "queue_depth")["value"], -3);
}

#[test]
fn the_spec_reader_sums_thread_shards_and_the_overflow_shard_exactly() {
    let ns = namespace_dir();
    // Six workers on two shards: four of them share the overflow shard.
    let mut w = writer(
        ns.path(),
        &[
            "run",
            "--workers",
            "6",
            "--shards",
            "2",
            "--min-per-worker",
            "20000",
            "--batch",
            "1000",
        ],
    );
    w.proc.send("go");
    w.proc.send("stop");
    let done = Done::parse(&w.proc.expect("done "));
    let spec = read_with_spec_reader(ns.path());
    let reg = registry(&spec, &w.path);
    assert_eq!(metric(reg, "ops_total")["value"], done.ops);
    let h = &metric(reg, "op_value")["value"];
    assert_eq!(h["count"], done.records, "{h}");
    assert_eq!(h["sum"].as_f64(), Some(done.sum as f64), "{h}");
    assert_eq!(h["max"].as_f64(), Some(done.max as f64), "{h}");
    assert_agree(ns.path(), &w.path);
}

#[test]
fn the_spec_reader_sees_dead_writers_and_reports_damaged_files_alone() {
    let ns = namespace_dir();
    let mut dead = writer(ns.path(), &["idle"]);
    dead.proc.kill();
    let live = writer(ns.path(), &["idle"]);
    let mut bytes = template().bytes.clone();
    bytes[..8].copy_from_slice(b"NOTTOPDK");
    let bad = plant(ns.path(), bytes);

    let spec = read_with_spec_reader(ns.path());
    assert_eq!(registry(&spec, &dead.path)["state"], "dead");
    assert_eq!(registry(&spec, &live.path)["state"], "alive");
    let errors = spec["errors"].as_array().expect("an errors array");
    assert!(
        errors.iter().any(|e| e["path"].as_str() == bad.to_str()
            && e["error"].as_str().is_some_and(|m| m.contains("magic"))),
        "the damaged file is not reported as such: {spec}"
    );
    assert_agree(ns.path(), &dead.path);
}

/// The spec reader's error for `path`, if it reported one.
fn spec_error<'a>(report: &'a Json, path: &Path) -> Option<&'a str> {
    report["errors"]
        .as_array()
        .expect("an errors array")
        .iter()
        .find(|e| e["path"].as_str() == path.to_str())
        .and_then(|e| e["error"].as_str())
}

#[test]
fn the_spec_reader_enforces_the_same_limits_on_hostile_files() {
    let ns = namespace_dir();
    let gib = Sparse::default().plant(ns.path());
    let holes = Sparse::holes().plant(ns.path());
    let far = Sparse::far_counter().plant(ns.path());

    let spec = read_with_spec_reader(ns.path());
    let rust = topdeck_json(ns.path(), &["ls", "--json"]);
    let rust_errors = rust["errors"].to_string();
    let e = spec_error(&spec, &gib).unwrap_or_else(|| panic!("{spec}"));
    assert!(
        e.contains("desc_capacity is 16777216, above the format's limit of 1048576"),
        "{e}"
    );
    assert!(
        rust_errors.contains(&gib.display().to_string())
            && rust_errors.contains("desc_capacity is 16777216"),
        "{rust}"
    );
    let e = spec_error(&spec, &holes).unwrap_or_else(|| panic!("{spec}"));
    assert!(
        e.starts_with("descriptor 1: string reference outside"),
        "{e}"
    );
    assert_eq!(metric(registry(&spec, &far), "x")["value"], 7);
    assert_agree(ns.path(), &far);
}
