// SPDX-License-Identifier: Apache-2.0
//! A registry reader driven by the integration tests: it snapshots in a
//! loop, checks every snapshot against what a writer may legally show
//! (counts never go backwards, metrics are complete), prints each broken
//! rule as a `violation` line, and on `stop` (or end of input) takes one
//! last snapshot and prints a `final` summary line.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use topdeck::{MetricKind, Namespace, RegistryReader, Snapshot, Value};

/// A reader never waits longer than this for `stop`: it must not outlive a failed test.
const DEADLINE: Duration = Duration::from_secs(120);
/// Violations printed in full; the rest are only counted.
const MAX_PRINTED: usize = 20;

/// Test reader for topdeck.
#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Snapshots the file until `stop`; checks that no counter or histogram
    /// count goes backwards. Prints `opened`, then `progress` once the
    /// counter `--counter` has shown `--progress-distinct` different values,
    /// then `final ops=.. hist_count=.. hist_sum=.. hist_max=.. snapshots=.. distinct=.. violations=..`.
    Watch {
        /// The registry file.
        path: PathBuf,
        /// Counter whose distinct values are counted.
        #[arg(long, default_value = "ops_total")]
        counter: String,
        /// Histogram reported in the final line.
        #[arg(long, default_value = "op_value")]
        histogram: String,
        /// Distinct counter values to see before printing `progress`.
        #[arg(long, default_value_t = 100)]
        progress_distinct: u64,
    },
    /// Waits for a registry to appear in the directory, then snapshots it
    /// until `stop`, checking that every metric `j` is `m_<j>{i="<j>"}`
    /// with help `help <j>`, kind by j % 3 and value 0 or j.
    Registrations {
        /// The namespace directory.
        dir: PathBuf,
        /// Metrics the writer will register.
        #[arg(long)]
        expect: usize,
    },
    /// Opens the file and snapshots it, prints `opened len=..`, waits for
    /// the line `snapshot`, snapshots again and prints `result ok len=..`
    /// or `result err kind=.. message=..`.
    Hold {
        /// The registry file.
        path: PathBuf,
    },
}

fn main() -> Result<()> {
    let args = Args::parse();
    let (stop, lines) = stdin_watch();
    match args.mode {
        Mode::Watch {
            path,
            counter,
            histogram,
            progress_distinct,
        } => watch(&stop, &path, &counter, &histogram, progress_distinct),
        Mode::Registrations { dir, expect } => registrations(&stop, &dir, expect),
        Mode::Hold { path } => hold(&lines, &path),
    }
}

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// A flag raised by `stop` or end of input, and every line read.
fn stdin_watch() -> (Arc<AtomicBool>, Receiver<String>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let flag = stop.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let line = line.trim().to_owned();
            if line == "stop" {
                break;
            }
            let _ = tx.send(line);
        }
        flag.store(true, Ordering::Release);
    });
    (stop, rx)
}

/// Collects broken rules.
#[derive(Default)]
struct Violations(u64);

impl Violations {
    fn add(&mut self, what: String) {
        if self.0 < MAX_PRINTED as u64 {
            say(&format!("violation {what}"));
        }
        self.0 += 1;
    }
}

/// The monotonic part of each metric: counter value or histogram count.
fn progress_of(v: &Value) -> Option<u64> {
    match v {
        Value::Counter(c) => Some(*c),
        Value::Histogram(h) => Some(h.count),
        _ => None,
    }
}

/// Checks `snap` against the previous one; updates `prev`.
fn check_monotonic(snap: &Snapshot, prev: &mut Vec<Option<u64>>, bad: &mut Violations) {
    if snap.len() < prev.len() {
        bad.add(format!(
            "metric count went from {} to {}",
            prev.len(),
            snap.len()
        ));
    }
    for (i, (m, v)) in snap.iter().enumerate() {
        let now = progress_of(v);
        if let Value::Histogram(h) = v {
            let buckets = h
                .buckets
                .iter()
                .fold(h.zero_count, |a, &b| a.wrapping_add(b));
            if buckets != h.count {
                bad.add(format!(
                    "{}: count {} but buckets hold {buckets}",
                    m.name, h.count
                ));
            }
        }
        match prev.get(i).copied().flatten() {
            Some(before) if now < Some(before) => {
                bad.add(format!(
                    "{}{:?} went backwards: {before} -> {now:?}",
                    m.name, m.labels
                ));
            }
            _ => {}
        }
    }
    *prev = snap.iter().map(|(_, v)| progress_of(v)).collect();
}

