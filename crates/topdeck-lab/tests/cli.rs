// SPDX-License-Identifier: Apache-2.0
//! `topdeck-lab`: every experiment in its quick form, run by the real
//! binary against real processes, checked on facts (sample counts, rows,
//! exact counter totals, wake-up ratios), never on timings.

use std::path::Path;
use std::process::Command;

use tempfile::TempDir;

/// A private output directory.
fn namespace() -> TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

/// `topdeck-lab --quick --out <out>`, to which a test adds its arguments.
fn lab_command(out: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_topdeck-lab"));
    c.args(["--quick", "--out"]).arg(out);
    c
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", String::from_utf8_lossy(bytes)))
}

/// `topdeck-lab --quick --out <dir> <args>`, which must succeed; its stdout.
fn lab(out: &Path, args: &[&str]) -> String {
    let o = lab_command(out)
        .args(args)
        .output()
        .expect("run topdeck-lab");
    assert!(
        o.status.success(),
        "topdeck-lab {args:?} failed\nstdout:\n{}\nstderr:\n{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// One experiment's section of the report.
fn section<'a>(html: &'a str, name: &str) -> &'a str {
    let start = html
        .find(&format!("<h2 id=\"{name}\">"))
        .unwrap_or_else(|| panic!("no {name} section"));
    let len = html[start..].find("</section>").expect("the section ends");
    &html[start..start + len]
}

/// The saved result of one experiment.
fn saved(out: &Path, name: &str) -> serde_json::Value {
    let path = out.join(format!("{name}.json"));
    json(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn num(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn observer_histograms_hold_every_iteration_of_both_phases() {
    let out = namespace();
    let stdout = lab(
        out.path(),
        &[
            "observer",
            "--iterations",
            "3000",
            "--populate-sockets",
            "300",
            "--populate-threads",
            "20",
            "--",
            "cat",
            "/proc/net/unix",
        ],
    );
    assert!(stdout.contains("| <1us | <10us |"), "{stdout}");
    assert!(stdout.contains("socket observed"), "{stdout}");
    let r = saved(out.path(), "observer");
    let phases = r["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 2);
    for p in phases {
        let series = p["series"].as_array().unwrap();
        let names: Vec<&str> = series.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["socket", "close"]);
        for s in series {
            assert_eq!(num(&s["count"]), 3000, "{s}");
            let buckets: u64 = s["decades"].as_array().unwrap().iter().map(num).sum();
            assert_eq!(buckets, 3000, "{s}");
        }
    }
    assert!(num(&r["observer_runs"]) >= 1, "{r}");
    // The population was really there while we measured.
    assert!(num(&r["census"]["host_unix_sockets"]) >= 300, "{r}");
}

#[test]
fn observer_victims_and_pinning_are_honoured() {
    let out = namespace();
    lab(
        out.path(),
        &[
            "observer",
            "--victim",
            "getpid",
            "--iterations",
            "500",
            "--same-cpu",
            "--",
            "true",
        ],
    );
    let r = saved(out.path(), "observer");
    assert_eq!(r["pin"], "same-cpu");
    assert_eq!(r["phases"][1]["series"][0]["name"], "getpid");
    assert_eq!(num(&r["phases"][1]["series"][0]["count"]), 500);
}

#[test]
fn populated_processes_exist_while_the_experiment_runs_and_go_after() {
    // 61 is used by no other test, so the sleepers' command line is ours alone.
    let out = namespace();
    lab(
        out.path(),
        &["contend", "--populate-processes", "61", "--", "true"],
    );
    let r = saved(out.path(), "contend");
    assert_eq!(num(&r["census"]["asked"]["processes"]), 61);
    assert!(num(&r["census"]["host_processes"]) >= 61, "{r}");
    // The helper kills and reaps its sleepers before it exits: none is left
    // (tests/reaped.rs checks that none is even dying when the lab returns).
    let ours = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .is_ok_and(|c| c.ends_with(b"\0child\0populate\x000\x000\x0061\0"))
            })
            .count()
    };
    let mut left = ours();
    for _ in 0..100 {
        if left == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        left = ours();
    }
    assert_eq!(left, 0, "sleeping processes outlived the experiment");
}

#[test]
fn selftest_runs_only_the_configurations_asked_for() {
    let out = namespace();
    lab(
        out.path(),
        &[
            "selftest",
            "--readers",
            "4",
            "--rates",
            "1000,flat",
            "--pins",
            "same-cpu",
            "--exporters",
            "topdeck",
        ],
    );
    let r = saved(out.path(), "selftest");
    let rows: Vec<(u64, serde_json::Value)> = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            assert_eq!(x["pin"], "same-cpu");
            assert_eq!(x["exporter"], "topdeck");
            (num(&x["readers"]), x["rate_hz"].clone())
        })
        .collect();
    assert_eq!(
        rows,
        [
            (0, serde_json::Value::Null),
            (4, serde_json::json!(1000)),
            (4, serde_json::Value::Null)
        ]
    );
}

