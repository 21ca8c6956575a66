// SPDX-License-Identifier: Apache-2.0
//! A registry writer driven by the integration tests over stdin/stdout:
//! it prints `ready <path>` once its file exists, then follows the lines it
//! is sent (`go`, `stop`, `continue`, `exit`) and reports exact counts of
//! what it did, so tests can compare them with what readers saw.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use topdeck::{Buckets, Counter, Histogram, Registry};

/// Test writer for topdeck (namespace directory from TOPDECK_DIR).
#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Publishes fixed values (good_total 42, good_gauge 7, good_seconds x3)
    /// and waits for `exit` or end of input.
    Idle,
    /// On `go`, workers update shared and per-worker counters and a
    /// histogram until `stop` has arrived and each did at least
    /// `--min-per-worker` iterations; then prints
    /// `done ops=.. records=.. sum=.. max=.. threads=.. per_worker=a,b,..`.
    Run {
        /// Worker threads.
        #[arg(long, default_value_t = 4)]
        workers: u32,
        /// Per-thread shards of the registry (more threads share the overflow shard).
        #[arg(long, default_value_t = 16)]
        shards: u32,
        /// Iterations each worker does at least.
        #[arg(long)]
        min_per_worker: u64,
        /// Iterations between checks of the stop flag (and, with --churn, per thread).
        #[arg(long, default_value_t = 10_000)]
        batch: u64,
        /// Each batch runs on a new short-lived thread.
        #[arg(long)]
        churn: bool,
        /// One histogram record every this many iterations.
        #[arg(long, default_value_t = 16)]
        hist_every: u64,
    },
    /// Publishes `--series` series in a registry named `flood` and waits
    /// for `exit`: histograms `flood_seconds` with `--labels` labels of
    /// `--label-bytes` bytes each and many buckets filled (a user flooding
    /// an exporter with wide label sets), or with `--counters` plain
    /// counters `flood_total{i}`.
    Flood {
        /// Series to publish.
        #[arg(long)]
        series: u32,
        /// Labels of each histogram besides its index.
        #[arg(long, default_value_t = 32)]
        labels: u32,
        /// Bytes of each label's value.
        #[arg(long, default_value_t = 1024)]
        label_bytes: usize,
        /// Counters without extra labels instead of wide histograms.
        #[arg(long)]
        counters: bool,
    },
    /// On `go`, registers `--count` metrics `m_<i>{i="<i>"}` with help
    /// `help <i>` (kind by i % 3: counter, gauge, histogram) and sets each
    /// to i (histograms: one record); after every `--checkpoint` metrics
    /// prints `progress <n>` and waits for `continue`; then `done <count>`.
    Register {
        /// Metrics to register.
        #[arg(long)]
        count: u32,
        /// Metrics between pauses.
        #[arg(long)]
        checkpoint: u32,
    },
}

fn main() -> Result<()> {
    let args = Args::parse();
    let input = stdin_lines();
    match args.mode {
        Mode::Idle => idle(&input),
        Mode::Run {
            workers,
            shards,
            min_per_worker,
            batch,
            churn,
            hist_every,
        } => run(
            &input,
            &Work {
                workers,
                min_per_worker,
                batch,
                churn,
                hist_every,
            },
            shards,
        ),
        Mode::Register { count, checkpoint } => register(&input, count, checkpoint),
        Mode::Flood {
            series,
            labels,
            label_bytes,
            counters,
        } => flood(&input, series, labels, label_bytes, counters),
    }
}

/// Lines from stdin, read on their own thread; the channel closes at end of input.
fn stdin_lines() -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim().to_owned()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for `word`; end of input counts as `exit`.
fn wait_for(input: &Receiver<String>, word: &str) -> Result<()> {
    loop {
        match input.recv() {
            Ok(l) if l == word => return Ok(()),
            Ok(l) if l == "exit" && word != "exit" => {
                bail!("told to exit while waiting for {word:?}")
            }
            Ok(_) => {}
            Err(_) if word == "exit" => return Ok(()),
            Err(_) => bail!("end of input while waiting for {word:?}"),
        }
    }
}

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // A test that stopped listening kills us anyway.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