fn watch(
    stop: &AtomicBool,
    path: &Path,
    counter: &str,
    histogram: &str,
    progress_distinct: u64,
) -> Result<()> {
    let mut reader =
        RegistryReader::open(path).with_context(|| format!("open {}", path.display()))?;
    say("opened");
    let start = Instant::now();
    let mut bad = Violations::default();
    let mut prev = Vec::new();
    let (mut snapshots, mut distinct, mut last) = (0u64, 0u64, None);
    let mut said_progress = false;
    let mut final_line = String::from("final none");
    loop {
        let stopping = stop.load(Ordering::Acquire);
        match reader.snapshot() {
            Ok(snap) => {
                snapshots += 1;
                check_monotonic(&snap, &mut prev, &mut bad);
                let ops = match snap.get(counter, &[]) {
                    Some(Value::Counter(c)) => Some(*c),
                    _ => None,
                };
                if ops.is_some() && ops != last {
                    distinct += 1;
                    last = ops;
                }
                if let (Some(ops), Some(Value::Histogram(h))) = (ops, snap.get(histogram, &[])) {
                    final_line = format!(
                        "final ops={ops} hist_count={} hist_sum={} hist_max={}",
                        h.count,
                        h.sum,
                        h.max.unwrap_or(f64::NAN)
                    );
                }
            }
            Err(e) => bad.add(format!("snapshot failed: {e}")),
        }
        if !said_progress && distinct >= progress_distinct {
            say("progress");
            said_progress = true;
        }
        if stopping {
            break;
        }
        if start.elapsed() > DEADLINE {
            bad.add("never told to stop".into());
            break;
        }
    }
    say(&format!(
        "{final_line} snapshots={snapshots} distinct={distinct} violations={}",
        bad.0
    ));
    Ok(())
}

/// Checks that metric `j` is the one the `register` writer made.
fn check_registered(
    j: usize,
    kind: MetricKind,
    name: &str,
    labels: &[(String, String)],
    help: &str,
    unit: &str,
    v: &Value,
) -> Result<(), String> {
    let want_kind = [
        MetricKind::Counter,
        MetricKind::GaugeI64,
        MetricKind::Histogram,
    ][j % 3];
    let want_unit = if j % 3 == 2 { "seconds" } else { "" };
    let label = [("i".to_owned(), j.to_string())];
    if kind != want_kind
        || name != format!("m_{j}")
        || labels != label
        || help != format!("help {j}")
        || unit != want_unit
    {
        return Err(format!(
            "metric {j} is {kind:?} {name:?} {labels:?} help {help:?} unit {unit:?}; expected {want_kind:?} m_{j}"
        ));
    }
    let ok = match v {
        Value::Counter(c) => kind == MetricKind::Counter && (*c == 0 || *c == j as u64),
        Value::Gauge(g) => kind == MetricKind::GaugeI64 && (*g == 0 || *g == j as i64),
        Value::Histogram(h) => kind == MetricKind::Histogram && h.count <= 1,
        // Never registered here; the last three only a ForeignReader makes.
        Value::GaugeF64(_) | Value::CounterF64(_) | Value::Buckets(_) | Value::Summary { .. } => {
            false
        }
    };
    if !ok {
        return Err(format!("metric {j} ({kind:?}) has value {v:?}"));
    }
    Ok(())
}

fn registrations(stop: &AtomicBool, dir: &Path, expect: usize) -> Result<()> {
    let start = Instant::now();
    let mut bad = Violations::default();
    let ns = Namespace::at(dir);
    let entry = loop {
        let listing = ns.list();
        for e in &listing.errors {
            bad.add(format!(
                "listing error while the registry was being created: {e}"
            ));
        }
        if let Some(e) = listing.entries.into_iter().next() {
            break e;
        }
        if start.elapsed() > DEADLINE || stop.load(Ordering::Acquire) {
            bad.add("no registry appeared".into());
            say(&format!(
                "final len=0 snapshots=0 partial=0 violations={}",
                bad.0
            ));
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let mut reader = entry
        .open()
        .with_context(|| format!("open {}", entry.path.display()))?;
    let mut prev = Vec::new();
    let (mut snapshots, mut partial, mut len) = (0u64, 0u64, 0usize);
    loop {
        let stopping = stop.load(Ordering::Acquire);
        match reader.snapshot() {
            Ok(snap) => {
                if snapshots == 0 {
                    say(&format!("opened len={}", snap.len()));
                }
                snapshots += 1;
                len = snap.len();
                if len > 0 && len < expect {
                    partial += 1;
                }
                if len > expect {
                    bad.add(format!("{len} metrics, more than the {expect} registered"));
                }
                check_monotonic(&snap, &mut prev, &mut bad);
                for (j, (m, v)) in snap.iter().enumerate() {
                    if let Err(e) =
                        check_registered(j, m.kind, &m.name, &m.labels, &m.help, &m.unit, v)
                    {
                        bad.add(e);
                    }
                }
            }
            Err(e) => bad.add(format!("snapshot failed: {e}")),
        }
        if stopping {
            break;
        }
        if start.elapsed() > DEADLINE {
            bad.add("never told to stop".into());
            break;
        }
    }
    say(&format!(
        "final len={len} snapshots={snapshots} partial={partial} violations={}",
        bad.0
    ));
    Ok(())
}

fn hold(lines: &Receiver<String>, path: &Path) -> Result<()> {
    let mut reader =
        RegistryReader::open(path).with_context(|| format!("open {}", path.display()))?;
    let first = reader
        .snapshot()
        .with_context(|| format!("first snapshot of {}", path.display()))?;
    say(&format!("opened len={}", first.len()));
    loop {
        match lines.recv_timeout(DEADLINE) {
            Ok(l) if l == "snapshot" => break,
            Ok(_) => {}
            Err(_) => anyhow::bail!("never told to snapshot"),
        }
    }
    match reader.snapshot() {
        Ok(s) => say(&format!("result ok len={}", s.len())),
        Err(e) => say(&format!("result err kind={:?} message={e}", e.kind())),
    }
    Ok(())
}