#[test]
fn contend_reports_one_row_per_concurrency_level() {
    let out = namespace();
    let stdout = lab(out.path(), &["contend", "--", "ps", "auxww"]);
    assert!(stdout.contains("Concurrency | Wall time (avg)"), "{stdout}");
    let r = saved(out.path(), "contend");
    let rows = r["rows"].as_array().unwrap();
    let levels: Vec<u64> = rows.iter().map(|x| num(&x["concurrency"])).collect();
    assert_eq!(levels, [1, 2, 4, 8]);
    for x in rows {
        assert_eq!(num(&x["instances"]), num(&x["concurrency"]), "{x}");
        // ps does real work in the kernel: its time was accounted to it.
        assert!(
            x["user_s"].as_f64().unwrap() + x["sys_s"].as_f64().unwrap() > 0.0,
            "{x}"
        );
    }
}

#[test]
fn selftest_readers_see_exactly_what_the_writer_wrote() {
    let out = namespace();
    let stdout = lab(out.path(), &["selftest"]);
    assert!(stdout.contains("topdeck, readers"), "{stdout}");
    assert!(stdout.contains("prometheus, readers"), "{stdout}");
    let r = saved(out.path(), "selftest");
    let rows = r["rows"].as_array().unwrap();
    // 0 readers, then 1, 4 and 16 at three rates, for each exporter.
    assert_eq!(rows.len(), 2 * (1 + 3 * 3));
    for row in rows {
        let readers = num(&row["readers"]);
        for run in row["runs"].as_array().unwrap() {
            let updates = num(&run["updates"]);
            assert!(updates > 0, "{run}");
            assert_eq!(run["monotonic"], true, "{run}");
            if readers > 0 {
                assert!(num(&run["snapshots"]) >= readers, "{row}");
            } else {
                assert_eq!(num(&run["snapshots"]), 0, "{row}");
            }
            if row["exporter"] == "topdeck" {
                // A final snapshot holds every update: counter and histogram alike.
                assert_eq!(
                    run["final_seen"],
                    serde_json::json!([updates, updates]),
                    "{run}"
                );
            }
        }
    }
}

#[test]
fn a_many_counter_writer_is_read_exactly_and_charged_per_snapshot() {
    let out = namespace();
    let stdout = lab(
        out.path(),
        &[
            "selftest",
            "--counters",
            "300",
            "--readers",
            "2",
            "--rates",
            "flat",
        ],
    );
    assert!(stdout.contains("300 counters in turn"), "{stdout}");
    assert!(stdout.contains("lost/snap"), "{stdout}");
    let r = saved(out.path(), "selftest");
    assert_eq!(num(&r["counters"]), 300);
    for row in r["rows"].as_array().unwrap() {
        let lost = row["lost_ns_per_snapshot"].as_f64().unwrap();
        assert!(lost.is_finite(), "{row}");
        if num(&row["readers"]) == 0 {
            assert_eq!(lost, 0.0, "no snapshot, nothing charged: {row}");
        }
        for run in row["runs"].as_array().unwrap() {
            let updates = num(&run["updates"]);
            assert_eq!(run["monotonic"], true, "{run}");
            if row["exporter"] == "topdeck" {
                // The 300 counters' totals add up to every increment.
                assert_eq!(
                    run["final_seen"],
                    serde_json::json!([updates, updates]),
                    "{run}"
                );
            }
        }
    }
}

#[test]
fn an_idle_ticker_wakes_at_least_100_times_more_than_topdeck() {
    let out = namespace();
    let stdout = lab(out.path(), &["idle"]);
    assert!(stdout.contains("clock reads per second"), "{stdout}");
    let r = saved(out.path(), "idle");
    let v = r["variants"].as_array().unwrap();
    assert_eq!(v[0]["name"], "topdeck");
    assert_eq!(v[1]["name"], "ticker");
    let topdeck_wakes = num(&v[0]["switches"]["voluntary"]);
    let ticker_wakes = num(&v[1]["switches"]["voluntary"]);
    assert!(
        ticker_wakes >= 100 * topdeck_wakes.max(1),
        "ticker {ticker_wakes} vs topdeck {topdeck_wakes} wake-ups"
    );
    assert!(r["breakeven_reads_per_s"].as_f64().unwrap() > 0.0, "{r}");
}

#[test]
fn the_report_names_every_experiment_it_holds_and_those_it_lacks() {
    let out = namespace();
    lab(
        out.path(),
        &["observer", "--iterations", "200", "--", "true"],
    );
    lab(out.path(), &["contend", "--", "true"]);
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    for name in ["observer", "contend", "selftest", "idle"] {
        assert!(
            html.contains(&format!("<h2 id=\"{name}\">{name}</h2>")),
            "{name}"
        );
    }
    assert!(html.contains("Not run yet: <code>topdeck-lab selftest"));
    assert!(html.matches("<svg").count() >= 5, "charts missing");
    assert!(!html.contains("Not run yet: <code>topdeck-lab observer"));
    // The machine at the top, dates a person reads, tables as tables.
    let top = &html[..html.find("<main").expect("a main part")];
    assert!(
        top.contains("Machine: <strong>") && top.contains(" vCPUs · Linux "),
        "{top}"
    );
    let recorded = section(&html, "observer");
    assert!(
        recorded.contains("Recorded 20") && recorded.contains(" UTC</p>"),
        "{recorded}"
    );
    assert_eq!(
        recorded.matches("<table>").count(),
        4,
        "decades, two shifts, phases"
    );
    assert!(!html.contains("<pre>") && !html.contains("Unix time"));
    // Self-contained: nothing fetched, nothing run.
    for outside in ["<script", "<link", "src=", "url(", "href=\"http"] {
        assert!(!html.contains(outside), "{outside}");
    }

    // `lab report` rewrites the same page from the saved results.
    std::fs::remove_file(out.path().join("report.html")).unwrap();
    let stdout = lab(out.path(), &["report"]);
    assert!(stdout.starts_with("report: "), "{stdout}");
    assert!(out.path().join("report.html").exists());
}