fn idle(input: &Receiver<String>) -> Result<()> {
    let r = Registry::builder()
        .name("good")
        .build()
        .context("create the registry")?;
    r.counter("good_total", &[("kind", "good")], "A good counter.", "")?
        .add(42);
    r.gauge("good_gauge", &[], "A good gauge.", "")?.set(7);
    let h = r.histogram("good_seconds", &[], "A good histogram.", "seconds")?;
    for _ in 0..3 {
        h.record(0.5);
    }
    say(&format!("ready {}", r.path().display()));
    wait_for(input, "exit")
}

fn flood(
    input: &Receiver<String>,
    series: u32,
    labels: u32,
    label_bytes: usize,
    counters: bool,
) -> Result<()> {
    let wide_bytes = match counters {
        true => u64::from(series) * 32,
        false => u64::from(series) * u64::from(labels + 1) * (label_bytes as u64 + 16),
    };
    let r = Registry::builder()
        .name("flood")
        .metrics(series + 16)
        .string_bytes(wide_bytes + (1 << 20))
        .build()
        .context("create the registry")?;
    let wide = "w".repeat(label_bytes);
    let keys: Vec<String> = (0..labels).map(|k| format!("l{k}")).collect();
    for i in 0..series {
        let i = i.to_string();
        if counters {
            r.counter("flood_total", &[("i", &i)], "Flooding.", "")?
                .inc();
            continue;
        }
        let mut pairs: Vec<(&str, &str)> = vec![("i", &i)];
        pairs.extend(keys.iter().map(|k| (k.as_str(), wide.as_str())));
        let h = r.histogram("flood_seconds", &pairs, "Flooding.", "seconds")?;
        // A value in every bucket from 1 µs to 100 s.
        let mut v = 1e-6;
        while v < 100.0 {
            h.record(v);
            v *= 1.05;
        }
    }
    say(&format!("ready {}", r.path().display()));
    wait_for(input, "exit")
}

struct Work {
    workers: u32,
    min_per_worker: u64,
    batch: u64,
    churn: bool,
    hist_every: u64,
}

/// What one worker did.
#[derive(Default, Clone, Copy)]
struct Tally {
    ops: u64,
    records: u64,
    sum: u64,
    max: u64,
    threads: u64,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.ops += o.ops;
        self.records += o.records;
        self.sum += o.sum;
        self.max = self.max.max(o.max);
        self.threads += o.threads;
    }
}

/// `n` iterations starting at iteration `start`: one increment of each
/// counter, and a record of an integral value every `every` iterations.
/// Odd threads go through `LocalCounter`s, even ones through `Counter`.
fn batch(
    ops: &Counter,
    mine: &Counter,
    hist: &Histogram,
    start: u64,
    n: u64,
    every: u64,
    local: bool,
) -> Tally {
    let mut t = Tally::default();
    let (lo, lm) = (local.then(|| ops.local()), local.then(|| mine.local()));
    for i in start..start + n {
        match (&lo, &lm) {
            (Some(a), Some(b)) => {
                a.inc();
                b.inc();
            }
            _ => {
                ops.inc();
                mine.inc();
            }
        }
        if i % every == 0 {
            let v = i % 1000 + 1;
            hist.record(v as f64);
            t.records += 1;
            t.sum += v;
            t.max = t.max.max(v);
        }
    }
    t.ops = n;
    t
}

