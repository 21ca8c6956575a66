// SPDX-License-Identifier: Apache-2.0
//! A recording of the example service, read back after the service has
//! stopped and its registry file is gone: `topdeck top --once --at` shows
//! its row and its metrics as they were, the same values as the view of
//! that frame while it was recorded, and what was not recorded as unknown;
//! `topdeck explain --at` gives its latencies window by window, the
//! requests of each what its histograms grew by in the recording.

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

/// The example service (500 requests/s) in a namespace of its own, with
/// `topdeck record` writing a frame every 200 ms into a store of its own.
struct Recorded {
    ns: tempfile::TempDir,
    store: tempfile::TempDir,
    recorder: Proc,
    service: Proc,
    /// The service's first line after `pid `: `<pid> registry <path>`.
    said: String,
    pid: u32,
}

impl Recorded {
    fn start() -> Self {
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
        Self {
            ns,
            store,
            recorder,
            service,
            said,
            pid,
        }
    }
}

#[test]
fn top_once_at_shows_the_example_service_as_recorded_after_it_stopped() {
    let Recorded {
        ns,
        store,
        mut recorder,
        mut service,
        said,
        pid,
    } = Recorded::start();
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
    let sent = unsafe { libc::kill(recorder.pid() as i32, libc::SIGTERM) };
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

/// The cumulative count of every histogram of writer `pid` in the frame
/// at or before `at_ns` of `store`, by name.
fn counts(store: &Path, at_ns: u64, pid: u32) -> Vec<(String, u64)> {
    let history = topdeck_history::History::open(store).expect("the store");
    let m = history
        .at(at_ns, &|s| s.pid == Some(pid))
        .expect("a readable store")
        .expect("a frame");
    assert_eq!(m.unix_ns, at_ns, "the frame itself");
    let (_, snap) = m.sources.first().expect("the service in it");
    snap.iter()
        .filter_map(|(info, v)| match v {
            topdeck::Value::Histogram(h) => Some((info.name.clone(), h.count)),
            _ => None,
        })
        .collect()
}

#[test]
fn explain_at_gives_the_recorded_services_latencies_window_by_window() {
    let Recorded {
        ns,
        store,
        mut recorder,
        mut service,
        said: _,
        pid,
    } = Recorded::start();
    let busy = |v: &Json| {
        of_pid(v, pid).is_some_and(|r| {
            let latency = series(r, "request_duration_seconds", serde_json::json!({}));
            latency["count"].as_u64() > Some(0)
        })
    };
    let start = unix_ns(&wait_for(ns.path(), store.path(), "its requests", busy));
    // Two seconds more of it: two windows of one second.
    wait_for(ns.path(), store.path(), "two seconds more", |v| {
        unix_ns(v) >= start + 2_200_000_000
    });
    // SAFETY: kill only sends a signal, to our own children.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    service.wait();
    // SAFETY: as above.
    let sent = unsafe { libc::kill(recorder.pid() as i32, libc::SIGTERM) };
    assert_eq!(sent, 0);
    recorder.wait();

    let history = store.path().to_str().unwrap();
    let at = rfc3339(start);
    let pid_arg = pid.to_string();
    let args = [
        "explain",
        &pid_arg,
        "--at",
        &at,
        "--window",
        "1s",
        "--count",
        "2",
        "--json",
        "--history",
        history,
    ];
    let out = topdeck(ns.path(), &args);
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("nobody is named: no topdeck agent was recorded"),
        "{}",
        out.stderr
    );
    let windows: Vec<Json> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(windows.len(), 2, "{}", out.stdout);
    let mut from = start;
    for w in &windows {
        // Each window between the frames recorded at or just before its ends.
        assert_eq!(w["from_unix_ns"], from, "{w}");
        let to = w["to_unix_ns"].as_u64().expect("its end");
        assert!(to > from && to <= start + 2_000_000_000, "{w}");
        assert_eq!(w["service"]["pid"], pid, "{w}");
        // The threads' wait was not recorded: unknown, not zero.
        assert_eq!(w["level"], "unrecorded", "{w}");
        assert!(w["wait"].is_null() && w["threads"].is_null(), "{w}");
        assert_eq!(w["culprits"], serde_json::json!([]), "{w}");
        let (then, now) = (
            counts(store.path(), from, pid),
            counts(store.path(), to, pid),
        );
        let rows = w["rows"].as_array().expect("rows");
        let names: Vec<&str> = rows.iter().map(|r| r["series"].as_str().unwrap()).collect();
        assert!(
            names.contains(&"request_duration_seconds") && names.contains(&"hash_duration_seconds"),
            "{names:?}"
        );
        for r in rows {
            let name = r["series"].as_str().unwrap();
            let count =
                |c: &[(String, u64)]| c.iter().find(|(n, _)| n == name).map_or(0, |(_, c)| *c);
            assert_eq!(r["requests"], count(&now) - count(&then), "{name}: {w}");
            assert!(r["requests"].as_u64() > Some(0), "{name} served: {w}");
            assert!(r["p99"].as_f64() >= r["p50"].as_f64(), "{r}");
            // No timer measured a request's wait without the agent.
            assert_eq!(
                (&r["per_request"], &r["finding"]),
                (&Json::Bool(false), &Json::from("unknown")),
                "{r}"
            );
            assert!(r["share"].is_null(), "{r}");
        }
        from = to;
    }

    // The same as text: where it was recorded, and what is unknown.
    let as_text: Vec<&str> = args.into_iter().filter(|a| *a != "--json").collect();
    let text = topdeck(ns.path(), &as_text);
    assert!(text.status.success(), "{}", text.stderr);
    let s = text.stdout;
    assert!(
        s.starts_with("explaining topdeck-example-service")
            && s.contains("as recorded in")
            && s.contains("nobody named (no topdeck agent was recorded"),
        "{s}"
    );
    assert_eq!(
        s.matches("its threads' CPU wait unknown (not recorded)")
            .count(),
        2,
        "{s}"
    );
}
