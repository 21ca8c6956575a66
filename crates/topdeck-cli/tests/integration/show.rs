// SPDX-License-Identifier: Apache-2.0
//! `topdeck show`: exact values, histogram quantiles, units, selection,
//! dead writers and what happens on bad input.

use super::*;

/// Finds the metric named `name` in `show --json` output.
fn metric<'a>(
    v: &'a serde_json::Value,
    name: &str,
    labels: serde_json::Value,
) -> &'a serde_json::Value {
    v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name && m["labels"] == labels)
        .unwrap_or_else(|| panic!("no metric {name} {labels} in {v}"))
}

#[test]
fn json_carries_exact_counter_and_gauge_values() {
    let ns = namespace();
    let r = registry(ns.path(), "values");
    r.counter("jobs_total", &[("queue", "fast")], "Jobs done.", "")
        .unwrap()
        .add(12_345);
    r.counter("jobs_total", &[("queue", "slow")], "Jobs done.", "")
        .unwrap()
        .add(7);
    r.counter("bytes_read_total", &[], "Bytes read.", "bytes")
        .unwrap()
        .add(3 << 20);
    r.gauge("depth", &[], "Queue depth.", "").unwrap().set(-7);
    r.gauge_f64("ratio", &[], "A ratio.", "")
        .unwrap()
        .set(0.375);

    let pid = std::process::id().to_string();
    let out = topdeck(ns.path())
        .args(["show", &pid, "--json"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["path"], r.path().to_str().unwrap());
    assert_eq!(v["pid"], std::process::id());
    assert_eq!(v["process"], own_name());
    assert_eq!(v["registry"], "values");
    assert_eq!(v["state"], "alive");
    assert_eq!(v["metrics"].as_array().unwrap().len(), 5);

    let fast = metric(&v, "jobs_total", serde_json::json!({"queue": "fast"}));
    assert_eq!(fast["kind"], "counter");
    assert_eq!(fast["value"], 12_345);
    assert_eq!(fast["help"], "Jobs done.");
    assert_eq!(fast["unit"], "");
    assert_eq!(
        metric(&v, "jobs_total", serde_json::json!({"queue": "slow"}))["value"],
        7
    );
    let bytes = metric(&v, "bytes_read_total", serde_json::json!({}));
    assert_eq!(
        (bytes["value"].as_u64(), bytes["unit"].as_str()),
        (Some(3 << 20), Some("bytes"))
    );
    let depth = metric(&v, "depth", serde_json::json!({}));
    assert_eq!(
        (depth["kind"].as_str(), depth["value"].as_i64()),
        (Some("gauge"), Some(-7))
    );
    assert_eq!(metric(&v, "ratio", serde_json::json!({}))["value"], 0.375);
}

#[test]
fn json_histograms_have_the_count_and_a_p50_inside_the_right_bucket() {
    let ns = namespace();
    let r = registry(ns.path(), "latency");
    let h = r
        .histogram("request_duration_seconds", &[], "Latency.", "seconds")
        .unwrap();
    for _ in 0..90 {
        h.record(0.003);
    }
    for _ in 0..10 {
        h.record(0.5);
    }
    let _idle = r
        .histogram("idle_seconds", &[], "Never recorded.", "seconds")
        .unwrap();

    let path = r.path().to_str().unwrap();
    let out = topdeck(ns.path())
        .args(["show", path, "--json"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    let value = &metric(&v, "request_duration_seconds", serde_json::json!({}))["value"];
    assert_eq!(value["count"], 100);
    assert!((value["sum"].as_f64().unwrap() - (90.0 * 0.003 + 10.0 * 0.5)).abs() < 1e-9);
    assert_eq!(value["max"], 0.5);
    // Two non-empty buckets: the one holding 0.003 (90) and the one holding 0.5 (10).
    let buckets = value["buckets"].as_array().unwrap();
    let counts: Vec<u64> = buckets.iter().map(|b| b[1].as_u64().unwrap()).collect();
    assert_eq!(counts, [90, 10], "{value}");
    // Schema 3: a bucket spans (upper / 2^(1/8), upper].
    let upper = buckets[0][0].as_f64().unwrap();
    let lower = upper / 2f64.powf(1.0 / 8.0);
    assert!(
        lower < 0.003 && 0.003 <= upper,
        "0.003 is not in ({lower}, {upper}]"
    );
    for q in ["p50", "p90"] {
        let p = value[q].as_f64().unwrap();
        assert!(
            lower < p && p <= upper,
            "{q} {p} outside ({lower}, {upper}]"
        );
    }
    let p99 = value["p99"].as_f64().unwrap();
    assert!(p99 > upper && p99 <= 0.5, "p99 {p99}");

    let idle = &metric(&v, "idle_seconds", serde_json::json!({}))["value"];
    assert_eq!(idle["count"], 0);
    for q in ["p50", "p90", "p99", "max"] {
        assert!(idle[q].is_null(), "{idle}");
    }
}

#[test]
fn the_table_shows_values_in_their_units() {
    let ns = namespace();
    let r = registry(ns.path(), "units");
    r.counter("bytes_read_total", &[], "", "bytes")
        .unwrap()
        .add(3 << 20);
    let h = r
        .histogram("request_duration_seconds", &[], "", "seconds")
        .unwrap();
    for _ in 0..10 {
        h.record(0.004);
    }
    let pid = std::process::id().to_string();
    let out = topdeck(ns.path()).args(["show", &pid]).assert().success();
    let stdout = text(&out.get_output().stdout);
    assert!(stdout.contains("state: alive"), "{stdout}");
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        line("bytes_read_total"),
        ["bytes_read_total", "counter", "3145728", "(3.0MiB)"]
    );
    let hist = line("request_duration_seconds");
    assert_eq!(hist[1..4], ["histogram", "count", "10"]);
    // 4 ms lies in (3.67ms, 4.0ms] at schema 3; the estimate stays inside it.
    let p50 = hist[hist.iter().position(|w| *w == "p50").unwrap() + 1];
    assert!(["3.7ms", "3.8ms", "3.9ms", "4.0ms"].contains(&p50), "{p50}");
    assert_eq!(hist[hist.len() - 2..], ["max", "4.0ms"]);
}

#[test]
fn an_unknown_key_exits_1_with_the_message() {
    let ns = namespace();
    let _r = registry(ns.path(), "other");
    let out = topdeck(ns.path())
        .args(["show", "no-such-thing"])
        .assert()
        .code(1);
    assert_eq!(
        text(&out.get_output().stderr).trim_end(),
        "error: no registry matches \"no-such-thing\"; run `topdeck ls` to see what exists"
    );
    assert!(out.get_output().stdout.is_empty());
}

#[test]
fn a_dead_writers_registry_still_shows_with_state_dead() {
    let ns = namespace();
    let (dead, pid) = dead_registry(ns.path());
    let pid = pid.to_string();
    let out = topdeck(ns.path()).args(["show", &pid]).assert().success();
    let stdout = text(&out.get_output().stdout);
    assert!(
        stdout.lines().any(|l| l.starts_with("state: dead")),
        "{stdout}"
    );
    assert!(stdout.contains(dead.to_str().unwrap()), "{stdout}");
    let jobs: Vec<&str> = stdout
        .lines()
        .find(|l| l.starts_with("jobs_total"))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(jobs, ["jobs_total", "counter", &DEAD_JOBS.to_string()]);

    let out = topdeck(ns.path())
        .args(["show", &pid, "--json"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    assert_eq!(v["state"], "dead");
    assert_eq!(
        metric(&v, "jobs_total", serde_json::json!({}))["value"],
        DEAD_JOBS
    );
    assert_eq!(
        metric(&v, "temperature_celsius", serde_json::json!({}))["value"],
        -3
    );
}

#[test]
fn a_process_name_finds_the_registry() {
    let ns = namespace();
    let r = registry(ns.path(), "by-name");
    let out = topdeck(ns.path())
        .args(["show", &own_name(), "--json"])
        .assert()
        .success();
    assert_eq!(
        json(&out.get_output().stdout)["path"],
        r.path().to_str().unwrap()
    );
}

#[test]
fn several_matches_pick_the_live_newest_and_say_how_to_pick_another() {
    let ns = namespace();
    let (dead, _) = dead_registry(ns.path());
    let older = registry(ns.path(), "older");
    // Creation times are nanoseconds apart at least; make the order certain.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let newer = registry(ns.path(), "newer");
    let out = topdeck(ns.path())
        .args(["show", &own_name(), "--json"])
        .assert()
        .success();
    assert_eq!(json(&out.get_output().stdout)["registry"], "newer");
    // The dead writer was this same test binary, so its name matches too;
    // live registries come before it, the newest first.
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.contains("2 other sources also match"), "{stderr}");
    assert!(stderr.contains("give its path"), "{stderr}");
    let at = |p: &Path| {
        stderr
            .find(p.to_str().unwrap())
            .unwrap_or_else(|| panic!("{} not named: {stderr}", p.display()))
    };
    assert!(at(newer.path()) < at(older.path()), "{stderr}");
    assert!(at(older.path()) < at(&dead), "{stderr}");

    let out = topdeck(ns.path())
        .args(["show", older.path().to_str().unwrap(), "--json"])
        .assert()
        .success();
    assert_eq!(json(&out.get_output().stdout)["registry"], "older");
    assert!(out.get_output().stderr.is_empty());
}

#[test]
fn a_corrupt_file_named_by_path_is_an_error_naming_it() {
    let ns = namespace();
    let bad = corrupt_file(ns.path());
    let out = topdeck(ns.path())
        .args(["show", bad.to_str().unwrap()])
        .assert()
        .code(1);
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains(bad.to_str().unwrap()), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_corrupt_file_beside_the_target_is_a_warning() {
    let ns = namespace();
    let _r = registry(ns.path(), "good");
    let bad = corrupt_file(ns.path());
    let pid = std::process::id().to_string();
    let out = topdeck(ns.path()).args(["show", &pid]).assert().success();
    let stderr = text(&out.get_output().stderr);
    assert!(stderr.starts_with("warning: "), "{stderr}");
    assert!(stderr.contains(bad.to_str().unwrap()), "{stderr}");
    assert!(text(&out.get_output().stdout).contains("registry: good"));
}

#[test]
fn a_reader_that_went_away_is_not_a_panic() {
    let ns = namespace();
    let r = registry(ns.path(), "pipe");
    for i in 0..200 {
        r.counter("many_total", &[("i", &i.to_string())], "", "")
            .unwrap()
            .inc();
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_topdeck"))
        .env("TOPDECK_DIR", ns.path())
        .args(["show", &std::process::id().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the child writes: its writes fail with EPIPE.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?} {stderr}", out.status);
}

#[test]
fn a_pid_shows_every_source_of_its_process() {
    let ns = namespace();
    let web = registry(ns.path(), "web");
    web.counter("web_requests_total", &[], "", "")
        .unwrap()
        .add(3);
    let db = registry(ns.path(), "db");
    db.counter("db_queries_total", &[], "", "").unwrap().add(5);
    let pid = std::process::id().to_string();
    let out = topdeck(ns.path()).args(["show", &pid]).assert().success();
    let shown = text(&out.get_output().stdout);
    assert!(
        shown.contains("registry: web") && shown.contains("registry: db"),
        "{shown}"
    );
    assert!(shown.contains("web_requests_total") && shown.contains("db_queries_total"));
    let out = topdeck(ns.path())
        .args(["show", &pid, "--json"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    let mut registries: Vec<&str> = v
        .as_array()
        .unwrap_or_else(|| panic!("an array of both: {v}"))
        .iter()
        .map(|s| s["registry"].as_str().unwrap())
        .collect();
    registries.sort_unstable();
    assert_eq!(registries, ["db", "web"]);
    // A name still picks one source, as an object.
    let out = topdeck(ns.path())
        .args(["show", "web", "--json"])
        .assert()
        .success();
    assert_eq!(json(&out.get_output().stdout)["registry"], "web");
}
