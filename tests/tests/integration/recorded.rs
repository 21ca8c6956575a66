// SPDX-License-Identifier: Apache-2.0
//! A recording of the example service, read back after the service has
//! stopped and its registry file is gone: `topdeck top --once --at` shows
//! its row and its metrics as they were, the same values as the view of
//! that frame while it was recorded, and what was not recorded as unknown.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::Value as Json;
use topdeck::dir::ENV_DIR;
use topdeck_tests::{topdeck, topdeck_bin, topdeck_json, workspace_bin, Proc, TIMEOUT};

/// `unix_ns` as RFC 3339 to the nanosecond: one frame, exactly.
fn rfc3339(unix_ns: u64) -> String {
    humantime::format_rfc3339_nanos(UNIX_EPOCH + Duration::from_nanos(unix_ns)).to_string()
}

fn unix_ns(frame: &Json) -> u64 {
    frame["recorded"]["unix_ns"]
        .as_u64()
        .unwrap_or_else(|| panic!("not a recorded frame: {frame}"))
}

/// The frame at or before `at` in `store`, as `top --once --json --at`
/// shows it; `None` while nothing is recorded.
fn frame(ns: &Path, store: &Path, at: &str) -> Option<Json> {
    let store = store.to_str().expect("a UTF-8 path");
    let out = topdeck(
        ns,
        &["top", "--once", "--json", "--at", at, "--history", store],
    );
    out.status
        .success()
        .then(|| serde_json::from_str(&out.stdout).expect("JSON"))
}

/// Waits until the last frame recorded in `store` satisfies `ok`.
fn wait_for(ns: &Path, store: &Path, what: &str, ok: impl Fn(&Json) -> bool) -> Json {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = frame(ns, store, "now").filter(|v| ok(v)) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "never recorded {what} within {TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The registry of writer `pid` in a harvest.
fn of_pid(v: &Json, pid: u32) -> Option<&Json> {
    v["registries"].as_array()?.iter().find(|r| r["pid"] == pid)
}

/// Series `name` (with `labels`) of registry `r`.
fn series<'a>(r: &'a Json, name: &str, labels: Json) -> &'a Json {
    r["series"]
        .as_array()
        .and_then(|s| {
            s.iter()
                .find(|s| s["name"] == name && s["labels"] == labels)
        })
        .unwrap_or_else(|| panic!("no {name} {labels} in {r:#}"))
}

#[test]
fn top_once_at_shows_the_example_service_as_recorded_after_it_stopped() {
    let ns = topdeck_tests::namespace_dir();
    let store = tempfile::tempdir().expect("a directory for the store");
    let mut record = Command::new(topdeck_bin());
    record
        .args(["record", "--interval", "200ms", "--dir"])
        .arg(store.path())
        .env(ENV_DIR, ns.path());
    let mut recorder = Proc::start("topdeck record", record);
    recorder.expect("topdeck record: reading");
    let mut service = Command::new(workspace_bin("topdeck-example-service"));
    service.args(["--rate", "500"]).env(ENV_DIR, ns.path());
    let mut service = Proc::start("topdeck-example-service", service);
    let said = service.expect("pid ");
    let pid: u32 = said
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {said:?}"));
    let file = said
        .rsplit(' ')
        .next()
        .expect("its registry's path")
        .to_owned();

    // A frame in which it hashed requests, as the view showed it then.
    let busy = |v: &Json| {
        of_pid(v, pid).is_some_and(|r| {
            let bytes = series(r, "bytes_processed_total", serde_json::json!({}));
            bytes["rate"].as_f64().is_some_and(|x| x > 0.0)
        })
    };
    let then = wait_for(ns.path(), store.path(), "the service's work", busy);
    // It stops cleanly and removes its file; the recording goes on without it.
    // SAFETY: kill only sends a signal, to our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    service.expect("stopped after");
    service.wait();
    assert!(!Path::new(&file).exists(), "{file} removed");
    wait_for(ns.path(), store.path(), "a frame without it", |v| {
        of_pid(v, pid).is_none()
    });
    // SAFETY: as above.
    let sent = unsafe { libc::kill(recorder.pid() as i32, libc::SIGINT) };
    assert_eq!(sent, 0);
    recorder.wait();

    let at = rfc3339(unix_ns(&then));
    let history = store.path().to_str().unwrap();
    let v = topdeck_json(
        ns.path(),
        &["top", "--once", "--json", "--at", &at, "--history", history],
    );
    assert_eq!(unix_ns(&v), unix_ns(&then));
    assert!(
        v["recorded"]["since_unix_ns"].as_u64() < Some(unix_ns(&then)),
        "{v}"
    );
    let r = of_pid(&v, pid).unwrap_or_else(|| panic!("the service as recorded: {v:#}"));
    assert_eq!(r["process"], "topdeck-example-service", "{r}");
    assert_eq!(r["state"], "alive", "alive then: {r}");
    assert_eq!(r["path"], file.as_str(), "{r}");
    // The values of that frame, as shown while it was recorded.
    let was = of_pid(&then, pid).unwrap();
    for (name, labels) in [
        ("bytes_processed_total", serde_json::json!({})),
        ("requests_total", serde_json::json!({"worker": "0"})),
        ("request_duration_seconds", serde_json::json!({})),
        ("workers", serde_json::json!({})),
    ] {
        assert_eq!(
            series(r, name, labels.clone()),
            series(was, name, labels),
            "{name}"
        );
    }
    let latency = series(r, "request_duration_seconds", serde_json::json!({}));
    assert!(latency["count"].as_u64() > Some(0), "{latency}");
    assert!(
        latency["p99"].as_f64() >= latency["p50"].as_f64(),
        "{latency}"
    );
    assert_eq!(series(r, "workers", serde_json::json!({}))["value"], 2.0);
    // Its process as recorded: what procfs said of it then was not.
    let p = v["processes"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["pid"] == pid))
        .unwrap_or_else(|| panic!("its process: {v:#}"));
    assert!(p["cpu"].is_null() && p["threads"].is_null(), "{p}");
    assert!(v.get("host").is_none(), "no host line: {v}");
    assert!(
        v["recorded"]["not_recorded"]
            .as_str()
            .is_some_and(|s| s.contains("process CPU and threads")),
        "{v}"
    );

    // The screen: its row, and the frame's time in the title.
    let mut cmd = Command::new(topdeck_bin());
    cmd.args(["top", "--once", "--at", &at, "--history", history])
        .env(ENV_DIR, ns.path())
        .env("COLUMNS", "120")
        .env("LINES", "30");
    let mut screen = Proc::start("topdeck top --once --at", cmd);
    screen.close_stdin();
    let out = screen.finish();
    assert!(out.status.success(), "{}", out.stderr);
    let s = out.stdout;
    let clock = &v["recorded"]["at"].as_str().unwrap()[11..19];
    assert!(
        s.lines()
            .next()
            .is_some_and(|l| l.starts_with("topdeck top · recorded ") && l.contains(clock)),
        "{s}"
    );
    let row = s
        .lines()
        .find(|l| l.contains(&format!("│{pid} ")))
        .unwrap_or_else(|| panic!("its row:\n{s}"));
    assert!(
        row.contains("topdeck-example-service") && row.contains("alive") && row.contains("/s"),
        "{row}"
    );
}