#[test]
fn bad_requests_fail_with_a_clear_message() {
    let out = namespace();
    let run = |args: &[&str]| {
        let o = lab_command(out.path()).args(args).output().unwrap();
        assert!(!o.status.success(), "{args:?} succeeded");
        text(&o.stderr)
    };
    let e = run(&["observer", "--", "/nonexistent/observer"]);
    assert!(
        e.contains("start observer \"/nonexistent/observer\""),
        "{e}"
    );
    let e = run(&["observer", "--", "false"]);
    assert!(
        e.contains("failed") && e.contains("fix the command first"),
        "{e}"
    );
    let e = run(&["observer", "--victim", "nope", "--", "true"]);
    assert!(e.contains("unknown victim"), "{e}");
    let e = run(&["contend"]);
    assert!(e.contains("required"), "{e}");
    let e = run(&["idle", "--also", "go"]);
    assert!(e.contains("is not NAME=PROGRAM"), "{e}");
    let e = run(&[
        "idle",
        "--duration",
        "1s",
        "--also",
        "x=/nonexistent/ticker",
    ]);
    assert!(
        e.contains("start helper") && e.contains("/nonexistent/ticker"),
        "{e}"
    );
    let e = run(&["selftest", "--rates", "0"]);
    assert!(e.contains("is not a rate"), "{e}");
    let e = run(&["child", "bogus"]);
    assert!(e.contains("unknown helper task"), "{e}");
}

#[test]
fn a_damaged_saved_result_is_left_out_with_a_warning_and_the_rest_reported() {
    let out = namespace();
    std::fs::write(out.path().join("idle.json"), "{").unwrap();
    std::fs::write(out.path().join("selftest.json"), "[1, 2]").unwrap();
    let o = lab_command(out.path())
        .args(["contend", "--", "true"])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{stdout}\n{stderr}");
    for name in ["idle", "selftest"] {
        assert!(
            stderr.contains("warning: left out of the report: ")
                && stderr.contains(&format!("{name}.json: not a saved {name} result"))
                && stderr.contains(&format!("rerun `topdeck-lab {name}`")),
            "{stderr}"
        );
    }
    let html = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    assert!(
        html.contains("Left out: ") && html.contains("idle.json"),
        "{html}"
    );
    let contend = section(&html, "contend");
    assert!(
        contend.contains("<table>") && contend.contains("<svg"),
        "contend drawn: {contend}"
    );
    assert_eq!(
        std::fs::read_to_string(out.path().join("idle.json")).unwrap(),
        "{",
        "the damaged file is kept as it was"
    );
}

#[test]
fn an_observer_named_topdeck_is_the_binary_beside_the_lab_and_its_absence_is_explained() {
    // current_exe() follows symlinks, so the lab is linked (or copied) into a
    // directory of its own, on the target's file system.
    let bin = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lab_exe = bin.path().join("topdeck-lab");
    let original = env!("CARGO_BIN_EXE_topdeck-lab");
    if std::fs::hard_link(original, &lab_exe).is_err() {
        std::fs::copy(original, &lab_exe).unwrap();
    }
    let out = namespace();
    let observe_topdeck = || {
        Command::new(&lab_exe)
            .args(["--quick", "--out"])
            .arg(out.path())
            .args(["observer", "--iterations", "100", "--", "topdeck", "ls"])
            .output()
            .unwrap()
    };

    let o = observe_topdeck();
    let stderr = text(&o.stderr);
    assert!(!o.status.success(), "ran without a topdeck beside it");
    assert!(
        stderr.contains(&bin.path().join("topdeck").display().to_string())
            && stderr.contains("make build"),
        "{stderr}"
    );

    // A stand-in topdeck that leaves a mark of each run.
    let marks = out.path().join("marks");
    let fake = bin.path().join("topdeck");
    std::fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", marks.display()),
    )
    .unwrap();
    let mut p = std::fs::metadata(&fake).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
    std::fs::set_permissions(&fake, p).unwrap();
    let o = observe_topdeck();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let runs = num(&saved(out.path(), "observer")["observer_runs"]);
    let marked = std::fs::read_to_string(&marks).unwrap();
    assert!(marked.lines().all(|l| l == "ls"), "{marked}");
    // The solo run before the phases, then each observer run: all the stand-in.
    assert_eq!(marked.lines().count() as u64, runs + 1, "{marked}");
}
