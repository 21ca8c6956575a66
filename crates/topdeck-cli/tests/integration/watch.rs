// SPDX-License-Identifier: Apache-2.0
//! `topdeck watch`: rates per interval, interval histograms, metric
//! selection, and dead writers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;

/// The lines of one interval block, by metric name. Each block begins
/// with its wall-clock time (RFC 3339, UTC) and the time since the start.
fn intervals(stdout: &str) -> Vec<Vec<&str>> {
    let mut blocks: Vec<Vec<&str>> = Vec::new();
    for line in stdout.lines() {
        if let Some(head) = line.strip_prefix("--- ") {
            let (time, since) = head.split_once(' ').unwrap_or_else(|| panic!("{line}"));
            assert!(humantime::parse_rfc3339(time).is_ok(), "{line}");
            assert!(since.starts_with('+') && since.ends_with('s'), "{line}");
            blocks.push(Vec::new());
        } else if let Some(b) = blocks.last_mut() {
            b.push(line.trim());
        }
    }
    blocks
}

#[test]
fn prints_a_rate_line_per_interval_and_stops_after_count() {
    let ns = namespace();
    let r = registry(ns.path(), "watched");
    let busy = r.counter("busy_total", &[], "", "").unwrap();
    r.counter("quiet_total", &[], "", "").unwrap().add(1000);
    r.gauge("depth", &[], "", "").unwrap().set(-7);
    let h = r.histogram("old_seconds", &[], "", "seconds").unwrap();
    for _ in 0..50 {
        h.record(0.002);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                busy.inc();
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    };
    let pid = std::process::id().to_string();
    let out = topdeck(ns.path())
        .args(["watch", &pid, "--count", "2", "--interval", "100ms"])
        .assert()
        .success();
    stop.store(true, Ordering::Relaxed);
    ticker.join().unwrap();

    let stdout = text(&out.get_output().stdout);
    assert!(stdout.starts_with("watching "), "{stdout}");
    assert!(
        !stdout.contains('\x1b'),
        "escape codes without a terminal: {stdout}"
    );
    let blocks = intervals(&stdout);
    assert_eq!(blocks.len(), 2, "{stdout}");
    for b in &blocks {
        let find = |name: &str| {
            b.iter()
                .find(|l| l.split_whitespace().next() == Some(name))
                .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>())
                .unwrap_or_else(|| panic!("no {name} in {stdout}"))
        };
        let busy = find("busy_total");
        assert!(
            busy[0].ends_with("/s") && busy[1].starts_with('+'),
            "{busy:?}"
        );
        // Nothing happened to these during the interval: a counter that did
        // not move has rate 0, and a histogram shows only the interval's
        // observations (none), not the 50 made before.
        assert_eq!(find("quiet_total"), ["0/s", "+0"]);
        assert_eq!(find("old_seconds"), ["0/s", "+0", "p50", "-", "p99", "-"]);
        assert_eq!(find("depth"), ["-7"]);
    }
}

#[test]
fn metric_arguments_select_by_name_prefix() {
    let ns = namespace();
    let r = registry(ns.path(), "filtered");
    let _requests = r.counter("http_requests_total", &[], "", "").unwrap();
    let _errors = r.counter("http_errors_total", &[], "", "").unwrap();
    r.gauge("queue_depth", &[], "", "").unwrap().set(3);
    let _workers = r.gauge("workers", &[], "", "").unwrap();
    let pid = std::process::id().to_string();
    let out = topdeck(ns.path())
        .args([
            "watch",
            &pid,
            "http_req",
            "queue",
            "--count",
            "1",
            "--interval",
            "10ms",
        ])
        .assert()
        .success();
    let stdout = text(&out.get_output().stdout);
    let blocks = intervals(&stdout);
    assert_eq!(blocks.len(), 1, "{stdout}");
    let names: Vec<&str> = blocks[0]
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["http_requests_total", "queue_depth"], "{stdout}");
}

#[test]
fn a_dead_writer_is_read_once_and_left() {
    let ns = namespace();
    let (_, pid) = dead_registry(ns.path());
    let out = topdeck(ns.path())
        .args(["watch", &pid.to_string(), "--interval", "1h"])
        .assert()
        .success();
    let stdout = text(&out.get_output().stdout);
    assert!(
        stdout.lines().any(|l| l.starts_with("state: dead")),
        "{stdout}"
    );
    assert!(intervals(&stdout).is_empty(), "{stdout}");
}

#[test]
fn an_unknown_key_exits_1_and_a_bad_interval_is_refused() {
    let ns = namespace();
    let out = topdeck(ns.path())
        .args(["watch", "424242424", "--count", "1"])
        .assert()
        .code(1);
    assert!(text(&out.get_output().stderr).contains("no registry matches \"424242424\""));
    let out = topdeck(ns.path())
        .args(["watch", "1", "--interval", "soon"])
        .assert()
        .failure();
    assert!(text(&out.get_output().stderr).contains("--interval"));
}

#[test]
fn a_pid_watches_every_source_of_its_process() {
    let ns = namespace();
    let a = registry(ns.path(), "orders");
    a.counter("orders_total", &[], "", "").unwrap().add(3);
    let b = registry(ns.path(), "payments");
    b.counter("payments_total", &[], "", "").unwrap().add(5);
    let pid = std::process::id().to_string();
    let out = topdeck(ns.path())
        .args(["watch", &pid, "--count", "1", "--interval", "50ms"])
        .assert()
        .success();
    let stdout = text(&out.get_output().stdout);
    let head = stdout.lines().next().unwrap();
    assert!(
        head.contains("registry orders") && head.contains("registry payments"),
        "{stdout}"
    );
    let block = &intervals(&stdout)[0];
    for want in [
        "registry orders",
        "orders_total",
        "registry payments",
        "payments_total",
    ] {
        assert!(
            block.iter().any(|l| l.starts_with(want)),
            "{want:?} in {stdout}"
        );
    }
}