fn run(input: &Receiver<String>, w: &Work, shards: u32) -> Result<()> {
    let r = Registry::builder()
        .name("run")
        .shards(shards)
        .build()
        .context("create the registry")?;
    let ops = r.counter("ops_total", &[], "Iterations of all workers.", "")?;
    let hist = r.histogram_with(
        "op_value",
        &[],
        "Recorded values.",
        "",
        Buckets::exponential(2, 1.0, 1e4)?,
    )?;
    let running = r.gauge("workers_running", &[], "Workers still running.", "")?;
    let finished = r.gauge_f64("finished_ratio", &[], "Share of workers done.", "")?;
    let mut mine = Vec::new();
    for i in 0..w.workers {
        mine.push(r.counter(
            "worker_ops_total",
            &[("worker", &i.to_string())],
            "Iterations of one worker.",
            "",
        )?);
    }
    say(&format!("ready {}", r.path().display()));
    wait_for(input, "go")?;
    let stop = Arc::new(AtomicBool::new(false));
    let tallies: Vec<Tally> = std::thread::scope(|s| -> Result<Vec<Tally>> {
        let handles: Vec<_> = mine
            .iter()
            .enumerate()
            .map(|(k, mine)| {
                let (ops, hist, running, finished, stop) =
                    (&ops, &hist, &running, &finished, &stop);
                s.spawn(move || {
                    running.inc();
                    let mut t = Tally::default();
                    let local = k % 2 == 1;
                    while !(stop.load(Ordering::Relaxed) && t.ops >= w.min_per_worker) {
                        let start = t.ops;
                        let done = if w.churn {
                            // A fresh thread per batch: shards change hands all the time.
                            let (o, m, h) = (ops.clone(), mine.clone(), hist.clone());
                            let (n, every) = (w.batch, w.hist_every);
                            let d = std::thread::spawn(move || {
                                batch(&o, &m, &h, start, n, every, local)
                            })
                            .join()
                            .expect("a batch thread panicked");
                            Tally { threads: 1, ..d }
                        } else {
                            batch(ops, mine, hist, start, w.batch, w.hist_every, local)
                        };
                        t.merge(done);
                    }
                    running.dec();
                    finished.add(1.0 / f64::from(w.workers));
                    t
                })
            })
            .collect();
        // Stop the workers even when input ends, or the scope would wait forever.
        let told = wait_for(input, "stop");
        stop.store(true, Ordering::Relaxed);
        told?;
        Ok(handles
            .into_iter()
            .map(|h| h.join().expect("a worker panicked"))
            .collect())
    })?;
    let mut all = Tally::default();
    for t in &tallies {
        all.merge(*t);
    }
    let per_worker: Vec<String> = tallies.iter().map(|t| t.ops.to_string()).collect();
    say(&format!(
        "done ops={} records={} sum={} max={} threads={} per_worker={}",
        all.ops,
        all.records,
        all.sum,
        all.max,
        all.threads,
        per_worker.join(",")
    ));
    wait_for(input, "exit")
}

fn register(input: &Receiver<String>, count: u32, checkpoint: u32) -> Result<()> {
    let words = 4 + 11; // histogram block: head words + buckets of (1, 1024] at schema 0
    let r = Registry::builder()
        .name("register")
        .metrics(count + 8)
        .string_bytes(64 * u64::from(count) + 4096)
        .gauge_bytes(8 * u64::from(count) + 4096)
        .shard_bytes(8 * words * u64::from(count) + 4096)
        .shards(4)
        .build()
        .context("create the registry")?;
    let buckets = Buckets::exponential(0, 1.0, 1024.0)?;
    say(&format!("ready {}", r.path().display()));
    wait_for(input, "go")?;
    for i in 0..count {
        let (name, label, help) = (format!("m_{i}"), i.to_string(), format!("help {i}"));
        let labels = [("i", label.as_str())];
        match i % 3 {
            0 => r.counter(&name, &labels, &help, "")?.add(u64::from(i)),
            1 => r.gauge(&name, &labels, &help, "")?.set(i64::from(i)),
            _ => r
                .histogram_with(&name, &labels, &help, "seconds", buckets)?
                .record(f64::from(i)),
        }
        if (i + 1) % checkpoint == 0 && i + 1 < count {
            say(&format!("progress {}", i + 1));
            wait_for(input, "continue")?;
        }
    }
    say(&format!("done {count}"));
    wait_for(input, "exit")
}
