// SPDX-License-Identifier: Apache-2.0
//! The Rust writer driver of the conformance suite (conformance/PROTOCOL.md):
//! `td-conform-writer <dir> <exit|crash|late>` creates the registry
//! `conformance` in `<dir>`, runs the script, prints `ready`, and ends as
//! the mode says when stdin closes.
//!
//! `--fixed-durations` records the timer's ten sections as 1..=10 ms
//! through `Timer::record` instead of timing them, so that the reference
//! file in conformance/vectors/ comes out the same on every run.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Barrier;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use topdeck::Registry;

/// Conformance writer driver (conformance/PROTOCOL.md).
#[derive(Parser)]
struct Args {
    /// The namespace directory to publish in.
    dir: PathBuf,
    /// How to end once stdin closes.
    mode: Mode,
    /// Time the timer's sections as 1..=10 ms (for reproducible reference files).
    #[arg(long)]
    fixed_durations: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Close the registry (its file is removed) and exit 0.
    Exit,
    /// Kill itself with SIGKILL: the file stays behind, its writer dead.
    Crash,
    /// Like exit, and register phase 2 when `more` arrives.
    Late,
}

/// Threads that increment `jobs_total{queue="fast"}`, and how often each.
const THREADS: u64 = 4;
const PER_THREAD: u64 = 25_000;

fn main() -> Result<()> {
    let args = Args::parse();
    let r = Registry::builder()
        .dir(&args.dir)
        .name("conformance")
        .build()
        .with_context(|| format!("create the registry in {}", args.dir.display()))?;
    script(&r, args.fixed_durations)?;
    say("ready")?;
    for line in std::io::stdin().lock().lines() {
        let line = line.context("read stdin")?;
        match (args.mode, line.trim()) {
            (Mode::Late, "more") => {
                r.counter("late_total", &[], "Registered late.", "")?.add(3);
                say("more-done")?;
            }
            (_, other) => bail!("unexpected line on stdin: {other:?}"),
        }
    }
    if args.mode == Mode::Crash {
        // SAFETY: raising a signal on ourselves has no memory preconditions.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    drop(r);
    Ok(())
}

/// Phase 1 of the script, in the protocol's order.
fn script(r: &Registry, fixed_durations: bool) -> Result<()> {
    let fast = r.counter("jobs_total", &[("queue", "fast")], "Jobs done.", "")?;
    // Every thread holds its shard before any of them ends, so each shard
    // holds one thread's 25,000 and the file does not depend on timing.
    let all_started = Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                fast.inc();
                all_started.wait();
                for _ in 1..PER_THREAD {
                    fast.inc();
                }
            });
        }
    });
    r.counter("jobs_total", &[("queue", "slow")], "Jobs done.", "")?
        .add(7);
    r.gauge("queue_depth", &[], "Jobs waiting — ünïcödé ✓", "")?
        .set(-42);
    let room = [("room", "a\"b\\c")];
    let t = r.gauge_f64("temperature_celsius", &room, "Temperature.", "celsius")?;
    t.set(21.5);
    t.set(-0.125);
    let (name, route) = ("request_duration_seconds", [("route", "/")]);
    let h = r.histogram(name, &route, "Time to serve.", "seconds")?;
    for i in 1..=1000u32 {
        h.record(f64::from(i) / 1000.0);
    }
    let p = r.histogram("payload_bytes", &[], "Sizes.", "bytes")?;
    for v in [0.0, 0.0, 0.0, 1024.0, 1024.0, 1e9] {
        p.record(v);
    }
    let timer = r.timer("db_query_seconds", &[], "Time in the database.")?;
    for ms in 1..=10 {
        if fixed_durations {
            timer.record(Duration::from_millis(ms));
        } else {
            timer.time(|| std::hint::black_box((0..ms * 1000).sum::<u64>()));
        }
    }
    Ok(())
}

fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .context("write to stdout")
}
