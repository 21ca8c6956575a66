// SPDX-License-Identifier: Apache-2.0
//! The example service as a black box: it publishes what it does, its
//! numbers add up, and it removes its file when told to stop.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use topdeck::{MetricKind, RegistryReader, Snapshot, Value};

/// Starts the service in the namespace `dir`; returns it, its registry
/// file (from the line it prints at start) and the rest of its stdout.
fn start(dir: &std::path::Path, args: &[&str]) -> (Child, PathBuf, BufReader<ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_topdeck-example-service"))
        .args(args)
        .env("TOPDECK_DIR", dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the service");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let words: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(words.len(), 4, "{first}");
    assert_eq!((words[0], words[2]), ("pid", "registry"), "{first}");
    assert_eq!(words[1], child.id().to_string());
    (child, PathBuf::from(words[3]), stdout)
}

fn counter(s: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    match s.get(name, labels) {
        Some(Value::Counter(c)) => *c,
        other => panic!("{name} {labels:?}: {other:?}"),
    }
}

fn gauge(s: &Snapshot, name: &str) -> i64 {
    match s.get(name, &[]) {
        Some(Value::Gauge(g)) => *g,
        other => panic!("{name}: {other:?}"),
    }
}

fn served(s: &Snapshot) -> u64 {
    s.iter()
        .filter(|(m, _)| m.name == "requests_total")
        .map(|(_, v)| match v {
            Value::Counter(c) => *c,
            other => panic!("requests_total: {other:?}"),
        })
        .sum()
}

#[test]
fn every_queued_request_is_served_or_refused_and_the_file_goes_at_the_end() {
    let ns = tempfile::tempdir().unwrap();
    let (mut child, path, mut stdout) = start(
        ns.path(),
        &["--duration", "1", "--rate", "400", "--workers", "3"],
    );
    // The mapping outlives the file: the final values can be read after exit.
    let mut reader = RegistryReader::open(&path).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(!path.exists(), "{} left behind", path.display());
    let mut last = String::new();
    stdout.read_line(&mut last).unwrap();
    let queued: u64 = last
        .split_whitespace()
        .nth(4)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no request count in {last:?}"));
    assert!(queued > 0, "{last}");

    let s = reader.snapshot().unwrap();
    let too_large = counter(&s, "errors_total", &[("reason", "too_large")]);
    assert_eq!(served(&s) + too_large, queued);
    for w in ["0", "1", "2"] {
        counter(&s, "requests_total", &[("worker", w)]);
    }
    assert_eq!(gauge(&s, "queue_depth"), 0);
    assert_eq!(gauge(&s, "in_flight"), 0);
    assert_eq!(gauge(&s, "workers"), 3);
    assert!(counter(&s, "bytes_processed_total", &[]) >= 256 * served(&s));
    let Some(Value::Histogram(latency)) = s.get("request_duration_seconds", &[]) else {
        panic!("no request_duration_seconds");
    };
    assert_eq!(latency.count, served(&s));
    let Some(Value::Histogram(wait)) = s.get("queue_wait_seconds", &[]) else {
        panic!("no queue_wait_seconds");
    };
    assert_eq!(wait.count, queued);
    let units: Vec<(&str, MetricKind, &str)> = s
        .iter()
        .map(|(m, _)| (m.name.as_str(), m.kind, m.unit.as_str()))
        .collect();
    assert!(units.contains(&("bytes_processed_total", MetricKind::Counter, "bytes")));
    assert!(units.contains(&("request_duration_seconds", MetricKind::Histogram, "seconds")));
}

#[test]
fn sigterm_stops_it_cleanly_and_removes_its_file() {
    let ns = tempfile::tempdir().unwrap();
    let (mut child, path, mut stdout) = start(ns.path(), &["--rate", "200"]);
    let mut reader = RegistryReader::open(&path).unwrap();
    // Wait for work to show before stopping it (bounded: 30 s at most).
    let mut done = 0;
    for _ in 0..300 {
        done = served(&reader.snapshot().unwrap());
        if done > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(done > 0, "no request served");
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill has no memory-safety preconditions; `pid` is our child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!path.exists(), "{} left behind", path.display());
    let mut last = String::new();
    stdout.read_line(&mut last).unwrap();
    assert!(last.starts_with("stopped after "), "{last}");
}
