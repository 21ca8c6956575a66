// SPDX-License-Identifier: Apache-2.0
//! `topdeck clock`: the source with its reason, calibration, skew and a
//! benchmark, as text and JSON; `TOPDECK_CLOCK=os` is obeyed.

use super::*;

#[test]
fn reports_source_calibration_skew_and_benchmark_as_json() {
    let ns = namespace();
    let out = topdeck(ns.path())
        .env_remove("TOPDECK_CLOCK")
        .env_remove("TOPDECK_CLOCK_FORCE")
        .args(["clock", "--json"])
        .assert()
        .success();
    let v = json(&out.get_output().stdout);
    let source = v["source"].as_str().unwrap();
    assert!(["os", "tsc", "tsc-per-cpu"].contains(&source), "{v}");
    assert!(!v["reason"].as_str().unwrap().is_empty(), "{v}");
    for k in [
        "now_ns",
        "now_ordered_ns",
        "wall_ns",
        "clock_gettime_monotonic_ns",
        "clock_gettime_realtime_ns",
    ] {
        assert!(v["benchmark"][k].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
    if source == "os" {
        println!(
            "skipped the TSC checks: this host's clock is the OS clock ({})",
            v["reason"]
        );
        assert!(v["calibration"].is_null(), "{v}");
        assert_eq!(v["bound"]["max_error_ns"], 0, "{v}");
        return;
    }
    let bound = &v["bound"];
    assert!(bound["max_error_ns"].as_u64().unwrap() >= 100, "{v}");
    if source == "tsc" {
        assert_eq!(bound["ordered_cross_thread_ns"], 0, "{v}");
    }
    assert!(
        bound["text"]
            .as_str()
            .unwrap()
            .contains("|now() - CLOCK_MONOTONIC| <="),
        "{v}"
    );
    assert_eq!(v["calibration"]["shift"], 32, "{v}");
    assert!(
        v["calibration"]["ticks_per_sec"].as_u64().unwrap() > 0,
        "{v}"
    );
    let skew = &v["skew"];
    let cpus =
        skew["cpus"].as_array().unwrap().len() + skew["unmeasured"].as_array().unwrap().len();
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(cpus + 1, online, "one entry per CPU but the reference: {v}");
}

#[test]
fn text_names_each_section_and_os_request_is_obeyed() {
    let ns = namespace();
    let out = topdeck(ns.path())
        .env("TOPDECK_CLOCK", "os")
        .arg("clock")
        .assert()
        .success();
    let stdout = text(&out.get_output().stdout);
    for line in [
        "source       os\n",
        "why          TOPDECK_CLOCK=os",
        "calibration  none (OS clock)",
        "bound        now() is CLOCK_MONOTONIC (0 ns)",
        "benchmark    ns/read: now()",
        "stats        recalibrations 0",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
}

#[test]
fn a_bad_wait_is_refused_with_a_hint() {
    let ns = namespace();
    let out = topdeck(ns.path())
        .args(["clock", "--wait", "soon"])
        .assert()
        .failure();
    assert!(text(&out.get_output().stderr).contains("--wait"));
}
